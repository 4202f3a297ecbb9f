"""Transports move text frames between the client and an agent: WebSocket, stdio, and in-memory."""

from acp_client.transports.base import Transport

__all__ = ["Transport"]

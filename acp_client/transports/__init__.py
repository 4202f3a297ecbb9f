"""Transports move text frames between the client and an agent: WebSocket, stdio, and in-memory.

Every transport implements :class:`Transport` (``send``, ``recv``, ``close``, ``closed``, ``description``),
keeps live :class:`TransportStats` in ``stats``, and raises only :mod:`acp_client.exceptions`. Every
transport a client opens shares one :class:`TransportOptions` (and its :class:`CookieJar`).

The WebSocket transport lives in :mod:`acp_client.transports.websocket` (``WebSocketTransport``,
``connect_websocket``) and is imported only by what uses it, so a program that only spawns stdio agents
never imports ``websockets``.
"""

from __future__ import annotations

from acp_client.transports._cookies import CookieJar
from acp_client.transports.base import DEFAULT_MAX_FRAME_BYTES, StreamResumable, Transport, TransportStats
from acp_client.transports.memory import MemoryTransport, memory_pair
from acp_client.transports.options import HeadersLike, HeadersProvider, TransportKind, TransportOptions
from acp_client.transports.stdio import StdioTransport, spawn_stdio

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "CookieJar",
    "HeadersLike",
    "HeadersProvider",
    "MemoryTransport",
    "StdioTransport",
    "StreamResumable",
    "Transport",
    "TransportKind",
    "TransportOptions",
    "TransportStats",
    "memory_pair",
    "spawn_stdio",
]

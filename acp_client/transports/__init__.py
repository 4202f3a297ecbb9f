"""Transports move text frames between the client and an agent: WebSocket, stdio, and in-memory.

Every transport implements :class:`Transport` (``send``, ``recv``, ``close``, ``closed``, ``description``),
keeps live :class:`TransportStats` in ``stats``, and raises only :mod:`acp_client.exceptions`.

The WebSocket names are imported on first use, so a program that only uses stdio or memory transports
never imports ``websockets``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acp_client.transports.base import DEFAULT_MAX_FRAME_BYTES, Transport, TransportStats
from acp_client.transports.memory import MemoryTransport, memory_pair
from acp_client.transports.stdio import StdioTransport, spawn_stdio

if TYPE_CHECKING:
    from acp_client.transports.websocket import CookieJar, WebSocketTransport, connect_websocket

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "CookieJar",
    "MemoryTransport",
    "StdioTransport",
    "Transport",
    "TransportStats",
    "WebSocketTransport",
    "connect_websocket",
    "memory_pair",
    "spawn_stdio",
]

_WEBSOCKET_NAMES = frozenset({"CookieJar", "WebSocketTransport", "connect_websocket"})


def __getattr__(name: str) -> Any:
    """Import the WebSocket transport when one of its names is first used."""
    if name in _WEBSOCKET_NAMES:
        from acp_client.transports import websocket

        value = getattr(websocket, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """Module attributes including the lazily imported WebSocket names."""
    return sorted(set(globals()) | _WEBSOCKET_NAMES)

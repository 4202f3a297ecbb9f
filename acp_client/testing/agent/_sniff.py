"""The socket side of the reference agent's endpoint: a ``websockets`` server connection that looks at the
first bytes of each accepted connection and serves HTTP/2 (prior knowledge) or plain HTTP/1.1 itself,
handing WebSocket upgrades to ``websockets`` untouched (see :mod:`._agent_http`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import ServerConnection

from acp_client.testing.agent._h2 import _H2Server
from acp_client.testing.agent._http1 import _H11Server

if TYPE_CHECKING:
    from acp_client.testing.agent._http import HttpEndpoint

_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_SNIFF_LIMIT = 64 * 1024
_HANDSHAKE_TIMEOUT = 10.0


class _DualConnection(ServerConnection):
    """A ``websockets`` server connection that serves plain HTTP requests itself (see the module docstring)."""

    _endpoint: HttpEndpoint

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._mode: str | None = None
        self._sniffed = b""
        self._decided: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._http: _H11Server | _H2Server | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._endpoint._conns.add(self)

    def data_received(self, data: bytes) -> None:
        if self._mode == "ws":
            super().data_received(data)
            return
        if self._http is not None:
            self._http.data_received(data)
            return
        self._sniffed += data
        buffered = self._sniffed
        if buffered.startswith(_H2_PREFACE[: len(buffered)]) and len(buffered) < len(_H2_PREFACE):
            return  # maybe an HTTP/2 preface: wait for the rest
        if buffered.startswith(_H2_PREFACE):
            self._become_http(_H2Server(self, self._endpoint), buffered)
            return
        end = buffered.find(b"\r\n\r\n")
        if end == -1 and len(buffered) < _SNIFF_LIMIT:
            return
        head = buffered[: end if end != -1 else len(buffered)].decode("latin-1").lower()
        upgrade = "\nupgrade: websocket" in head or "\nupgrade:websocket" in head
        if upgrade and self._endpoint.serve_websocket:
            self._mode = "ws"
            self._sniffed = b""
            if not self._decided.done():
                self._decided.set_result("ws")
            super().data_received(buffered)
            return
        self._become_http(_H11Server(self, self._endpoint), buffered)

    def _become_http(self, server: _H11Server | _H2Server, data: bytes) -> None:
        self._mode = "http"
        self._http = server
        self._sniffed = b""
        if not self._decided.done():
            self._decided.set_result("http")
        server.start()
        server.data_received(data)

    def eof_received(self) -> None:
        if self._mode == "ws":
            super().eof_received()
            return
        if self._http is not None:
            self._http.eof_received()
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._endpoint._conns.discard(self)
        if self._http is not None:
            self._http.connection_lost()
        if not self._decided.done():
            self._decided.set_result("lost")
        super().connection_lost(exc)

    def http_close(self) -> None:
        """Close an HTTP (or still undecided) connection at once."""
        if self._mode != "ws":
            self.transport.abort()

    async def handshake(self, *args: Any, **kwargs: Any) -> None:
        try:
            async with asyncio.timeout(_HANDSHAKE_TIMEOUT):
                mode = await asyncio.shield(self._decided)
        except TimeoutError:
            self.transport.abort()
            return
        if mode == "ws":
            async with asyncio.timeout(_HANDSHAKE_TIMEOUT):
                await super().handshake(*args, **kwargs)
            return
        if mode == "http" and self._http is not None:
            await self._http.serve()

    def abort_tcp(self) -> None:
        """Reset the TCP connection (SO_LINGER 0, then abort)."""
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def write(self, data: bytes) -> None:
        """Write raw bytes (HTTP side)."""
        if not self.transport.is_closing():
            self.transport.write(data)

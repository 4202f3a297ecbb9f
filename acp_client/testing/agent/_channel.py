"""Frame channels: the one thing the reference agent's connection handler needs from a link.

A channel moves whole text frames (one JSON-RPC message or batch each). The agent serves a WebSocket
connection and a newline-delimited stdio stream through the same handler by wrapping each in a channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Protocol

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

__all__ = ["ChannelClosed", "FrameChannel", "StreamChannel", "WebSocketChannel"]

#: Bound on one stdio line, in bytes (matches the JSON-RPC core's default frame bound).
_STDIO_LINE_LIMIT = 16 * 1024 * 1024


class ChannelClosed(Exception):
    """The channel is closed: no more frames will arrive and sends are impossible."""


class FrameChannel(Protocol):
    """An ordered, bidirectional stream of text frames as seen from the agent's side."""

    async def send(self, frame: str) -> None:
        """Write one text frame; raises :class:`ChannelClosed` when the link is gone."""
        ...

    async def recv(self) -> str:
        """Wait for the next text frame; raises :class:`ChannelClosed` at the end of the stream."""
        ...

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the link gracefully (``code``/``reason`` are used where the link has them)."""
        ...

    def abort(self) -> None:
        """Drop the link at once, without a closing handshake (a TCP reset where possible)."""
        ...

    def pause_reading(self) -> None:
        """Stop reading from the underlying transport (nothing is read, not even WebSocket pings)."""
        ...

    def resume_reading(self) -> None:
        """Undo :meth:`pause_reading`."""
        ...


class WebSocketChannel:
    """A server-side WebSocket connection as a :class:`FrameChannel`; binary frames are ignored."""

    def __init__(self, ws: ServerConnection) -> None:
        """Wrap an accepted ``websockets`` server connection."""
        self.ws = ws
        self.binary_frames_ignored = 0

    async def send(self, frame: str) -> None:
        """Send one text frame."""
        try:
            await self.ws.send(frame)
        except ConnectionClosed as exc:
            raise ChannelClosed(str(exc)) from exc

    async def recv(self) -> str:
        """Receive the next text frame, skipping binary frames (the transport RFD says they are ignored)."""
        while True:
            try:
                message = await self.ws.recv()
            except ConnectionClosed as exc:
                raise ChannelClosed(str(exc)) from exc
            if isinstance(message, str):
                return message
            self.binary_frames_ignored += 1

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Run the WebSocket closing handshake (bounded by the server's ``close_timeout``)."""
        await self.ws.close(code, reason)

    def abort(self) -> None:
        """Reset the TCP connection: ``SO_LINGER`` 0 then abort, so the peer sees RST rather than FIN."""
        transport = self.ws.transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed: abort() below is still the right call
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()

    def pause_reading(self) -> None:
        """Pause the asyncio transport: pings stay unread, so no pong goes back."""
        transport = self.ws.transport
        if not transport.is_closing():
            transport.pause_reading()

    def resume_reading(self) -> None:
        """Resume the asyncio transport."""
        transport = self.ws.transport
        if not transport.is_closing():
            transport.resume_reading()


class StreamChannel:
    """Newline-delimited JSON frames over an asyncio reader/writer pair (stdio, pipes, sockets)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Wrap a reader (inbound lines) and a writer (outbound lines)."""
        self.reader = reader
        self.writer = writer

    async def send(self, frame: str) -> None:
        """Write one frame followed by ``\\n`` (frames never contain raw newlines: JSON escapes them)."""
        if self.writer.is_closing():
            raise ChannelClosed("writer closed")
        try:
            self.writer.write(frame.encode("utf-8") + b"\n")
            await self.writer.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise ChannelClosed(str(exc)) from exc

    async def recv(self) -> str:
        """Read the next non-blank line; raises :class:`ChannelClosed` at EOF."""
        while True:
            try:
                line = await self.reader.readline()
            except ValueError:
                # over the line limit: drain what the reader holds and report it as garbage to the JSON-RPC core
                return "\x00oversize line"
            except ConnectionError as exc:
                raise ChannelClosed(str(exc)) from exc
            if not line:
                raise ChannelClosed("end of stream")
            text = line.decode("utf-8", errors="replace").strip()
            if text:
                return text

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the writer (the peer sees end of stream)."""
        if not self.writer.is_closing():
            self.writer.close()
        with contextlib.suppress(ConnectionError, RuntimeError):  # the peer is gone already: fine, closed it is
            await self.writer.wait_closed()

    def abort(self) -> None:
        """Close the writer's transport at once."""
        self.writer.transport.abort()

    def pause_reading(self) -> None:
        """Stop reading further lines (stdio has no pings; this only stops input)."""
        transport = self.writer.transport
        if isinstance(transport, asyncio.ReadTransport) and not transport.is_closing():
            transport.pause_reading()

    def resume_reading(self) -> None:
        """Undo :meth:`pause_reading`."""
        transport = self.writer.transport
        if isinstance(transport, asyncio.ReadTransport) and not transport.is_closing():
            transport.resume_reading()


def stdio_line_limit() -> int:
    """The line limit to give an ``asyncio.StreamReader`` that feeds a :class:`StreamChannel`."""
    return _STDIO_LINE_LIMIT

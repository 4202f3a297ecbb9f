"""The editor side: the bridge's own stdin/stdout as a JSON-RPC connection (the bridge is the agent here).

:func:`reserve_stdout` makes sure nothing but JSON-RPC ever reaches the editor: it keeps a private copy of
file descriptor 1 for the JSON-RPC frames and points fd 1 (and ``sys.stdout``) at stderr, so a stray
``print``, a warning, or a C library writing to stdout lands on stderr instead of corrupting the stream.

:class:`EditorLink` is a :class:`~acp_client.client.connection.Connection` over those streams: one reader task,
each inbound request in its own task (so a forwarded request may wait for the remote while others flow),
malformed frames answered with JSON-RPC errors by the core, ``$/cancel_request`` honoured both ways.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from acp_client.client.connection import Connection, NotificationHandler, RequestHandler
from acp_client.transports import StdioTransport

__all__ = ["EditorLink", "reserve_stdout"]


@contextlib.contextmanager
def reserve_stdout() -> Iterator[int]:
    """Yield a private duplicate of fd 1 for JSON-RPC; meanwhile fd 1 and ``sys.stdout`` write to stderr.

    Everything is restored on exit (the command may run inside another program, e.g. a test).
    """
    sys.stdout.flush()
    saved = os.dup(1)
    private = os.dup(1)
    previous = sys.stdout
    try:
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        yield private
    finally:
        sys.stdout = previous
        os.dup2(saved, 1)
        os.close(saved)
        with contextlib.suppress(OSError):
            os.close(private)  # normally closed already by the write pipe


class EditorLink:
    """The JSON-RPC connection to the editor over the bridge's stdin and the reserved stdout copy."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    @classmethod
    async def open(
        cls,
        out_fd: int,
        *,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        max_frame_bytes: int,
    ) -> EditorLink:
        """Connect to the editor over stdin and ``out_fd`` (pipes or a terminal) and start reading.

        Raises ``ValueError`` when stdin or stdout is a regular file (asyncio cannot watch those).
        """
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=max_frame_bytes + 1)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        out = os.fdopen(out_fd, "wb", buffering=0)
        try:
            # a StreamReaderProtocol (over an unused reader) gives the writer drain() and wait_closed()
            transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), out
            )
        except BaseException:
            out.close()
            raise
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        stdio = StdioTransport.from_streams(reader, writer, max_frame_bytes=max_frame_bytes, description="editor")
        connection = Connection(stdio, request_timeout=None, on_request=on_request, on_notification=on_notification)
        await connection.start()
        return cls(connection)

    @property
    def closed(self) -> bool:
        """``True`` once the editor closed its end (or the link was closed)."""
        return self.connection.closed

    async def request(self, method: str, params: Any) -> Any:
        """Ask the editor (agent→client requests); waits as long as the editor takes (it may ask the user)."""
        return await self.connection.request(method, params, timeout=None)

    async def notify(self, method: str, params: Any) -> None:
        """Send the editor a notification (``session/update``)."""
        await self.connection.notify(method, params)

    async def wait_closed(self) -> None:
        """Wait until the editor's end of the link is gone."""
        await self.connection.wait_closed()

    async def close(self) -> None:
        """Close the link (flushes what was written)."""
        await self.connection.close()

"""One SSE stream of a Streamable HTTP link as its reader and router see it: its key (the session, or
``None`` for the connection stream), reading task, opening outcome and what it delivered
(:class:`Stream`), and the read-only view the router gets (:class:`StreamView`)."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from acp_client.transports.http._base import _retrieve
from acp_client.transports.http._cursors import CursorTrack

__all__ = ["Stream", "StreamView"]


class StreamView(Protocol):
    """What the router may read of one stream."""

    @property
    def session_id(self) -> str | None: ...

    @property
    def label(self) -> str: ...

    @property
    def is_open(self) -> bool: ...

    @property
    def state_updates(self) -> int: ...

    async def next_message(self) -> None: ...

    async def wait_opened(self) -> bool: ...


class Stream:
    """One SSE stream: its key (``None`` = the connection stream), task, and opening outcome. Its reader
    (:class:`~acp_client.transports.http._streams.StreamReader`) writes its attributes; the router reads
    them through :class:`StreamView`."""

    def __init__(self, session_id: str | None) -> None:
        self.session_id = session_id
        self.label = "connection" if session_id is None else f"session {session_id}"
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.opened.add_done_callback(_retrieve)  # an opening nobody awaits any more is not an error
        self.task: asyncio.Task[None] | None = None
        self.detached = False  # the client closed/deleted the session: its stream may end quietly
        #: loop time since which the reader waits for bytes (``None`` while it delivers what it read): the
        #: read-idle watchdog's clock
        self.waiting_since: float | None = None
        self.state_updates = 0  # v2 ``state_update`` notifications among the delivered messages
        self.delivered = 0  # messages delivered (replayed duplicates that were dropped are not)
        #: the cursors it delivered, when the agent advertised resumable streams (``None``: not read)
        self.cursors: CursorTrack | None = None
        self._changed = asyncio.Event()  # set on every delivered message

    @property
    def is_open(self) -> bool:
        return self.opened.done() and not self.opened.cancelled() and self.opened.exception() is None

    def note_plain(self, count: int) -> None:
        """``count`` messages that are not ``state_update`` were delivered: wake :meth:`next_message`."""
        self.delivered += count
        self._changed.set()

    def note(self, message: dict[str, Any] | list[Any]) -> None:
        """Count a delivered message (and whether it is a v2 ``state_update``); wake :meth:`next_message`."""
        self.delivered += 1
        if self.session_id is not None and isinstance(message, dict) and message.get("method") == "session/update":
            params = message.get("params")
            update = params.get("update") if isinstance(params, dict) else None
            if isinstance(update, dict) and update.get("sessionUpdate") == "state_update":
                self.state_updates += 1
        self._changed.set()

    async def next_message(self) -> None:
        """Wait until the stream delivers another message."""
        self._changed.clear()
        await self._changed.wait()

    async def wait_opened(self) -> bool:
        """Wait until the server answered the stream's GET; ``True`` when it was opened."""
        await asyncio.wait({self.opened})
        return self.is_open

    def cancel(self) -> None:
        """Stop the reading task (unless it is the caller)."""
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()

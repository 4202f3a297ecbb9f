"""The inbound queue of a Streamable HTTP link and the link's failure (:class:`Inbox`), and what the other
parts of the transport may do with them (:class:`Inbound`)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Protocol, cast

from acp_client.exceptions import ConnectionLost
from acp_client.transports.base import Decoded

__all__ = ["INBOX_FRAMES", "Inbound", "Inbox"]


class Inbound(Protocol):
    """What the parts of a link may do with its inbound queue and its failure."""

    @property
    def failed(self) -> bool: ...

    def put(self, text: str) -> None: ...

    async def put_waiting(self, text: str) -> None: ...

    async def put_all_waiting(self, texts: list[str | Decoded]) -> None: ...

    def fail(self, loss: ConnectionLost) -> None: ...

    def lost(self) -> ConnectionLost: ...


#: Frames an event stream may queue for ``recv`` before its reader stops reading the socket (backpressure,
#: as a WebSocket stops reading past its ``max_queue`` of 16 messages).
INBOX_FRAMES = 16


class Inbox:
    """The frames waiting for ``recv`` and the link's failure (set once). The first failure that is not a
    local close calls ``on_lost`` (the transport stops its streams and keepalive there).

    The event-stream readers put with :meth:`put_waiting`, which waits while :data:`INBOX_FRAMES` frames are
    queued: a reader that waits stops reading its socket, so a flooding server is held back by TCP instead
    of filling memory. The few frames that come in POST answers are put at once."""

    def __init__(self, on_lost: Callable[[ConnectionLost], None], *, limit: int = INBOX_FRAMES) -> None:
        # a deque and one shared wake-up future, not an asyncio.Queue: a burst of updates costs an append and
        # a popleft per frame (the queue's put and get were a tenth of the time in the stream profile)
        self._frames: deque[str | Decoded | None] = deque()
        self._arrived: asyncio.Future[None] | None = None  # set when a frame comes while get waits
        self._failure: ConnectionLost | None = None
        self._woken = False
        self._on_lost = on_lost
        self._limit = limit
        self._room = asyncio.Event()
        self._room.set()

    @property
    def failed(self) -> bool:
        return self._failure is not None

    def _wake_getters(self) -> None:
        arrived = self._arrived
        if arrived is not None:
            self._arrived = None
            if not arrived.done():
                arrived.set_result(None)

    def put(self, text: str) -> None:
        self._frames.append(text)
        self._wake_getters()

    async def put_waiting(self, text: str) -> None:
        """Queue ``text`` once fewer than the limit are waiting (or at once, when the link failed)."""
        while len(self._frames) >= self._limit and self._failure is None:
            self._room.clear()
            await self._room.wait()
        self._frames.append(text)
        self._wake_getters()

    async def put_all_waiting(self, texts: list[str | Decoded]) -> None:
        """Queue ``texts`` (in order; some already decoded) once fewer than the limit are waiting: the frames
        of one read go in together, so the queue holds at most the limit plus what one socket read carried."""
        while len(self._frames) >= self._limit and self._failure is None:
            self._room.clear()
            await self._room.wait()
        self._frames.extend(texts)
        self._wake_getters()

    async def get(self) -> str:
        """The next frame; ``ConnectionLost`` once the link failed and every frame before was taken."""
        frames = self._frames
        while not frames:
            await self._wait()
        item = frames.popleft()
        if not self._room.is_set() and len(frames) < self._limit:
            self._room.set()
        if item is None:
            frames.append(None)  # every later get fails too (as the queue did: after what came since)
            raise self.lost()
        return item if type(item) is str else item[0]

    async def get_batch(self) -> list[str | Decoded]:
        """Every frame queued (at least one), in order, up to the failure mark; ``ConnectionLost`` as
        :meth:`get` raises it."""
        frames = self._frames
        while not frames:
            await self._wait()
        if frames[0] is None:
            await self.get()  # raises, and keeps the mark for every later call
        items = list(frames)
        frames.clear()
        if None in items:  # the failure mark: what follows it waits for the next call (as with get)
            mark = items.index(None)
            frames.extend(items[mark:])
            del items[mark:]
        if not self._room.is_set() and len(frames) < self._limit:
            self._room.set()
        return cast(list[str | Decoded], items)

    async def _wait(self) -> None:
        if self._arrived is None:
            self._arrived = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._arrived)  # shared by every getter: one cancelled getter spoils none

    def fail(self, loss: ConnectionLost, *, cancel: bool = True, wake: bool = True) -> None:
        """Record the link's failure (the first one counts). ``cancel=False``: a local close (the streams
        end after the DELETE); ``wake=False``: ``get`` is not woken (an opening error is raised instead)."""
        if wake:
            self.wake()
        if self._failure is not None:
            return
        self._failure = loss
        self._room.set()  # a reader waiting for room goes on (and finds the link failed)
        if cancel:
            self._on_lost(loss)

    def wake(self) -> None:
        """Let ``get`` raise (once every frame received before was taken)."""
        if not self._woken:
            self._woken = True
            self._frames.append(None)
            self._wake_getters()

    def lost(self) -> ConnectionLost:
        assert self._failure is not None
        return self._failure.with_request_sent(False)

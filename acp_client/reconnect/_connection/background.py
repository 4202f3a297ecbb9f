"""Two small parts a :class:`~acp_client.ReconnectingClient` shares among its pieces: the helper tasks it
runs in the background, and the signal that something changed (its state or a session's link)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

__all__ = ["BackgroundTasks", "ChangeSignal"]


class BackgroundTasks:
    """The helper tasks of one client (a liveness ping, a re-attach, a recovery of adopted sessions):
    named, kept referenced while they run, and cancelled together when the client closes."""

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[object]] = set()

    def spawn(self, coro: Awaitable[object], name: str) -> None:
        """Run ``coro`` as a task named ``name``."""
        task = asyncio.ensure_future(coro)
        if isinstance(task, asyncio.Task):
            task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """Cancel every helper task and wait until they ended."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)


class ChangeSignal:
    """ "Something changed": the client's state or a session's link. Waiters take :meth:`event` and wait on
    it, then look again; :meth:`notify` sets it and starts a fresh one."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None

    def event(self) -> asyncio.Event:
        """The event the next :meth:`notify` sets."""
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    def notify(self) -> None:
        """Wake everything waiting on :meth:`event` (nothing to do when no one asked for it since the last
        notify: a recovery round notifies several times per session)."""
        old, self._event = self._event, None
        if old is not None:
            old.set()

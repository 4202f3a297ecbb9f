"""The test kit's one way to wait: predicates re-checked whenever their owner says something changed.

:class:`ReferenceAgent` (``wait_for``), :class:`FaultProxy` (``wait_for_*``) and the CLI demo all wait with
a :class:`Waiters`: the owner calls :meth:`Waiters.changed` after each change of state, and every waiter
whose predicate now holds wakes up. No polling, no sleeps, and every wait is bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["Waiters"]


class Waiters:
    """Coroutines waiting until a predicate over their owner's state holds."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []

    def __len__(self) -> int:
        return len(self._entries)

    def changed(self) -> None:
        """Re-check every pending predicate; wake the waiters whose predicate holds now."""
        for predicate, future in list(self._entries):
            if not future.done() and predicate():
                future.set_result(None)

    def fail_all(self, error: BaseException) -> None:
        """Wake every pending waiter with ``error`` (the owner is shutting down)."""
        for _, future in self._entries:
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: a waiter that already gave up must not warn
        self._entries.clear()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float | None, what: str | None = None) -> None:
        """Return once ``predicate()`` holds; ``TimeoutError`` after ``timeout`` seconds (naming ``what``)."""
        if predicate():
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (predicate, future)
        self._entries.append(entry)
        try:
            async with asyncio.timeout(timeout):
                await future
        except TimeoutError:
            if what is None:
                raise
            raise TimeoutError(f"gave up waiting for {what} after {timeout:g} s") from None
        finally:
            if entry in self._entries:
                self._entries.remove(entry)

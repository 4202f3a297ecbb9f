"""The answers a :class:`~acp_client.client.connection.Connection` waits for: one owner for the table of its
requests' futures and what goes with it (the ids given up, whose late answers are expected; the ids whose
waiter must run before the next frame; when an answer was last read)."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Answers"]


class Answers:
    """The futures of the requests waiting for an answer, by request id."""

    __slots__ = ("_abandoned", "_futures", "_waiter_first", "answered_at")

    def __init__(self) -> None:
        self._futures: dict[int, asyncio.Future[Any]] = {}
        # ids of requests whose callers gave up: their late answers (e.g. -32800) are expected, not noise
        self._abandoned: collections.deque[int] = collections.deque(maxlen=256)
        # requests whose waiter runs before the next frame is handled (see Connection.request_watched)
        self._waiter_first: set[int] = set()
        #: ``time.monotonic()`` when an answer (a result or an error) was last read
        self.answered_at = 0.0

    def __len__(self) -> int:
        """How many requests wait for an answer."""
        return len(self._futures)

    def expect(self, id_: int) -> asyncio.Future[Any]:
        """A future for the answer to request ``id_`` (replacing the one an earlier call made for it: a
        given-up request's late answer then settles the new one)."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._futures[id_] = fut
        return fut

    def forget(self, id_: int) -> None:
        """The caller is done with request ``id_``: an answer that comes now is late."""
        self._futures.pop(id_, None)
        self._waiter_first.discard(id_)

    def waiter_first(self, id_: int) -> None:
        """When request ``id_`` is answered, its waiter runs before the connection handles the next frame."""
        self._waiter_first.add(id_)

    def abandon(self, id_: int) -> None:
        """The caller gave up on request ``id_``: its late answer is expected."""
        self._abandoned.append(id_)

    def abandoned(self, id_: object) -> bool:
        """Whether an unmatched answer is the late one of a request given up."""
        return id_ in self._abandoned

    def settle(self, id_: int, result: Any = None, error: BaseException | None = None) -> bool | None:
        """Settle request ``id_`` with ``result`` (or ``error``). ``None`` when nothing waits for it (a late
        answer); else whether its waiter must run before the next frame."""
        fut = self._futures.get(id_)
        if fut is None or fut.done():
            return None
        self.answered_at = time.monotonic()
        if error is None:
            fut.set_result(result)
        else:
            fut.set_exception(error)
        return id_ in self._waiter_first

    def fail(self, ids: list[int], error: Callable[[], BaseException]) -> int:
        """The link is gone: fail every waiting request among ``ids`` with a fresh ``error()``; return how many."""
        failed = 0
        for id_ in ids:
            fut = self._futures.pop(id_, None)
            if fut is not None and not fut.done():
                fut.set_exception(error())
                failed += 1
        return failed

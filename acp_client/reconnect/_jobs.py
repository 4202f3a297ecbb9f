"""The bookkeeping of a recovery round: one job per session (its task and outcomes), the round that counts
its jobs' first outcomes, and a held recovery slot. Used by :class:`~acp_client.reconnect._recoverer.
SessionRecoverer`, which owns them."""

from __future__ import annotations

import asyncio

from acp_client.reconnect._limits import FixedLimit

__all__ = ["Job", "Round", "Slot"]


class Round:
    """The first outcomes of one round's jobs: one future for the whole round, set by its last job (not a
    future and a wake-up per session)."""

    __slots__ = ("done", "left", "results")

    def __init__(self) -> None:
        self.left = 0
        self.results: dict[Job, str] = {}
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def settled(self, job: Job, outcome: str) -> None:
        self.results[job] = outcome
        self.left -= 1
        if not self.left and not self.done.done():
            self.done.set_result(None)


class Job:
    """One session's recovery task and its outcome. The outcome settles once per wait: a round reads the
    first one; ``recover_now`` waits for the current one, or the next one once it settled."""

    __slots__ = ("_last", "_round", "_settled", "_waiter", "_wake", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None
        self._last = "failed"  # the outcome settled last
        self._settled = False
        self._round: Round | None = None
        self._waiter: asyncio.Future[str] | None = None  # made only for a recover_now caller
        self._wake: asyncio.Event | None = None  # made only when a retry waits out a backoff

    @property
    def wake(self) -> asyncio.Event:
        if self._wake is None:
            self._wake = asyncio.Event()
        return self._wake

    def join(self, round_: Round) -> None:
        """Count in ``round_``: at once if the current outcome already settled, else when it does."""
        if self._round is round_:
            return
        round_.left += 1
        if self._settled:
            round_.settled(self, self._last)
        else:
            self._round = round_

    def settle(self, outcome: str) -> None:
        if self._settled:
            return
        self._settled = True
        self._last = outcome
        waiter, round_, self._round = self._waiter, self._round, None
        if waiter is not None and not waiter.done():
            waiter.set_result(outcome)
        if round_ is not None:
            round_.settled(self, outcome)

    def outcome(self) -> asyncio.Future[str]:
        """A future for the current outcome (already settled: done with it)."""
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
            if self._settled:
                self._waiter.set_result(self._last)
        return self._waiter

    def next_outcome(self) -> asyncio.Future[str]:
        """A future for the current outcome, or the next one if the current one settled."""
        if self._settled:
            self._settled = False
            self._waiter = None
        return self.outcome()


class Slot:
    """A job's recovery slot: taken before a request, given back exactly once per taking (early by a
    given-up request, else when the request ends), or kept for the job's next request (:meth:`renew`)."""

    __slots__ = ("_limit", "_started")

    def __init__(self, limit: FixedLimit) -> None:
        self._limit = limit
        self._started: float | None = None  # when the request on the held slot began; None: not held

    @property
    def held(self) -> bool:
        """``True`` while the slot is taken."""
        return self._started is not None

    async def take(self) -> None:
        """Take a slot (waiting in the limit's queue when none is free)."""
        started = self._limit.try_acquire()
        self._started = started if started is not None else await self._limit.acquire()

    def release(self, *, ok: bool, overloaded: bool = False, lag: float = 0.0) -> None:
        """Give the slot back and tell the limit how its request went (nothing when not held)."""
        started, self._started = self._started, None
        if started is not None:
            self._limit.release(started, ok=ok, overloaded=overloaded, lag=lag)

    def renew(self, *, lag: float = 0.0) -> None:
        """Its request was answered fine: tell the limit and keep the slot if the limit has room
        (:meth:`FixedLimit.renew`); otherwise it is given back."""
        started = self._started
        if started is not None:
            self._started = self._limit.renew(started, lag=lag)

    def give_back(self) -> None:
        """Give back a slot kept for a request that was not made (no round trip to report)."""
        if self._started is not None:
            self._started = None
            self._limit.give_back()

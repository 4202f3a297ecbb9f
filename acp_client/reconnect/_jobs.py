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
    """One held recovery slot, given back exactly once (early by a given-up request, else at the end)."""

    __slots__ = ("_limit", "_started")

    def __init__(self, limit: FixedLimit, started: float) -> None:
        self._limit: FixedLimit | None = limit
        self._started = started

    def release(self, *, ok: bool, overloaded: bool = False, lag: float = 0.0) -> None:
        limit, self._limit = self._limit, None
        if limit is not None:
            limit.release(self._started, ok=ok, overloaded=overloaded, lag=lag)

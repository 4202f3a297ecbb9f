"""The bookkeeping of a recovery round: one job per session (its task and outcomes), the round that counts
its jobs' first outcomes, and a recovery slot, which carries a job's requests and tells the limit how each
went. Used by :class:`~acp_client.reconnect._recovery.recoverer.SessionRecoverer`, which owns them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from acp_client.exceptions import RPCError
from acp_client.reconnect._recovery.limits import FixedLimit

_T = TypeVar("_T")

#: JSON-RPC "server busy / overloaded" answers that count as a congestion signal for the adaptive limit.
_OVERLOAD_CODES = frozenset({-32000, -32603})


class AnswerClock(Protocol):
    """What :meth:`Slot.carry` reads of a connection: when it last read an answer to one of its requests."""

    @property
    def answered_at(self) -> float:
        """``time.monotonic()`` of that read."""
        ...


__all__ = ["AnswerClock", "Job", "Round", "Slot"]


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

    async def carry(self, call: Callable[[], Awaitable[_T]], link: AnswerClock, *, keep: bool = False) -> _T:
        """Run one recovery request (``call()``, on ``link``) holding this slot, taken first unless kept from
        the job's last request, and tell the limit how it went (a timeout, a lost link or an overload answer
        is a congestion signal; an RPC answer is not). The request may give the slot back early (a given-up
        request). With ``keep``, a request answered fine keeps the slot for the job's next request while the
        limit has room.

        The round trip the limit learns from ends when ``link`` read the answer, not when this task got to
        run again: the wait behind the other answers of the same read is the client's own backlog, and
        counting it would read a busy client as a congested agent (on loopback, where an answer takes well
        under a millisecond, it would pin the limit low and cost CPU per session in smaller batches)."""
        if self._started is None:
            await self.take()
        sent = time.monotonic()
        ok = overloaded = answered = False
        try:
            result = await call()
            ok = answered = True
            return result
        except RPCError as exc:
            overloaded = exc.code in _OVERLOAD_CODES
            ok = not overloaded
            answered = True
            raise
        finally:
            read = link.answered_at  # an answer read before this request went out is not its own
            lag = time.monotonic() - read if answered and read >= sent else 0.0
            if keep and ok:
                self.renew(lag=lag)
            else:
                self.release(ok=ok, overloaded=overloaded, lag=lag)

    def give_back(self) -> None:
        """Give back a slot kept for a request that was not made (no round trip to report)."""
        if self._started is not None:
            self._started = None
            self._limit.give_back()

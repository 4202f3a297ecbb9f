"""How many recovery requests may be in flight at once: a fixed limit, or one that adapts to the agent.

A recovery slot is held only while a request is on the wire (never during a retry's backoff). The
adaptive limit works like TCP Vegas / Netflix's concurrency-limits gradient: it starts small, grows by one
slot per request answered about as fast as the fastest one seen (so it doubles every round trip while the
link has room: latency dominates, not the agent), stops growing when answers get slower than
``tolerance`` times the fastest (requests queue at the agent), and halves on a timeout, an error or an
overload answer. So on a link with latency it climbs towards the pipelined floor, and against an agent
with a bounded worker pool it settles near what that pool serves.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable

__all__ = ["AdaptiveLimit", "ConcurrencyLimit", "FixedLimit"]


class FixedLimit:
    """At most ``limit`` recovery requests in flight."""

    def __init__(self, limit: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if limit < 1:
            raise ValueError(f"a concurrency limit must be at least 1, not {limit}")
        self._limit = limit
        self._clock = clock
        self.in_flight = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def limit(self) -> int:
        """The current limit."""
        return self._limit

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.in_flight}/{self.limit}>"

    async def acquire(self) -> float:
        """Wait for a slot; returns the start time to hand back to :meth:`release`."""
        while self.in_flight >= self.limit:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # pass the wake-up we consumed on to the next waiter
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self.in_flight += 1
        return self._clock()

    def release(self, started: float, *, ok: bool, overloaded: bool = False) -> None:
        """Give the slot back; ``ok`` is ``False`` after a timeout or an error (``overloaded`` for an
        agent that said it is busy)."""
        self.in_flight -= 1
        self._observe(self._clock() - started, ok=ok, overloaded=overloaded)
        self._wake()

    def _observe(self, rtt: float, *, ok: bool, overloaded: bool) -> None:
        """Fixed: nothing to learn."""

    def _wake(self) -> None:
        free = self.limit - self.in_flight
        for waiter in list(self._waiters):
            if free <= 0:
                break
            if not waiter.done():
                waiter.set_result(None)
                free -= 1


class AdaptiveLimit(FixedLimit):
    """A limit that grows while answers stay fast and shrinks on slowness, timeouts and errors.

    Like TCP: *slow start* adds one slot per fast answer (the limit doubles every round trip) until the
    first slow answer, which halves it; from then on *congestion avoidance* adds one slot per round trip's
    worth of fast answers and takes a tenth off for slow ones, at most once per round trip. A timeout, an
    error or an overload answer halves it at any time. Answers within ``noise`` seconds of the fastest
    count as fast (sub-millisecond jitter on loopback is not a signal).
    """

    def __init__(
        self,
        initial: int = 8,
        *,
        minimum: int = 1,
        maximum: int = 512,
        tolerance: float = 2.0,
        noise: float = 0.002,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(initial, clock=clock)
        self._value = float(initial)
        self.minimum = minimum
        self.maximum = maximum
        self.tolerance = tolerance
        self.noise = noise
        self.fastest: float | None = None
        self.slow_start = True
        self._last_cut = float("-inf")

    @property
    def limit(self) -> int:
        """The current limit (between ``minimum`` and ``maximum``)."""
        return max(self.minimum, min(self.maximum, int(self._value)))

    def _cut(self, factor: float, now: float) -> None:
        # at most one cut per fastest round trip, so one burst of slow answers is one signal
        if now - self._last_cut >= (self.fastest or 0.0):
            self._value = max(float(self.minimum), self._value * factor)
            self._last_cut = now

    def _observe(self, rtt: float, *, ok: bool, overloaded: bool) -> None:
        now = self._clock()
        if not ok or overloaded:
            self.slow_start = False
            self._cut(0.5, now)
            return
        if self.fastest is None or rtt < self.fastest:
            self.fastest = rtt
        fast = rtt <= max(self.fastest * self.tolerance, self.fastest + self.noise)
        if fast:
            if self.in_flight + 1 >= self.limit / 2:  # grow only a limit that is actually used
                step = 1.0 if self.slow_start else 1.0 / max(self._value, 1.0)
                self._value = min(float(self.maximum), self._value + step)
        elif self.slow_start:
            self.slow_start = False
            self._cut(0.5, now)
        else:
            self._cut(0.9, now)


ConcurrencyLimit = FixedLimit

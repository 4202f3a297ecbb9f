"""How many recovery requests may be in flight at once: a fixed limit, or one that adapts to the agent.

A recovery slot is held only while a request is on the wire (never during a retry's backoff). The
adaptive limit is a latency gradient, like Netflix's concurrency-limits ``Gradient2`` and TCP Vegas: each
round trip's answers move the limit towards ``limit * gradient + sqrt(limit)`` (each answer ``1/limit`` of
``smoothing`` of the way, as TCP grows its window per acknowledgement: a burst of answers read together is
one signal, not hundreds that compound), where ``gradient`` is how close the
answer's round trip stayed to the baseline (1 while it is within ``tolerance`` times the baseline, down to
0.5 as requests start to queue at the agent) and ``sqrt(limit)`` is the queue it allows. So while
the link has room the limit grows by about half of itself per round trip (latency dominates, not the
agent: it climbs towards the pipelined floor), and against an agent with a bounded worker pool it settles
where only a small queue forms. While answers show no queueing at all, it grows by at least one per
answer (doubling every round trip, as TCP's slow start): a limit that settled low against a busy agent on
loopback climbs in a few round trips when the next connection runs over a slow path. An overload answer
halves it, and so does a timeout or a lost link unless other requests were answered fine meanwhile (then
it was that session's own fault: a few hung sessions must not throttle the healthy ones).

The baseline is the fastest round trip of the last ``baseline_window`` seconds (10 s, a sliding minimum as
BBR keeps its min RTT), forgotten at every new connection (:meth:`AdaptiveLimit.new_path`). A minimum that
never decays is TCP Vegas's known weakness when a route changes: after a move from loopback to a 20 ms
path every answer would read as congestion for the rest of the client's life. Queueing the client causes
itself raises the round trips of a burst, not the minimum over a window in which quieter moments occur;
a slower path raises every round trip, so the minimum follows it once the window has passed (at once
after a reconnect, which is when a path change usually shows).
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
        self._woken = 0  # waiters woken for a free slot that have not taken it yet

    @property
    def limit(self) -> int:
        """The current limit."""
        return self._limit

    @property
    def waiting(self) -> int:
        """How many requests wait for a slot (the recovery queue's depth)."""
        return len(self._waiters)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.in_flight}/{self.limit}>"

    def try_acquire(self) -> float | None:
        """Take a free slot without waiting: the start time to hand back to :meth:`release`, or ``None``
        when none is free (then wait in :meth:`acquire`)."""
        if self.in_flight + self._woken < self._limit:
            self.in_flight += 1
            self._took()
            return self._clock()
        return None

    def _took(self) -> None:
        """A slot was taken (``in_flight`` counts it)."""

    async def acquire(self) -> float:
        """Wait for a slot; returns the start time to hand back to :meth:`release`.

        Waiters are served first come, first served: a freed slot is reserved for the waiter it wakes, so
        neither a newcomer nor a second release can take it first.
        """
        started = self.try_acquire()
        if started is not None:
            return started
        loop = asyncio.get_running_loop()
        front = False
        while True:
            waiter: asyncio.Future[None] = loop.create_future()
            if front:
                self._waiters.appendleft(waiter)
            else:
                self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._woken -= 1
                    self._wake()  # woken, then cancelled: pass the reserved slot on to the next waiter
                raise  # (a waiter cancelled while queued stays in the queue, done, until _wake drops it)
            self._woken -= 1
            if self.in_flight < self.limit:
                break
            front = True  # the limit shrank while it was being woken: wait again, first in line
        self.in_flight += 1
        self._took()
        return self._clock()

    def release(self, started: float, *, ok: bool, overloaded: bool = False, lag: float = 0.0) -> None:
        """Give the slot back; ``ok`` is ``False`` after a timeout or an error (``overloaded`` for an
        agent that said it is busy). ``lag``: how long ago the answer was read (seconds), a wait of the
        client's own that is not part of the round trip."""
        rtt = self._clock() - started - lag
        self._observe(rtt if rtt > 0.0 else 0.0, ok=ok, overloaded=overloaded)
        self._returned()

    def renew(self, started: float, *, lag: float = 0.0) -> float | None:
        """Report a request answered fine, as :meth:`release` does, but keep its slot for the same job's next
        request while the limit has room for it: the next start time, or ``None`` when the slot was given
        back (the limit shrank below what is in flight; wait in :meth:`acquire` again).

        A session's resume follows its status probe on the slot the probe held: the session that started
        finishes first instead of queueing again behind every session still waiting for its probe (one wait,
        one wake-up and one hand-over less per recovered session)."""
        now = self._clock()
        rtt = now - started - lag
        self._observe(rtt if rtt > 0.0 else 0.0, ok=True, overloaded=False)
        if self.in_flight + self._woken <= self._limit:
            self._wake()  # the limit may have grown
            return now
        self._returned()
        return None

    def give_back(self) -> None:
        """Return a slot that carried no request (kept for a request that was not made): nothing to learn."""
        self._returned()

    def _returned(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _observe(self, rtt: float, *, ok: bool, overloaded: bool) -> None:
        """Fixed: nothing to learn."""

    def new_path(self) -> None:
        """A new connection starts (it may run over another network path). Fixed: nothing to forget."""

    def _wake(self) -> None:
        """Wake as many waiters, oldest first, as there are free slots (O(woken), whatever the queue's
        length: ten thousand sessions recovering at once must not cost a copy of the queue per answer)."""
        free = self.limit - self.in_flight - self._woken
        waiters = self._waiters
        while free > 0 and waiters:
            waiter = waiters.popleft()
            if not waiter.done():  # a cancelled waiter is dropped here
                waiter.set_result(None)
                self._woken += 1
                free -= 1


class AdaptiveLimit(FixedLimit):
    """A limit that grows while answers stay fast and shrinks as they slow down or fail (module docstring).

    ``smoothing`` is how far towards the target one round trip's answers move the limit together (each
    answer moves it ``smoothing / limit`` of the way); answers within ``noise`` seconds of the fastest count
    as fast (sub-millisecond jitter on loopback is not a signal).
    """

    def __init__(
        self,
        initial: int = 8,
        *,
        minimum: int = 1,
        maximum: int = 512,
        tolerance: float = 2.0,
        smoothing: float = 0.5,
        noise: float = 0.002,
        baseline_window: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(initial, clock=clock)
        self._value = float(initial)
        self._minimum = minimum
        self._maximum = maximum
        self._clamp()
        self.tolerance = tolerance
        self.smoothing = smoothing
        self.noise = noise
        self.baseline_window = baseline_window
        # (time, rtt) of fine answers, rtt increasing from the front: the front is the fastest round trip of
        # the last ``baseline_window`` seconds (a sliding minimum, as BBR keeps its min RTT)
        self._window: collections.deque[tuple[float, float]] = collections.deque()
        self._last_cut = float("-inf")
        self._last_ok = float("-inf")  # when a request was last answered fine
        # the most requests in flight at once since none was: the limit counts as used when this came near
        # it (a burst's last answers find few in flight, yet the burst filled the limit)
        self._peak = 0
        # the lowest the gradient may take the limit until ``_shrink_until``: half of where the round trip
        # in which answers started to slow down began (a full window of slow answers must not compound)
        self._shrink_floor = 0.0
        self._shrink_until = float("-inf")

    def _took(self) -> None:
        if self.in_flight > self._peak:
            self._peak = self.in_flight

    def _returned(self) -> None:
        super()._returned()
        if not self.in_flight:
            self._peak = 0

    @property
    def fastest(self) -> float | None:
        """The baseline: the fastest fine round trip of the last ``baseline_window`` seconds on this path."""
        return self._window[0][1] if self._window else None

    def new_path(self) -> None:
        """A new connection starts: forget the baseline (the limit stays). A laptop that moved from the
        office network to a tether, or a VPN that came up, has a new round trip; a baseline kept from the
        old path would read every answer of the new one as congestion and pin the limit near 4."""
        self._window.clear()

    def _remember(self, now: float, rtt: float) -> None:
        window = self._window
        while window and window[-1][1] >= rtt:
            window.pop()  # never the minimum again while this faster, newer sample is in the window
        window.append((now, rtt))
        horizon = now - self.baseline_window
        while len(window) > 1 and window[0][0] < horizon:
            window.popleft()  # a baseline older than the window: the path may have changed since

    @property
    def limit(self) -> int:
        """The current limit (between ``minimum`` and ``maximum``)."""
        return self._limit

    @property
    def minimum(self) -> int:
        """The lowest the limit goes."""
        return self._minimum

    @minimum.setter
    def minimum(self, value: int) -> None:
        self._minimum = value
        self._clamp()

    @property
    def maximum(self) -> int:
        """The highest the limit goes."""
        return self._maximum

    @maximum.setter
    def maximum(self, value: int) -> None:
        self._maximum = value
        self._clamp()

    def _clamp(self) -> None:
        # kept as an int, not computed at every read: each request reads the limit several times
        # (conditionals, not min()/max(): those parse their arguments as keywords, per answer)
        value = int(self._value)
        self._limit = self._minimum if value < self._minimum else self._maximum if value > self._maximum else value

    def _observe(self, rtt: float, *, ok: bool, overloaded: bool) -> None:
        now = self._clock()
        if not ok and not overloaded and self._last_ok > now - rtt:
            return  # others were answered while this one hung: a fault of its session, not congestion
        if not ok or overloaded:
            # at most one cut per fastest round trip, so one burst of failures is one signal
            if now - self._last_cut >= (self.fastest or 0.0):
                self._value = max(float(self.minimum), self._value / 2)
                self._clamp()
                self._last_cut = now
            return
        self._last_ok = now
        self._remember(now, rtt)
        fastest = self._window[0][1]
        allowed = fastest * self.tolerance
        if allowed < fastest + self.noise:
            allowed = fastest + self.noise
        ratio = allowed / rtt if rtt > 0 else 1.0
        gradient = 1.0 if ratio > 1.0 else 0.5 if ratio < 0.5 else ratio
        target = self._value * gradient + self._value**0.5
        if target > self._value and self._peak < self.limit / 2:
            return  # grow only a limit that is actually used
        # a round trip brings about ``limit`` answers, read in bursts with the same round trip: each moves the
        # limit ``1/limit`` of the way, so a round trip's answers together move it ``smoothing`` of the way to
        # the target once (a per-answer step would compound over a burst: hundreds of answers from a busy
        # but healthy pipeline took 512 to 60 in four round trips, below what the path needs)
        value = self._value + self.smoothing * (target - self._value) / (self._value if self._value > 1.0 else 1.0)
        if value < self._value:
            # each slow answer moves the limit down a little; a round trip's worth of them (hundreds, after an
            # overshoot) would compound to the minimum, so within one baseline round trip at most halve it
            if now >= self._shrink_until:
                self._shrink_floor = self._value / 2
                self._shrink_until = now + fastest
            if value < self._shrink_floor:
                value = self._shrink_floor
        # no queueing seen: at least one more per fine answer, so a small limit doubles every round trip (TCP's
        # slow start); ``sqrt(limit)`` alone adds only ~1.6 per round trip at 4, which is where a limit learned
        # against a busy agent on loopback starts when the next connection is a 20 ms path
        if gradient >= 1.0 and value < self._value + 1.0:
            value = self._value + 1.0
        if value < self._minimum:
            value = float(self._minimum)
        elif value > self._maximum:
            value = float(self._maximum)
        self._value = value
        self._clamp()


ConcurrencyLimit = FixedLimit

"""Reconnect delays: capped exponential growth with full jitter on every attempt, and a crash-loop breaker."""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Backoff", "Clock", "CrashLoopBreaker"]


class Clock:
    """The time source of the reconnect manager: ``monotonic()`` and ``sleep()``; replace both in tests."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin, never going backwards."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (cancellable)."""
        await asyncio.sleep(seconds)


@dataclass
class Backoff:
    """Full-jitter exponential backoff: attempt ``n`` (1-based) waits ``U(0, min(cap, base * 2**n))``.

    The draw uses the injectable ``rng`` so tests can seed it. A server hint (``Retry-After``, close 1013)
    raises the delay to at least the hint, plus jitter of up to ``hint_jitter`` of the hint so a herd told
    the same number still spreads out. The same policy paces the reconnect loop (as the ``wait`` of its
    tenacity ``AsyncRetrying``), the per-session recovery retries and the store's write retries.
    """

    base: float = 0.5
    cap: float = 30.0
    hint_jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random)

    def bound(self, attempt: int) -> float:
        """The upper bound of the delay before attempt ``attempt`` (1-based)."""
        return min(self.cap, self.base * 2.0 ** min(attempt, 64))

    def delay(self, attempt: int, hint: float | None = None) -> float:
        """The delay before attempt ``attempt`` (1-based), honouring a server ``hint`` in seconds."""
        drawn = self.rng.uniform(0.0, self.bound(attempt))
        if hint is not None and hint > 0:
            return hint + self.rng.uniform(0.0, hint * self.hint_jitter)
        return drawn


@dataclass
class CrashLoopBreaker:
    """Trips when ``threshold`` connections died less than ``short_lived`` seconds after becoming ready,
    all within ``window`` seconds (the LSP client's rule: 5 within 3 minutes)."""

    threshold: int = 5
    short_lived: float = 10.0
    window: float = 180.0
    clock: Callable[[], float] = time.monotonic
    _deaths: collections.deque[float] = field(default_factory=collections.deque, init=False, repr=False)

    def record(self, lived: float) -> bool:
        """Record a connection that lived ``lived`` seconds after ready; ``True`` if the breaker trips."""
        if lived >= self.short_lived:
            return False
        now = self.clock()
        self._deaths.append(now)
        while self._deaths and now - self._deaths[0] > self.window:
            self._deaths.popleft()
        return len(self._deaths) >= self.threshold

    def reset(self) -> None:
        """Forget every recorded death (after a manual ``reconnect_now()``)."""
        self._deaths.clear()

"""How fast one worker takes sessions over: :class:`ClaimPacer` (a token bucket over sessions claimed).

A worker that dies leaves every one of its sessions free at once, and every survivor sees them in its next
adoption round. Without a bound the survivors claim thousands of sessions in one go and start as many
recoveries against the agents: a hand-over storm. The pacer lets one worker claim at most ``rate`` sessions
per second (a burst of one second's worth, then a steady ``rate``), so a storm is spread over time and over
the survivors (each adoption round also starts after a random delay and claims in a random order, so
workers racing for the same sessions mostly claim different ones).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["ClaimPacer"]


class ClaimPacer:
    """At most ``rate`` claims per second, one second's worth in a burst (``clock`` for tests)."""

    __slots__ = ("_at", "_clock", "_rate", "_tokens")

    def __init__(self, rate: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = float(rate)
        self._clock = clock
        self._tokens = self._rate
        self._at = clock()

    @property
    def rate(self) -> float:
        """Sessions per second."""
        return self._rate

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._rate, self._tokens + (now - self._at) * self._rate)
        self._at = now

    async def grant(self, wanted: int) -> int:
        """How many of ``wanted`` claims may go out now (at least one, after waiting for it if the bucket
        is empty); the grant is taken from the bucket."""
        if wanted <= 0:
            return 0
        self._refill()
        if self._tokens < 1:
            await asyncio.sleep((1 - self._tokens) / self._rate)  # the pace itself, not a synchronisation
            self._refill()
        granted = max(1, min(wanted, int(self._tokens)))
        self._tokens -= granted
        return granted

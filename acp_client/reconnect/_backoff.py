"""Reconnect delays: :class:`Backoff` (the package's one backoff, defined in :mod:`acp_client._backoff`), the
clock the reconnect manager waits on, and the crash-loop breaker."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from acp_client._backoff import Backoff
from acp_client._checks import check_callable, check_count, check_seconds
from acp_client.exceptions import UsageError

__all__ = ["Backoff", "Clock", "CrashLoopBreaker", "check_clock"]


class Clock:
    """The time source of the reconnect manager: ``monotonic()`` and ``sleep()``; replace both in tests."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin, never going backwards."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (cancellable)."""
        await asyncio.sleep(seconds)


def check_clock(name: str, value: object) -> None:
    """Raise :class:`UsageError` unless ``value`` is ``None`` or a clock: ``monotonic()`` and ``sleep()`` as
    :class:`Clock` has them (a subclass, or any object with both)."""
    if value is None or isinstance(value, Clock):
        return
    if not (callable(getattr(value, "monotonic", None)) and callable(getattr(value, "sleep", None))):
        raise UsageError(f"{name} must be a Clock (monotonic() and sleep()) or None, not {type(value).__name__}")


@dataclass
class CrashLoopBreaker:
    """Trips when ``threshold`` connections died less than ``short_lived`` seconds after becoming ready,
    all within ``window`` seconds (the LSP client's rule: 5 within 3 minutes).

    ``threshold`` is an int ``>= 1``, ``short_lived`` and ``window`` seconds ``> 0``, ``clock`` a callable
    returning monotonic seconds; anything else raises :class:`~acp_client.exceptions.UsageError` at
    construction."""

    threshold: int = 5
    short_lived: float = 10.0
    window: float = 180.0
    clock: Callable[[], float] = time.monotonic
    _deaths: collections.deque[float] = field(default_factory=collections.deque, init=False, repr=False)

    def __post_init__(self) -> None:
        check_count("CrashLoopBreaker", "threshold", self.threshold)
        check_seconds("CrashLoopBreaker", "short_lived", self.short_lived)
        check_seconds("CrashLoopBreaker", "window", self.window)
        check_callable("CrashLoopBreaker", "clock", self.clock)

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

"""The progress watch of a long request (a replaying ``session/load`` or ``session/resume``).

The watch is a timer callback, not a loop in the waiting task: while the agent answers in time (the common
case, thousands of times per recovery round) the request costs one timer and one wake-up, as a plain
request does. Only when the request must be given up does the watch act: it hands the request's id a fresh
future (an answer that arrives from then on is still received) and fails the one the caller awaits with
:class:`GaveUp`, naming the bound that was reached.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["GaveUp", "ProgressWatch"]


class GaveUp(Exception):
    """Set on a watched request's future when it is given up; ``late`` receives an answer still to come."""

    def __init__(self, why: str, late: asyncio.Future[Any]) -> None:
        super().__init__(why)
        self.why = why
        self.late = late


class ProgressWatch:
    """Gives up ``fut`` after ``silence`` seconds with neither an answer nor a change of ``progress()``,
    after ``deadline`` seconds in all, or (checked at every tick of at most a second) after more than
    ``max_progress`` progress. ``renew()`` makes the future a late answer goes to (the owner of the
    request table registers it under the request's id)."""

    __slots__ = (
        "_deadline",
        "_first",
        "_fut",
        "_loop",
        "_max_progress",
        "_progress",
        "_quiet_since",
        "_renew",
        "_seen",
        "_silence",
        "_started",
        "_tick",
        "_timer",
    )

    def __init__(
        self,
        fut: asyncio.Future[Any],
        *,
        silence: float,
        progress: Callable[[], object],
        deadline: float | None,
        max_progress: int | None,
        renew: Callable[[], asyncio.Future[Any]],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._fut = fut
        self._silence = silence
        self._progress = progress
        self._deadline = deadline
        self._max_progress = max_progress
        self._renew = renew
        self._started = self._quiet_since = self._loop.time()
        self._seen = self._first = progress()
        # without a progress bound, one look per silence; with one, a look every second at most
        self._tick = silence if max_progress is None else min(silence, 1.0)
        self._timer: asyncio.TimerHandle | None = None
        self._arm(self._started)

    def stop(self) -> None:
        """The caller is done waiting (answered, given up or cancelled): no more looks."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self, now: float) -> None:
        wait = min(self._tick, max(0.0, self._quiet_since + self._silence - now))
        if self._deadline is not None:
            wait = min(wait, max(0.0, self._started + self._deadline - now))
        self._timer = self._loop.call_at(now + wait, self._look)

    def _look(self) -> None:
        self._timer = None
        if self._fut.done():
            return
        now_t = self._loop.time()
        try:
            now = self._progress()
        except Exception as exc:  # the caller's progress callback failed: the caller sees why
            self._fut.set_exception(exc)
            return
        first, bound = self._first, self._max_progress
        if bound is not None and isinstance(now, int) and isinstance(first, int) and now - first > bound:
            self._give_up(f"more than {bound} updates replayed without an answer (Limits.replay_updates)")
        elif self._deadline is not None and now_t - self._started >= self._deadline:
            self._give_up(f"no answer within {self._deadline:g} s")
        elif now != self._seen:
            self._seen, self._quiet_since = now, now_t  # the agent is still streaming: silence starts again
            self._arm(now_t)
        elif now_t - self._quiet_since >= self._silence:
            self._give_up(f"no answer and no progress for {self._silence:g} s")
        else:
            self._arm(now_t)

    def _give_up(self, why: str) -> None:
        self._fut.set_exception(GaveUp(why, self._renew()))

"""The retry schedule of the Redis link, as tenacity strategies: the package's one full-jitter
:class:`~acp_client._backoff.Backoff` under a cap, and a deadline
that bounds the whole retry (``retry_for``). :meth:`~acp_client.sessions.redis._link.RedisLink.retrying`
hands them to tenacity's ``AsyncRetrying``.

Both are plain callables of tenacity's ``RetryCallState`` (tenacity accepts any such callable as a ``wait`` or
``stop``), so this module does not import tenacity: the Redis link imports it on first use, as it imports
redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from acp_client._backoff import Backoff

if TYPE_CHECKING:
    from tenacity import RetryCallState

__all__ = ["Deadline", "FullJitter"]


class FullJitter:
    """Wait what :class:`~acp_client._backoff.Backoff` draws after the n-th failed attempt (uniformly in
    ``[0, min(cap, base * 2**n)]``), never past ``deadline`` seconds after the first attempt (the last wait
    is shortened so one more attempt is made at the deadline)."""

    def __init__(self, backoff: Backoff, *, deadline: float) -> None:
        self._backoff = backoff
        self._deadline = deadline

    def ceiling(self, attempt: int) -> float:
        """The longest wait after failed attempt number ``attempt`` (1-based), before the deadline clamp."""
        return self._backoff.bound(attempt)

    def __call__(self, state: RetryCallState) -> float:
        left = self._deadline - (state.seconds_since_start or 0.0)
        return max(0.0, min(self._backoff.delay(state.attempt_number), left))


class Deadline:
    """Stop retrying once ``seconds`` have passed since the first attempt (``0``: never retry)."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds

    def __call__(self, state: RetryCallState) -> bool:
        return (state.seconds_since_start or 0.0) >= self._seconds

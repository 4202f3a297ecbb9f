"""The one backoff of the package: capped exponential growth with full jitter on every attempt.

:class:`Backoff` paces a :class:`~acp_client.ReconnectingClient`'s reconnects, its per-session recovery
retries and its store's write retries, and the Redis store's link retries (through its tenacity ``wait``,
:class:`~acp_client.sessions.redis._retry.FullJitter`). It sits below every layer that retries, so there is
one formula: attempt ``n`` (1-based) waits ``U(0, min(cap, base * 2**n))``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from acp_client._checks import check_instance, check_number, check_seconds

__all__ = ["Backoff"]


@dataclass
class Backoff:
    """Full-jitter exponential backoff: attempt ``n`` (1-based) waits ``U(0, min(cap, base * 2**n))``.

    So the first retry waits up to ``2 * base`` and each further one up to twice as long, never more than
    ``cap``. The draw uses the injectable ``rng`` so tests can seed it. A server hint (``Retry-After``, close
    1013) raises the delay to at least the hint, plus jitter of up to ``hint_jitter`` of the hint so a herd
    told the same number still spreads out. The same policy paces the reconnect loop (as the ``wait`` of its
    tenacity ``AsyncRetrying``), the per-session recovery retries and the store's write retries.

    ``base`` and ``cap`` are seconds ``>= 0`` (``0`` never waits), ``hint_jitter`` a fraction ``>= 0`` and
    ``rng`` a :class:`random.Random`; anything else raises :class:`~acp_client.exceptions.UsageError` at
    construction.
    """

    base: float = 0.5
    cap: float = 30.0
    hint_jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        check_seconds("Backoff", "base", self.base, zero=True)
        check_seconds("Backoff", "cap", self.cap, zero=True)
        check_number("Backoff", "hint_jitter", self.hint_jitter)
        check_instance("Backoff", "rng", self.rng, random.Random, optional=False)

    def bound(self, attempt: int) -> float:
        """The upper bound of the delay before attempt ``attempt`` (1-based)."""
        return min(self.cap, self.base * 2.0 ** min(attempt, 64))

    def delay(self, attempt: int, hint: float | None = None) -> float:
        """The delay before attempt ``attempt`` (1-based), honouring a server ``hint`` in seconds."""
        drawn = self.rng.uniform(0.0, self.bound(attempt))
        if hint is not None and hint > 0:
            return hint + self.rng.uniform(0.0, hint * self.hint_jitter)
        return drawn

"""The fault vocabulary of :class:`~acp_client.testing.FaultProxy`: what one direction of a link may do.

This module only describes faults, it runs nothing: :class:`ProxyMode` (one direction's behaviour, built
with its class methods and validated there), :class:`LinkMode` (the pair for both directions of a link),
the :data:`Direction` and :data:`ModeKind` names and the :data:`MAX_DELAY` cap. The pipes of
:mod:`acp_client.testing.fault_proxy._link` carry the modes out; :mod:`acp_client.testing.fault_proxy` re-exports
the public names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

__all__ = ["MAX_DELAY", "PASS", "Direction", "LinkMode", "ModeKind", "ProxyMode", "directions"]

#: a direction of a link: client → upstream, upstream → client, or both
Direction = Literal["c2s", "s2c", "both"]
#: the kinds of per-direction :class:`ProxyMode`
ModeKind = Literal["pass", "delay", "blackhole", "hold", "limit_bytes", "slice", "slow_close"]

#: upper bound, in seconds, of every delay a mode may introduce
MAX_DELAY = 60.0


def _check_seconds(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= MAX_DELAY:
        raise ValueError(f"{name} must be between 0 and {MAX_DELAY:g} seconds, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class ProxyMode:
    """What one direction of a link does with the bytes it reads; build one with the class methods.

    ``seconds`` is the delay of ``delay``/``slice``/``slow_close``, ``jitter`` the extra random delay of
    ``delay``, ``size`` the byte count of ``limit_bytes``/``slice``.
    """

    kind: ModeKind
    seconds: float = 0.0
    jitter: float = 0.0
    size: int = 0

    @classmethod
    def passthrough(cls) -> ProxyMode:
        """Forward every chunk as soon as possible."""
        return cls("pass")

    @classmethod
    def delay(cls, seconds: float, jitter: float = 0.0) -> ProxyMode:
        """Deliver each chunk ``seconds`` + U(0, ``jitter``) after it was read; chunks keep their order."""
        return cls("delay", seconds=_check_seconds("seconds", seconds), jitter=_check_seconds("jitter", jitter))

    @classmethod
    def blackhole(cls) -> ProxyMode:
        """Forward nothing and stop reading the source; both sockets stay open (a half-open link)."""
        return cls("blackhole")

    @classmethod
    def hold(cls) -> ProxyMode:
        """Forward nothing but keep reading (up to ``max_buffer``); pass-through later delivers it in order."""
        return cls("hold")

    @classmethod
    def limit_bytes(cls, n: int) -> ProxyMode:
        """Forward ``n`` more bytes, then close the whole link with FIN (``0``: close at once)."""
        if n < 0:
            raise ValueError("n must be >= 0")
        return cls("limit_bytes", size=int(n))

    @classmethod
    def slice(cls, size: int, delay: float = 0.0) -> ProxyMode:
        """Write at most ``size`` bytes at a time, ``delay`` seconds apart (frames arrive in pieces)."""
        if size < 1:
            raise ValueError("size must be >= 1")
        return cls("slice", seconds=_check_seconds("delay", delay), size=int(size))

    @classmethod
    def slow_close(cls, seconds: float) -> ProxyMode:
        """Forward data, but pass a close from the source side on to the other side ``seconds`` late."""
        return cls("slow_close", seconds=_check_seconds("seconds", seconds))

    @classmethod
    def parse(cls, mode: ProxyMode | str) -> ProxyMode:
        """Accept a :class:`ProxyMode` or the name of a parameterless one (``"pass"``, ``"blackhole"``, ``"hold"``)."""
        if isinstance(mode, ProxyMode):
            return mode
        if mode == "pass":
            return cls.passthrough()
        if mode == "blackhole":
            return cls.blackhole()
        if mode == "hold":
            return cls.hold()
        raise ValueError(
            f"unknown mode {mode!r}; use a ProxyMode (e.g. ProxyMode.delay(0.1)) or 'pass'/'blackhole'/'hold'"
        )


#: the pass-through mode, the default of every direction
PASS = ProxyMode.passthrough()


class LinkMode(NamedTuple):
    """The modes of both directions of a link."""

    c2s: ProxyMode
    s2c: ProxyMode


def directions(direction: Direction) -> tuple[Literal["c2s", "s2c"], ...]:
    """The single directions ``direction`` names (``"both"`` is both); ``ValueError`` for anything else."""
    if direction == "both":
        return ("c2s", "s2c")
    if direction in ("c2s", "s2c"):
        return (direction,)
    raise ValueError(f"direction must be 'c2s', 's2c' or 'both', got {direction!r}")

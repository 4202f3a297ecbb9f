"""Recovery strategies: what to do with each known session after a (re)connect.

After every (re)connect the reconnect manager probes each session with ``session/status`` (when the new
connection advertises it) and asks a :class:`RecoveryStrategy` what to do with the answer. The strategy is
a small, replaceable mapping from (session, probe, capabilities) to an :class:`Action`; the default one,
:class:`DefaultStrategy`, implements the ACP recovery rules:

========================================  ===============================================================
probe                                     action
========================================  ===============================================================
unknown session (status, resume or load)  forget the session and say why (``-32002``, or another dialect of
                                          it: :mod:`acp_client.reconnect.dialects`)
``active`` (or the older ``open``)        re-attach: ``session/resume`` (v1: resume if advertised, else
                                          ``session/load``) — reported as *reattached*
``inactive`` (``saved``), any other       restore: v2 ``session/resume`` with replay; v1 ``session/load``
string                                    when advertised, else ``session/resume`` — reported as *restored*
not advertised, ``-32601``, other error   go straight to resume/load and let its answer decide
========================================  ===============================================================

Override per client (``ReconnectingClient(strategy=...)``) or per session
(``client.set_strategy(session_id, ...)``). ``decide`` may be a coroutine (to look something up), but it
runs within ``Timeouts.strategy`` (holding no recovery slot): a strategy that needs a *human*
(a notebook asking before forgetting) returns :class:`Keep` at once; the client then emits
``SessionDetached`` and the application calls ``client.recover(id)`` or ``client.forget(id)`` later.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from acp_client._checks import check_bool, check_choice, check_instance
from acp_client.exceptions import UsageError
from acp_client.schema.status import ACTIVE_STATUSES, StateSnapshot
from acp_client.sessions import SessionRecord

__all__ = [
    "ACTIVE_STATUSES",
    "Action",
    "Capabilities",
    "DefaultStrategy",
    "Forget",
    "Keep",
    "Reattach",
    "RecoveryStrategy",
    "StatusProbe",
    "strategy_from_callable",
]


@dataclass(frozen=True, slots=True)
class StatusProbe:
    """What ``session/status`` said about one session on the new connection.

    ``status`` is the raw status string (open set) or ``None`` when no probe was made or it failed
    (``skipped_reason`` says why: ``"not_advertised"``, ``"method_not_found"``, ``"error"``, ``"malformed"``
    (an answer with no readable status: ``null``, ``{}``, a non-string ``status``); or the method that
    answered ``-32002`` — ``"session/resume"``, ``"session/load"`` — when the strategy is asked again after a
    re-attach found the session unknown). ``not_found`` is ``True`` for an unknown-session answer: ``-32002``,
    a code of ``RecoveryPolicy.unknown_session_codes``, or words the policy's ``dialects`` read as unknown.
    ``state`` is the v2 foreground snapshot, if reported.
    """

    status: str | None
    state: StateSnapshot | None = None
    not_found: bool = False
    skipped_reason: str | None = None
    error: BaseException | None = None

    @property
    def active(self) -> bool:
        """``True`` when the agent reported the session in memory."""
        return self.status in ACTIVE_STATUSES


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the *new* connection offers, as a strategy needs it."""

    protocol_version: int
    load: bool
    resume: bool
    status: bool


@dataclass(frozen=True, slots=True)
class Reattach:
    """Attach the session on the new connection with ``session/resume`` or ``session/load``.

    ``replay`` asks for the history first (v2 ``replayFrom: start``; implied by a v1 load). ``outcome`` is
    what the recovery is reported as: ``"reattached"`` (it was live) or ``"restored"``.
    """

    mode: Literal["resume", "load"]
    replay: bool
    outcome: Literal["reattached", "restored"] = "restored"

    def __post_init__(self) -> None:
        check_choice("Reattach", "mode", self.mode, ("resume", "load"))
        check_bool("Reattach", "replay", self.replay)
        check_choice("Reattach", "outcome", self.outcome, ("reattached", "restored"))


@dataclass(frozen=True, slots=True)
class Forget:
    """Forget the session: drop it from the client and the store and end its handle with ``SessionLost``."""

    reason: str = "unknown"

    def __post_init__(self) -> None:
        check_instance("Forget", "reason", self.reason, str, optional=False)


@dataclass(frozen=True, slots=True)
class Keep:
    """Leave the session detached for now (for example until the user decides); nothing is sent."""

    reason: str = "kept"

    def __post_init__(self) -> None:
        check_instance("Keep", "reason", self.reason, str, optional=False)


Action = Reattach | Forget | Keep


class RecoveryStrategy(Protocol):
    """Maps one session's probe on a new connection to an :class:`Action` (may be a coroutine)."""

    def decide(
        self, record: SessionRecord, probe: StatusProbe, capabilities: Capabilities
    ) -> Action | Awaitable[Action]:
        """Choose what to do with the session described by ``record``."""
        ...


class DefaultStrategy:
    """The ACP recovery rules (see the module docstring).

    ``replay``: ``True`` (default) aims at a consistent transcript — v2 resumes with
    ``replayFrom: {"type": "start"}``, and a v1 session that is not live is restored with ``session/load``
    when advertised. ``False`` never asks for a replay (v2 plain resume; v1 resume when advertised), for a
    chat frontend that keeps its own history. ``forget_unknown=False`` turns -32002 into :class:`Keep`
    (the application then calls ``client.forget()`` itself).
    """

    def __init__(self, *, replay: bool = True, forget_unknown: bool = True) -> None:
        check_bool("DefaultStrategy", "replay", replay)
        check_bool("DefaultStrategy", "forget_unknown", forget_unknown)
        self.replay = replay
        self.forget_unknown = forget_unknown

    def __repr__(self) -> str:
        return f"DefaultStrategy(replay={self.replay}, forget_unknown={self.forget_unknown})"

    def decide(self, record: SessionRecord, probe: StatusProbe, capabilities: Capabilities) -> Action:
        """Apply the default mapping."""
        if probe.not_found:
            return Forget("unknown") if self.forget_unknown else Keep("unknown")
        outcome: Literal["reattached", "restored"] = "reattached" if probe.active else "restored"
        if capabilities.protocol_version >= 2:
            return Reattach("resume", replay=self.replay, outcome=outcome)
        prefer_load = self.replay and not probe.active
        if capabilities.load and (prefer_load or not capabilities.resume):
            return Reattach("load", replay=True, outcome=outcome)
        if capabilities.resume:
            return Reattach("resume", replay=False, outcome=outcome)
        return Keep("the agent advertises neither session/resume nor session/load")


def check_strategy(name: str, value: object) -> None:
    """Raise :class:`~acp_client.exceptions.UsageError` unless ``value`` is ``None`` or a strategy: an object
    with a callable ``decide`` (wrap a plain function with :func:`strategy_from_callable`)."""
    if value is not None and not callable(getattr(value, "decide", None)):
        raise UsageError(
            f"{name} must be a RecoveryStrategy (an object with a decide() method) or None, not {value!r}; "
            "wrap a plain function with strategy_from_callable()"
        )


def strategy_from_callable(
    fn: Callable[[SessionRecord, StatusProbe, Capabilities], Action | Awaitable[Action]],
) -> RecoveryStrategy:
    """Wrap a plain function ``(record, probe, capabilities) -> Action`` as a strategy."""

    class _FnStrategy:
        def decide(
            self, record: SessionRecord, probe: StatusProbe, capabilities: Capabilities
        ) -> Action | Awaitable[Action]:
            return fn(record, probe, capabilities)

    return _FnStrategy()

"""The reconnect manager's states and the typed events it reports."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "LEGAL_TRANSITIONS",
    "ClientState",
    "ConnectionDropped",
    "Event",
    "SessionDetached",
    "SessionForgotten",
    "SessionRecovered",
    "SessionRecoveryFailed",
    "StateChanged",
]


class ClientState(enum.Enum):
    """The reconnect manager's lifecycle (see ``LEGAL_TRANSITIONS``)."""

    IDLE = "idle"  #: created, not started
    CONNECTING = "connecting"  #: opening the transport
    INITIALIZING = "initializing"  #: sending initialize on the new connection
    RECOVERING = "recovering"  #: probing and re-attaching known sessions
    READY = "ready"  #: connected; every session that could be recovered is attached
    BACKOFF = "backoff"  #: waiting before the next attempt
    FAILED = "failed"  #: stopped reconnecting (fatal error or crash-loop breaker); reconnect_now() re-arms
    CLOSED = "closed"  #: closed by the application; final


_S = ClientState
#: Every legal ``old -> new`` transition; anything else is a bug and raises.
LEGAL_TRANSITIONS: dict[ClientState, frozenset[ClientState]] = {
    _S.IDLE: frozenset({_S.CONNECTING, _S.CLOSED}),
    _S.CONNECTING: frozenset({_S.INITIALIZING, _S.BACKOFF, _S.FAILED, _S.CLOSED}),
    _S.INITIALIZING: frozenset({_S.RECOVERING, _S.BACKOFF, _S.FAILED, _S.CLOSED}),
    _S.RECOVERING: frozenset({_S.READY, _S.BACKOFF, _S.FAILED, _S.CLOSED}),
    _S.READY: frozenset({_S.BACKOFF, _S.FAILED, _S.CLOSED, _S.RECOVERING}),
    _S.BACKOFF: frozenset({_S.CONNECTING, _S.FAILED, _S.CLOSED}),
    _S.FAILED: frozenset({_S.CONNECTING, _S.CLOSED}),
    _S.CLOSED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class StateChanged:
    """``client.state`` moved from ``old`` to ``new``. Logged as ``acp.state_changed``."""

    old: ClientState
    new: ClientState
    reason: str | None = None
    attempt: int = 0
    delay: float | None = None
    generation: int = 0


@dataclass(frozen=True, slots=True)
class ConnectionDropped:
    """The live connection ended. Logged as ``acp.connection_dropped``."""

    reason: str | None
    close_code: int | None
    generation: int
    lived: float


@dataclass(frozen=True, slots=True)
class SessionRecovered:
    """A session is attached again. Logged as ``acp.session_recovered``.

    ``outcome``: ``"reattached"`` (it was live on the agent) or ``"restored"``; ``mode``: ``"resume"`` or
    ``"load"``; ``replayed``: history was replayed; ``may_have_missed_updates``: updates sent while the link
    was down may be lost (no replay); ``status``: the raw ``session/status`` answer, if probed.
    """

    session_id: str
    outcome: str
    mode: str
    replayed: bool
    may_have_missed_updates: bool
    status: str | None
    state: str | None
    generation: int


@dataclass(frozen=True, slots=True)
class SessionForgotten:
    """A session was dropped from the client and the store. Logged as ``acp.session_forgotten``.

    ``reason``: ``"unknown"`` (the agent answered -32002 to ``via``), or ``"application"`` (``forget()``).
    """

    session_id: str
    reason: str
    via: str | None


@dataclass(frozen=True, slots=True)
class SessionRecoveryFailed:
    """Recovering a session failed for a reason other than -32002; it stays known and is retried.

    Logged as ``acp.session_recovery_failed``. ``will_retry`` says whether another try is scheduled on
    this connection (otherwise the next reconnect or ``recover()`` tries again).
    """

    session_id: str
    error: str
    attempt: int
    will_retry: bool


@dataclass(frozen=True, slots=True)
class SessionDetached:
    """The recovery strategy chose :class:`~acp_client.recovery.Keep`: the session stays known but detached
    until the application decides (``client.recover(id)`` or ``client.forget(id)``). Logged as
    ``acp.session_detached``. ``not_found`` is ``True`` when the agent said it does not know the session."""

    session_id: str
    reason: str
    not_found: bool


Event = StateChanged | ConnectionDropped | SessionRecovered | SessionForgotten | SessionRecoveryFailed | SessionDetached

"""The reconnect manager's states, the typed events it reports, and the bus that delivers them.

Every event is a frozen dataclass. :class:`EventBus` hands each one to every subscriber (bounded buffers:
a reader that falls behind loses the oldest events and then receives one :class:`EventsDropped`) and
mirrors it to the log as ``acp.<name>``.
"""

from __future__ import annotations

import asyncio
import collections
import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, fields
from typing import Any

from acp_client import _observe
from acp_client._logging import get_logger

__all__ = [
    "LEGAL_TRANSITIONS",
    "ClientState",
    "ConnectionDropped",
    "Event",
    "EventBus",
    "EventsDropped",
    "PromptClassified",
    "RecoveryRoundFinished",
    "SessionConfigNotRestored",
    "SessionDetached",
    "SessionForgotten",
    "SessionRecovered",
    "SessionRecoveryFailed",
    "SessionStoreFailed",
    "SessionStoreReset",
    "SessionTakenOver",
    "SessionsAdopted",
    "StateChanged",
]

log = get_logger("acp_client.reconnect")


class ClientState(enum.Enum):
    """The reconnect manager's lifecycle (see ``LEGAL_TRANSITIONS``)."""

    # members are singletons compared by identity: hash them so too (Enum hashes the name in Python, and
    # every link move looks the link up in a transition table)
    __hash__ = object.__hash__

    IDLE = "idle"  #: created, not started
    CONNECTING = "connecting"  #: opening the transport
    INITIALIZING = "initializing"  #: sending initialize on the new connection
    RECOVERING = "recovering"  #: probing and re-attaching known sessions
    READY = "ready"  #: connected; every session that could be recovered is attached
    BACKOFF = "backoff"  #: waiting before the next attempt
    SUSPENDED = "suspended"  #: the link keeps failing (crash-loop breaker): retrying at a slow pace
    FAILED = "failed"  #: stopped for a fatal verdict (auth, 4xx, no agent executable, no common version)
    CLOSED = "closed"  #: closed by the application; final


_S = ClientState
#: Every legal ``old -> new`` transition; anything else is a bug and raises.
LEGAL_TRANSITIONS: dict[ClientState, frozenset[ClientState]] = {
    _S.IDLE: frozenset({_S.CONNECTING, _S.CLOSED}),
    _S.CONNECTING: frozenset({_S.INITIALIZING, _S.BACKOFF, _S.SUSPENDED, _S.FAILED, _S.CLOSED}),
    _S.INITIALIZING: frozenset({_S.RECOVERING, _S.BACKOFF, _S.SUSPENDED, _S.FAILED, _S.CLOSED}),
    _S.RECOVERING: frozenset({_S.READY, _S.BACKOFF, _S.SUSPENDED, _S.FAILED, _S.CLOSED}),
    _S.READY: frozenset({_S.BACKOFF, _S.SUSPENDED, _S.FAILED, _S.CLOSED, _S.RECOVERING}),
    _S.BACKOFF: frozenset({_S.CONNECTING, _S.FAILED, _S.CLOSED}),
    _S.SUSPENDED: frozenset({_S.CONNECTING, _S.CLOSED}),
    _S.FAILED: frozenset({_S.CONNECTING, _S.CLOSED}),
    _S.CLOSED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class StateChanged:
    """``client.state`` moved from ``old`` to ``new``. Logged as ``acp.state_changed``.

    For ``BACKOFF``, ``FAILED`` and ``SUSPENDED``, ``error`` says why (the OS error, the close code, the
    HTTP status ...: the text of the error that ended the attempt) and, when the agent is a local process,
    ``exit_code`` and ``stderr_tail`` (its last stderr lines) say how it ended.
    """

    old: ClientState
    new: ClientState
    reason: str | None = None
    attempt: int = 0
    delay: float | None = None
    generation: int = 0
    error: str | None = None
    exit_code: int | None = None
    stderr_tail: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ConnectionDropped:
    """The live connection ended. Logged as ``acp.connection_dropped``."""

    reason: str | None
    close_code: int | None
    generation: int
    lived: float
    closed_by_client: bool = False


@dataclass(frozen=True, slots=True)
class SessionRecovered:
    """A session is attached again. Logged as ``acp.session_recovered``.

    ``outcome``: ``"reattached"`` (it was live on the agent) or ``"restored"``; ``mode``: ``"resume"`` or
    ``"load"``; ``replayed``: history was replayed; ``may_have_missed_updates``: updates sent while the link
    was down may be lost (no replay); ``status``: the raw ``session/status`` answer, if probed. ``path``
    names the way back: ``"ladder"`` (status → resume/load on a new connection) or a transport's own
    stream resumption (``"stream_resumed"``). ``stream_resumption`` records whether the transport's own
    resumption brought the session back after the cut and why not: on Streamable HTTP with
    ``Last-Event-ID`` (``"resumed with Last-Event-ID"``, ``"not resumed: the connection stream carries no
    event ids"``), on WebSocket with ``stream/resume`` when the agent advertised ``transport.resumable``
    (``"resumed with stream/resume: ..."``, ``"not resumed: the agent refused stream/resume: <its
    reason>"``); ``None`` when the transport did not try (stdio, a WebSocket agent without the capability).
    After a ``"restored"`` recovery, ``config_reapplied`` names the desired settings (``"mode"``,
    ``"option:<configId>"``) that were set again, and ``config_not_restored`` those that failed (each also
    reported by :class:`SessionConfigNotRestored`); a setting the agent had restored itself is in neither.
    """

    session_id: str
    outcome: str
    mode: str
    replayed: bool
    may_have_missed_updates: bool
    status: str | None
    state: str | None
    generation: int
    path: str = "ladder"
    stream_resumption: str | None = None
    config_reapplied: tuple[str, ...] = ()
    config_not_restored: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PromptClassified:
    """A prompt the drop left in flight was classified after its session's recovery (one event per prompt,
    right after that session's :class:`SessionRecovered`). Logged as ``acp.prompt_classified``.

    ``state`` is the ledger's verdict (``"inserted"``, ``"finished"`` or ``"unknown"``; see
    :class:`~acp_client.PromptState`), ``evidence`` what decided it (``"receipt"``, ``"echo"``, ``"replay"``,
    ``"snapshot"``, ``"no_evidence"`` ...), ``message_id`` the user message it was inserted as, when known.
    The entry itself is ``session.prompt_ledger.get(prompt_id)``; nothing is re-sent (``session.resend()``).
    """

    session_id: str
    prompt_id: str
    state: str
    evidence: str | None
    message_id: str | None
    generation: int = 0


@dataclass(frozen=True, slots=True)
class SessionConfigNotRestored:
    """After a *restored* recovery, setting the application's chosen mode or config options again failed.
    ``failures`` pairs each setting (``"mode"``, ``"option:<configId>"``) with the agent's error. The next
    ``prompt()``/``send_prompt()`` of the session raises :class:`~acp_client.exceptions.ConfigNotRestored`
    once, before sending. Logged as ``acp.session_config_not_restored``."""

    session_id: str
    failures: tuple[tuple[str, str], ...]
    generation: int = 0


@dataclass(frozen=True, slots=True)
class SessionForgotten:
    """A session was dropped from the client and the store, for good. Logged as ``acp.session_forgotten``.

    ``reason``: ``"unknown"`` (the agent answered an unknown-session error to ``via``), ``"not_listed"``
    (resume/load failed and ``session/list`` does not name it), or ``"application"`` (``forget()``).
    """

    session_id: str
    reason: str
    via: str | None
    generation: int = 0


@dataclass(frozen=True, slots=True)
class SessionRecoveryFailed:
    """Recovering a session failed for a reason other than an unknown session; it stays known and is
    retried. Logged as ``acp.session_recovery_failed``. ``will_retry`` says whether another try is
    scheduled on this connection (otherwise the next reconnect or ``recover()`` tries again)."""

    session_id: str
    error: str
    attempt: int
    will_retry: bool
    generation: int = 0


@dataclass(frozen=True, slots=True)
class SessionDetached:
    """The recovery strategy chose :class:`~acp_client.reconnect.strategy.Keep`: the session stays known but detached
    until the application decides (``client.recover(id)`` or ``client.forget(id)``). Logged as
    ``acp.session_detached``. ``not_found`` is ``True`` when the agent said it does not know the session."""

    session_id: str
    reason: str
    not_found: bool
    generation: int = 0


@dataclass(frozen=True, slots=True)
class SessionStoreFailed:
    """Writing a session to the store failed (``operation``: ``"save"`` or ``"delete"``). The session
    itself is unaffected; the write is retried later. Reported once until a write of that session
    succeeds again. Logged as ``acp.session_store_failed``."""

    session_id: str
    operation: str
    error: str
    generation: int = 0


@dataclass(frozen=True, slots=True)
class RecoveryRoundFinished:
    """Every session of one recovery round has an outcome (counts per outcome; ``failed`` ones are
    retried in the background). Logged as ``acp.recovery_round_finished``."""

    generation: int
    reattached: int
    restored: int
    forgotten: int
    failed: int
    kept: int


@dataclass(frozen=True, slots=True)
class SessionTakenOver:
    """Another worker owns this session now (its lease expired and was claimed, or the agent says the
    session is attached elsewhere): the handle is detached with ``reason`` and this worker stops
    recovering it; calls on the handle raise :class:`~acp_client.exceptions.LeaseLost`. ``holder`` names the
    new owner when known. Logged as ``acp.session_taken_over``.

    ``reason``: ``"lease_lost"`` (a renewal found the lease gone or held by another worker),
    ``"lease_expired"`` (the store stayed unreachable past the lease's local deadline), ``"write_rejected"``
    (a fenced write was refused), ``"attached_elsewhere"`` (the agent said so and the store confirms another
    holder) or ``"released"`` (``client.release(id)``)."""

    session_id: str
    reason: str
    holder: str | None
    generation: int = 0


@dataclass(frozen=True, slots=True)
class SessionsAdopted:
    """This worker claimed ``session_ids`` from the shared store (their worker died or released them) and
    starts recovering them; each then reports :class:`SessionRecovered` (or fails) as usual. One event per
    claimed chunk (``Limits.adopt_per_second`` paces them). Logged as ``acp.sessions_adopted``."""

    session_ids: tuple[str, ...]
    generation: int = 0


@dataclass(frozen=True, slots=True)
class SessionStoreReset:
    """The shared store lost its data (a restart without persistence): ``reclaimed`` sessions this worker
    served were written back, ``taken`` ones are owned elsewhere now. Logged as ``acp.session_store_reset``."""

    reclaimed: int
    taken: int
    generation: int = 0


@dataclass(frozen=True, slots=True)
class EventsDropped:
    """This ``events()`` reader fell behind: ``count`` of the oldest events were dropped for it."""

    count: int


Event = (
    StateChanged
    | ConnectionDropped
    | SessionRecovered
    | SessionForgotten
    | SessionRecoveryFailed
    | SessionDetached
    | SessionStoreFailed
    | RecoveryRoundFinished
    | SessionTakenOver
    | SessionsAdopted
    | SessionStoreReset
    | PromptClassified
    | SessionConfigNotRestored
    | EventsDropped
)

_NAMES: dict[type, str] = {
    StateChanged: "state_changed",
    ConnectionDropped: "connection_dropped",
    SessionRecovered: "session_recovered",
    SessionForgotten: "session_forgotten",
    SessionRecoveryFailed: "session_recovery_failed",
    SessionDetached: "session_detached",
    SessionStoreFailed: "session_store_failed",
    RecoveryRoundFinished: "recovery_round_finished",
    SessionTakenOver: "session_taken_over",
    SessionsAdopted: "sessions_adopted",
    SessionStoreReset: "session_store_reset",
    PromptClassified: "prompt_classified",
    SessionConfigNotRestored: "session_config_not_restored",
}


def event_name(event: object) -> str:
    """The stable log name of an event type (``acp.<name>``)."""
    return "acp." + _NAMES.get(type(event), type(event).__name__.lower())


@dataclass(eq=False)
class _Subscriber:
    maxsize: int
    buffer: collections.deque[Event] = field(default_factory=collections.deque)
    dropped: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def push(self, event: Event) -> None:
        if len(self.buffer) >= self.maxsize:
            self.buffer.popleft()
            self.dropped += 1
        self.buffer.append(event)
        self.wake.set()


class _Subscription:
    """An async iterator over the bus: registered when made (nothing emitted after that is missed),
    unregistered when closed or garbage-collected, e.g. with the reader task that was cancelled (the bus
    never holds the iterator itself, only its buffer)."""

    def __init__(self, bus: EventBus, maxsize: int) -> None:
        self._bus = bus
        self._sub: _Subscriber | None = _Subscriber(maxsize)
        bus._register(self._sub)
        self._done = False

    def __aiter__(self) -> _Subscription:
        return self

    async def __anext__(self) -> Event:
        sub = self._sub
        if self._done or sub is None:
            raise StopAsyncIteration
        while True:
            if sub.dropped:
                count, sub.dropped = sub.dropped, 0
                _observe.note_dropped("events", count)
                return EventsDropped(count)
            if sub.buffer:
                return sub.buffer.popleft()
            if self._bus.closed:
                await self.aclose()
                raise StopAsyncIteration
            sub.wake.clear()
            await sub.wake.wait()  # a cancelled wait loses nothing: the iterator can be awaited again

    async def aclose(self) -> None:
        """Stop receiving events (also done when the iterator is cancelled or collected)."""
        self._done = True
        if self._sub is not None:
            self._bus._unregister(self._sub)
            self._sub = None

    def __del__(self) -> None:
        if self._sub is not None:
            self._bus._unregister(self._sub)


class EventBus:
    """Delivers each event to every subscriber and to the log; one bus per client."""

    def __init__(self, *, buffer: int = 1024) -> None:
        self._buffer = buffer
        self._strong: set[_Subscriber] = set()
        self._sinks: tuple[_observe.EventSink, ...] = ()
        self.closed = False

    def observe(self, sink: _observe.EventSink) -> None:
        """Also hand every event to ``sink`` (an instrumentation's, see ``acp_client._observe``, or the wire
        log's), in order, synchronously, as it is emitted."""
        self._sinks = (*self._sinks, sink)

    @property
    def subscribers(self) -> int:
        """How many iterators are registered right now."""
        return len(self._strong)

    def subscribe(self, *, maxsize: int | None = None) -> AsyncIterator[Event]:
        """An iterator over the events emitted from now on (bounded: see the module)."""
        return _Subscription(self, maxsize if maxsize is not None else self._buffer)

    def _register(self, sub: _Subscriber) -> None:
        self._strong.add(sub)

    def _unregister(self, sub: _Subscriber) -> None:
        self._strong.discard(sub)

    def emit(self, event: Event) -> None:
        """Deliver ``event`` to every subscriber and log it as ``acp.<name>``."""
        if log.is_enabled("info"):  # a recovery emits one event per session: no values built for nothing
            values: dict[str, Any] = {}
            for f in fields(event):
                value = getattr(event, f.name)
                values[f.name] = value.value if isinstance(value, enum.Enum) else value
            log.info(event_name(event), **values)
        for sink in self._sinks:
            sink(event)
        for sub in list(self._strong):
            sub.push(event)

    def close(self) -> None:
        """End every subscription once its buffer is drained."""
        self.closed = True
        for sub in list(self._strong):
            sub.wake.set()

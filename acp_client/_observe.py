"""The observer hooks: how an instrumentation (``acp_client.otel``) sees the client, without the client
knowing which one it is.

The library calls the functions and Protocols below at a handful of named points (a request starts and
ends, a connection attempt, a recovery round, one session's recovery, a typed event, the headers of an
outgoing HTTP POST or WebSocket handshake, dropped events or updates). Nothing is observed until an
observer is installed with :func:`install` (``acp_client.otel.instrument()`` does it), and then only
clients and connections made afterwards see it. With none installed each hook point costs one module
attribute read, and this module imports nothing but the standard library.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Protocol

__all__ = [
    "ClientGauges",
    "EventSink",
    "LinkFacts",
    "Observer",
    "RequestScope",
    "Scope",
    "connection_attempt",
    "current",
    "install",
    "note_dropped",
    "outgoing_headers",
    "recovery_round",
    "session_recovery",
    "uninstall",
]


class LinkFacts(Protocol):
    """What a request's observer may read about the connection it goes out on (read when needed)."""

    @property
    def peer(self) -> str:
        """The transport's description: the URL it talks to, or the agent's command line."""
        ...

    @property
    def protocol_version(self) -> int:
        """The negotiated ACP version (``0`` before ``initialize`` was answered)."""
        ...


class RequestScope(Protocol):
    """One observed request, from just before its frame is written until its answer (or failure)."""

    def end(self, error: BaseException | None) -> None:
        """The request ended: answered (``error`` is ``None``), failed, timed out or cancelled."""
        ...


class Scope(Protocol):
    """One observed stretch of work (a connection attempt, a recovery round, a session's recovery)."""

    def outcome(self, value: str) -> None:
        """Name how it went (``"ready"``, ``"reattached"``, ``"failed"`` ...)."""
        ...


class ClientGauges(Protocol):
    """What a ``ReconnectingClient`` shows an observer that samples it (read at collection time)."""

    def sessions_by_link(self) -> Mapping[str, int]:
        """How many known sessions are in each link state (``"attached"``, ``"recovering"`` ...)."""
        ...

    def recovery_queue_depth(self) -> int:
        """How many recovery requests wait for a concurrency slot."""
        ...

    def inbound_in_flight(self) -> int:
        """How many agent->client requests are being served (running or queued) on the live connection."""
        ...

    def ownership(self) -> Mapping[str, int | str] | None:
        """With a store shared by several workers: ``owner`` (this worker's id), ``owned``, and the totals
        ``renewed``, ``lost``, ``adopted``, ``renew_failures``; ``None`` otherwise."""
        ...


class EventSink(Protocol):
    """Receives one client's typed events (``acp_client.reconnect`` events), synchronously, in order."""

    def __call__(self, event: object) -> None: ...


class Observer(Protocol):
    """An instrumentation, as the library calls it. Every method must be fast and must not raise."""

    def request(self, method: str, params: object, link: LinkFacts) -> tuple[object, RequestScope]:
        """A request is about to be sent: return the params to send (the observer may add
        ``params._meta`` trace context; it never changes the caller's object) and its scope. Called in
        the caller's task, and the scope's :meth:`RequestScope.end` in the same task."""
        ...

    def outgoing_headers(self) -> list[tuple[str, str]]:
        """Headers to add to an outgoing HTTP POST or WebSocket handshake, read from the current context
        (W3C ``traceparent``/``tracestate``); empty when propagation is off."""
        ...

    def connection_attempt(self, generation: int, attempt: int) -> AbstractContextManager[Scope]:
        """One connection attempt: open the transport, ``initialize``, recover the sessions."""
        ...

    def recovery_round(self, generation: int, sessions: int, link: LinkFacts) -> AbstractContextManager[Scope]:
        """One recovery round over the sessions known when a connection opened."""
        ...

    def session_recovery(
        self, session_id: str, attempt: int, generation: int, link: LinkFacts
    ) -> AbstractContextManager[Scope]:
        """One attempt at recovering one session (probe, decision, resume/load)."""
        ...

    def watch(self, client: ClientGauges) -> EventSink:
        """A ``ReconnectingClient`` was made: sample ``client`` (held weakly) and return the sink for its
        events."""
        ...

    def dropped(self, kind: str, count: int) -> None:
        """A slow reader lost ``count`` items: ``kind`` is ``"events"`` or ``"updates"``."""
        ...


_installed: Observer | None = None


def install(observer: Observer) -> None:
    """Make ``observer`` the one the library calls (replacing any other); clients and connections made
    from now on see it."""
    global _installed
    _installed = observer


def uninstall(observer: Observer | None = None) -> None:
    """Stop calling ``observer`` (or whichever is installed, when ``None``)."""
    global _installed
    if observer is None or _installed is observer:
        _installed = None


def current() -> Observer | None:
    """The installed observer, or ``None``."""
    return _installed


def outgoing_headers() -> list[tuple[str, str]]:
    """The trace headers for an outgoing POST or handshake (none when nothing is installed)."""
    observer = _installed
    return observer.outgoing_headers() if observer is not None else []


def note_dropped(kind: str, count: int) -> None:
    """Tell the installed observer that a slow reader lost ``count`` events or updates."""
    observer = _installed
    if observer is not None:
        observer.dropped(kind, count)


class _NullScope:
    def outcome(self, value: str) -> None:
        pass


_NULL_SCOPE = _NullScope()
# one reusable do-nothing scope: a generator-based context manager per call would cost two objects (and a
# share of the cyclic GC) for every recovery attempt of every session when nothing is installed
_NULL_CONTEXT: AbstractContextManager[Scope] = contextlib.nullcontext(_NULL_SCOPE)


def _null_scope() -> AbstractContextManager[Scope]:
    return _NULL_CONTEXT


def connection_attempt(generation: int, attempt: int) -> AbstractContextManager[Scope]:
    """The installed observer's scope for a connection attempt, or one that does nothing."""
    observer = _installed
    return observer.connection_attempt(generation, attempt) if observer is not None else _null_scope()


def recovery_round(generation: int, sessions: int, link: LinkFacts) -> AbstractContextManager[Scope]:
    """The installed observer's scope for a recovery round, or one that does nothing."""
    observer = _installed
    return observer.recovery_round(generation, sessions, link) if observer is not None else _null_scope()


def session_recovery(session_id: str, attempt: int, generation: int, link: LinkFacts) -> AbstractContextManager[Scope]:
    """The installed observer's scope for one session's recovery attempt, or one that does nothing."""
    observer = _installed
    if observer is None:
        return _null_scope()
    return observer.session_recovery(session_id, attempt, generation, link)


# ---------------------------------------------------------------------------- OTLP settings for stdio agents

_agent_otel: Mapping[str, str] | None = None


def set_agent_otel(settings: Mapping[str, str] | None) -> None:
    """The ``OTEL_*`` settings an instrumentation hands to the stdio agents the client spawns (``None``:
    those of this process's environment). Owned by :func:`acp_client.otel.instrument`."""
    global _agent_otel
    _agent_otel = dict(settings) if settings is not None else None


def agent_otel() -> Mapping[str, str] | None:
    """The settings of :func:`set_agent_otel`, or ``None``."""
    return _agent_otel

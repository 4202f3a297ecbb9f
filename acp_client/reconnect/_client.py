"""ReconnectingClient: one connection at a time, recovered sessions, stable handles.

This module is the constructor, the state and the lifecycle. The connection loop is the ``ConnectionLoop``
mixin (``_connection_loop.py``). Per-session recovery belongs to
:class:`~acp_client.reconnect._recoverer.SessionRecoverer`, events to
:class:`~acp_client.reconnect._events.EventBus`, the sessions to one
:class:`~acp_client.sessions.SessionRegistry`, store writes to
:class:`~acp_client.reconnect._store_writer.StoreWriter`, and the ACP calls to the ``SessionAPI`` mixin.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from acp_client._logging import get_logger
from acp_client.client import ACPClient, ProtocolVersionOption
from acp_client.client._connect import Target, check_protocol_version
from acp_client.client.options import fold_flat_keywords
from acp_client.exceptions import (
    ClientClosed,
    ConnectionLost,
    ReconnectFailed,
    UsageError,
)
from acp_client.handlers import ClientHandlers
from acp_client.reconnect._backoff import Backoff, Clock, CrashLoopBreaker
from acp_client.reconnect._classify import Classifier, classify_error
from acp_client.reconnect._connection_loop import ConnectionLoop
from acp_client.reconnect._control import RecoveryControl
from acp_client.reconnect._events import (
    LEGAL_TRANSITIONS,
    ClientState,
    Event,
    EventBus,
    StateChanged,
)
from acp_client.reconnect._ownership import FencedWrites, SessionOwnership
from acp_client.reconnect._ownership_client import ClientHost, OwnershipAPI
from acp_client.reconnect._recoverer import SessionRecoverer
from acp_client.reconnect._session_api import SessionAPI
from acp_client.reconnect._store_writer import StoreWriter
from acp_client.reconnect.options import FLAT_KEYWORDS, Limits, RecoveryPolicy, Timeouts
from acp_client.reconnect.strategy import DefaultStrategy, RecoveryStrategy
from acp_client.sessions import (
    MemorySessionStore,
    Session,
    SessionLink,
    SessionRegistry,
    SessionStore,
    SharedSessionStore,
)
from acp_client.transports import Transport, TransportOptions

__all__ = ["ReconnectingClient"]

log = get_logger("acp_client.reconnect")

_PAUSED = (ClientState.BACKOFF, ClientState.SUSPENDED)

_Option = Timeouts | RecoveryPolicy | Limits | TransportOptions


def _checked_objects(
    *, timeouts: object, policy: object, limits: object, transport_options: object
) -> dict[str, _Option]:
    """The four option objects (defaults for ``None``); anything else raises :class:`UsageError`."""
    given = {"timeouts": timeouts, "policy": policy, "limits": limits, "transport_options": transport_options}
    kinds: dict[str, type[_Option]] = {
        "timeouts": Timeouts,
        "policy": RecoveryPolicy,
        "limits": Limits,
        "transport_options": TransportOptions,
    }
    objects: dict[str, _Option] = {}
    for name, value in given.items():
        kind = kinds[name]
        if value is None:
            objects[name] = kind()
        elif isinstance(value, kind):
            objects[name] = value
        else:
            raise UsageError(f"{name} must be a {kind.__name__}, not {type(value).__name__}")
    return objects


def _check_callables(**hooks: object) -> None:
    for name, hook in hooks.items():
        if hook is not None and not callable(hook):
            raise UsageError(f"{name} must be a callable or None, not {hook!r}")


class ReconnectingClient(SessionAPI, RecoveryControl, OwnershipAPI, ConnectionLoop):
    """An ACP client that survives dropped links and recovers every session it knows.

    Use it as ``async with ReconnectingClient(url) as client:`` (entering waits until the first connection
    is ready, and raises the error if the client gives up its first connection: a fatal verdict, or an
    agent that keeps dying before it is ever ready; ``Timeouts.ready`` bounds the wait further). It owns
    one connection at a time and runs an explicit state machine (:class:`ClientState`), reported by
    :meth:`events` and as log events named ``acp.<event>``.

    After every (re)connect each known session is probed with ``session/status`` (when advertised) and
    handed to the recovery ``strategy``; failed attempts are retried with backoff while the connection
    lives. A connection that keeps dying soon after it became ready trips the ``breaker``: the client is
    then ``SUSPENDED`` and retries every ``RecoveryPolicy.suspended_interval`` seconds. ``FAILED`` is kept
    for fatal verdicts (auth refused, HTTP 4xx other than 408/425/429, the agent executable missing, no
    common version). ``reconnect_now()`` re-arms either at once.

    Keywords, grouped the way websockets' ``connect()`` groups its own (every one is optional):

    What it talks to:
        ``target``: a ``ws(s)://`` or ``http(s)://`` URL, a command (string or argv list) to spawn over
        stdio, or a zero-argument coroutine function returning a transport (not an open transport: the
        client must be able to reopen it). ``handlers`` (default: a plain :class:`ClientHandlers`) answer
        the agent's requests. ``protocol_version``: ``1``, ``2`` or ``"auto"`` (default). ``client_info``
        (default: this SDK's name and version) is sent as ``clientInfo``.

    Sessions and their recovery:
        ``store`` (default :class:`~acp_client.sessions.MemorySessionStore`; a
        :class:`~acp_client.sessions.SQLiteSessionStore` survives process restarts, a shared store such
        as ``RedisSessionStore`` lets several workers split the sessions) keeps the session records; a
        store that fails never fails a recovery. ``strategy`` (default
        :class:`~acp_client.reconnect.strategy.DefaultStrategy`) decides resume, load, keep or forget per
        session. ``policy`` (default ``RecoveryPolicy()``): concurrency, tries, start jitter,
        unknown-session codes, backoff reset, suspended retry interval. ``should_own`` (default: every
        session; needs a shared store) says which sessions this worker serves.

    Timing and bounds:
        ``timeouts`` (default ``Timeouts()``): one setting per wait (initialize, request,
        probe, strategy, replay silence, recovery deadline, list check, session wait, ready).
        ``limits`` (default ``Limits()``): the event buffer per reader, the reconcile
        probes in flight.

    Transport:
        ``transport_options`` (default ``TransportOptions()``):
        headers, cookies, TLS, the link's own timeouts (open, ping, close), the frame bound, compression,
        the transport kind, HTTP/2, a stdio agent's environment and directory. One object is shared by
        every connection of this client (and its cookie jar with it).

    Reconnecting:
        ``backoff`` (default ``Backoff()``) paces reconnects, recovery retries and store
        retries. ``breaker`` (default ``CrashLoopBreaker()``) suspends a client whose
        connections keep dying young. ``classifier`` (default
        :func:`~acp_client.reconnect.classify_error`) reads an error as retry or fatal.
        ``on_auth_required`` (default ``None``), a coroutine function called with the live
        :class:`ACPClient` once when the agent answers "auth required" during a recovery, may
        authenticate. ``wait_for_ready`` (default ``False``): session calls made while the client is
        reconnecting wait for the next connection (up to ``Timeouts.session_wait``) instead of raising
        :class:`~acp_client.exceptions.NotConnected` at once.

    Testing:
        ``clock`` (default: the event loop's) and ``rng`` (default: a fresh :class:`random.Random`) are
        injectable.

    Every invalid value raises :class:`~acp_client.exceptions.UsageError` when the client (or the option
    object) is built. The flat keywords of earlier releases (``request_timeout=``, ``recovery_tries=``,
    ``headers=`` ...) still work, folded into these objects, and warn with :class:`DeprecationWarning`;
    they go away in the next release (``docs/design.md`` lists where each one went).
    """

    def __init__(
        self,
        target: Target,
        *,
        handlers: ClientHandlers | None = None,
        protocol_version: ProtocolVersionOption = "auto",
        client_info: Mapping[str, str] | None = None,
        store: SessionStore | None = None,
        strategy: RecoveryStrategy | None = None,
        policy: RecoveryPolicy | None = None,
        should_own: Callable[[str], bool] | None = None,
        timeouts: Timeouts | None = None,
        limits: Limits | None = None,
        transport_options: TransportOptions | None = None,
        backoff: Backoff | None = None,
        breaker: CrashLoopBreaker | None = None,
        classifier: Classifier = classify_error,
        on_auth_required: Callable[[ACPClient], Awaitable[None]] | None = None,
        wait_for_ready: bool = False,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        **deprecated: object,
    ) -> None:
        if isinstance(target, Transport):
            raise UsageError("a ReconnectingClient needs something it can reopen: a URL, a command or a factory")
        check_protocol_version(protocol_version)
        objects = _checked_objects(timeouts=timeouts, policy=policy, limits=limits, transport_options=transport_options)
        if deprecated:
            objects = fold_flat_keywords("ReconnectingClient", deprecated, FLAT_KEYWORDS, objects)
        _check_callables(classifier=classifier, on_auth_required=on_auth_required, should_own=should_own)
        if not isinstance(wait_for_ready, bool):
            raise UsageError(f"wait_for_ready must be True or False, not {wait_for_ready!r}")
        assert isinstance(objects["timeouts"], Timeouts) and isinstance(objects["policy"], RecoveryPolicy)
        assert isinstance(objects["limits"], Limits) and isinstance(objects["transport_options"], TransportOptions)
        self._timeouts: Timeouts = objects["timeouts"]
        self._policy: RecoveryPolicy = objects["policy"]
        self._limits: Limits = objects["limits"]
        # the one object every transport of this client reads; the client adds its stream-resumed hook
        self._options: TransportOptions = objects["transport_options"].replace(on_stream_resumed=self._stream_resumed)
        self._target = target
        self._handlers = handlers or ClientHandlers()
        self._strategy: RecoveryStrategy = strategy or DefaultStrategy()
        self._strategies: dict[str, RecoveryStrategy] = {}
        self._protocol_option = protocol_version
        self._client_info = client_info
        self._rng = rng or random.Random()
        self._clock = clock or Clock()
        self._backoff = backoff or Backoff(rng=self._rng)
        self._breaker = breaker or CrashLoopBreaker(clock=self._clock.monotonic)
        self._classify = classifier
        self._wait_for_ready = wait_for_ready
        self._on_auth_required = on_auth_required

        self._state = ClientState.IDLE
        self._registry = SessionRegistry()
        self._bus = EventBus(buffer=self._limits.event_buffer)
        # several workers on one shared store: leases, adoption and hand-over (see _ownership.py)
        writes: SessionStore = store if store is not None else MemorySessionStore()
        self._ownership: SessionOwnership | None = None
        if isinstance(writes, SharedSessionStore):
            self._ownership = SessionOwnership(writes, should_own=should_own, generation=lambda: self._generation)
            writes = FencedWrites(writes, self._ownership)
        elif should_own is not None:
            raise UsageError("should_own needs a store shared by several workers (RedisSessionStore)")
        self._writer = StoreWriter(
            writes,
            emit=self._bus.emit,
            generation=lambda: self._generation,
            backoff=self._backoff,
            clock=self._clock,
        )
        self._recoverer = SessionRecoverer.build(
            self,
            policy=self._policy,
            timeouts=self._timeouts,
            backoff=self._backoff,
            clock=self._clock,
            rng=self._rng,
            on_auth_required=on_auth_required,
        )
        self._client: ACPClient | None = None
        self._last_version = 2 if protocol_version != 1 else 1
        self._generation = 0
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._changed: asyncio.Event | None = None
        self._failure: ReconnectFailed | None = None
        self._ever_ready = False
        self._skip_pause_of: int | None = None  # reconnect_now() during this attempt: no backoff after it
        self._manual_cut_of: int | None = None  # reconnect_now() dropped this connection: not a crash
        self._loaded_store = False
        self._aux: set[asyncio.Task[Any]] = set()

    def __repr__(self) -> str:
        return f"<ReconnectingClient {self._state.value} sessions={len(self._registry)} generation={self._generation}>"

    # ------------------------------------------------------------------ properties

    @property
    def sessions(self) -> Mapping[str, Session]:
        """Known sessions by id (read-only view; handles stay valid across reconnects)."""
        return self._registry.view

    @property
    def protocol_version(self) -> int:
        """The protocol version of the current (or last) connection."""
        return self._client.protocol_version if self._client is not None else self._last_version

    @property
    def current(self) -> ACPClient | None:
        """The per-connection :class:`ACPClient` while connected, else ``None``."""
        return self._client

    @property
    def generation(self) -> int:
        """How many connection attempts were made (each connection is tagged with its generation)."""
        return self._generation

    @property
    def failure(self) -> ReconnectFailed | None:
        """Why the client is ``FAILED`` or ``SUSPENDED`` (``None`` otherwise)."""
        return self._failure if self._state in (ClientState.FAILED, ClientState.SUSPENDED) else None

    @property
    def transport_options(self) -> TransportOptions:
        """The transport settings every connection of this client uses."""
        return self._options

    @property
    def timeouts(self) -> Timeouts:
        """The timeouts this client runs with (after folding any deprecated flat keyword in)."""
        return self._timeouts

    @property
    def policy(self) -> RecoveryPolicy:
        """The recovery policy this client runs with."""
        return self._policy

    @property
    def limits(self) -> Limits:
        """The bounds this client runs with."""
        return self._limits

    @property
    def recovery_limit(self) -> int:
        """How many recovery requests may be in flight right now (adapts unless fixed)."""
        return self._recoverer.limit.limit

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> ReconnectingClient:
        await self.start()
        try:
            await self.wait_ready(timeout=self._timeouts.ready, first=True)
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Start connecting in the background (``async with`` does this and waits for ready)."""
        if self._state is ClientState.CLOSED:
            raise ClientClosed("this ReconnectingClient was closed; create a new one")
        if self._task is not None:
            return
        self._wake = asyncio.Event()
        if not self._loaded_store:
            self._loaded_store = True
            ownership = self._ownership
            records = await (ownership.load() if ownership is not None else self._writer.store.load_all())
            for record in records:
                if record.session_id not in self._registry:
                    self._registry.add(Session(self, record))
            if ownership is not None:
                ownership.start(ClientHost(self))  # lease renewal and adoption run while the client lives
        self._task = asyncio.create_task(self._run(), name="acp-reconnect")

    async def aclose(self) -> None:
        """Close the connection and stop reconnecting. Session records stay in the store."""
        if self._state is ClientState.CLOSED:
            return
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
        if self._ownership is not None:
            await self._ownership.stop()  # the store's close (below) releases the leases
        await self._recoverer.stop_all()
        aux = list(self._aux)
        for helper in aux:
            helper.cancel()
        if aux:
            await asyncio.wait(aux)
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        self._set_state(ClientState.CLOSED, reason="closed by the application")
        for session in self._registry:
            if session.link not in (SessionLink.LOST, SessionLink.CLOSED):
                session._terminate(SessionLink.CLOSED, None)
        self._bus.close()
        await self._writer.aclose()

    close = aclose

    async def wait_ready(self, timeout: float | None = None, *, first: bool = False) -> None:
        """Wait until the state is ``READY``. Raises the ``ReconnectFailed`` if it becomes ``FAILED`` (with
        ``first=True`` also if it is ``SUSPENDED`` before it was ever ready), ``ClientClosed`` if closed,
        ``TimeoutError`` after ``timeout`` seconds."""
        async with asyncio.timeout(timeout):
            while True:
                changed = self._changed_event()
                if self._state is ClientState.READY and self._live_client() is not None:
                    return
                if self._state is ClientState.FAILED and self._failure is not None:
                    raise self._failure
                if first and self._state is ClientState.SUSPENDED and self._failure and not self._ever_ready:
                    raise self._failure
                if self._state is ClientState.CLOSED:
                    raise ClientClosed("the client was closed")
                await changed.wait()

    def reconnect_now(self) -> None:
        """Reconnect without waiting: cut a backoff or suspension short, drop a live connection, or re-arm
        after ``FAILED``. During connecting/initializing it only spares that attempt its backoff."""
        if self._state is ClientState.FAILED:
            self._breaker.reset()
            self._failure = None
            self._skip_pause_of = self._generation + 1
            self._task = asyncio.create_task(self._run(), name="acp-reconnect")
        elif self._state in _PAUSED and self._wake is not None:
            if self._state is ClientState.SUSPENDED:
                self._breaker.reset()
            self._wake.set()
        elif self._state in (ClientState.CONNECTING, ClientState.INITIALIZING):
            self._skip_pause_of = self._generation
        elif self._client is not None:
            log.info("acp.reconnect_requested", generation=self._generation)
            self._manual_cut_of = self._generation
            self._spawn(self._client.connection.close(), "acp-reconnect-now")

    def notify_network_changed(self) -> None:
        """A hint that the network changed or the machine woke up (Python has no such events of its own).

        While waiting to reconnect, reconnect now. While connected, check liveness now with a ping instead
        of waiting for the next scheduled one, so nothing is written into a dead socket for long.
        """
        if self._state is ClientState.BACKOFF and self._wake is not None:
            self._wake.set()
            return
        client = self._client
        ping = getattr(client.connection.transport, "ping", None) if client is not None else None
        if client is None or ping is None:
            return

        async def check() -> None:
            try:
                await ping()
            except ConnectionLost:
                pass  # the transport failed the link; the reader and the loop take it from here
            except Exception:
                log.exception("acp.liveness_check_failed")
                await client.connection.close()

        self._spawn(check(), "acp-liveness-check")

    notify_resumed_from_sleep = notify_network_changed

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._aux.add(task)
        task.add_done_callback(self._aux.discard)

    # ------------------------------------------------------------------ events and state

    def events(self) -> AsyncIterator[Event]:
        """Typed events from now on. Bounded per reader: one that falls behind loses the oldest and then
        receives :class:`~acp_client.reconnect.EventsDropped`. Closing the iterator, cancelling its reader,
        or dropping it unsubscribes; it ends when the client closes."""
        return self._bus.subscribe()

    def _notify_changed(self) -> None:
        """Wake everything waiting on a change of state or of a session's link."""
        old = self._changed_event()
        self._changed = asyncio.Event()
        old.set()

    def _changed_event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _set_state(self, new: ClientState, *, reason: str | None = None, attempt: int = 0, delay: float | None = None,
                   error: BaseException | None = None) -> None:
        old = self._state
        if old is new:
            return
        if new not in LEGAL_TRANSITIONS[old]:
            raise RuntimeError(f"illegal state transition {old.value} -> {new.value}")
        self._state = new
        cause = error.cause if isinstance(error, ReconnectFailed) else error
        self._bus.emit(
            StateChanged(
                old, new, reason, attempt, delay, self._generation,
                error=str(cause) if cause is not None else None,
                exit_code=getattr(cause, "exit_code", None),
                stderr_tail=tuple(getattr(cause, "stderr_tail", None) or ()),
            )
        )
        self._notify_changed()

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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal

from acp_client._logging import get_logger
from acp_client.client import ACPClient, ProtocolVersionOption
from acp_client.client._connect import Target
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
from acp_client.reconnect.strategy import DefaultStrategy, RecoveryStrategy
from acp_client.sessions import (
    MemorySessionStore,
    Session,
    SessionLink,
    SessionRegistry,
    SessionStore,
    SharedSessionStore,
)
from acp_client.transports import CookieJar, Transport, TransportKind, TransportOptions
from acp_client.transports.options import HeadersLike, HeadersProvider

__all__ = ["ReconnectingClient"]

log = get_logger("acp_client.reconnect")

_PAUSED = (ClientState.BACKOFF, ClientState.SUSPENDED)


class ReconnectingClient(SessionAPI, RecoveryControl, OwnershipAPI, ConnectionLoop):
    """An ACP client that survives dropped links and recovers every session it knows.

    Use it as ``async with ReconnectingClient(url) as client:`` (entering waits until the first connection
    is ready, and raises the error if the client gives up its first connection: a fatal verdict, or an
    agent that keeps dying before it is ever ready; ``ready_timeout`` bounds the wait further). It owns
    one connection at a time and runs an explicit state machine (:class:`ClientState`), reported by
    :meth:`events` and as log events named ``acp.<event>``.

    After every (re)connect each known session is probed with ``session/status`` (when advertised) and
    handed to the recovery ``strategy`` (default :class:`~acp_client.reconnect.strategy.DefaultStrategy`).
    ``recovery_concurrency`` bounds the recovery requests in flight: ``"adaptive"`` (default) grows while
    answers stay fast and shrinks on slowness and errors; an int fixes it. ``recovery_timeout`` is the
    silence after which an attempt is given up (a replay that keeps streaming is never cut off; add
    ``recovery_deadline`` for an overall cap); failed attempts are retried with backoff, ``recovery_tries``
    of them inside the recovery round, then in the background while the connection lives.
    ``unknown_session_codes`` are the error codes read as "the agent does not know this session" (default
    ``{-32002}``; real agents also answer -32602/-32603, which are then checked against ``session/list``).

    A connection that keeps dying soon after it became ready trips the ``breaker``: the client is then
    ``SUSPENDED`` and retries every ``suspended_interval`` seconds. ``FAILED`` is kept for fatal verdicts
    (auth refused, HTTP 4xx other than 408/425/429, the agent executable missing, no common version).
    ``reconnect_now()`` re-arms either at once.

    Sessions are kept in ``store`` (memory by default; :class:`~acp_client.sessions.SQLiteSessionStore`
    survives process restarts); a store that fails never fails a recovery. Transport keywords (``headers``
    ... ``stdio_cwd``; ``stdio_env``/``stdio_cwd`` are the environment and working directory of a spawned
    agent) are gathered into one :class:`~acp_client.transports.TransportOptions`. Timing
    options are float seconds. ``clock`` and ``rng`` are injectable for tests.
    """

    def __init__(
        self,
        target: Target,
        *,
        handlers: ClientHandlers | None = None,
        store: SessionStore | None = None,
        strategy: RecoveryStrategy | None = None,
        protocol_version: ProtocolVersionOption = "auto",
        headers: HeadersLike | HeadersProvider | None = None,
        cookies: CookieJar | None = None,
        ssl: Any = None,
        request_timeout: float | None = 30.0,
        open_timeout: float | None = 10.0,
        initialize_timeout: float | None = 10.0,
        ping_interval: float | None = 20.0,
        ping_timeout: float | None = 20.0,
        close_timeout: float = 10.0,
        max_frame_bytes: int = 16 * 1024 * 1024,
        compression: Literal["deflate"] | None = "deflate",
        transport: TransportKind = None,
        http2: bool | Literal["prior_knowledge"] = True,
        stdio_env: Mapping[str, str] | None = None,
        stdio_cwd: str | None = None,
        backoff: Backoff | None = None,
        breaker: CrashLoopBreaker | None = None,
        classifier: Classifier = classify_error,
        stable_after: float = 10.0,
        suspended_interval: float = 30.0,
        recovery_concurrency: int | Literal["adaptive"] = "adaptive",
        recovery_timeout: float = 10.0,
        recovery_deadline: float | None = None,
        recovery_tries: int = 3,
        recovery_start_jitter: float = 0.25,
        unknown_session_codes: Iterable[int] = (-32002,),
        session_wait_timeout: float = 30.0,
        wait_for_ready: bool = False,
        ready_timeout: float | None = None,
        on_auth_required: Callable[[ACPClient], Awaitable[None]] | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        client_info: Mapping[str, str] | None = None,
        event_buffer: int = 1024,
        should_own: Callable[[str], bool] | None = None,
    ) -> None:
        if isinstance(target, Transport):
            raise UsageError("a ReconnectingClient needs something it can reopen: a URL, a command or a factory")
        self._target = target
        self._handlers = handlers or ClientHandlers()
        self._strategy: RecoveryStrategy = strategy or DefaultStrategy()
        self._strategies: dict[str, RecoveryStrategy] = {}
        self._protocol_option = protocol_version
        self._options = TransportOptions(
            headers=headers,
            cookies=cookies if cookies is not None else CookieJar(),
            ssl=ssl,
            open_timeout=open_timeout,
            ping_interval=ping_interval,
            ping_timeout=ping_timeout,
            close_timeout=close_timeout,
            max_frame_bytes=max_frame_bytes,
            compression=compression,
            transport=transport,
            http2=http2,
            stdio_env=stdio_env,
            stdio_cwd=stdio_cwd,
            on_stream_resumed=self._stream_resumed,
        )
        self._request_timeout = request_timeout
        self._initialize_timeout = initialize_timeout
        self._client_info = client_info
        self._rng = rng or random.Random()
        self._clock = clock or Clock()
        self._backoff = backoff or Backoff(rng=self._rng)
        self._breaker = breaker or CrashLoopBreaker(clock=self._clock.monotonic)
        self._classify = classifier
        self._stable_after = stable_after
        self._suspended_interval = suspended_interval
        self._session_wait_timeout = session_wait_timeout
        self._wait_for_ready = wait_for_ready
        self._ready_timeout = ready_timeout
        self._on_auth_required = on_auth_required

        self._state = ClientState.IDLE
        self._registry = SessionRegistry()
        self._bus = EventBus(buffer=event_buffer)
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
            concurrency=recovery_concurrency,
            timeout=recovery_timeout,
            deadline=recovery_deadline,
            tries=recovery_tries,
            start_jitter=recovery_start_jitter,
            unknown_session_codes=unknown_session_codes,
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
    def recovery_limit(self) -> int:
        """How many recovery requests may be in flight right now (adapts unless fixed)."""
        return self._recoverer.limit.limit

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> ReconnectingClient:
        await self.start()
        try:
            await self.wait_ready(timeout=self._ready_timeout, first=True)
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
        await self._handlers.client_closed()  # the handlers end what they still run for the agent

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

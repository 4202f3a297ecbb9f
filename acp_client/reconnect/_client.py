"""ReconnectingClient: one connection at a time, recovered sessions, stable handles."""

from __future__ import annotations

import asyncio
import collections
import inspect
import random
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from acp_client._logging import get_logger
from acp_client.client import ACPClient, Connector, ProtocolVersionOption, SessionInfo, Target, open_transport
from acp_client.exceptions import (
    AuthRequired,
    ClientClosed,
    ConnectionLost,
    MethodNotFound,
    NotConnected,
    ReconnectFailed,
    RecoveryFailed,
    SessionLost,
    SessionNotFound,
    UsageError,
)
from acp_client.handlers import ClientHandlers
from acp_client.reconnect._backoff import Backoff, Clock, CrashLoopBreaker
from acp_client.reconnect._classify import Classifier, classify_error
from acp_client.reconnect._events import (
    LEGAL_TRANSITIONS,
    ClientState,
    ConnectionDropped,
    Event,
    SessionDetached,
    SessionForgotten,
    SessionRecovered,
    SessionRecoveryFailed,
    StateChanged,
)
from acp_client.recovery import (
    Capabilities,
    DefaultStrategy,
    Forget,
    Keep,
    Reattach,
    RecoveryStrategy,
    StatusProbe,
)
from acp_client.schema import SessionStatusResponse
from acp_client.sessions import (
    MemorySessionStore,
    RecoveryMarker,
    Session,
    SessionLink,
    SessionStore,
)
from acp_client.transports import CookieJar, Transport

__all__ = ["ReconnectingClient"]

log = get_logger("acp_client.reconnect")

_NO_CONNECTION = (ClientState.IDLE, ClientState.CONNECTING, ClientState.INITIALIZING, ClientState.BACKOFF)


class ReconnectingClient:
    """An ACP client that survives dropped links and recovers every session it knows.

    Use it as ``async with ReconnectingClient(url) as client:`` (entering waits until the first connection
    is ready, or raises the fatal error). It owns one connection at a time and runs an explicit state
    machine (:class:`ClientState`: connecting → initializing → recovering → ready → backoff → …, and
    failed / closed), reported by :meth:`events` and as structlog events named ``acp.<event>``.

    After every (re)connect each known session is probed with ``session/status`` (when advertised) and
    handed to the recovery ``strategy`` (default :class:`~acp_client.recovery.DefaultStrategy`), at most
    ``recovery_concurrency`` at a time, each bounded by ``recovery_timeout`` and tried ``recovery_tries``
    times. :class:`~acp_client.sessions.Session` handles stay valid across reconnects. Sessions are kept
    in ``store`` (memory by default; :class:`~acp_client.sessions.SQLiteSessionStore` survives process
    restarts), so a client started on a store that holds sessions recovers them on its first connect.

    Timing options are float seconds. ``clock`` and ``rng`` are injectable for tests.
    """

    def __init__(
        self,
        target: Target,
        *,
        handlers: ClientHandlers | None = None,
        store: SessionStore | None = None,
        strategy: RecoveryStrategy | None = None,
        protocol_version: ProtocolVersionOption = "auto",
        headers: Mapping[str, str] | Callable[[], Any] | None = None,
        cookies: CookieJar | None = None,
        ssl: Any = None,
        request_timeout: float | None = 30.0,
        open_timeout: float | None = 10.0,
        initialize_timeout: float | None = 10.0,
        ping_interval: float | None = 20.0,
        ping_timeout: float | None = 20.0,
        close_timeout: float = 10.0,
        max_frame_bytes: int = 16 * 1024 * 1024,
        backoff: Backoff | None = None,
        breaker: CrashLoopBreaker | None = None,
        classifier: Classifier = classify_error,
        stable_after: float = 10.0,
        recovery_concurrency: int = 8,
        recovery_timeout: float = 10.0,
        recovery_tries: int = 3,
        recovery_start_jitter: float = 0.25,
        session_wait_timeout: float = 30.0,
        wait_for_ready: bool = False,
        on_auth_required: Callable[[ACPClient], Awaitable[None]] | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        client_info: Mapping[str, str] | None = None,
        event_buffer: int = 1024,
    ) -> None:
        if isinstance(target, Transport):
            raise UsageError("a ReconnectingClient needs something it can reopen: a URL, a command or a factory")
        self._target = target
        self._handlers = handlers or ClientHandlers()
        self._store: SessionStore = store if store is not None else MemorySessionStore()
        self._strategy: RecoveryStrategy = strategy or DefaultStrategy()
        self._strategies: dict[str, RecoveryStrategy] = {}
        self._protocol_option = protocol_version
        self._cookies = cookies if cookies is not None else CookieJar()
        self._transport_options: dict[str, Any] = {
            "headers": headers,
            "cookies": self._cookies,
            "ssl": ssl,
            "open_timeout": open_timeout,
            "ping_interval": ping_interval,
            "ping_timeout": ping_timeout,
            "close_timeout": close_timeout,
            "max_frame_bytes": max_frame_bytes,
        }
        self._request_timeout = request_timeout
        self._initialize_timeout = initialize_timeout
        self._client_info = client_info
        self._rng = rng or random.Random()
        self._clock = clock or Clock()
        self._backoff = backoff or Backoff(rng=self._rng)
        self._breaker = breaker or CrashLoopBreaker(clock=self._clock.monotonic)
        self._classify = classifier
        self._stable_after = stable_after
        self._recovery_concurrency = recovery_concurrency
        self._recovery_timeout = recovery_timeout
        self._recovery_tries = recovery_tries
        self._recovery_start_jitter = recovery_start_jitter
        self._session_wait_timeout = session_wait_timeout
        self._wait_for_ready = wait_for_ready
        self._on_auth_required = on_auth_required
        self._can_refresh_auth = callable(headers)
        self._event_buffer = event_buffer

        self._state = ClientState.IDLE
        self._sessions: dict[str, Session] = {}
        self._client: ACPClient | None = None
        self._last_version = 2 if protocol_version != 1 else 1
        self._generation = 0
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._changed: asyncio.Event | None = None
        self._failure: ReconnectFailed | None = None
        self._skip_backoff = False
        self._loaded_store = False
        self._subscribers: list[collections.deque[Event]] = []
        self._sub_events: list[asyncio.Event] = []
        #: background recovery retries of sessions that failed the recovery phase, by session id
        self._recovering: dict[str, asyncio.Task[None]] = {}
        self._retry_cap = 30.0
        #: short-lived helper tasks (manual reconnects, liveness checks), cancelled on close
        self._aux: set[asyncio.Task[Any]] = set()
        self._transitions: list[tuple[ClientState, ClientState]] = []

    def __repr__(self) -> str:
        return f"<ReconnectingClient {self._state.value} sessions={len(self._sessions)} generation={self._generation}>"

    # ------------------------------------------------------------------ properties

    @property
    def state(self) -> ClientState:
        """The current lifecycle state."""
        return self._state

    @property
    def sessions(self) -> Mapping[str, Session]:
        """Known sessions by id (read-only view; handles stay valid across reconnects)."""
        return types.MappingProxyType(self._sessions)

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
        """Why the client is ``FAILED`` (``None`` otherwise)."""
        return self._failure if self._state is ClientState.FAILED else None

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> ReconnectingClient:
        await self.start()
        try:
            await self.wait_ready()
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
        self._changed = asyncio.Event()
        if not self._loaded_store:
            self._loaded_store = True
            for record in await self._store.load_all():
                if record.session_id not in self._sessions:
                    self._sessions[record.session_id] = Session(self, record)
        self._task = asyncio.create_task(self._run(), name="acp-reconnect")

    async def aclose(self) -> None:
        """Close the connection and stop reconnecting. Session records stay in the store."""
        if self._state is ClientState.CLOSED:
            return
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
        await self._stop_retries()
        aux = list(self._aux)
        for helper in aux:
            helper.cancel()
        if aux:
            await asyncio.wait(aux)
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        self._set_state(ClientState.CLOSED, reason="closed by the application")
        for session in self._sessions.values():
            if session.link not in (SessionLink.LOST, SessionLink.CLOSED):
                session._terminate(SessionLink.CLOSED, None)
        await self._store.close()

    close = aclose

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until the state is ``READY``. Raises the ``ReconnectFailed`` if it becomes ``FAILED``,
        ``ClientClosed`` if closed, ``TimeoutError`` after ``timeout`` seconds."""
        async with asyncio.timeout(timeout):
            while True:
                changed = self._changed_event()
                if self._state is ClientState.READY and self._live_client() is not None:
                    return
                if self._state is ClientState.FAILED and self._failure is not None:
                    raise self._failure
                if self._state is ClientState.CLOSED:
                    raise ClientClosed("the client was closed")
                await changed.wait()

    def reconnect_now(self) -> None:
        """Reconnect without waiting: cut a backoff short, drop a live connection, or re-arm after FAILED."""
        self._skip_backoff = True
        if self._state is ClientState.FAILED:
            self._breaker.reset()
            self._failure = None
            self._set_state(ClientState.CONNECTING, reason="reconnect_now")
            self._task = asyncio.create_task(self._run(), name="acp-reconnect")
        elif self._state is ClientState.BACKOFF and self._wake is not None:
            self._wake.set()
        elif self._client is not None:
            log.info("acp.reconnect_requested", generation=self._generation)
            task = asyncio.get_running_loop().create_task(self._client.connection.close(), name="acp-reconnect-now")
            self._aux.add(task)
            task.add_done_callback(self._aux.discard)

    def notify_network_changed(self) -> None:
        """A hint that the network changed or the machine woke up (Python has no such events of its own).

        While waiting to reconnect, reconnect now. While connected, check liveness now with a WebSocket ping
        instead of waiting for the next scheduled one, so nothing is written into a dead socket for long.
        """
        if self._state is ClientState.BACKOFF and self._wake is not None:
            self._skip_backoff = True
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

        task = asyncio.get_running_loop().create_task(check(), name="acp-liveness-check")
        self._aux.add(task)
        task.add_done_callback(self._aux.discard)

    notify_resumed_from_sleep = notify_network_changed

    # ------------------------------------------------------------------ events

    def events(self) -> AsyncIterator[Event]:
        """Subscribe to typed events from now on (bounded per subscriber: the oldest are dropped)."""
        queue: collections.deque[Event] = collections.deque(maxlen=self._event_buffer)
        flag = asyncio.Event()
        self._subscribers.append(queue)
        self._sub_events.append(flag)
        return self._iterate_events(queue, flag)

    async def _iterate_events(self, queue: collections.deque[Event], flag: asyncio.Event) -> AsyncIterator[Event]:
        try:
            while True:
                while queue:
                    yield queue.popleft()
                if self._state is ClientState.CLOSED:
                    return
                flag.clear()
                await flag.wait()
        finally:
            if queue in self._subscribers:
                index = self._subscribers.index(queue)
                del self._subscribers[index]
                del self._sub_events[index]

    def _emit(self, event: Event) -> None:
        name = "acp." + _EVENT_NAMES[type(event)]
        fields = {k: getattr(event, k) for k in event.__dataclass_fields__}
        for key in ("old", "new"):
            if key in fields:
                fields[key] = fields[key].value
        log.info(name, **fields)
        for queue, flag in zip(self._subscribers, self._sub_events, strict=True):
            queue.append(event)
            flag.set()

    def _changed_event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _bump(self) -> None:
        old = self._changed_event()
        self._changed = asyncio.Event()
        old.set()

    def _set_state(
        self, new: ClientState, *, reason: str | None = None, attempt: int = 0, delay: float | None = None
    ) -> None:
        old = self._state
        if old is new:
            return
        if new not in LEGAL_TRANSITIONS[old]:
            raise RuntimeError(f"illegal state transition {old.value} -> {new.value}")
        self._state = new
        self._transitions.append((old, new))
        self._emit(StateChanged(old, new, reason, attempt, delay, self._generation))
        self._bump()

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must surface as FAILED, not as a silently dead task
            log.exception("acp.reconnect_loop_crashed")
            self._fail(ReconnectFailed("internal_error", exc))

    async def _loop(self) -> None:
        attempt = 0
        auth_retry_used = False
        while True:
            self._generation += 1
            generation = self._generation
            self._set_state(ClientState.CONNECTING, attempt=attempt)
            try:
                client = await self._open(generation)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                verdict = self._classify(exc)
                retry = verdict.retry
                if not retry and verdict.auth and self._can_refresh_auth and not auth_retry_used:
                    auth_retry_used, retry = True, True  # the header provider gets one chance to refresh
                log.warning("acp.connect_failed", error=str(exc), reason=verdict.reason, generation=generation)
                if not retry:
                    self._fail(ReconnectFailed(verdict.reason, exc))
                    return
                attempt += 1
                await self._pause(self._backoff.delay(attempt, verdict.retry_after), verdict.reason, attempt)
                continue
            auth_retry_used = False
            self._client = client
            self._last_version = client.protocol_version
            self._set_state(ClientState.RECOVERING)
            await self._recover_all(client)
            ready_at = self._clock.monotonic()
            if not client.connection.closed:
                self._set_state(ClientState.READY)
                loss = await client.connection.wait_closed()
            else:
                loss = client.connection.loss or ConnectionLost()
            lived = self._clock.monotonic() - ready_at
            self._client = None
            await self._stop_retries()
            await client.aclose()
            self._emit(ConnectionDropped(loss.reason, loss.close_code, generation, lived))
            manual = self._skip_backoff  # reconnect_now() dropped it: not a crash of the agent
            verdict = self._classify(loss)
            if not verdict.retry and not manual:
                self._fail(ReconnectFailed(verdict.reason, loss))
                return
            if not manual and self._breaker.record(lived):
                self._fail(ReconnectFailed("flapping", loss))
                return
            if lived >= self._stable_after:
                attempt = 0
            attempt += 1
            await self._pause(self._backoff.delay(attempt, verdict.retry_after), verdict.reason, attempt)

    def _fail(self, error: ReconnectFailed) -> None:
        self._failure = error
        self._task = None
        self._set_state(ClientState.FAILED, reason=error.reason)

    async def _pause(self, delay: float, reason: str, attempt: int) -> None:
        if self._skip_backoff:
            self._skip_backoff = False
            delay = 0.0
        self._set_state(ClientState.BACKOFF, reason=reason, attempt=attempt, delay=delay)
        wake = self._wake
        assert wake is not None
        wake.clear()
        sleeper = asyncio.ensure_future(self._clock.sleep(delay))
        waker = asyncio.ensure_future(wake.wait())
        try:
            await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            waker.cancel()
            await asyncio.wait({sleeper, waker})
        self._skip_backoff = False

    async def _open(self, generation: int) -> ACPClient:
        first: list[Transport] = []

        async def factory() -> Transport:
            if first:
                return first.pop()
            return await open_transport(self._target, **self._transport_options)

        first.append(await open_transport(self._target, **self._transport_options))
        self._set_state(ClientState.INITIALIZING)
        connector = Connector(
            factory,
            handlers=self._handlers,
            protocol_version=self._protocol_option,
            request_timeout=self._request_timeout,
            initialize_timeout=self._initialize_timeout,
            client_info=self._client_info,
            sessions=self._sessions,
            session_owner=self,
            generation=generation,
        )
        try:
            return await connector
        finally:
            for leftover in first:  # the factory was never called (initialize not reached)
                await leftover.close()

    # ------------------------------------------------------------------ recovery

    async def _recover_all(self, client: ACPClient) -> None:
        todo = [
            s
            for s in self._sessions.values()
            if s.link not in (SessionLink.LOST, SessionLink.CLOSED)
            and not (s.link is SessionLink.ATTACHED and s._connection_id == client.connection.id)
        ]
        if not todo:
            return
        for session in todo:
            session.link = SessionLink.RECOVERING
        self._bump()
        limit = asyncio.Semaphore(self._recovery_concurrency)

        async def one(session: Session) -> None:
            try:
                if self._recovery_start_jitter > 0:
                    await self._clock.sleep(self._rng.uniform(0.0, self._recovery_start_jitter))
                async with limit:
                    await self._recover_session(client, session)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # e.g. a user strategy that raised: the session stays known
                log.exception("acp.session_recovery_crashed", session_id=session.id)
                self._recovery_failed(session, exc, 0, will_retry=False)

        async with asyncio.TaskGroup() as group:
            for session in todo:
                group.create_task(one(session), name=f"acp-recover-{session.id}")

    def _capabilities(self, client: ACPClient) -> Capabilities:
        return Capabilities(
            protocol_version=client.protocol_version,
            load=client.supports("load"),
            resume=client.supports("resume"),
            status=client.supports("status"),
        )

    async def _probe(self, client: ACPClient, session: Session, caps: Capabilities) -> StatusProbe:
        if not caps.status:
            return StatusProbe(None, skipped_reason="not_advertised")
        try:
            answer: SessionStatusResponse = await client.session_status(session.id, timeout=None)
        except SessionNotFound as exc:
            return StatusProbe(None, not_found=True, error=exc)
        except MethodNotFound as exc:
            return StatusProbe(None, skipped_reason="method_not_found", error=exc)
        except (ConnectionLost, AuthRequired):
            raise
        except Exception as exc:
            if isinstance(exc, TimeoutError):
                raise
            log.warning("acp.status_probe_failed", session_id=session.id, error=str(exc))
            return StatusProbe(None, skipped_reason="error", error=exc)
        return StatusProbe(answer.status, state=answer.state)

    async def _decide(self, session: Session, probe: StatusProbe, caps: Capabilities) -> Any:
        strategy = self._strategies.get(session.id, self._strategy)
        action = strategy.decide(session.record, probe, caps)
        if inspect.isawaitable(action):
            action = await action
        return action

    async def _recover_session(
        self, client: ACPClient, session: Session, *, background: bool = False, first_attempt: int = 1
    ) -> None:
        """Probe, decide and re-attach one session; failures are retried (in the recovery phase up to
        ``recovery_tries`` times, then in the background with capped backoff while the connection lives)."""
        caps = self._capabilities(client)
        auth_tried = False
        attempt = first_attempt - 1
        while True:
            attempt += 1
            via = "session/status"
            try:
                async with asyncio.timeout(self._recovery_timeout):
                    probe = await self._probe(client, session, caps)
                    if probe.state is not None and caps.protocol_version >= 2:
                        session._apply_snapshot(probe.state.state)
                    action = await self._decide(session, probe, caps)
                    if isinstance(action, Reattach):
                        via = f"session/{action.mode}"
                        mode, replayed = await self._reattach(client, session, action, caps)
                if isinstance(action, Forget):
                    await self._forget(session, action.reason, via)
                elif isinstance(action, Keep):
                    self._keep(session, action, probe.not_found)
                else:
                    assert isinstance(action, Reattach)
                    await self._recovered(session, action, mode, replayed, probe)
                self._bump()
                return
            except asyncio.CancelledError:
                raise
            except SessionNotFound:
                not_found = StatusProbe(None, not_found=True, skipped_reason=via)
                verdict = await self._decide(session, not_found, caps)
                if isinstance(verdict, Forget):
                    await self._forget(session, verdict.reason, via)
                else:
                    self._keep(session, verdict if isinstance(verdict, Keep) else Keep("kept"), True)
                self._bump()
                return
            except ConnectionLost:
                session.link = SessionLink.DETACHED  # the next connection tries again
                self._bump()
                return
            except AuthRequired as exc:
                if self._on_auth_required is not None and not auth_tried:
                    auth_tried = True
                    await self._on_auth_required(client)
                    attempt -= 1
                    continue
                error: BaseException = exc
            except Exception as exc:
                error = exc
            if client.connection.closed:
                session.link = SessionLink.DETACHED
                self._bump()
                return
            in_phase = attempt < self._recovery_tries
            self._recovery_failed(session, error, attempt, will_retry=True)
            if not in_phase and not background:
                # the recovery phase must not wait forever for one session: go on retrying in the background
                self._retry_later(client, session, attempt)
                return
            await self._clock.sleep(self._rng.uniform(0.0, min(self._retry_cap, 0.5 * 2**attempt)))
            session.link = SessionLink.RECOVERING

    def _recovery_failed(self, session: Session, error: BaseException, attempt: int, *, will_retry: bool) -> None:
        text = f"{type(error).__name__}: {error}"
        session.link = SessionLink.FAILED
        self._emit(SessionRecoveryFailed(session.id, text, attempt, will_retry))
        session._mark(RecoveryMarker(session.id, "failed", reason=text))
        self._bump()

    def _retry_later(self, client: ACPClient, session: Session, attempt: int) -> None:
        if session.id in self._recovering:
            return

        async def retry() -> None:
            try:
                await self._clock.sleep(self._rng.uniform(0.0, min(self._retry_cap, 0.5 * 2**attempt)))
                session.link = SessionLink.RECOVERING
                self._bump()
                await self._recover_session(client, session, background=True, first_attempt=attempt + 1)
            finally:
                self._recovering.pop(session.id, None)

        self._recovering[session.id] = asyncio.create_task(retry(), name=f"acp-retry-{session.id}")

    async def _stop_retries(self) -> None:
        tasks = list(self._recovering.values())
        self._recovering.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def _keep(self, session: Session, action: Keep, not_found: bool) -> None:
        session.link = SessionLink.DETACHED
        session._mark(RecoveryMarker(session.id, "kept", reason=action.reason))
        self._emit(SessionDetached(session.id, action.reason, not_found))

    async def _reattach(
        self, client: ACPClient, session: Session, action: Reattach, caps: Capabilities
    ) -> tuple[str, bool]:
        mode, replay = action.mode, action.replay
        try:
            await client.attach(session, mode=mode, replay=replay, timeout=None)
        except MethodNotFound:
            if mode != "resume" or not caps.load or caps.protocol_version >= 2:
                raise
            log.info("acp.resume_not_implemented_falling_back_to_load", session_id=session.id)
            mode, replay = "load", True
            await client.attach(session, mode="load", replay=True, timeout=None)
        return mode, (replay or mode == "load")

    async def _recovered(
        self, session: Session, action: Reattach, mode: str, replayed: bool, probe: StatusProbe
    ) -> None:
        missed = not replayed
        self._emit(
            SessionRecovered(
                session.id, action.outcome, mode, replayed, missed, probe.status, session.state, self._generation
            )
        )
        session._mark(RecoveryMarker(session.id, action.outcome, mode, replayed, missed, status=probe.status))
        await self._store.save(session.record)

    async def _forget(self, session: Session, reason: str, via: str | None) -> None:
        self._sessions.pop(session.id, None)
        self._strategies.pop(session.id, None)
        error = SessionLost(session.id, reason)
        session._mark(RecoveryMarker(session.id, "lost", reason=reason))
        session._terminate(SessionLink.LOST, error)
        await self._store.delete(session.id)
        self._emit(SessionForgotten(session.id, reason, via))

    # ------------------------------------------------------------------ manual control

    def set_strategy(self, session_id: str, strategy: RecoveryStrategy | None) -> None:
        """Use ``strategy`` for one session (``None`` returns it to the client's strategy)."""
        if strategy is None:
            self._strategies.pop(session_id, None)
        else:
            self._strategies[session_id] = strategy

    async def recover(self, session_id: str) -> Session:
        """Probe and recover one session now on the current connection; returns its handle.

        Raises ``SessionLost`` if it was forgotten, ``RecoveryFailed`` if it could not be attached.
        """
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionLost(session_id, "not known to this client")
        await self.wait_ready(timeout=self._session_wait_timeout)
        async with asyncio.timeout(self._session_wait_timeout):
            while True:
                changed = self._changed_event()
                client = await self._require_client()
                if session.link is SessionLink.ATTACHED and session._connection_id == client.connection.id:
                    break
                if session.link is SessionLink.RECOVERING:
                    await changed.wait()  # the automatic recovery is on it: never run a second one
                    continue
                pending = self._recovering.pop(session.id, None)
                if pending is not None:  # a background retry waiting out its backoff: do it now instead
                    pending.cancel()
                    await asyncio.wait({pending})
                session.link = SessionLink.RECOVERING
                await self._recover_session(client, session)
                break
        session._check_usable()
        if session.link is not SessionLink.ATTACHED:
            raise RecoveryFailed(session_id)
        return session

    async def forget(self, session_id: str) -> None:
        """Forget a session locally (client and store); the agent is not told (use close/delete for that)."""
        session = self._sessions.get(session_id)
        if session is not None:
            await self._forget(session, "application", None)
        else:
            await self._store.delete(session_id)

    # ------------------------------------------------------------------ SessionOwner

    async def _require_client(self) -> ACPClient:
        async with asyncio.timeout(self._session_wait_timeout):
            while True:
                changed = self._changed_event()
                if self._state is ClientState.CLOSED:
                    raise ClientClosed("the client was closed")
                if self._state is ClientState.FAILED and self._failure is not None:
                    raise self._failure
                live = self._live_client()
                if live is not None and self._state in (ClientState.READY, ClientState.RECOVERING):
                    return live
                if not self._wait_for_ready and self._state in _NO_CONNECTION and self._task is not None:
                    raise NotConnected(f"no connection to the agent right now ({self._state.value})")
                await changed.wait()

    def _live_client(self) -> ACPClient | None:
        """The current per-connection client, unless its connection already died (the loop has not
        noticed yet: a call must wait for the next one rather than go out on a dead link)."""
        client = self._client
        return client if client is not None and not client.connection.closed else None

    async def _attached_client(self, session: Session) -> ACPClient:
        async with asyncio.timeout(self._session_wait_timeout):
            while True:
                changed = self._changed_event()
                session._check_usable()
                client = await self._require_client()
                if session.link is SessionLink.ATTACHED and session._connection_id == client.connection.id:
                    return client
                if self._state is ClientState.READY and session.link in (SessionLink.FAILED, SessionLink.DETACHED):
                    raise RecoveryFailed(session.id)
                await changed.wait()

    async def _session_request(
        self, session: Session, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> Any:
        client = await self._attached_client(session)
        return await client.connection.request(method, params, timeout=timeout)

    async def _session_notify(self, session: Session, method: str, params: dict[str, Any]) -> None:
        client = await self._attached_client(session)
        await client._session_notify(session, method, params)

    # ------------------------------------------------------------------ the ACP API

    async def new_session(
        self,
        cwd: str,
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str] | None = None,
        timeout: float | None = 30.0,
        meta: Mapping[str, Any] | None = None,
    ) -> Session:
        """Create a session on the current connection; it is stored and recovered after every drop.

        ``meta`` is stored with the session record (JSON-serialisable application data, e.g. a title or the
        user it belongs to); strategies can read it as ``record.meta``.
        """
        client = await self._require_client()
        session = await client.new_session(
            cwd, mcp_servers=mcp_servers, additional_directories=additional_directories, timeout=timeout
        )
        if meta:
            session.record.meta.update(meta)
        await self._store.save(session.record)
        return session

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str] | None = None,
        replay: bool = False,
        timeout: float | None = 60.0,
    ) -> Session:
        """Attach an existing session (``session/resume``) and keep it recovered from now on."""
        client = await self._require_client()
        session = await client.resume_session(
            session_id,
            cwd,
            mcp_servers=mcp_servers,
            additional_directories=additional_directories,
            replay=replay,
            timeout=timeout,
        )
        await self._store.save(session.record)
        return session

    async def load_session(
        self,
        session_id: str,
        cwd: str,
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str] | None = None,
        timeout: float | None = 60.0,
    ) -> Session:
        """v1 ``session/load`` an existing session and keep it recovered from now on."""
        client = await self._require_client()
        session = await client.load_session(
            session_id, cwd, mcp_servers=mcp_servers, additional_directories=additional_directories, timeout=timeout
        )
        await self._store.save(session.record)
        return session

    async def _idempotent(self, call: Callable[[ACPClient], Awaitable[Any]]) -> Any:
        """Run a read-only call; if the link drops under it, run it once more on the next connection."""
        try:
            return await call(await self._require_client())
        except ConnectionLost:
            log.info("acp.idempotent_call_retried", generation=self._generation)
            await self.wait_ready(timeout=self._session_wait_timeout)  # the next connection, not this one
            return await call(await self._require_client())

    async def session_status(self, session_id: str, *, timeout: float | None = 10.0) -> SessionStatusResponse:
        """``session/status`` on the current connection (side-effect free, so retried once after a drop)."""
        result: SessionStatusResponse = await self._idempotent(lambda c: c.session_status(session_id, timeout=timeout))
        return result

    def list_sessions(self, cwd: str | None = None, *, timeout: float | None = 30.0) -> AsyncIterator[SessionInfo]:
        """``session/list`` over every page, on the current connection."""

        async def pages() -> AsyncIterator[SessionInfo]:
            client = await self._require_client()
            async for info in client.list_sessions(cwd, timeout=timeout):
                yield info

        return pages()

    async def close_session(self, session_id: str, *, timeout: float | None = 30.0) -> None:
        """``session/close`` and forget the session locally (it leaves the store)."""
        await (await self._require_client()).close_session(session_id, timeout=timeout)
        await self._drop_local(session_id)

    async def delete_session(self, session_id: str, *, timeout: float | None = 30.0) -> None:
        """``session/delete`` and forget the session locally (it leaves the store)."""
        await (await self._require_client()).delete_session(session_id, timeout=timeout)
        await self._drop_local(session_id)

    async def _drop_local(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
        self._strategies.pop(session_id, None)
        await self._store.delete(session_id)

    async def save_session(self, session: Session) -> None:
        """Persist the session's record now (after changing ``session.record.meta``, for example)."""
        await self._store.save(session.record)

    async def authenticate(self, method_id: str, *, timeout: float | None = 30.0) -> None:
        """Authenticate on the current connection (``authenticate`` / ``auth/login``)."""
        await (await self._require_client()).authenticate(method_id, timeout=timeout)

    async def request(self, method: str, params: Any = None, *, timeout: float | None = 30.0) -> Any:
        """Send any request on the current connection (escape hatch); never re-sent after a drop."""
        return await (await self._require_client()).request(method, params, timeout=timeout)


_EVENT_NAMES: dict[type, str] = {
    SessionDetached: "session_detached",
    StateChanged: "state_changed",
    ConnectionDropped: "connection_dropped",
    SessionRecovered: "session_recovered",
    SessionForgotten: "session_forgotten",
    SessionRecoveryFailed: "session_recovery_failed",
}

"""The blocking clients: :class:`SyncClient` (one connection, made by :func:`connect`) and
:class:`ReconnectingClient` (the blocking twin of :class:`acp_client.ReconnectingClient`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Generator, Mapping
from types import TracebackType
from typing import Any

from acp_client._checks import check_seconds
from acp_client.client import ACPClient
from acp_client.client._connect import Connector, Target
from acp_client.client._connect import connect as _async_connect
from acp_client.exceptions import ReconnectFailed
from acp_client.reconnect import ClientState, Event, Limits, RecoveryPolicy, Timeouts
from acp_client.reconnect import ReconnectingClient as _AsyncReconnectingClient
from acp_client.reconnect._settings import ClientSettings
from acp_client.sessions import Session
from acp_client.sync._runner import CLOSE_TIMEOUT, _LoopThread, _subscribe, _wait_bound
from acp_client.sync._session import SyncSession
from acp_client.sync._wrap import _Blocking, _OnLoop, _ReturnsList, _ReturnsSession, _Twin
from acp_client.transports import TransportOptions


class _Facade(_Twin):
    """What both blocking clients share: the private loop, stable session wrappers, context management."""

    def __init__(self, runner: _LoopThread) -> None:
        self._runner = runner
        self._wrappers: dict[int, SyncSession] = {}

    def _wrap(self, session: Session) -> SyncSession:
        wrapper = self._wrappers.get(id(session))
        if wrapper is None or wrapper.session is not session:
            wrapper = self._wrappers[id(session)] = SyncSession(self._runner, session)
        return wrapper

    def _close_with(self, aclose: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            if self._runner.alive:
                self._runner.run(aclose(), CLOSE_TIMEOUT)
        finally:
            self._runner.stop()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (the loop thread is stopped)."""
        return not self._runner.alive

    def close(self) -> None:
        """Close the client and stop its private loop thread (each client says what it closes)."""
        raise NotImplementedError

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class SyncClient(_Facade):
    """A blocking :class:`~acp_client.client.ACPClient` over one connection; made by :func:`connect`.

    Every public method of ``ACPClient`` exists here with the same parameters (``list_sessions`` returns a
    list); sessions come back as :class:`SyncSession`.
    """

    def __init__(self, runner: _LoopThread, client: ACPClient) -> None:
        super().__init__(runner)
        #: The underlying async client (use it only from the client's loop).
        self.client = client

    def __repr__(self) -> str:
        return f"<SyncClient {self.client!r}>"

    def __enter__(self) -> SyncClient:
        return self

    @property
    def _target(self) -> ACPClient:
        return self.client

    def _request_timeout(self) -> float | None:
        return self.client.connection.request_timeout

    def close(self) -> None:
        """Close the connection and stop the private loop thread. Idempotent."""
        self._close_with(self.client.aclose)

    @property
    def protocol_version(self) -> int:
        """The negotiated protocol version."""
        return self.client.protocol_version

    @property
    def agent_capabilities(self) -> dict[str, Any]:
        """The agent's capabilities (raw JSON object)."""
        return self.client.agent_capabilities

    @property
    def sessions(self) -> dict[str, SyncSession]:
        """Sessions attached on this connection, by id (a snapshot)."""
        return {sid: self._wrap(session) for sid, session in list(self.client.sessions.items())}

    supports = _OnLoop(ACPClient.supports)
    request = _Blocking(ACPClient.request)
    notify = _Blocking(ACPClient.notify)
    authenticate = _Blocking(ACPClient.authenticate)
    login = _Blocking(ACPClient.login)
    logout = _Blocking(ACPClient.logout)
    new_session = _ReturnsSession(ACPClient.new_session)
    load_session = _ReturnsSession(ACPClient.load_session)
    resume_session = _ReturnsSession(ACPClient.resume_session)
    attach = _Blocking(ACPClient.attach)
    list_sessions = _ReturnsList(ACPClient.list_sessions)
    close_session = _Blocking(ACPClient.close_session)
    delete_session = _Blocking(ACPClient.delete_session)
    archive_session = _Blocking(ACPClient.archive_session)
    unarchive_session = _Blocking(ACPClient.unarchive_session)
    auth_status = _Blocking(ACPClient.auth_status)
    session_status = _Blocking(ACPClient.session_status)
    set_mode = _Blocking(ACPClient.set_mode)
    set_config_option = _Blocking(ACPClient.set_config_option)
    cancel = _Blocking(ACPClient.cancel)


def connect(target: Target, *, timeout: float | None = 60.0, **options: Any) -> SyncClient:
    """Connect and initialize (see :func:`acp_client.connect` for ``options``: ``timeouts=``,
    ``transport_options=`` ..., handed over as they are); returns a :class:`SyncClient`, usable as a
    context manager. ``timeout`` bounds the whole connect."""
    check_seconds("", "timeout", timeout, optional=True)
    connector = _async_connect(target, **options)  # every keyword checked here, before a thread starts
    runner = _LoopThread("acp-sync-client")
    try:
        client = runner.run(_open(connector), timeout)
    except BaseException:
        runner.stop()
        raise
    return SyncClient(runner, client)


async def _open(connector: Connector) -> ACPClient:
    return await connector


class _Unset:
    """The type of a keyword that was not given."""

    def __repr__(self) -> str:
        return "<not given: the client's Timeouts.ready>"


_UNSET = _Unset()


class ReconnectingClient(_Facade):
    """A blocking :class:`acp_client.ReconnectingClient`; takes the same keywords (``timeouts=``,
    ``policy=``, ``limits=``, ``transport_options=`` ..., handed over as they are), plus ``ready_timeout``.

    Nothing connects until it is used: entering ``with`` — or, without ``with``, the first call that needs a
    connection — starts the client and waits up to ``ready_timeout`` seconds (default: ``Timeouts.ready``,
    30 s unless set; ``None``: no bound) until it is ready; it raises ``ReconnectFailed`` if the client
    gives up first. ``with`` closes it on exit; without ``with``, call :meth:`close`. Every public method of
    the async client exists here with the same parameters; session handles stay valid across reconnects,
    exactly as in the async client.
    """

    def __init__(self, target: Target, *, ready_timeout: float | _Unset | None = _UNSET, **options: Any) -> None:
        if not isinstance(ready_timeout, _Unset):
            check_seconds("", "ready_timeout", ready_timeout, optional=True)
        # every keyword checked here with the async client's own checks, before a thread starts (its
        # construction on the loop checks them again, and warns for the deprecated ones)
        ClientSettings.from_options(target, options, warn=False)
        runner = _LoopThread("acp-sync-reconnecting-client")
        super().__init__(runner)
        self._ready_once = False

        async def create() -> _AsyncReconnectingClient:
            return _AsyncReconnectingClient(target, **options)

        try:
            #: The underlying async client (use it only from the client's loop).
            self.client: _AsyncReconnectingClient = runner.run(create(), CLOSE_TIMEOUT)
        except BaseException:
            runner.stop()
            raise
        if isinstance(ready_timeout, _Unset):  # the same bound as ``async with``: Timeouts.ready
            ready_timeout = self.client.timeouts.ready
        #: How long the first use (or ``with``) waits for a ready connection.
        self.ready_timeout: float | None = ready_timeout

    def __repr__(self) -> str:
        return f"<sync {self.client!r}>"

    @property
    def _target(self) -> _AsyncReconnectingClient:
        return self.client

    def _request_timeout(self) -> float | None:
        return self.client.timeouts.request

    def _before_call(self) -> None:
        if not self._ready_once:
            self.wait_ready(self.ready_timeout, first=True)

    def __enter__(self) -> ReconnectingClient:
        try:
            self.wait_ready(self.ready_timeout, first=True)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Close the connection, stop reconnecting and stop the private loop thread. Idempotent."""
        self._close_with(self.client.aclose)

    @property
    def state(self) -> ClientState:
        """The current lifecycle state."""
        return self.client.state

    @property
    def protocol_version(self) -> int:
        """The protocol version of the current (or last) connection."""
        return self.client.protocol_version

    @property
    def generation(self) -> int:
        """How many connection attempts were made."""
        return self.client.generation

    @property
    def failure(self) -> ReconnectFailed | None:
        """Why the client stopped reconnecting (``None`` while it keeps trying)."""
        return self.client.failure

    @property
    def transport_options(self) -> TransportOptions:
        """The transport settings every connection of this client uses."""
        return self.client.transport_options

    @property
    def timeouts(self) -> Timeouts:
        """The timeouts this client runs with."""
        return self.client.timeouts

    @property
    def policy(self) -> RecoveryPolicy:
        """The recovery policy this client runs with."""
        return self.client.policy

    @property
    def limits(self) -> Limits:
        """The bounds this client runs with."""
        return self.client.limits

    @property
    def recovery_limit(self) -> int:
        """How many recovery requests may be in flight right now (adapts unless fixed)."""
        return self.client.recovery_limit

    @property
    def wire_log_stats(self) -> Mapping[str, int] | None:
        """The wire log's counters (``None`` without one): lines written, dropped, failed writes."""
        return self.client.wire_log_stats

    @property
    def owner_id(self) -> str | None:
        """This worker's id in a shared store (``None`` without one)."""
        return self.client.owner_id

    @property
    def sessions(self) -> dict[str, SyncSession]:
        """Known sessions by id (a snapshot; the handles themselves stay valid across reconnects)."""

        async def snapshot() -> list[Session]:
            return list(self.client.sessions.values())

        return {session.id: self._wrap(session) for session in self._runner.run(snapshot(), CLOSE_TIMEOUT)}

    def start(self) -> None:
        """Start connecting in the background without waiting (``with`` and first use do it for you)."""

        async def start() -> None:
            if self.client.state is ClientState.IDLE:
                await self.client.start()

        self._runner.run(start(), CLOSE_TIMEOUT)

    def wait_ready(self, timeout: float | None = None, *, first: bool = False) -> None:
        """Start the client if needed and block until it is ``READY``; raises ``ReconnectFailed`` (with
        ``first=True`` also when the client gave up before it was ever ready), ``ClientClosed`` or a
        ``TimeoutError``. ``with`` and first use call it with ``first=True`` and ``ready_timeout``."""
        self.start()
        self._runner.run(self.client.wait_ready(timeout, first=first), _wait_bound(timeout))
        self._ready_once = True

    reconnect_now = _OnLoop(_AsyncReconnectingClient.reconnect_now)
    notify_network_changed = _OnLoop(_AsyncReconnectingClient.notify_network_changed)
    set_strategy = _OnLoop(_AsyncReconnectingClient.set_strategy)
    strategy_for = _OnLoop(_AsyncReconnectingClient.strategy_for)
    forget = _Blocking(_AsyncReconnectingClient.forget, needs_connection=False)
    save_session = _Blocking(_AsyncReconnectingClient.save_session, needs_connection=False)
    recover = _ReturnsSession(_AsyncReconnectingClient.recover)
    release = _Blocking(_AsyncReconnectingClient.release)
    adopt = _ReturnsSession(_AsyncReconnectingClient.adopt)
    new_session = _ReturnsSession(_AsyncReconnectingClient.new_session)
    resume_session = _ReturnsSession(_AsyncReconnectingClient.resume_session)
    load_session = _ReturnsSession(_AsyncReconnectingClient.load_session)
    session_status = _Blocking(_AsyncReconnectingClient.session_status)
    list_sessions = _ReturnsList(_AsyncReconnectingClient.list_sessions)
    close_session = _Blocking(_AsyncReconnectingClient.close_session)
    delete_session = _Blocking(_AsyncReconnectingClient.delete_session)
    archive_session = _Blocking(_AsyncReconnectingClient.archive_session)
    unarchive_session = _Blocking(_AsyncReconnectingClient.unarchive_session)
    auth_status = _Blocking(_AsyncReconnectingClient.auth_status)
    authenticate = _Blocking(_AsyncReconnectingClient.authenticate)
    request = _Blocking(_AsyncReconnectingClient.request)

    def notify_resumed_from_sleep(self) -> None:
        """Hint that the machine woke up (same as :meth:`notify_network_changed`)."""
        self.notify_network_changed()

    def events(self, timeout: float | None = None) -> Generator[Event, None, None]:
        """Block over the client's typed events from this call on; ``timeout`` bounds the wait for each one
        (``ACPTimeoutError`` when it passes). ``close()`` the generator to unsubscribe.

        Subscribing starts a client that was not started yet (after subscribing, so its first connection's
        events are seen too)."""
        events = _subscribe(self._runner, self.client.events, timeout)
        self.start()
        return events


def _forwarding_signature(ours: Callable[..., Any], theirs: Callable[..., Any]) -> inspect.Signature:
    """``ours``'s signature with its ``**options`` spelled out as the keywords ``theirs`` takes (what
    ``help()`` and IDEs show); the ``**`` parameter stays for the rest (deprecated keywords)."""
    mine = inspect.signature(ours)
    forwarded = inspect.signature(theirs).parameters.values()
    named = [p for p in mine.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    extra = [p for p in forwarded if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in mine.parameters]
    rest = [p for p in mine.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
    return mine.replace(parameters=named + extra + rest)


ReconnectingClient.__init__.__signature__ = _forwarding_signature(  # type: ignore[attr-defined]
    ReconnectingClient.__init__, _AsyncReconnectingClient.__init__
)
connect.__signature__ = _forwarding_signature(connect, _async_connect)  # type: ignore[attr-defined]

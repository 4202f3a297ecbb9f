"""ReconnectingClient: one connection at a time, recovered sessions, stable handles.

The client is composed of parts that each own their state; its keywords become one
:class:`~acp_client.reconnect._settings.ClientSettings` (checked, defaults filled in), from which
:func:`~acp_client.reconnect._assembly.assemble` builds and wires the parts, and the client drives them (its ACP
calls are defined here, once):

- :class:`~acp_client.reconnect._connection.supervisor.ConnectionSupervisor`: the connection loop and all of its state
  (lifecycle state, generation, current connection, failure, ``reconnect_now()``);
- :class:`~acp_client.reconnect._calls.gate.ClientGate`: when a call may go out, and on which connection;
- :class:`~acp_client.reconnect._calls.session_calls.SessionCalls`: the sessions' calls (the client is their owner);
- :class:`~acp_client.reconnect._sessions.keeper.SessionKeeper` (the registry, strategies and store writes) and
  :class:`~acp_client.reconnect._calls.recovery_control.RecoveryControl` (``recover()``, ``forget()``);
- :class:`~acp_client.reconnect._recovery.recoverer.SessionRecoverer`: the per-session recovery jobs;
- :class:`~acp_client.reconnect._ownership.control.OwnershipControl` and
  :class:`~acp_client.reconnect._ownership.control.ClientHost`: several workers on one shared store;
- :class:`~acp_client.reconnect._events.EventBus` (events) and
  :class:`~acp_client.reconnect._sessions.store_writer.StoreWriter` (the store).
"""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

from acp_client.client import USE_CLIENT_DEFAULT, ACPClient, ProtocolVersionOption, RequestTimeout, SessionInfo
from acp_client.client._connect import Target
from acp_client.client.wire_log import WireLogOption
from acp_client.exceptions import (
    CapabilityNotSupported,
    ClientClosed,
    ConnectionLost,
    ReconnectFailed,
    SessionLost,
)
from acp_client.handlers import ClientHandlers
from acp_client.reconnect._assembly import assemble
from acp_client.reconnect._backoff import Backoff, Clock, CrashLoopBreaker
from acp_client.reconnect._connection.classify import Classifier, classify_error
from acp_client.reconnect._events import ClientState, Event
from acp_client.reconnect._settings import ClientSettings, check_reconnect_target
from acp_client.reconnect.options import Limits, McpSecrets, RecoveryPolicy, Timeouts
from acp_client.reconnect.strategy import RecoveryStrategy, check_strategy
from acp_client.schema import SessionStatusResponse
from acp_client.sessions import Attachment, Session, SessionStore
from acp_client.transports import TransportOptions

__all__ = ["ReconnectingClient"]


class ReconnectingClient:
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
        ``target``: a ``ws(s)://`` or ``http(s)://`` URL, an argv list (a string is always a URL) to spawn over
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
        session; needs a shared store) says which sessions this worker serves. ``mcp_secrets`` (default
        ``None``: the store keeps the MCP servers whole) keeps every ``env``/``headers`` value of a
        session's MCP servers out of the store and supplies them at each re-attach: called as
        ``mcp_secrets(session_id, servers)`` (sync or async) with the blanked servers, it returns the
        servers to send.

    Timing and bounds:
        ``timeouts`` (default ``Timeouts()``): one setting per wait (initialize, request,
        probe, strategy, replay silence, recovery deadline, list check, session wait, ready).
        ``Timeouts.request`` is the deadline of every call below whose ``timeout=`` is left at
        :data:`~acp_client.client.USE_CLIENT_DEFAULT` (a number or ``None`` given to one call wins);
        ``Session.prompt()`` has none unless given (a turn may run long).
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
        :func:`~acp_client.reconnect.classify_error`; a callable, never ``None``) reads an error as retry or fatal.
        ``on_auth_required`` (default ``None``), a coroutine function called with the live
        :class:`ACPClient` to authenticate it: once per connection when the agent answers "auth
        required" during a recovery, and on every new connection, before its recovery, once an earlier
        one had to authenticate. Without it, the method last given to :meth:`authenticate` is sent again
        on every new connection, before its recovery. ``wait_for_ready`` (default ``False``): session
        calls made while the client is reconnecting wait for the next connection (up to
        ``Timeouts.session_wait``) instead of raising :class:`~acp_client.exceptions.NotConnected` at once.

    Observing:
        ``wire_log`` (default ``None``): write one JSON line per frame sent or received (time, direction,
        connection generation, kind, method, id, size) and one per lifecycle event (connection open and
        closed, state changes, recoveries) to a file path (created ``0600``, rotated at 10 MiB, 3 backups)
        or an open text stream; a :class:`~acp_client.WireLog` chooses payloads (redacted), the rotation
        bound and the backups. Read one with ``acp-client wire-log FILE``. A failing disk never fails the
        link: the wire log stops, says so once at WARNING, and :attr:`wire_log_stats` counts it.

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
        mcp_secrets: McpSecrets | None = None,
        timeouts: Timeouts | None = None,
        limits: Limits | None = None,
        transport_options: TransportOptions | None = None,
        backoff: Backoff | None = None,
        breaker: CrashLoopBreaker | None = None,
        classifier: Classifier = classify_error,
        on_auth_required: Callable[[ACPClient], Awaitable[None]] | None = None,
        wait_for_ready: bool = False,
        wire_log: WireLogOption = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        **deprecated: object,
    ) -> None:
        given = {name: value for name, value in locals().items() if name not in ("self", "target", "deprecated")}
        check_reconnect_target(target)
        # the keywords above are the fields of ClientSettings, which checks them and fills in the defaults
        self._settings = settings = ClientSettings.from_keywords(given, deprecated)
        parts = assemble(target, settings, owner=_Owner(self))
        # the parts, each owning its state (see the module docstring); the client only drives them
        self._options = parts.options
        self._bus, self._tasks, self._writer = parts.bus, parts.tasks, parts.writer
        self._ownership, self._owners, self._host = parts.ownership, parts.owners, parts.host
        self._keeper, self._auth, self._recoverer = parts.keeper, parts.auth, parts.recoverer
        self._supervisor, self._gate = parts.supervisor, parts.gate
        self._control, self._calls = parts.control, parts.calls
        self._wire = parts.wire
        self._loaded_store = False

    def __repr__(self) -> str:
        return f"<ReconnectingClient {self.state.value} sessions={len(self._keeper)} generation={self.generation}>"

    # ------------------------------------------------------------------ properties

    @property
    def state(self) -> ClientState:
        """The current lifecycle state."""
        return self._supervisor.state

    @property
    def sessions(self) -> Mapping[str, Session]:
        """Known sessions by id (read-only view; handles stay valid across reconnects)."""
        return self._keeper.view

    @property
    def protocol_version(self) -> int:
        """The protocol version of the current (or last) connection."""
        return self._supervisor.protocol_version

    @property
    def current(self) -> ACPClient | None:
        """The per-connection :class:`ACPClient` while connected, else ``None``."""
        return self._supervisor.current

    @property
    def generation(self) -> int:
        """How many connection attempts were made (each connection is tagged with its generation)."""
        return self._supervisor.generation

    @property
    def failure(self) -> ReconnectFailed | None:
        """Why the client is ``FAILED`` or ``SUSPENDED`` (``None`` otherwise)."""
        return self._supervisor.failure

    @property
    def transport_options(self) -> TransportOptions:
        """The transport settings every connection of this client uses."""
        return self._options

    @property
    def timeouts(self) -> Timeouts:
        """The timeouts this client runs with (after folding any deprecated flat keyword in)."""
        return self._settings.timeouts

    @property
    def policy(self) -> RecoveryPolicy:
        """The recovery policy this client runs with."""
        return self._settings.policy

    @property
    def limits(self) -> Limits:
        """The bounds this client runs with."""
        return self._settings.limits

    @property
    def recovery_limit(self) -> int:
        """How many recovery requests may be in flight right now (adapts unless fixed)."""
        return self._recoverer.limit.limit

    @property
    def wire_log_stats(self) -> Mapping[str, int] | None:
        """The wire log's counters (``None`` without one): ``lines`` written, ``dropped`` (its queue was
        full, or it had stopped), ``errors`` (a write failed: the wire log stopped there)."""
        return dict(self._wire.stats) if self._wire is not None else None

    @property
    def owner_id(self) -> str | None:
        """This worker's id in a shared store (``None`` with a store of one process)."""
        return self._owners.owner_id

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> ReconnectingClient:
        await self.start()
        try:
            await self.wait_ready(timeout=self._settings.timeouts.ready, first=True)
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Start connecting in the background (``async with`` does this and waits for ready)."""
        if self.state is ClientState.CLOSED:
            raise ClientClosed("this ReconnectingClient was closed; create a new one")
        if self._supervisor.running:
            return
        if not self._loaded_store:
            self._loaded_store = True
            ownership = self._ownership
            stored = await (ownership.load() if ownership is not None else self._writer.store.load_all())
            for session_id in self._keeper.load(stored):  # tombstones of closes a past run did not finish
                await self._keeper.closed(session_id)
            if ownership is not None:
                ownership.start(self._host)  # lease renewal and adoption run while the client lives
        self._supervisor.start()

    async def aclose(self) -> None:
        """Close the connection and stop reconnecting. Session records stay in the store."""
        if self.state is ClientState.CLOSED:
            return
        await self._supervisor.stop()
        if self._ownership is not None:
            await self._ownership.stop()  # the store's close (below) releases the leases
        await self._recoverer.stop_all()
        await self._tasks.aclose()
        await self._supervisor.aclose()
        self._keeper.close_all()
        self._bus.close()
        await self._writer.aclose()
        if self._wire is not None:
            await self._wire.aclose()  # what was queued is written, the file closed
        await self._settings.handlers.client_closed()  # the handlers end what they still run for the agent

    close = aclose

    async def wait_ready(self, timeout: float | None = None, *, first: bool = False) -> None:
        """Wait until the state is ``READY``. Raises the ``ReconnectFailed`` if it becomes ``FAILED`` (with
        ``first=True`` also if it is ``SUSPENDED`` before it was ever ready), ``ClientClosed`` if closed,
        ``TimeoutError`` after ``timeout`` seconds."""
        await self._supervisor.wait_ready(timeout, first=first)

    def reconnect_now(self) -> None:
        """Reconnect without waiting: cut a backoff or suspension short, drop a live connection, or re-arm
        after ``FAILED``. During connecting/initializing it only spares that attempt its backoff."""
        self._supervisor.reconnect_now()

    def notify_network_changed(self) -> None:
        """A hint that the network changed or the machine woke up (Python has no such events of its own).

        While waiting to reconnect, reconnect now. While connected, check liveness now with a ping instead
        of waiting for the next scheduled one, so nothing is written into a dead socket for long.
        """
        self._supervisor.network_changed()

    notify_resumed_from_sleep = notify_network_changed

    def events(self) -> AsyncIterator[Event]:
        """Typed events from now on. Bounded per reader: one that falls behind loses the oldest and then
        receives :class:`~acp_client.reconnect.EventsDropped`. Closing the iterator, cancelling its reader,
        or dropping it unsubscribes; it ends when the client closes."""
        return self._bus.subscribe()

    # ------------------------------------------------------------------ the ACP API

    async def new_session(
        self,
        cwd: str | os.PathLike[str],
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str | os.PathLike[str]] | None = None,
        timeout: RequestTimeout = USE_CLIENT_DEFAULT,
        meta: Mapping[str, Any] | None = None,
    ) -> Session:
        """Create a session on the current connection; it is stored and recovered after every drop.

        ``meta`` is stored with the session record (JSON-serialisable application data, e.g. a title or the
        user it belongs to); strategies can read it as ``record.meta``.
        """
        client = await self._gate.require()
        session = await client.new_session(
            cwd, mcp_servers=mcp_servers, additional_directories=additional_directories, timeout=timeout
        )
        if meta:
            session.record.meta.update(meta)
        await self._keeper.persist(session)
        return session

    async def resume_session(
        self,
        session_id: str,
        cwd: str | os.PathLike[str],
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str | os.PathLike[str]] | None = None,
        replay: bool = False,
        timeout: RequestTimeout = USE_CLIENT_DEFAULT,
    ) -> Session:
        """Attach an existing session (``session/resume``) and keep it recovered from now on."""
        client = await self._gate.require()
        session = await client.resume_session(
            session_id,
            cwd,
            mcp_servers=mcp_servers,
            additional_directories=additional_directories,
            replay=replay,
            timeout=timeout,
        )
        await self._keeper.persist(session)
        return session

    async def load_session(
        self,
        session_id: str,
        cwd: str | os.PathLike[str],
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str | os.PathLike[str]] | None = None,
        timeout: RequestTimeout = USE_CLIENT_DEFAULT,
    ) -> Session:
        """v1 ``session/load`` an existing session and keep it recovered from now on."""
        client = await self._gate.require()
        session = await client.load_session(
            session_id, cwd, mcp_servers=mcp_servers, additional_directories=additional_directories, timeout=timeout
        )
        await self._keeper.persist(session)
        return session

    async def session_status(
        self, session_id: str, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT
    ) -> SessionStatusResponse:
        """``session/status`` on the current connection (side-effect free, so retried once after a drop)."""
        return await self._gate.read_only(lambda c: c.session_status(session_id, timeout=timeout))

    def list_sessions(
        self,
        cwd: str | None = None,
        *,
        timeout: RequestTimeout = USE_CLIENT_DEFAULT,
        archived: Literal["exclude", "include", "only"] | None = None,
    ) -> AsyncIterator[SessionInfo]:
        """``session/list`` over every page, on the current connection (``archived``: see
        :meth:`ACPClient.list_sessions`). Its cursors live only within the walk; nothing stores them."""

        async def pages() -> AsyncIterator[SessionInfo]:
            client = await self._gate.require()
            async for info in client.list_sessions(cwd, timeout=timeout, archived=archived):
                yield info

        return pages()

    async def archive_session(self, session_id: str, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> None:
        """``session/archive`` on the current connection (**UNSTABLE**; see :meth:`ACPClient.archive_session`).
        The session stays known here and is recovered as before: archived is not closed."""
        await (await self._gate.require()).archive_session(session_id, timeout=timeout)

    async def unarchive_session(self, session_id: str, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> None:
        """``session/unarchive`` on the current connection (**UNSTABLE**)."""
        await (await self._gate.require()).unarchive_session(session_id, timeout=timeout)

    async def auth_status(self, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> Any:
        """``auth/status`` on the current connection (**UNSTABLE**; see :meth:`ACPClient.auth_status`);
        side-effect free, so retried once after a drop."""
        return await self._gate.read_only(lambda c: c.auth_status(timeout=timeout))

    async def close_session(self, session_id: str, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> None:
        """``session/close``, and the session is closed here for good: from the call on, nothing resumes,
        loads or probes it again, across reconnects and, with a store, restarts (the store keeps a closed
        record until the agent confirms; a restart in between removes it without resuming it). If the close
        cannot reach the agent (the link is down: ``ConnectionLost``/``NotConnected``), the error is raised and
        the session stays closed here; call again to retry the request."""
        await self._end_session(
            "session/close", "close", session_id, lambda c: c.close_session(session_id, timeout=timeout)
        )

    async def delete_session(self, session_id: str, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> None:
        """``session/delete``, with the guarantees of :meth:`close_session`."""
        await self._end_session(
            "session/delete", "delete", session_id, lambda c: c.delete_session(session_id, timeout=timeout)
        )

    async def _end_session(
        self, method: str, feature: str, session_id: str, send: Callable[[ACPClient], Awaitable[None]]
    ) -> None:
        client = await self._gate.require()
        if not client.supports(feature):  # refused before anything changes here
            raise CapabilityNotSupported(method, f"the agent's {feature} capability", client.protocol_version)
        await self._recoverer.cancel(session_id)
        await self._keeper.closing(session_id)
        await send(client)
        await self._keeper.closed(session_id)

    async def save_session(self, session: Session) -> None:
        """Persist the session's record now (after changing ``session.record.meta``, for example)."""
        if self._keeper.get(session.id) is not session:
            raise SessionLost(session.id, "not known to this client any more")
        await self._keeper.persist(session)

    async def authenticate(self, method_id: str, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> None:
        """Authenticate on the current connection (``authenticate`` / ``auth/login``); every later connection
        is authenticated again before its sessions are recovered (with ``on_auth_required`` when given,
        else with this ``method_id``)."""
        await (await self._gate.require()).authenticate(method_id, timeout=timeout)
        self._auth.chose(method_id)  # and on every new connection from now on

    async def request(self, method: str, params: Any = None, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> Any:
        """Send any request on the current connection (escape hatch); never re-sent after a drop."""
        return await (await self._gate.require()).request(method, params, timeout=timeout)

    # ------------------------------------------------------------------ recovery control

    def strategy_for(self, session_id: str) -> RecoveryStrategy:
        """The strategy that decides for ``session_id`` (its own, or the client's)."""
        return self._keeper.strategy_for(session_id)

    def set_strategy(self, session_id: str, strategy: RecoveryStrategy | None) -> None:
        """Use ``strategy`` for one session (``None`` returns it to the client's strategy)."""
        check_strategy("strategy", strategy)
        self._keeper.set_strategy(session_id, strategy)

    async def recover(self, session_id: str) -> Session:
        """Probe and recover one session now on the current connection; returns its handle.

        Joins a recovery already running for it (cutting its backoff short) rather than starting a second
        one. Raises ``SessionLost`` if it was forgotten, ``RecoveryFailed`` if it could not be attached.
        """
        return await self._control.recover(session_id)

    async def forget(self, session_id: str) -> None:
        """Forget a session locally (client and store) for good; the agent is not told (use close/delete).

        Whatever its recovery is doing, nothing more is sent for it and a late answer is discarded.
        """
        await self._control.forget(session_id)

    # ------------------------------------------------------------------ several workers

    async def release(self, session_id: str) -> bool:
        """Hand a session over on purpose: give up its lease (other workers may adopt it at once) and stop
        serving it here: the handle turns detached, ``SessionTakenOver(reason="released")`` is reported,
        and calls on it raise ``LeaseLost``. The agent is not told. ``False`` if this worker did not hold
        the lease. Needs a shared store (:class:`~acp_client.sessions.RedisSessionStore`)."""
        return await self._owners.release(session_id)

    async def adopt(self, session_id: str) -> Session:
        """Take a session over on purpose: claim its lease (``LeaseLost`` while another worker holds it)
        and recover it on this worker's connection; returns its handle. Needs a shared store."""
        return await self._owners.adopt(session_id)


class _Owner:
    """The :class:`~acp_client.sessions.SessionOwner` a :class:`ReconnectingClient` hands its sessions and its
    per-connection clients: calls and reports go to the client's :class:`SessionCalls` (looked up at each
    call: the parts are built after this object), the version is the current connection's."""

    __slots__ = ("_client",)

    def __init__(self, client: ReconnectingClient) -> None:
        self._client = client

    @property
    def protocol_version(self) -> int:
        """The protocol version of the current (or last) connection."""
        return self._client.protocol_version

    async def session_request(
        self, session: Session, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> Any:
        """See :meth:`SessionCalls.session_request`."""
        return await self._client._calls.session_request(session, method, params, timeout=timeout)

    async def session_notify(self, session: Session, method: str, params: dict[str, Any]) -> None:
        """See :meth:`SessionCalls.session_notify`."""
        await self._client._calls.session_notify(session, method, params)

    async def wait_attached(self, session: Session, method: str, timeout: float) -> float:
        """See :meth:`SessionCalls.wait_attached`."""
        return await self._client._calls.wait_attached(session, method, timeout)

    def attached(self, session: Session, attachment: Attachment) -> None:
        """See :meth:`SessionCalls.attached`."""
        self._client._calls.attached(session, attachment)

    def detached(self, session: Session, loss: ConnectionLost) -> None:
        """See :meth:`SessionCalls.detached`."""
        self._client._calls.detached(session, loss)

    def closed(self, session: Session) -> None:
        """See :meth:`SessionCalls.closed`."""
        self._client._calls.closed(session)

    async def persist(self, session: Session) -> None:
        """Store the session's record (its prompt ledger or desired config changed) while this client keeps
        it; a store fault is reported and retried (``SessionStoreFailed``), never raised."""
        await self._client._keeper.save_record(session)

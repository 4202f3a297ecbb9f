"""The typed ACP client over one connection: negotiation, capabilities, and every client→agent call.

``connect()`` opens a transport, starts a :class:`~acp_client.client.connection.Connection`, sends ``initialize``
and returns an :class:`ACPClient`. It works as ``client = await connect(url)`` and as
``async with connect(url) as client:``. For a connection that survives drops, use
:class:`acp_client.ReconnectingClient`, which runs one ``ACPClient`` per connection underneath.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Literal

from acp_client._checks import check_instance, check_seconds, check_str_mapping
from acp_client._logging import get_logger
from acp_client._version import __version__
from acp_client.client._negotiate import (
    SUPPORTED_PROTOCOL_VERSIONS,
    ClientFacts,
    ProtocolVersionOption,
    attach_method,
    initialize_params,
    read_initialize_answer,
    require,
    supported,
    timeout_with_stray_line,
)
from acp_client.client._router import InboundRouter, UpdateAcceptance
from acp_client.client._support import (
    DEFAULT_MAX_LIST_PAGES,
    PathArg,
    SessionInfo,
    directory_list,
    list_pages,
    path_text,
    server_list,
    shape_mcp_servers,
)
from acp_client.client.connection import Connection
from acp_client.client.options import USE_CLIENT_DEFAULT, RequestTimeout
from acp_client.client.wire_log import WireRecorder
from acp_client.exceptions import (
    ACPTimeoutError,
    CapabilityNotSupported,
    ClientClosed,
    ConnectionLost,
    ProtocolError,
    SessionLost,
    UsageError,
)
from acp_client.handlers import ClientHandlers
from acp_client.schema import (
    SessionStatusResponse,
    build_status_models,
    models_for,
    parse_result,
    parse_status_response,
)
from acp_client.schema.transport import ResumableTransport
from acp_client.sessions import (
    Attachment,
    Session,
    SessionControl,
    SessionLink,
    SessionOwner,
    SessionRecord,
    SessionRegistry,
)
from acp_client.sessions._session import config_option_params
from acp_client.transports.base import StreamResumable, Transport

__all__ = ["SUPPORTED_PROTOCOL_VERSIONS", "ACPClient", "ProtocolVersionOption", "SessionInfo", "shape_mcp_servers"]

log = get_logger("acp_client.client")  # the logger name users configure; stable across moves



class ACPClient:
    """A typed ACP client over one :class:`~acp_client.client.connection.Connection`.

    Usually made by :func:`connect`. After ``initialize`` it exposes the negotiated ``protocol_version``,
    the agent's capabilities (``agent_capabilities``, the raw JSON object: peers drop capability flags they
    do not know, this keeps them), ``agent_info`` and ``auth_methods``.

    Every call's ``timeout=`` (float seconds) defaults to :data:`~acp_client.client.options.USE_CLIENT_DEFAULT`:
    the client's ``request_timeout`` (``Timeouts.request`` when made by :func:`connect`). A number given
    to one call bounds that call instead; ``None`` waits without a deadline. :meth:`initialize` keeps its
    own (``Timeouts.initialize``, which :func:`connect` passes).
    """

    def __init__(
        self,
        transport: Transport,
        *,
        handlers: ClientHandlers | None = None,
        registry: SessionRegistry | None = None,
        client_info: Mapping[str, str] | None = None,
        session_owner: SessionOwner | None = None,
        request_timeout: float | None = 30.0,
        generation: int | None = None,
        wire: WireRecorder | None = None,
    ) -> None:
        check_instance("", "transport", transport, Transport, optional=False)
        check_instance("", "wire", wire, WireRecorder)
        check_instance("", "handlers", handlers, ClientHandlers)
        check_str_mapping("", "client_info", client_info)
        check_seconds("", "request_timeout", request_timeout, optional=True)
        self.handlers = handlers or ClientHandlers()
        # a reconnecting client lends its registry (it owns it); on its own this client owns a fresh one
        self._registry = registry if registry is not None else SessionRegistry()
        # sessions made here answer to the reconnecting client that owns this one, or to this client's own
        # small owner: either sends their calls and is the one writer of their links (this client reports)
        self._owns_sessions = session_owner is None
        self._wire = wire  # lent by connect() or a ReconnectingClient; this client closes it only on its own
        self._session_owner: SessionOwner = session_owner if session_owner is not None else _OneConnection(self)
        self._control = SessionControl()
        # made first: the connection calls its methods directly, one call per update less than a lambda
        self._inbound = InboundRouter(
            handlers=self.handlers, registry=self._registry, versions=self, owner=self._session_owner
        )
        #: The JSON-RPC connection over ``transport``; what the agent sends goes to this client's router.
        self.connection = Connection(
            transport,
            request_timeout=request_timeout,
            generation=generation,
            on_request=self._inbound.on_request,
            on_notification=self._inbound.on_notification,
            on_close=self._inbound.on_connection_lost,
            facts=ClientFacts(transport, lambda: self.protocol_version),
            wire=wire,
        )
        self._inbound.bind(self.connection)
        self.client_info = dict(client_info or {"name": "acp-client", "version": __version__})
        self.protocol_version: int = 0
        self.agent_capabilities: dict[str, Any] = {}
        self.agent_info: dict[str, Any] = {}
        self.auth_methods: list[dict[str, Any]] = []
        self.initialize_result: dict[str, Any] = {}
        self._closed_by_owner = False  # aclose() was called: a session call says "closed", not "detached"

    @property
    def sessions(self) -> Mapping[str, Session]:
        """Sessions known to this client by id (read-only; shared with a reconnecting client that owns it)."""
        return self._registry.view

    def __repr__(self) -> str:
        return f"<ACPClient v{self.protocol_version or '?'} {self.connection!r}>"

    async def __aenter__(self) -> ACPClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection; sessions attached to it become detached.

        A client on its own (not one connection of a ``ReconnectingClient``) then tells its handlers
        (``handlers.client_closed()``), so they end what they still run for the agent.
        """
        self._closed_by_owner = True
        await self.connection.close()
        self._inbound.detach_all()
        if self._owns_sessions:
            if self._wire is not None:
                await self._wire.aclose()  # what was queued is written, the file closed
            await self.handlers.client_closed()

    close = aclose

    # ------------------------------------------------------------------ negotiation

    def initialize_params(self, version: int) -> dict[str, Any]:
        """The ``initialize`` params this client sends for a protocol version (v1- or v2-shaped)."""
        return initialize_params(self.handlers.client_capabilities(version), self.client_info, version)

    async def initialize(self, version: int = 2, *, timeout: float | None = 10.0) -> int:
        """Send ``initialize`` offering ``version`` and record what the agent answered, within ``timeout``
        seconds (not the client's request timeout: :func:`connect` passes ``Timeouts.initialize``).

        Returns the negotiated version. Raises :class:`UnsupportedProtocolVersion` if the agent answers a
        version this client does not speak, or ``ProtocolError`` if the answer is malformed.
        """
        transport = self.connection.transport
        if isinstance(transport, StreamResumable):
            transport.watch_cursors()  # every message after the answer counts for a stream resume
        try:
            result = await self.connection.request("initialize", self.initialize_params(version), timeout=timeout)
        except ACPTimeoutError as exc:
            clearer = timeout_with_stray_line(exc, self.connection.last_discarded)
            if clearer is None:
                raise
            raise clearer from None
        answer = read_initialize_answer(result, version, connection_id=self.connection.id)
        self.protocol_version = answer.version
        self.initialize_result = answer.result
        self.agent_capabilities = answer.capabilities
        self.agent_info = answer.info
        self.auth_methods = answer.auth_methods
        # Build this version's models now, once per process, rather than inside the first status probe or
        # update of a recovery round, where the pause (a second or more of pydantic schema building on a
        # slow machine) would count against every recovery request's timeout.
        models_for(answer.version)
        self._offer_stream_resume(answer.result)
        if self.supports("status"):
            # the session/status models need the v2 `Usage` type even for a v1 answer: built here, not in the
            # first probe of a recovery round (0.3 s of CPU, 10 s and more on a loaded machine, counted
            # against the probe's timeout)
            build_status_models()
        log.info(
            "initialized",
            connection_id=self.connection.id,
            protocol_version=answer.version,
            agent=self.agent_info.get("name"),
        )
        return answer.version

    def _offer_stream_resume(self, result: dict[str, Any] | None) -> None:
        """Tell a transport that can resume its stream whether the agent offers it (``transport.resumable``
        in the ``initialize`` answer; ``None``: no answer)."""
        transport = self.connection.transport
        if isinstance(transport, StreamResumable):
            transport.enable_stream_resume(ResumableTransport.from_initialize(result))

    def supports(self, feature: str) -> bool:
        """Whether the agent advertised ``feature`` on this connection.

        Features: ``load``, ``resume``, ``list``, ``close``, ``delete``, ``status``,
        ``additional_directories``, ``logout`` (v1) and ``session`` (v2 baseline).
        """
        return supported(feature, self.protocol_version, self.agent_capabilities)

    def _require(self, method: str, feature: str) -> None:
        require(method, feature, self.protocol_version, self.agent_capabilities)

    # ------------------------------------------------------------------ escape hatch

    async def request(self, method: str, params: Any = None, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> Any:
        """Send any request (custom ``_`` methods, unstable ones) and return its raw result."""
        return await self.connection.request(method, params, timeout=timeout)

    async def notify(self, method: str, params: Any = None) -> None:
        """Send any notification."""
        await self.connection.notify(method, params)

    # ------------------------------------------------------------------ auth

    async def authenticate(self, method_id: str, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> None:
        """Authenticate with one of ``auth_methods`` (``authenticate`` in v1, ``auth/login`` in v2)."""
        method = "auth/login" if self.protocol_version >= 2 else "authenticate"
        if self.protocol_version >= 2 and not self.auth_methods:
            raise CapabilityNotSupported(method, "authMethods (the agent listed none)", self.protocol_version)
        await self.connection.request(method, {"methodId": method_id}, timeout=timeout)

    login = authenticate

    async def logout(self, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> None:
        """Log out (``logout`` in v1, gated on ``auth.logout``; ``auth/logout`` in v2)."""
        if self.protocol_version >= 2:
            if not self.auth_methods:
                raise CapabilityNotSupported("auth/logout", "authMethods (the agent listed none)", 2)
            await self.connection.request("auth/logout", {}, timeout=timeout)
        else:
            self._require("logout", "logout")
            await self.connection.request("logout", {}, timeout=timeout)

    # ------------------------------------------------------------------ sessions

    def _session_params(
        self,
        cwd: PathArg,
        mcp_servers: Sequence[Mapping[str, Any]] | None,
        additional_directories: Sequence[PathArg] | None,
        method: str,
    ) -> dict[str, Any]:
        servers = server_list(mcp_servers) if mcp_servers is not None else []
        params: dict[str, Any] = {
            "cwd": path_text(cwd, "cwd"),
            "mcpServers": shape_mcp_servers(servers, self.protocol_version),
        }
        if additional_directories is not None:
            directories = directory_list(additional_directories)
            self._require(method, "additional_directories")
            params["additionalDirectories"] = directories
        return params

    async def new_session(
        self,
        cwd: PathArg,
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[PathArg] | None = None,
        timeout: RequestTimeout = USE_CLIENT_DEFAULT,
    ) -> Session:
        """Create a session (``session/new``) attached to this connection and return its handle."""
        if self.protocol_version >= 2:
            self._require("session/new", "session")
        params = self._session_params(cwd, mcp_servers, additional_directories, "session/new")
        with self._inbound.new_session_pending():
            result = await self.connection.request("session/new", params, timeout=timeout)
            return self._register_new(result, params, params["cwd"])

    def _register_new(self, result: Any, params: dict[str, Any], cwd: str) -> Session:
        session_id = result.get("sessionId") if isinstance(result, dict) else None
        if not isinstance(session_id, str):
            raise ProtocolError("session/new answered without a string sessionId")
        record = SessionRecord(
            session_id=session_id,
            cwd=cwd,
            mcp_servers=params["mcpServers"],
            additional_directories=params.get("additionalDirectories"),
            protocol_version=self.protocol_version,
        )
        session = Session(self._session_owner, record)
        self._control.learn(session, result)  # its config options and commands, when the answer has them
        if self.protocol_version >= 2:
            self._control.apply_snapshot(session, "idle")  # "a new session defaults to idle"
        self._session_owner.attached(session, Attachment(self.connection.id, self.protocol_version))
        self._registry.add(session)
        self._inbound.deliver_early(session_id)  # updates the agent sent right behind its answer
        return session

    def _existing(
        self,
        session_id: str,
        cwd: PathArg,
        mcp_servers: Sequence[Mapping[str, Any]] | None,
        additional_directories: Sequence[PathArg] | None,
    ) -> Session:
        """The handle of a session created elsewhere (this client's own if it knows the id already)."""
        cwd_text = path_text(cwd, "cwd")
        servers = server_list(mcp_servers) if mcp_servers is not None else []
        directories = directory_list(additional_directories) if additional_directories is not None else None
        session = self.sessions.get(session_id)
        if session is None:
            record = SessionRecord(
                session_id,
                cwd_text,
                [dict(s) for s in servers],
                directories,
                self.protocol_version,
            )
            session = Session(self._session_owner, record)
        self._registry.reopen(session)  # asked for by id: a forgotten id may come back on purpose
        return session

    async def load_session(
        self,
        session_id: str,
        cwd: PathArg,
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[PathArg] | None = None,
        timeout: RequestTimeout = USE_CLIENT_DEFAULT,
    ) -> Session:
        """v1 ``session/load``: attach an existing session here; the agent replays its whole history first.

        In v2 use :meth:`resume_session` with ``replay=True``.
        """
        session = self._existing(session_id, cwd, mcp_servers, additional_directories)
        await self.attach(session, mode="load", replay=True, timeout=timeout)
        return session

    async def resume_session(
        self,
        session_id: str,
        cwd: PathArg,
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[PathArg] | None = None,
        replay: bool = False,
        timeout: RequestTimeout = USE_CLIENT_DEFAULT,
    ) -> Session:
        """``session/resume``: attach an existing session here. ``replay=True`` (v2 only) asks for the whole
        history first (``replayFrom: {"type": "start"}``); v1 resume never replays."""
        session = self._existing(session_id, cwd, mcp_servers, additional_directories)
        await self.attach(session, mode="resume", replay=replay, timeout=timeout)
        return session

    def accept_updates(self, session_id: str) -> UpdateAcceptance:
        """Open a window in which this connection routes the updates of ``session_id`` to its session
        whatever its link, until the window is closed (``with client.accept_updates(sid) as window:``).

        For a session's owner that applies an attach later than the answer (a recovery first checks the
        answer, then moves the link): passed to :meth:`attach` as ``acceptance``, it receives the attach's
        report (:attr:`UpdateAcceptance.attachment`), and no update the agent sends behind its answer is
        dropped before the owner applied it."""
        return self._inbound.accept(session_id)

    async def attach(
        self,
        session: Session,
        *,
        mode: Literal["resume", "load"],
        replay: bool,
        timeout: RequestTimeout = USE_CLIENT_DEFAULT,
        silence: float | None = None,
        deadline: float | None = None,
        on_give_up: Callable[[], None] | None = None,
        max_replay: int | None = None,
        mcp_servers: list[dict[str, Any]] | None = None,
        acceptance: UpdateAcceptance | None = None,
    ) -> None:
        """Attach a known session on this connection with ``session/resume`` or (v1) ``session/load``.

        Updates that arrive until the answer are flagged as replay; with a replay the transcript is rebuilt
        from empty and swapped in when the answer arrives. In v2 the state snapshot that precedes the answer
        becomes the current state; without one the state is unknown. Raises ``SessionNotFound`` (-32002)
        when the agent does not know the session; the caller decides whether to forget it.

        With ``silence`` (seconds) the call is timed by progress instead of ``timeout`` (given up after that
        long with neither an answer nor a replayed update, and after ``deadline`` in all): see
        :meth:`~acp_client.client.connection.Connection.request_watched` (``on_give_up`` is passed on,
        ``max_replay`` is its ``max_progress``). ``mcp_servers`` replaces the record's servers in the request
        (secrets supplied at recovery time); the request has this connection's shape whatever the record's.

        No link moves and no record is written here: the answer is reported as an
        :class:`~acp_client.sessions.Attachment` to the session's owner or, with ``acceptance`` (an open
        :meth:`accept_updates` window for this session), left in that window for whoever opened it.
        """
        record = session.record
        if acceptance is not None:
            acceptance.check(session.id, self.connection.id)
        method = attach_method(mode, replay, self.protocol_version, self.agent_capabilities)
        params = self._attach_params(record, mode == "resume" and replay, mcp_servers)
        if self._registry.get(record.session_id) is not session and not self._registry.add(session):
            raise SessionLost(record.session_id, "forgotten")
        self._control.begin_replay(session, rebuild=replay)
        ok = False
        answer: Any = None
        try:
            with self._inbound.accept(record.session_id):
                if silence is None:
                    answer = await self.connection.request(method, params, timeout=timeout)
                else:
                    answer = await self.connection.request_watched(
                        method, params, silence=silence, deadline=deadline, on_give_up=on_give_up,
                        progress=self._control.replay_progress(session), max_progress=max_replay,
                        # a reader of the session's stream gets the recovery marker before what follows
                        # the answer (it costs a loop turn per session, so only when someone reads)
                        waiter_first=self._control.has_subscribers(session),
                    )
            ok = True
        finally:
            self._control.end_replay(session, success=ok)
        # no await from the answer to the report: no update is routed in between
        self._control.learn(session, answer)  # v2 alpha.6/7 resume answers carry commands and config options
        self._report(session, Attachment(self.connection.id, self.protocol_version, params["mcpServers"]), acceptance)

    def _report(self, session: Session, attachment: Attachment, acceptance: UpdateAcceptance | None) -> None:
        """Report an attach: to the session's owner (it moves the link and writes the record), or into the
        window of whoever opened ``acceptance`` (it applies the attachment later)."""
        if acceptance is not None:
            acceptance.attachment = attachment
        else:
            self._session_owner.attached(session, attachment)

    def _attach_params(
        self, record: SessionRecord, replay_from_start: bool, mcp_servers: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        """The params of a resume/load of ``record`` in this connection's shape."""
        servers = shape_mcp_servers(record.mcp_servers if mcp_servers is None else mcp_servers, self.protocol_version)
        params: dict[str, Any] = {"sessionId": record.session_id, "cwd": record.cwd, "mcpServers": servers}
        if record.additional_directories is not None and self.supports("additional_directories"):
            params["additionalDirectories"] = list(record.additional_directories)
        if replay_from_start:
            params["replayFrom"] = {"type": "start"}
        return params

    def list_sessions(
        self,
        cwd: str | None = None,
        *,
        timeout: RequestTimeout = USE_CLIENT_DEFAULT,
        max_pages: int = DEFAULT_MAX_LIST_PAGES,
        archived: Literal["exclude", "include", "only"] | None = None,
    ) -> AsyncIterator[SessionInfo]:
        """``session/list``: iterate over every session the agent reports, fetching page after page.

        ``timeout`` bounds each page. An agent that sends a cursor it sent before (a loop), or more than
        ``max_pages`` pages, ends the iteration with :class:`~acp_client.exceptions.ProtocolError` naming
        the bound: a listing always ends. ``archived`` filters by archive state (``"exclude"``, the agent's
        default, ``"include"`` or ``"only"``); it needs the agent's ``archive`` capability. Cursors are
        opaque: they are used within this walk and kept nowhere.
        """
        self._require("session/list", "list")
        if max_pages < 1:
            raise UsageError(f"max_pages must be at least 1, not {max_pages!r}")
        if archived is not None:
            if archived not in ("exclude", "include", "only"):
                raise UsageError(f"archived must be 'exclude', 'include' or 'only', not {archived!r}")
            self._require("session/list with archived", "archive")
        return list_pages(self.connection.request, cwd, timeout=timeout, max_pages=max_pages, archived=archived)

    async def archive_session(self, session_id: str, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> None:
        """``session/archive`` (**UNSTABLE**): the agent hides the session from default listings; it can still
        be resumed or loaded. Needs the agent's ``archive`` capability (``CapabilityNotSupported`` otherwise)."""
        self._require("session/archive", "archive")
        await self.connection.request("session/archive", {"sessionId": session_id}, timeout=timeout)

    async def unarchive_session(self, session_id: str, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> None:
        """``session/unarchive`` (**UNSTABLE**): the session is listed by default again."""
        self._require("session/unarchive", "archive")
        await self.connection.request("session/unarchive", {"sessionId": session_id}, timeout=timeout)

    async def auth_status(self, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> Any:
        """``auth/status`` (**UNSTABLE**): whether the agent is authenticated (``state``: ``authenticated``,
        ``unauthenticated``, ``not_required``, ``unknown`` or a newer value) and the accounts it has, as the
        typed ``AuthStatusResponse`` of the connection's protocol version. Account fields are for display only:
        do not log them. Needs the agent's ``auth.status`` capability."""
        self._require("auth/status", "auth_status")
        result = await self.connection.request("auth/status", {}, timeout=timeout)
        return parse_result("auth/status", result, self.protocol_version)

    async def close_session(self, session_id: str, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> None:
        """``session/close``: the agent cancels the session's work and frees it; the handle becomes closed."""
        self._require("session/close", "close")
        await self.connection.request("session/close", {"sessionId": session_id}, timeout=timeout)
        self._end_session(session_id)
        await self.handlers.session_ended(session_id)

    async def delete_session(self, session_id: str, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> None:
        """``session/delete``: remove the session from the agent's list; the handle becomes closed."""
        self._require("session/delete", "delete")
        await self.connection.request("session/delete", {"sessionId": session_id}, timeout=timeout)
        self._end_session(session_id)
        await self.handlers.session_ended(session_id)

    def _end_session(self, session_id: str) -> None:
        session = self._registry.remove(session_id)
        if session is not None:
            self._session_owner.closed(session)

    async def session_status(
        self, session_id: str, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT
    ) -> SessionStatusResponse:
        """``session/status``: is the session ``active``, ``inactive`` (or a newer value)? Side-effect free.

        Raises ``SessionNotFound`` (-32002) when the agent does not know it. In v2, ``.state`` is the
        foreground snapshot or ``None`` when not reported (never read as idle). v1 answers carry no state.
        """
        self._require("session/status", "status")
        result = await self.connection.request("session/status", {"sessionId": session_id}, timeout=timeout)
        return parse_status_response(result, self.protocol_version)

    async def set_mode(self, session_id: str, mode_id: str, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT) -> Any:
        """v1 ``session/set_mode`` (v2 uses config options instead)."""
        if self.protocol_version >= 2:
            raise CapabilityNotSupported("session/set_mode", None, 2, hint="use set_config_option()")
        result = await self.connection.request(
            "session/set_mode", {"sessionId": session_id, "modeId": mode_id}, timeout=timeout
        )
        session = self._registry.get(session_id)
        if session is not None:
            self._control.want_config(session, "mode", mode_id)  # set again after a restore
        return result

    async def set_config_option(
        self, session_id: str, config_id: str, value: str | bool, *, timeout: RequestTimeout = USE_CLIENT_DEFAULT
    ) -> Any:
        """``session/set_config_option``; returns the agent's full ``configOptions`` list."""
        params = config_option_params(session_id, config_id, value, self.protocol_version)
        result = await self.connection.request("session/set_config_option", params, timeout=timeout)
        session = self._registry.get(session_id)
        if session is not None:
            self._control.learn(session, result)
            self._control.want_config(session, f"option:{config_id}", value)  # set again after a restore
        return result.get("configOptions") if isinstance(result, dict) else result

    async def cancel(self, session_id: str) -> None:
        """``session/cancel`` (a notification): stop the session's current turn.

        As the protocol requires, every permission request of that session still waiting for the user is
        answered *cancelled* at once (its handler task is cancelled).
        """
        self._inbound.cancel_permissions(session_id)
        await self.connection.notify("session/cancel", {"sessionId": session_id})


class _OneConnection:
    """The :class:`~acp_client.sessions.SessionOwner` of the sessions of an :class:`ACPClient` on its own: their
    calls go out on its one connection, and it moves their links as the client reports (created or attached
    here, the connection lost, closed by the agent). A reconnecting client hands its own owner instead."""

    __slots__ = ("_client", "_control")

    def __init__(self, client: ACPClient) -> None:
        self._client = client
        self._control = SessionControl()

    @property
    def protocol_version(self) -> int:
        """The negotiated protocol version of the client's connection."""
        return self._client.protocol_version

    async def session_request(
        self, session: Session, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> Any:
        """Send a session's request on the connection; refused while the session is not attached."""
        if session.link is not SessionLink.ATTACHED:
            if self._client._closed_by_owner:
                raise ClientClosed(f"session {session.id}: this client was closed; connect() again to go on")
            raise UsageError(f"session {session.id} is not attached to this connection ({session.link.value})")
        return await self._client.connection.request(method, params, timeout=timeout)

    async def wait_attached(self, session: Session, method: str, timeout: float) -> float:
        """One connection: nothing to wait for (:meth:`session_request` refuses a session not attached)."""
        return timeout

    async def session_notify(self, session: Session, method: str, params: dict[str, Any]) -> None:
        """Send a session's notification (``session/cancel`` also answers its waiting permission requests)."""
        if method == "session/cancel":
            await self._client.cancel(session.id)
        else:
            await self._client.connection.notify(method, params)

    def attached(self, session: Session, attachment: Attachment) -> None:
        """Created or attached on the connection: the link moves to ``attached``, the record takes the
        attach's version and servers."""
        self._control.attach(session, attachment)

    def detached(self, session: Session, loss: ConnectionLost) -> None:
        """The connection ended: the link moves to ``detached``, failing the turns waiting."""
        self._control.move_link(session, SessionLink.DETACHED, loss=loss)

    def closed(self, session: Session) -> None:
        """Closed or deleted: the link moves to ``closed`` (final)."""
        self._control.move_link(session, SessionLink.CLOSED)

    async def persist(self, session: Session) -> None:
        """One connection keeps no store: nothing to write."""

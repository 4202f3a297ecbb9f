"""A real ACP agent for tests, demos and integration checks, served over WebSocket on loopback (or stdio).

::

    async with ReferenceAgent(protocol_version=2) as agent:
        ...  # connect a client to agent.url ("ws://127.0.0.1:PORT/acp")
        await agent.wait_for_method("session/prompt")
        await agent.drop_all_connections()

Prompts are scripts in a small language (see :mod:`acp_client.testing.agent._script`: ``echo: hi``,
``stream 50``, ``sleep 2.5``, ``permission``, ``fail``, …), or ``agent.on_prompt`` runs your own coroutine.

Standalone: ``python -m acp_client.testing.reference_agent --port 8765 --protocol 2`` prints the URL as its
only line on stdout and serves until SIGINT/SIGTERM; ``--stdio`` serves one connection on stdin/stdout.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine, Iterable, Mapping
from types import TracebackType
from typing import Any, Literal

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from acp_client._logging import get_logger
from acp_client.client import SUPPORTED_PROTOCOL_VERSIONS
from acp_client.jsonrpc import Invalid
from acp_client.testing.agent import _methods as _agent_methods
from acp_client.testing.agent._capabilities import CAPABILITY_NAMES, capability_name
from acp_client.testing.agent._channel import FrameChannel, StreamChannel, WebSocketChannel
from acp_client.testing.agent._connection import AgentConnection, Reply
from acp_client.testing.agent._errors import AgentError, RawAnswer
from acp_client.testing.agent._faults import FaultControls
from acp_client.testing.agent._http import HttpEndpoint
from acp_client.testing.agent._records import AgentRecords, Handshake, Received, TraceContext
from acp_client.testing.agent._resumable import Resumable
from acp_client.testing.agent._sessions import AgentSessionRecord
from acp_client.testing.agent._stream_resume import ResumableStreams
from acp_client.testing.agent._tasks import AgentTasks
from acp_client.testing.agent._turns import PromptHook, PromptTurn, emit_update

__all__ = ["AgentError", "Handshake", "PromptTurn", "Received", "ReferenceAgent", "main", "serve_forever"]

_log = get_logger(__name__)


def _checked_versions(protocol_version: int, supported_versions: Iterable[int] | None) -> tuple[int, ...]:
    """The versions the agent answers (sorted); ``ValueError`` for an unknown one or a latest not among them."""
    versions = tuple(sorted(set(supported_versions))) if supported_versions is not None else (protocol_version,)
    for v in (protocol_version, *versions):
        if v not in SUPPORTED_PROTOCOL_VERSIONS:
            raise ValueError(f"protocol version {v!r} is not one of {SUPPORTED_PROTOCOL_VERSIONS}")
    if protocol_version not in versions:
        raise ValueError("protocol_version must be one of supported_versions")
    return versions


def _check_choices(*, replay_as: str, prompt_answer: str, list_page_size: int) -> None:
    """Refuse an unknown ``replay_as``/``prompt_answer`` or a page size below 1 (``ValueError``)."""
    if replay_as not in ("messages", "chunks"):
        raise ValueError("replay_as must be 'messages' or 'chunks'")
    if list_page_size < 1:
        raise ValueError("list_page_size must be at least 1")
    if prompt_answer not in ("receipt", "empty", "stop_reason"):
        raise ValueError("prompt_answer must be 'receipt', 'empty' or 'stop_reason'")


class ReferenceAgent:
    """An in-process ACP agent (v1 and/or v2) with observability and fault controls for tests.

    Sessions belong to the agent, not to a connection; each is attached to the connection that last sent
    ``session/new``/``session/load``/``session/resume`` for it, and its updates go only there. A session whose
    connection died stays *active* (in memory). Nothing starts before ``async with``.

    Two parts own the logs and waits (``agent.records``: ``received``, ``count``, ``wait_for``…) and most fault
    switches (``agent.faults``: ``stall``, ``reject_handshake``, ``drop_all_connections``…); the agent offers
    the names tests use as thin delegates to them.

    Constructor options (all but ``protocol_version`` keyword-only; most are also plain mutable attributes):

    - ``protocol_version``: the agent's latest version (1 or 2); ``supported_versions`` (default: just that
      one) lists every version it answers — a client offering an unsupported one gets ``protocol_version``.
    - ``capabilities``: ``{name: bool}`` overrides; names in :data:`CAPABILITY_NAMES` (dotted wire paths such
      as ``"sessionCapabilities.resume"`` are accepted). All default to present. A hidden capability is not
      advertised and its method answers -32601.
    - ``require_auth``: session methods answer -32000 until ``authenticate``/``auth/login`` with method id
      ``"agent-login"`` on the same connection.
    - ``replay_as``: ``"messages"`` (v2 whole ``user_message``/``agent_message``) or ``"chunks"``.
    - ``resume_snapshot``: v2 ``session/resume`` sends the current-state ``state_update`` after replay and
      before the response (``False`` emulates a non-compliant agent).
    - ``load_result_null``: v1 ``session/load`` answers ``null`` instead of ``{}``.
    - ``list_page_size``: ``session/list`` page size.
    - ``status_answers_method_not_found`` / ``resume_answers_method_not_found``: advertised but -32601.
    - ``reissue_permission_on_reattach``: a permission request lost with its connection is sent again to the
      next connection attaching the session (else the outcome is ``cancelled``).
    - ``ping_interval``: the server's own keepalive pings (default off); ``close_timeout``: closing handshake
      bound in seconds.
    - ``listen``: ``False`` starts no WebSocket server (serve streams with :meth:`serve_stream`).
    - ``prompt_answer``: what a v2 ``session/prompt`` answers once the prompt is inserted: ``"receipt"``
      (default, v2 alpha.5: ``{"messageId": <the user message's id>}``), ``"empty"`` (``{}``, as agents before
      alpha.5) or ``"stop_reason"`` (``{"stopReason": "end_turn"}``, an agent that never moved on).
    - ``resumable``: serve the durable transport draft (PR 2208) and advertise ``transport.resumable``: a
      :class:`~acp_client.testing.agent._resumable.Resumable` (retention, keepalive, a switch to refuse), or
      ``True`` for its defaults. Default ``None``: not advertised. Over WebSocket the agent then stamps cursors,
      keeps each connection across a socket drop and answers ``stream/resume``; :attr:`streams` records the
      attempts (see :mod:`acp_client.testing.agent._stream_resume`).
    """

    #: the resumable WebSocket connections (made on first use when ``resumable`` is set; see :attr:`streams`)
    _streams: ResumableStreams | None = None

    def __init__(
        self,
        protocol_version: int = 2,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        path: str = "/acp",
        supported_versions: Iterable[int] | None = None,
        capabilities: Mapping[str, bool] | None = None,
        require_auth: bool = False,
        replay_as: Literal["messages", "chunks"] = "messages",
        resume_snapshot: bool = True,
        load_result_null: bool = False,
        list_page_size: int = 50,
        status_answers_method_not_found: bool = False,
        resume_answers_method_not_found: bool = False,
        reissue_permission_on_reattach: bool = True,
        on_prompt: PromptHook | None = None,
        set_cookie: str | None = None,
        ping_interval: float | None = None,
        close_timeout: float = 1.0,
        listen: bool = True,
        prompt_answer: Literal["receipt", "empty", "stop_reason"] = "receipt",
        resumable: Resumable | bool | None = None,
    ) -> None:
        """Configure the agent; see the class docstring for the options. Nothing runs until ``async with``."""
        self._tasks = AgentTasks()
        #: the agent's logs and waits (see :class:`~acp_client.testing.agent._records.AgentRecords`)
        self.records = AgentRecords()
        #: the agent's fault switches (see :class:`~acp_client.testing.agent._faults.FaultControls`)
        self.faults = FaultControls(
            connections=lambda: list(self._connections.values()),
            spawn=self._tasks.spawn,
            records=self.records,
        )
        self.supported_versions: tuple[int, ...] = _checked_versions(protocol_version, supported_versions)
        _check_choices(replay_as=replay_as, prompt_answer=prompt_answer, list_page_size=list_page_size)
        self.prompt_answer: Literal["receipt", "empty", "stop_reason"] = prompt_answer
        self.protocol_version = protocol_version
        self.host, self.path = host, path
        self._requested_port = port
        overrides = {capability_name(name): bool(present) for name, present in (capabilities or {}).items()}
        self._capabilities = {**dict.fromkeys(CAPABILITY_NAMES, True), **overrides}
        #: how resumable streams are served (``None``: the capability is not advertised)
        self.resumable: Resumable | None = Resumable() if resumable is True else (resumable or None)
        self.require_auth = require_auth
        self.replay_as: Literal["messages", "chunks"] = replay_as
        self.resume_snapshot = resume_snapshot
        self.load_result_null = load_result_null
        self.list_page_size = list_page_size
        self.status_answers_method_not_found = status_answers_method_not_found
        self.resume_answers_method_not_found = resume_answers_method_not_found
        self.reissue_permission_on_reattach = reissue_permission_on_reattach
        #: ``async def hook(turn: PromptTurn) -> str | None`` replacing the prompt mini-language
        self.on_prompt: PromptHook | None = on_prompt
        #: ``Set-Cookie`` value sent in every 101 response (load-balancer affinity emulation)
        self.set_cookie = set_cookie
        self._ping_interval, self._close_timeout, self._listen = ping_interval, close_timeout, listen
        self._reset_dialect()
        self._init_serving_state()

    def _init_serving_state(self) -> None:
        """The state of serving, empty: the session table, the connections, the server, the HTTP side."""
        #: session id → record; the agent's whole session table (shared by all connections)
        self.sessions: dict[str, AgentSessionRecord] = {}
        #: session updates that found no live attached connection
        self.dropped_updates = 0
        self._state: Literal["new", "running", "closing", "closed"] = "new"
        self._server: Server | None = None
        self._port: int | None = None
        self._connections: dict[str, AgentConnection] = {}
        self._ws_ids: dict[ServerConnection, str] = {}
        self._connection_counter = 0
        #: the Streamable HTTP side of the endpoint (controls in :class:`~acp_client.testing.agent._http.HttpEndpoint`)
        self.http = HttpEndpoint(self)

    def _reset_dialect(self) -> None:
        """Set the answers a test may swap at run time (another agent's dialect, an error) to the defaults."""
        #: session id → a status string to answer instead (``"hibernating"``…), an :class:`AgentError` to raise,
        #: or a :class:`~acp_client.testing.RawAnswer` sent as the whole result (``None``, ``{}``, ...)
        self.status_override: dict[str, str | AgentError | RawAnswer] = {}
        #: when set, ``initialize`` answers this error (e.g. ``AgentError(-32000, ...)`` for auth-required)
        self.initialize_error: AgentError | None = None
        #: method → an error every request of that method answers (e.g. ``{"session/resume": AgentError(-32603)}``)
        self.method_errors: dict[str, AgentError] = {}
        #: ``fn(session_id) -> AgentError``: the answer to status/resume/load/close of a session the agent does not
        #: know, instead of ``-32002`` (a real agent's dialect, e.g. kimi-cli's ``-32602`` with
        #: ``data {"session_id": "Session not found"}``)
        self.unknown_session_error: Callable[[str], AgentError] | None = None
        #: ``session/load`` of an unknown id answers success with no replay, and keeps and lists nothing under
        #: that id (pydantic-acp's dialect: a load of an unknown id succeeds)
        self.load_unknown_succeeds = False
        #: ``session/list`` without a ``cwd`` lists nothing (kimi-cli's dialect)
        self.list_requires_cwd = False
        #: session ids whose ``session/status`` is never answered (a hung storage lookup)
        self.hang_status: set[str] = set()
        #: when set, ``session/list`` answers ``list_answer(params)`` as its whole result (a listing that
        #: loops, never ends, or is malformed)
        self.list_answer: Callable[[dict[str, Any]], Any] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> ReferenceAgent:
        """Start listening (WebSocket on ``host``, ``port`` 0 = any free port)."""
        if self._state != "new":
            raise RuntimeError("a ReferenceAgent can only be started once; create a new one")
        self._state = "running"
        if self._listen:
            self._server = await serve(
                self._ws_handler,
                self.host,
                self._requested_port,
                process_request=self._process_request,
                process_response=self._process_response,
                ping_interval=self._ping_interval if self._ping_interval is not None else self._keepalive(),
                close_timeout=self._close_timeout,
                max_size=16 * 1024 * 1024,
                **self.http.serve_options(),  # Streamable HTTP (HTTP/1.1, h2c) on the same port and path
            )
            self._port = int(self._server.sockets[0].getsockname()[1])
            _log.debug("reference_agent_listening", url=self.url)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop: close the server and every connection, cancel and await every task the agent started."""
        await self.aclose()

    async def aclose(self) -> None:
        """Same as leaving ``async with``. Idempotent."""
        if self._state in ("closing", "closed"):
            return
        self._state = "closing"
        try:
            self.faults.unstall()
            await self._tasks.cancel_all()
            await self.http.aclose()
            if self._server is not None:
                self._server.close(close_connections=True)
                try:
                    async with asyncio.timeout(self._close_timeout + 2.0):
                        await self._server.wait_closed()
                except TimeoutError:
                    for connection in list(self._connections.values()):
                        connection.mark_closing()
                        connection.channel.abort()
                    await self._server.wait_closed()
            for connection in list(self._connections.values()):  # stream connections
                connection.mark_closing()
                await connection.channel.close()
            await self._tasks.cancel_all()
        finally:
            self._state = "closed"
            _log.debug("reference_agent_closed")

    @property
    def url(self) -> str:
        """``ws://HOST:PORT/acp`` (only while listening)."""
        return f"ws://{self.host}:{self.port}{self.path}"

    @property
    def http_url(self) -> str:
        """``http://HOST:PORT/acp``: the same endpoint over Streamable HTTP (HTTP/1.1 or h2c)."""
        return f"http://{self.host}:{self.port}{self.path}"

    @property
    def port(self) -> int:
        """The bound TCP port (only while listening)."""
        if self._port is None:
            raise RuntimeError("the agent is not listening (use 'async with' and listen=True)")
        return self._port

    # ------------------------------------------------------------------ serving

    async def _ws_handler(self, ws: ServerConnection) -> None:
        connection_id = self._ws_ids.pop(ws, None) or self.next_connection_id()
        if self.resumable is not None:
            await self.streams.serve_socket(ws, connection_id)
            return
        await self.serve_channel(WebSocketChannel(ws), connection_id=connection_id)

    def _keepalive(self) -> float | None:
        """The WebSocket ping interval a resumable agent keeps (its advertised ``keepaliveSeconds``)."""
        return self.resumable.keepalive_seconds if self.resumable is not None else None

    @property
    def streams(self) -> ResumableStreams:
        """The resumable WebSocket connections and the log of ``stream/resume`` attempts (``resumable`` set);
        see :class:`~acp_client.testing.agent._stream_resume.ResumableStreams`. ``RuntimeError`` without it."""
        if self.resumable is None:
            raise RuntimeError("the agent serves no resumable streams (ReferenceAgent(resumable=...))")
        if self._streams is None:
            self._streams = ResumableStreams(self, self.resumable)
        return self._streams

    def connection(self, connection_id: str) -> AgentConnection | None:
        """The live connection with this id (``None`` when unknown or ended)."""
        return self._connections.get(connection_id)

    async def serve_stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection of newline-delimited JSON frames (e.g. stdio) until end of input.

        Create ``reader`` with ``limit=`` a generous bound (16 MiB here) to accept large frames.
        """
        await self.serve_channel(StreamChannel(reader, writer))

    async def serve_channel(self, channel: FrameChannel, *, connection_id: str | None = None) -> None:
        """Serve one connection over any :class:`~acp_client.testing.agent._channel.FrameChannel` until it ends."""
        if self._state != "running":
            raise RuntimeError("the agent is not running")
        cid = connection_id or self.next_connection_id()
        connection = AgentConnection(self, channel, cid)
        self._connections[cid] = connection
        if self.faults.stalled:
            channel.pause_reading()
        _log.debug("reference_agent_connection_open", connection_id=cid)
        self.records.notify_changed()
        await connection.run()

    def next_connection_id(self) -> str:
        """A fresh connection id (``conn-1``, ``conn-2``…; WebSocket and Streamable HTTP links share them)."""
        self._connection_counter += 1
        return f"conn-{self._connection_counter}"

    def _process_request(self, ws: ServerConnection, request: Request) -> Response | None:
        headers = {k: v for k, v in request.headers.raw_items()}
        self.records.record_trace_headers("websocket", None, headers)
        refusal = self.faults.refuse_handshake(request.path, headers)
        if refusal is not None:
            response = ws.respond(refusal.status, f"rejected by the reference agent ({refusal.status})\n")
            if refusal.retry_after is not None:
                response.headers["Retry-After"] = refusal.retry_after
            return response
        if request.path.split("?", 1)[0] != self.path:
            self.records.record_handshake(request.path, headers, 404)
            return ws.respond(404, "not found\n")
        return None

    def _process_response(self, ws: ServerConnection, request: Request, response: Response) -> Response | None:
        if response.status_code == 101:
            connection_id = self.next_connection_id()
            self._ws_ids[ws] = connection_id
            response.headers["Acp-Connection-Id"] = connection_id
            if self.set_cookie is not None:
                response.headers["Set-Cookie"] = self.set_cookie
            self.records.record_handshake(request.path, {k: v for k, v in request.headers.raw_items()}, 101)
        return None

    # ------------------------------------------------------------------ hooks used by connections and handlers

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> asyncio.Task[Any]:
        """Start a task owned by the agent (cancelled and awaited on restart and on exit)."""
        return self._tasks.spawn(coro, name=name)

    async def dispatch(self, connection: AgentConnection, method: str, params: Any, reply: Reply) -> Any:
        """Handle one request (used by connections; answers through ``reply`` or returns the result)."""
        handle = _agent_methods.dispatch
        return await self.faults.metered(method, lambda: handle(self, connection, method, params, reply))

    async def handle_notification(self, connection: AgentConnection, method: str, params: Any) -> None:
        """Handle one notification (used by connections)."""
        await _agent_methods.handle_notification(self, connection, method, params)

    def connection_closed(self, connection: AgentConnection) -> None:
        """Forget a connection whose link ended (its sessions stay attached to it, hence still active)."""
        if self._connections.get(connection.id) is connection:
            del self._connections[connection.id]
        _log.debug("reference_agent_connection_closed", connection_id=connection.id)
        self.records.notify_changed()

    # ------------------------------------------------------------------ capabilities

    @property
    def capability_flags(self) -> dict[str, bool]:
        """A copy of the capability switches (name → advertised)."""
        return dict(self._capabilities)

    def has_capability(self, name: str) -> bool:
        """Whether a capability (see :data:`CAPABILITY_NAMES`) is currently on."""
        return self._capabilities[capability_name(name)]

    def set_capability(self, name: str, present: bool) -> None:
        """Advertise or hide a capability; takes effect for gating at once and for advertising at the next
        ``initialize``. Raises ``ValueError`` for an unknown name."""
        self._capabilities[capability_name(name)] = present

    # ------------------------------------------------------------------ observability

    @property
    def connections(self) -> int:
        """The number of live connections."""
        return len(self._connections)

    @property
    def connection_ids(self) -> list[str]:
        """Ids of the live connections (``conn-1``…; also sent as the ``Acp-Connection-Id`` 101 header)."""
        return list(self._connections)

    async def wait_for_connections(self, n: int, timeout: float = 5.0) -> None:
        """Wait until exactly ``n`` connections are live."""
        await self.records.wait_for(lambda: len(self._connections) == n, timeout)

    # ------------------------------------------------------------------ the records' and faults' names (delegates)

    @property
    def received(self) -> list[Received]:
        """Every inbound request and notification, in processing order (``records.received``)."""
        return self.records.received

    @property
    def invalid_frames(self) -> list[tuple[str, Invalid]]:
        """Every unusable inbound frame (``records.invalid_frames``)."""
        return self.records.invalid_frames

    @property
    def handshakes(self) -> list[Handshake]:
        """Every opening handshake, accepted or not (``records.handshakes``)."""
        return self.records.handshakes

    @property
    def trace_contexts(self) -> list[TraceContext]:
        """Every ``traceparent`` received, with its carrier (``records.trace_contexts``)."""
        return self.records.trace_contexts

    def count(self, method: str, session_id: str | None = None) -> int:
        """How many ``method`` frames were received (for ``session_id`` when given); see ``records.count``."""
        return self.records.count(method, session_id)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Wait until ``predicate()`` holds (``TimeoutError`` after ``timeout`` s); see ``records.wait_for``."""
        await self.records.wait_for(predicate, timeout)

    async def wait_for_method(
        self, method: str, count: int = 1, *, session_id: str | None = None, timeout: float = 5.0
    ) -> list[Received]:
        """Wait until ``method`` was received ``count`` times; see ``records.wait_for_method``."""
        return await self.records.wait_for_method(method, count, session_id=session_id, timeout=timeout)

    async def drop_all_connections(
        self, code: int = 1011, reason: str = "", *, abort: bool = False, timeout: float = 5.0
    ) -> int:
        """Close every live connection and wait for their handlers; see ``faults.drop_all_connections``."""
        return await self.faults.drop_all_connections(code, reason, abort=abort, timeout=timeout)

    def stall(self) -> None:
        """Keep sockets open but answer nothing (``faults.stall``)."""
        self.faults.stall()

    def unstall(self) -> None:
        """Undo :meth:`stall` (``faults.unstall``)."""
        self.faults.unstall()

    @property
    def stalled(self) -> bool:
        """Whether :meth:`stall` is in effect."""
        return self.faults.stalled

    def reject_handshake(
        self, status: int = 503, *, retry_after: float | None = None, times: int | None = None
    ) -> None:
        """Answer opening handshakes with HTTP ``status``; see ``faults.reject_handshake``."""
        self.faults.reject_handshake(status, retry_after=retry_after, times=times)

    def accept_handshakes(self) -> None:
        """Stop rejecting handshakes (``faults.accept_handshakes``)."""
        self.faults.accept_handshakes()

    @property
    def rejected_handshakes(self) -> int:
        """Handshakes answered with an error status (``faults.rejected_handshakes``)."""
        return self.faults.rejected_handshakes

    def close_after_initialize(self, delay: float | None, code: int = 1011) -> None:
        """Close each connection ``delay`` s after its initialize answer; see ``faults.close_after_initialize``."""
        self.faults.close_after_initialize(delay, code)

    def set_capacity(self, workers: int | None, service_time: float = 0.0) -> None:
        """Serve the recovery methods with ``workers`` workers; see ``faults.set_capacity``."""
        self.faults.set_capacity(workers, service_time)

    @property
    def max_outstanding(self) -> int:
        """The most recovery requests held at once under :meth:`set_capacity` (``faults.max_outstanding``)."""
        return self.faults.max_outstanding

    # ------------------------------------------------------------------ agent-initiated output

    async def send_update(self, session_id: str, update: dict[str, Any]) -> bool:
        """Send a ``session/update`` of the agent's own (background activity) to the session's attached
        connection; ``False`` if it had none alive. Raises ``KeyError`` for an unknown session."""
        return await emit_update(self, self.sessions[session_id], update)

    # ------------------------------------------------------------------ faults on sessions (others: agent.faults)

    async def restart(
        self,
        keep_sessions: bool = True,
        *,
        code: int = 1012,
        abort: bool = False,
        timeout: float = 5.0,
        keep_config: bool = True,
    ) -> None:
        """Emulate an agent restart: all work stops, every connection drops (close ``code``, or reset), and
        every session becomes *inactive* (known, not in memory) — or unknown with ``keep_sessions=False``.
        Transcripts survive, so replay after resume/load still works. ``keep_config=False``: each session
        comes back in the default mode and config (an agent whose store keeps the conversation only)."""
        await self._tasks.cancel_all()
        for session in self.sessions.values():
            session.turn = None
            session.unload()
            if not keep_config:
                session.reset_config()
        if not keep_sessions:
            self.sessions.clear()
        await self.faults.drop_all_connections(code, "agent restart", abort=abort, timeout=timeout)
        self.records.notify_changed()

    def forget_session(self, session_id: str) -> bool:
        """Make a session unknown (-32002 from then on); a running turn is cancelled. ``False`` if unknown."""
        session = self.sessions.pop(session_id, None)
        if session is None:
            return False
        if session.turn is not None:
            session.turn.cancel()
        self.records.notify_changed()
        return True


# ---------------------------------------------------------------------------- standalone

# the options, serve_forever() and main() live in _agent_serve (shared with `acp-client serve-reference`)
from acp_client.testing.agent._serve import main, serve_forever  # noqa: E402

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

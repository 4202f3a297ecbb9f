"""The bridge itself: an ACP agent on stdio that forwards to a remote agent through a ReconnectingClient.

Routing of the editor's requests (the remote's raw answers are returned unchanged unless said otherwise):

==========================  =========================================================================
``initialize``              connects (bounded by ``connect_timeout``) with the editor's protocol version,
                            capabilities and info; answers what the remote advertised, adjusted (see
                            :meth:`Bridge._initialize`)
``session/new``             ``client.new_session``; the raw answer (modes, config options) via the tap
``session/load``            ``client.load_session`` / ``client.resume_session``: the editor gets the
``session/resume``          replay it asked for, the client keeps recovering the session afterwards
``session/prompt``          v1: ``Session.prompt`` (the handle: waits for recovery, fails on a drop); v2:
                            ``client.recover`` then the raw request, because a v2 answer only acknowledges
                            the prompt (the turn's end arrives as a ``state_update``)
``session/close|delete``    ``client.close_session`` / ``delete_session`` (forgets it locally too)
``authenticate``            forwarded raw; the method is remembered and replayed on every new connection
``auth/login``              that asks for authentication
everything else             ``client.request(method, params)`` after the named session (if any) is
                            recovered; notifications go to the current connection
==========================  =========================================================================
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from acp_client._logging import get_logger
from acp_client._version import __version__
from acp_client.bridge._editor import EditorLink
from acp_client.bridge._forward import SessionPipe, SessionPipes
from acp_client.bridge._handlers import EditorHandlers
from acp_client.bridge._outage import META_KEY, to_rpc_error
from acp_client.bridge._tap import RawTap
from acp_client.bridge._view import EditorView
from acp_client.client import ACPClient
from acp_client.exceptions import (
    ClientClosed,
    ConnectionLost,
    InternalError,
    InvalidParams,
    InvalidRequest,
    ReconnectFailed,
    SessionLost,
    SessionNotFound,
)
from acp_client.reconnect import Backoff, ClientState, ReconnectingClient, SessionForgotten, StateChanged
from acp_client.recovery import Action, Capabilities, DefaultStrategy, Forget, Reattach, StatusProbe
from acp_client.sessions import MemorySessionStore, SessionRecord, SessionStore, SQLiteSessionStore
from acp_client.transports import Transport

__all__ = ["Bridge", "BridgeOptions", "BridgeStrategy", "describe_url"]

log = get_logger("acp_client.bridge")

T = TypeVar("T")


def describe_url(url: str) -> str:
    """``scheme://host:port/path`` of ``url``, without credentials or query (they may hold a token)."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "<malformed URL>"
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"


@dataclass(frozen=True, slots=True, repr=False)
class BridgeOptions:
    """How the bridge reaches the remote agent and how long it waits (float seconds).

    ``outage_timeout`` bounds how long an editor request waits for the link to come back;
    ``connect_timeout`` bounds reaching the remote when the editor initializes (then the bridge exits);
    ``ping_interval``/``ping_timeout`` set the liveness check that notices a silent (half-open) drop;
    ``max_backoff`` caps the wait between reconnect attempts (an editor request also cuts a wait short).
    """

    url: str = field(repr=False)  # may carry a token in its query
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # Authorization ...
    store: str | None = None
    outage_timeout: float = 30.0
    connect_timeout: float = 15.0
    ping_interval: float | None = 10.0
    ping_timeout: float | None = 10.0
    max_backoff: float = 5.0
    max_frame_bytes: int = 16 * 1024 * 1024

    def __repr__(self) -> str:
        return (
            f"BridgeOptions(url={describe_url(self.url)!r}, headers=<{len(self.headers)} hidden>, "
            f"store={self.store!r}, outage_timeout={self.outage_timeout}, connect_timeout={self.connect_timeout})"
        )


class BridgeStrategy:
    """Recovery for the bridge: prefer a replay whenever the agent can give one.

    The bridge compares a replay with what the editor already has and forwards only what is new, so a
    replay lets the editor get exactly what it missed; a resume without one can only end in a gap notice.
    v1 sessions are therefore restored with ``session/load`` when advertised (even when still live), v2
    ones with ``replayFrom: start`` (the default strategy); everything else as the default strategy says.
    """

    def __init__(self) -> None:
        self._default = DefaultStrategy()

    def __repr__(self) -> str:
        return "BridgeStrategy()"

    def decide(self, record: SessionRecord, probe: StatusProbe, capabilities: Capabilities) -> Action:
        """See the class docstring."""
        if probe.not_found:
            return Forget("unknown")
        if capabilities.protocol_version < 2 and capabilities.load:
            return Reattach("load", replay=True, outcome="reattached" if probe.active else "restored")
        return self._default.decide(record, probe, capabilities)


class _HookedStore:
    """A session store that reports every save first (synchronously), then delegates.

    ``ReconnectingClient`` saves a session right after creating or attaching it, before it hands back the
    handle; subscribing at that moment means no update published afterwards can be missed.
    """

    def __init__(self, inner: SessionStore, on_save: Callable[[SessionRecord], None]) -> None:
        self._inner = inner
        self._on_save = on_save

    def __repr__(self) -> str:
        return f"<bridge store {self._inner!r}>"

    async def load_all(self) -> list[SessionRecord]:
        return await self._inner.load_all()

    async def save(self, record: SessionRecord) -> None:
        self._on_save(record)
        await self._inner.save(record)

    async def delete(self, session_id: str) -> None:
        await self._inner.delete(session_id)

    async def close(self) -> None:
        await self._inner.close()


def _params(params: Any) -> dict[str, Any]:
    if not isinstance(params, dict):
        raise InvalidParams(-32602, "Invalid params", {"reason": "params must be an object"})
    return params


def _str(params: dict[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidParams(-32602, "Invalid params", {"reason": f"{key} must be a non-empty string"})
    return value


def _servers(params: dict[str, Any]) -> list[dict[str, Any]]:
    value = params.get("mcpServers")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise InvalidParams(-32602, "Invalid params", {"reason": "mcpServers must be an array of objects"})
    return value


def _directories(params: dict[str, Any]) -> list[str] | None:
    value = params.get("additionalDirectories")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidParams(-32602, "Invalid params", {"reason": "additionalDirectories must be an array of strings"})
    return value


class Bridge:
    """One bridge process: the editor on stdio, the remote agent behind a :class:`ReconnectingClient`.

    ``run()`` serves until the editor closes its end (exit code 0) or the remote cannot be reached when the
    editor initializes (exit code 1; ``fatal`` then says why).
    """

    def __init__(self, options: BridgeOptions) -> None:
        self.options = options
        #: why the bridge gave up (for the command's stderr line), or ``None``
        self.fatal: str | None = None
        self._exit_code = 0
        self._editor: EditorLink | None = None
        self._rc: ReconnectingClient | None = None
        self._tap = RawTap()
        self._pipes = SessionPipes(self._notify_editor, self._protocol_version)
        self._auth_method: str | None = None
        self._stop: asyncio.Event | None = None
        self._aux: set[asyncio.Task[Any]] = set()
        self._routes: dict[str, Callable[[str, Any], Awaitable[Any]]] = {
            "session/new": self._new,
            "session/load": self._attach,
            "session/resume": self._attach,
            "session/prompt": self._prompt,
            "session/close": self._close,
            "session/delete": self._close,
            "authenticate": self._login,
            "auth/login": self._login,
            "logout": self._logout,
            "auth/logout": self._logout,
        }

    def __repr__(self) -> str:
        return f"<Bridge {describe_url(self.options.url)} remote={self._rc!r}>"

    # ------------------------------------------------------------------ lifecycle

    async def run(self, out_fd: int) -> int:
        """Serve the editor on stdin and ``out_fd`` until it leaves; returns the exit code."""
        self._stop = asyncio.Event()
        self._editor = await EditorLink.open(
            out_fd,
            on_request=self._on_request,
            on_notification=self._on_notification,
            max_frame_bytes=self.options.max_frame_bytes,
        )
        log.info("bridge_started", remote=describe_url(self.options.url), version=__version__)
        closed = asyncio.ensure_future(self._editor.wait_closed())
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({closed, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (closed, stopped):
                task.cancel()
            await asyncio.wait({closed, stopped})
            await self._shutdown()
        log.info("bridge_stopped", exit_code=self._exit_code)
        return self._exit_code

    def stop(self) -> None:
        """Ask ``run()`` to finish (e.g. on SIGTERM)."""
        if self._stop is not None:
            self._stop.set()

    async def _shutdown(self) -> None:
        aux = list(self._aux)
        for task in aux:
            task.cancel()
        if aux:
            await asyncio.wait(aux)
        await self._pipes.stop_all()
        try:
            if self._rc is not None:
                await self._rc.aclose()  # the sessions stay in the store
        except Exception:  # the editor's side must still be closed
            log.exception("bridge_close_failed", side="remote")
        if self._editor is not None:
            await self._editor.close()

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._aux.add(task)
        task.add_done_callback(self._aux.discard)

    def _give_up(self, message: str) -> None:
        """Stop with exit code 1 once the request being served (the editor's ``initialize``) is answered."""
        self.fatal = message
        self._exit_code = 1
        serving = asyncio.current_task()

        async def stop_after_answer() -> None:
            if serving is not None:
                await asyncio.wait({serving}, timeout=5.0)
            self.stop()

        self._spawn(stop_after_answer(), "acp-bridge-give-up")

    # ------------------------------------------------------------------ the remote side

    def _protocol_version(self) -> int:
        return self._rc.protocol_version if self._rc is not None else 1

    def _remote(self) -> ReconnectingClient:
        rc = self._rc
        if rc is None:
            raise InvalidRequest(-32600, "Invalid request", {"reason": "send initialize first"})
        if rc.state.value in ("failed", "suspended"):
            rc.reconnect_now()  # the editor wants the remote again: try once more now (still bounded)
        elif rc.state is ClientState.BACKOFF:
            rc.notify_network_changed()  # someone is waiting: try now instead of at the end of the backoff
        return rc

    def _transport_factory(self) -> Callable[[], Awaitable[Transport]]:
        """What the client opens on every (re)connect: the transport its own options describe (headers, ping,
        cookies, ...), with the tap on it."""
        from acp_client._connect import open_transport

        async def open_remote() -> Transport:
            assert self._rc is not None
            return self._tap.wrap(await open_transport(self.options.url, self._rc.transport_options))

        return open_remote

    async def _reauthenticate(self, client: ACPClient) -> None:
        if self._auth_method is not None:
            await client.authenticate(self._auth_method, timeout=self.options.outage_timeout)

    def _on_saved(self, record: SessionRecord) -> None:
        rc = self._rc
        session = rc.sessions.get(record.session_id) if rc is not None else None
        pipe = self._pipes.get(record.session_id)
        if session is not None and (pipe is None or pipe.session is not session):
            # a session the editor just created or attached: subscribe before anything more arrives
            self._pipes.adopt(session, opened=True, preload=self._tap.release(record.session_id))
            log.debug("bridge_session_adopted", session_id=record.session_id, via="store_save")

    async def _watch(self, rc: ReconnectingClient) -> None:
        async for event in rc.events():
            if isinstance(event, StateChanged):
                log.info("bridge_remote_state", old=event.old.value, new=event.new.value, reason=event.reason)
                if event.new is ClientState.FAILED:
                    log.error("bridge_remote_failed", reason=event.reason)
            elif isinstance(event, SessionForgotten):
                log.warning("bridge_session_forgotten", session_id=event.session_id, reason=event.reason)

    async def _bounded(self, call: Awaitable[T]) -> T:
        """Wait for the link (and the session) at most ``outage_timeout`` seconds."""
        async with asyncio.timeout(self.options.outage_timeout):
            return await call

    # ------------------------------------------------------------------ the editor side

    async def _notify_editor(self, method: str, params: dict[str, Any]) -> None:
        assert self._editor is not None
        await self._editor.notify(method, params)

    async def _on_request(self, method: str, params: Any) -> Any:
        if method == "initialize":
            return await self._initialize(params)
        route: Callable[[str, Any], Awaitable[Any]] = self._routes.get(method, self._forward)
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        try:
            try:
                return await route(method, params)
            except ConnectionLost as exc:
                if exc.request_sent:
                    raise
                # it never reached the agent: safe to send once more, on the next connection
                log.info("bridge_request_retried", method=method, reason=exc.reason)
                return await route(method, params)
        except Exception as exc:
            error = to_rpc_error(
                exc,
                method=method,
                session_id=session_id if isinstance(session_id, str) else None,
                outage_timeout=self.options.outage_timeout,
            )
            if error is not exc:
                log.info("bridge_request_failed", method=method, error=f"{type(exc).__name__}: {exc}")
            raise error from None

    def _on_notification(self, method: str, params: Any) -> None:
        if self._rc is None:
            log.info("bridge_notification_before_initialize", method=method)
            return
        self._spawn(self._forward_notification(method, params), f"acp-bridge-notify-{method}")

    async def _forward_notification(self, method: str, params: Any) -> None:
        rc = self._remote()
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        session = rc.sessions.get(session_id) if isinstance(session_id, str) else None
        try:
            if method == "session/cancel" and session is not None:
                await self._bounded(session.cancel())  # waits for the session to be back, at most the bound
                return
            client = rc.current
            if client is None or client.connection.closed:
                log.info("bridge_notification_dropped", method=method, reason="no connection to the remote")
                return
            await client.notify(method, params)
        except Exception as exc:
            log.info("bridge_notification_failed", method=method, error=f"{type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ initialize

    async def _initialize(self, params: Any) -> Any:
        if self._rc is not None:
            raise InvalidRequest(-32600, "Invalid request", {"reason": "initialize was already called"})
        p = _params(params)
        version = p.get("protocolVersion")
        if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version <= 65535:
            raise InvalidParams(-32602, "Invalid params", {"reason": "protocolVersion must be an integer 0-65535"})
        v2 = version >= 2
        caps = p.get("capabilities" if v2 else "clientCapabilities")
        info = p.get("info" if v2 else "clientInfo")
        client_info = None
        if isinstance(info, dict) and isinstance(info.get("name"), str):
            client_info = {k: str(v) for k, v in info.items() if k in ("name", "version", "title") and v is not None}
            client_info.setdefault("version", "unknown")
        assert self._editor is not None
        options = self.options
        store: SessionStore = SQLiteSessionStore(options.store) if options.store else MemorySessionStore()
        protocol: Literal[1, "auto"] = 1 if version <= 1 else "auto"
        rc = ReconnectingClient(
            self._transport_factory(),
            handlers=EditorHandlers(self._editor, caps if isinstance(caps, dict) else {}),
            store=_HookedStore(store, self._on_saved),
            strategy=BridgeStrategy(),
            backoff=Backoff(base=0.25, cap=options.max_backoff),
            close_timeout=2.0,
            protocol_version=protocol,
            headers=list(options.headers) or None,
            open_timeout=min(10.0, options.connect_timeout),
            max_frame_bytes=options.max_frame_bytes,
            request_timeout=None,
            initialize_timeout=options.connect_timeout,
            ping_interval=options.ping_interval,
            ping_timeout=options.ping_timeout,
            session_wait_timeout=options.outage_timeout,
            wait_for_ready=True,
            on_auth_required=self._reauthenticate,
            client_info=client_info,
        )
        self._rc = rc
        try:
            await rc.start()
        except Exception as exc:  # e.g. a --store file that cannot be opened
            message = f"cannot start: {type(exc).__name__}: {exc}"
            log.error("bridge_start_failed", error=message)
            self._give_up(message)
            raise InternalError(-32603, message, {META_KEY: {"reason": "start_failed"}}) from None
        for session in rc.sessions.values():  # kept in the store by an earlier bridge: tracked, not shown
            self._pipes.adopt(session, opened=False)
        self._spawn(self._watch(rc), "acp-bridge-events")
        remote = describe_url(options.url)
        try:
            await rc.wait_ready(timeout=options.connect_timeout)
        except (TimeoutError, ReconnectFailed, ClientClosed) as exc:
            why = (
                f"no connection within {options.connect_timeout:g} s"
                if isinstance(exc, TimeoutError)
                else str(exc.__cause__ or exc)
            )
            message = f"cannot reach the remote agent at {remote}: {why}"
            log.error("bridge_remote_unreachable", remote=remote, error=why)
            self._give_up(message)
            raise InternalError(-32603, message, {META_KEY: {"reason": "unreachable"}}) from None
        client = rc.current
        assert client is not None
        return self._describe_remote(client)

    def _describe_remote(self, client: ACPClient) -> dict[str, Any]:
        """What the remote advertised, honestly adjusted: the negotiated version, no terminal-auth methods
        (the editor would run them against the bridge, not the agent), and a ``_meta`` marker."""
        result = copy.deepcopy(client.initialize_result)
        result["protocolVersion"] = client.protocol_version
        methods = result.get("authMethods")
        if isinstance(methods, list):
            result["authMethods"] = [m for m in methods if not (isinstance(m, dict) and m.get("type") == "terminal")]
        meta = result.get("_meta")
        meta = dict(meta) if isinstance(meta, dict) else {}
        meta[META_KEY] = {"version": __version__, "reconnects": True}
        result["_meta"] = meta
        return result

    # ------------------------------------------------------------------ sessions

    async def _new(self, method: str, params: Any) -> Any:
        p = _params(params)
        cwd, servers, directories = _str(p, "cwd"), _servers(p), _directories(p)
        rc = self._remote()
        session = await rc.new_session(cwd, mcp_servers=servers, additional_directories=directories, timeout=None)
        pipe = self._pipes.adopt(session, opened=True)
        result = self._tap.take("session/new", session.id, {"sessionId": session.id})
        await pipe.drain()
        return result

    async def _attach(self, method: str, params: Any) -> Any:
        p = _params(params)
        session_id, cwd, servers, directories = _str(p, "sessionId"), _str(p, "cwd"), _servers(p), _directories(p)
        replay = True
        if method == "session/resume":
            replay_from = p.get("replayFrom")
            if replay_from is not None and not (isinstance(replay_from, dict) and replay_from.get("type") == "start"):
                raise InvalidParams(-32602, "Invalid params", {"reason": "the bridge only replays from the start"})
            replay = replay_from is not None
        rc = self._remote()

        async def call() -> Any:
            if method == "session/load":
                return await rc.load_session(
                    session_id, cwd, mcp_servers=servers, additional_directories=directories, timeout=None
                )
            return await rc.resume_session(
                session_id, cwd, mcp_servers=servers, additional_directories=directories, replay=replay, timeout=None
            )

        known = rc.sessions.get(session_id)
        pipe = self._pipes.get(session_id)
        if known is not None and pipe is not None and pipe.session is known:
            await self._bounded(rc.wait_ready())  # never race the automatic recovery of the same session
            pipe.begin_editor_replay(replay=replay)
            try:
                await call()
                await pipe.drain()
            finally:
                pipe.end_editor_replay()
        else:
            self._tap.capture(session_id)  # the handle does not exist yet: catch the replay on the wire
            try:
                session = await call()
            finally:
                captured = self._tap.release(session_id)
            pipe = self._pipes.get(session_id)
            if pipe is None or pipe.session is not session:
                pipe = self._pipes.adopt(session, opened=True, preload=captured)
            if not replay:
                pipe.view = EditorView(known=False)
            await pipe.drain()
        return self._tap.take(method, session_id, {})

    def _open_session(self, rc: ReconnectingClient, session_id: str) -> SessionPipe:
        session = rc.sessions.get(session_id)
        if session is None:
            reason = self._pipes.lost_reason(session_id)
            if reason is not None:
                raise SessionLost(session_id, reason)
            raise SessionNotFound(
                -32002,
                f"session {session_id} is not open in this bridge: session/load or session/resume it first",
                {"sessionId": session_id},
            )
        return self._pipes.adopt(session, opened=True)

    async def _prompt(self, method: str, params: Any) -> Any:
        p = _params(params)
        session_id = _str(p, "sessionId")
        prompt = p.get("prompt")
        if not isinstance(prompt, list):
            raise InvalidParams(-32602, "Invalid params", {"reason": "prompt must be an array of content blocks"})
        rc = self._remote()
        pipe = self._open_session(rc, session_id)
        if rc.protocol_version < 2:
            await pipe.drain()
            pipe.note_prompt(prompt)
            result = await pipe.session.prompt(prompt, timeout=None)
            await pipe.drain()
            return result.raw
        await self._bounded(rc.recover(session_id))
        answer = await rc.request(method, p, timeout=None)
        await pipe.drain()
        return answer

    async def _close(self, method: str, params: Any) -> Any:
        p = _params(params)
        session_id = _str(p, "sessionId")
        rc = self._remote()
        if session_id in rc.sessions:
            if method == "session/close":
                await rc.close_session(session_id, timeout=None)
            else:
                await rc.delete_session(session_id, timeout=None)
            answer: Any = {}
        else:
            answer = await rc.request(method, p, timeout=None)
        await self._pipes.remove(session_id)
        return answer

    async def _login(self, method: str, params: Any) -> Any:
        p = _params(params)
        answer = await self._remote().request(method, p, timeout=None)
        method_id = p.get("methodId")
        self._auth_method = method_id if isinstance(method_id, str) else None
        return answer

    async def _logout(self, method: str, params: Any) -> Any:
        answer = await self._remote().request(method, params, timeout=None)
        self._auth_method = None
        return answer

    async def _forward(self, method: str, params: Any) -> Any:
        rc = self._remote()
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        pipe: SessionPipe | None = None
        if isinstance(session_id, str):
            if session_id in rc.sessions:
                pipe = self._pipes.adopt(rc.sessions[session_id], opened=True)
                await self._bounded(rc.recover(session_id))
            elif (reason := self._pipes.lost_reason(session_id)) is not None:
                raise SessionLost(session_id, reason)
        answer = await rc.request(method, params, timeout=None)
        if pipe is not None:
            await pipe.drain()
        return answer

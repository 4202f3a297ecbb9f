"""The bridge itself: an ACP agent on stdio that forwards to a remote agent through a ReconnectingClient.

This module holds its lifecycle (``run``, stop, shutdown, giving up), the editor side (requests dispatched to
the routes of :mod:`acp_client.bridge._routes`, which documents what each method does; notifications) and
``initialize`` (reading the editor's hello, connecting and describing the remote). It holds three objects
that own their state: the :class:`~acp_client.bridge._remote.RemoteSide` (the client, outage waits,
re-authentication), the :class:`~acp_client.bridge._routes.SessionRoutes` (what each editor request does)
and the :class:`~acp_client.bridge._forward.SessionPipes` (each session's stream to the editor); the options
are in :mod:`acp_client.bridge._options`.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable
from typing import Any

from acp_client._logging import get_logger
from acp_client._version import __version__
from acp_client.bridge._editor import EditorLink
from acp_client.bridge._forward import SessionPipes
from acp_client.bridge._handlers import EditorHandlers
from acp_client.bridge._options import BridgeOptions, describe_url
from acp_client.bridge._outage import META_KEY, to_rpc_error
from acp_client.bridge._remote import RemoteSide
from acp_client.bridge._routes import SessionRoutes, _params
from acp_client.bridge._tap import RawTap
from acp_client.client import ACPClient
from acp_client.exceptions import (
    ClientClosed,
    ConnectionLost,
    InternalError,
    InvalidParams,
    InvalidRequest,
    ReconnectFailed,
    UnsupportedProtocolVersion,
)
from acp_client.sessions import MemorySessionStore, SessionStore, SQLiteSessionStore

__all__ = ["Bridge"]

log = get_logger("acp_client.bridge")


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
        tap = RawTap()
        self._remote = RemoteSide(options, tap)
        self._pipes = SessionPipes(self._notify_editor, self._remote.protocol_version)
        self._routes = SessionRoutes(self._remote, self._pipes, tap)
        self._stop: asyncio.Event | None = None
        self._aux: set[asyncio.Task[Any]] = set()

    def __repr__(self) -> str:
        return f"<Bridge {describe_url(self.options.url)} remote={self._remote!r}>"

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
            await self._remote.aclose()  # the sessions stay in the store
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

    # ------------------------------------------------------------------ the editor side

    async def _notify_editor(self, method: str, params: dict[str, Any]) -> None:
        assert self._editor is not None
        await self._editor.notify(method, params)

    async def _on_request(self, method: str, params: Any) -> Any:
        if method == "initialize":
            return await self._initialize(params)
        route = self._routes.route(method)
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
        if not self._remote.started:
            log.info("bridge_notification_before_initialize", method=method)
            return
        self._spawn(self._forward_notification(method, params), f"acp-bridge-notify-{method}")

    async def _forward_notification(self, method: str, params: Any) -> None:
        rc = self._remote.client()
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        session = rc.sessions.get(session_id) if isinstance(session_id, str) else None
        try:
            if method == "session/cancel" and session is not None:
                await self._remote.bounded(session.cancel())  # waits for the session to be back, at most the bound
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
        if self._remote.started:
            raise InvalidRequest(-32600, "Invalid request", {"reason": "initialize was already called"})
        version, caps, client_info = _editor_hello(_params(params))
        assert self._editor is not None
        options = self.options
        store: SessionStore = SQLiteSessionStore(options.store) if options.store else MemorySessionStore()
        rc = self._remote.make(
            handlers=EditorHandlers(self._editor, caps),
            store=store,
            adopter=self._routes,
            protocol=1 if version <= 1 else "auto",
            client_info=client_info,
        )
        try:
            await rc.start()
        except Exception as exc:  # e.g. a --store file that cannot be opened
            message = f"cannot start: {type(exc).__name__}: {exc}"
            log.error("bridge_start_failed", error=message)
            self._give_up(message)
            raise InternalError(-32603, message, {META_KEY: {"reason": "start_failed"}}) from None
        for session in rc.sessions.values():  # kept in the store by an earlier bridge: tracked, not shown
            self._pipes.adopt(session, opened=False)
        self._spawn(self._remote.watch(rc), "acp-bridge-events")
        remote = describe_url(options.url)
        try:
            await rc.wait_ready(timeout=options.connect_timeout, first=True)
        except ReconnectFailed as exc:
            refusal = _version_refusal(version, remote, exc)
            if refusal is None:
                raise self._unreachable(remote, str(exc.__cause__ or exc)) from None
            log.error("bridge_protocol_mismatch", remote=remote, editor_version=version)
            self._give_up(refusal)
            raise InternalError(-32603, refusal, {META_KEY: {"reason": "protocol_mismatch"}}) from None
        except (TimeoutError, ClientClosed) as exc:
            # a timeout's text names the last attempt's cause ("could not connect to ...: ..."), which the
            # editor shows to its user
            why = str(exc) if isinstance(exc, TimeoutError) else str(exc.__cause__ or exc)
            raise self._unreachable(remote, why) from None
        client = rc.current
        assert client is not None
        return self._describe_remote(client)

    def _unreachable(self, remote: str, why: str) -> InternalError:
        """Give up (exit 1 after the answer) and return the editor's error: the remote cannot be reached."""
        message = f"cannot reach the remote agent at {remote}: {why}"
        log.error("bridge_remote_unreachable", remote=remote, error=why)
        self._give_up(message)
        return InternalError(-32603, message, {META_KEY: {"reason": "unreachable"}})

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


def _version_refusal(editor_version: int, remote: str, failure: ReconnectFailed) -> str | None:
    """The refusal the editor gets when it speaks v1 and the remote answers only v2, or ``None``.

    The bridge does not translate between the versions (docs/design.md, the bridge, says why): a v2
    session's turn, state and history have no faithful v1 form, and a half translation would fail in the
    middle of a session, where an editor cannot explain it. So it refuses at ``initialize``, saying so."""
    cause = failure.__cause__ if isinstance(failure.__cause__, UnsupportedProtocolVersion) else failure.cause
    if editor_version > 1 or not isinstance(cause, UnsupportedProtocolVersion) or cause.answered != 2:
        return None
    return (
        f"the remote agent at {remote} speaks only ACP protocol version 2 (it answered 2 to this editor's "
        "version 1), and acp-client bridge does not translate between versions: use an editor that speaks "
        "version 2, or a remote agent that also answers version 1"
    )


def _editor_hello(params: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str] | None]:
    """The protocol version, capabilities and client info of the editor's ``initialize`` (v1 or v2 names)."""
    version = params.get("protocolVersion")
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version <= 65535:
        raise InvalidParams(-32602, "Invalid params", {"reason": "protocolVersion must be an integer 0-65535"})
    v2 = version >= 2
    caps = params.get("capabilities" if v2 else "clientCapabilities")
    info = params.get("info" if v2 else "clientInfo")
    client_info = None
    if isinstance(info, dict) and isinstance(info.get("name"), str):
        client_info = {k: str(v) for k, v in info.items() if k in ("name", "version", "title") and v is not None}
        client_info.setdefault("version", "unknown")
    return version, caps if isinstance(caps, dict) else {}, client_info

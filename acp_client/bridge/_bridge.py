"""The bridge itself: an ACP agent on stdio that forwards to a remote agent through a ReconnectingClient.

This module holds its lifecycle (``run``, stop, shutdown, giving up), the editor side (requests dispatched to
the routes of :mod:`acp_client.bridge._routes`, which documents what each method does; notifications) and
``initialize`` (connecting and describing the remote). The remote side and outage waits are in
:mod:`acp_client.bridge._remote`, the options in :mod:`acp_client.bridge._options`.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from acp_client._logging import get_logger
from acp_client._version import __version__
from acp_client.bridge._editor import EditorLink
from acp_client.bridge._forward import SessionPipes
from acp_client.bridge._handlers import EditorHandlers
from acp_client.bridge._options import BridgeOptions, BridgeStrategy, describe_url
from acp_client.bridge._outage import META_KEY, to_rpc_error
from acp_client.bridge._remote import _HookedStore
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
)
from acp_client.reconnect import Backoff, ReconnectingClient, Timeouts
from acp_client.sessions import MemorySessionStore, SessionStore, SQLiteSessionStore
from acp_client.transports import TransportOptions

__all__ = ["Bridge"]

log = get_logger("acp_client.bridge")


class Bridge(SessionRoutes):
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
        self._routes: dict[str, Callable[[str, Any], Awaitable[Any]]] = self._route_table()

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
            protocol_version=protocol,
            timeouts=Timeouts(request=None, initialize=options.connect_timeout, session_wait=options.outage_timeout),
            transport_options=TransportOptions(
                headers=list(options.headers) or None,
                open_timeout=min(10.0, options.connect_timeout),
                close_timeout=2.0,
                ping_interval=options.ping_interval,
                ping_timeout=options.ping_timeout,
                max_frame_bytes=options.max_frame_bytes,
            ),
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

"""The editor's requests, by method: what the bridge does with each one but ``initialize``.

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

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from acp_client._logging import get_logger
from acp_client.bridge._forward import SessionPipe, SessionPipes
from acp_client.bridge._tap import RawTap
from acp_client.exceptions import InvalidParams, SessionLost, SessionNotFound
from acp_client.reconnect import ReconnectingClient
from acp_client.sessions import Session, SessionRecord

log = get_logger("acp_client.bridge")

T = TypeVar("T")

#: One route: ``(method, params) -> result``.
Route = Callable[[str, Any], Awaitable[Any]]


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


class Remote(Protocol):
    """What the routes need of the bridge's remote side (:class:`~acp_client.bridge._remote.RemoteSide`)."""

    def client(self) -> ReconnectingClient: ...

    def known_session(self, session_id: str) -> Session | None: ...

    def remember_auth(self, method_id: str | None) -> None: ...

    async def bounded(self, call: Awaitable[T]) -> T: ...


class SessionRoutes:
    """The routes of the table above. Owns the table; works on the remote through :class:`Remote`, on the
    bridge's session pipes and raw tap through their own methods."""

    def __init__(self, remote: Remote, pipes: SessionPipes, tap: RawTap) -> None:
        self._remote = remote
        self._pipes = pipes
        self._tap = tap
        self._routes: dict[str, Route] = {
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

    def route(self, method: str) -> Route:
        """The route of ``method`` (any but ``initialize``; unlisted ones are forwarded as they are)."""
        return self._routes.get(method, self._forward)

    def adopt_saved(self, record: SessionRecord) -> None:
        """The client saved ``record``: a session the editor just created or attached gets its pipe now,
        before anything more is published (see :class:`~acp_client.bridge._remote._HookedStore`)."""
        session = self._remote.known_session(record.session_id)
        pipe = self._pipes.get(record.session_id)
        if session is not None and (pipe is None or pipe.session is not session):
            self._pipes.adopt(session, opened=True, preload=self._tap.release(record.session_id))
            log.debug("bridge_session_adopted", session_id=record.session_id, via="store_save")

    async def _new(self, method: str, params: Any) -> Any:
        p = _params(params)
        cwd, servers, directories = _str(p, "cwd"), _servers(p), _directories(p)
        rc = self._remote.client()
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
        rc = self._remote.client()

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
            await self._remote.bounded(rc.wait_ready())  # never race the automatic recovery of the same session
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
                pipe.history_unseen()
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
        rc = self._remote.client()
        pipe = self._open_session(rc, session_id)
        if rc.protocol_version < 2:
            await pipe.drain()
            pipe.note_prompt(prompt)
            result = await pipe.session.prompt(prompt, timeout=None)
            await pipe.drain()
            return result.raw
        await self._remote.bounded(rc.recover(session_id))
        answer = await rc.request(method, p, timeout=None)
        await pipe.drain()
        return answer

    async def _close(self, method: str, params: Any) -> Any:
        p = _params(params)
        session_id = _str(p, "sessionId")
        rc = self._remote.client()
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
        answer = await self._remote.client().request(method, p, timeout=None)
        method_id = p.get("methodId")
        self._remote.remember_auth(method_id if isinstance(method_id, str) else None)
        return answer

    async def _logout(self, method: str, params: Any) -> Any:
        answer = await self._remote.client().request(method, params, timeout=None)
        self._remote.remember_auth(None)
        return answer

    async def _forward(self, method: str, params: Any) -> Any:
        rc = self._remote.client()
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        pipe: SessionPipe | None = None
        if isinstance(session_id, str):
            if session_id in rc.sessions:
                pipe = self._pipes.adopt(rc.sessions[session_id], opened=True)
                await self._remote.bounded(rc.recover(session_id))
            elif (reason := self._pipes.lost_reason(session_id)) is not None:
                raise SessionLost(session_id, reason)
        answer = await rc.request(method, params, timeout=None)
        if pipe is not None:
            await pipe.drain()
        return answer

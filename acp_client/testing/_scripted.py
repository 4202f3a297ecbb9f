""":class:`ScriptedAgent`: a tiny ACP agent on a real loopback WebSocket whose every answer a test can script.

Where :class:`~acp_client.testing.ReferenceAgent` behaves like a real agent with fault switches, a scripted
agent answers each method with a handler the test chooses: it may hold its answer until the test releases
it, stream updates slowly, answer a JSON-RPC error (raise :class:`ScriptedError`), or wait for the client's
``$/cancel_request``. Every frame it receives is logged, so "no further request reached the agent" is read
from the agent's own log.

::

    async with ScriptedAgent(2, status=True) as agent:
        async def status(call: ScriptedCall) -> dict[str, Any]:
            await release.wait()                  # hold the answer until the test says so
            return {"status": "active"}

        agent.handlers["session/status"] = status
        ...                                       # connect a client to agent.url
        await agent.wait_for(lambda: agent.requests("session/status"))
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from acp_client.testing._waiting import Waiters

__all__ = ["ScriptedAgent", "ScriptedCall", "ScriptedError", "ScriptedHandler", "ScriptedLink"]


class ScriptedError(Exception):
    """Raise from a handler to answer the request with a JSON-RPC error."""

    def __init__(self, code: int, message: str = "scripted error") -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message


@dataclass
class ScriptedCall:
    """One request received by a :class:`ScriptedAgent`, as its handler sees it; ``cancelled`` is set when
    the client sends ``$/cancel_request`` for it."""

    agent: ScriptedAgent
    conn: ScriptedLink
    id: int | str
    method: str
    params: dict[str, Any]
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def session_id(self) -> str:
        """The ``sessionId`` parameter (``"None"`` when there is none)."""
        return str(self.params.get("sessionId"))

    async def update(self, update: dict[str, Any]) -> None:
        """Send one ``session/update`` for this call's session on its connection."""
        await self.conn.notify("session/update", {"sessionId": self.session_id, "update": update})


#: A handler for one method: receives the call, returns the JSON-RPC result or raises :class:`ScriptedError`.
ScriptedHandler = Callable[[ScriptedCall], Awaitable[object]]


class ScriptedLink:
    """One accepted WebSocket connection of a :class:`ScriptedAgent`, numbered from 1 in order of arrival."""

    def __init__(self, agent: ScriptedAgent, ws: ServerConnection, number: int) -> None:
        self.agent = agent
        self.ws = ws
        self.number = number
        self.calls: dict[int | str, ScriptedCall] = {}
        self._ids = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    async def send(self, message: dict[str, Any]) -> None:
        """Write one JSON-RPC message (nothing happens on a closed connection)."""
        with contextlib.suppress(ConnectionClosed):
            await self.ws.send(json.dumps(message))

    async def notify(self, method: str, params: object) -> None:
        """Send a notification to the client."""
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params: object = None, *, raw: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a request to the client and return its whole response object (``raw``: send this message
        instead, with the request id filled in)."""
        id_ = f"agent-{next(self._ids)}"
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[id_] = fut
        base: dict[str, Any] = raw if raw is not None else {"jsonrpc": "2.0", "method": method}
        message: dict[str, Any] = {**base, "id": id_}
        if params is not None:
            message["params"] = params
        await self.send(message)
        try:
            return await fut
        finally:
            self._waiting.pop(id_, None)

    async def run(self) -> None:
        """Serve the connection until it closes (the agent runs this for each connection it accepts)."""
        try:
            async for text in self.ws:
                message = json.loads(text)
                method = message.get("method")
                if method is None:  # a response to one of our requests
                    fut = self._waiting.get(message.get("id"))
                    if fut is not None and not fut.done():
                        fut.set_result(message)
                    continue
                params = message.get("params") or {}
                self.agent.log.append((self.number, method, params))
                self.agent.changed()
                if "id" not in message:
                    if method == "$/cancel_request":
                        call = self.calls.get(params.get("requestId", ""))
                        if call is not None:
                            call.cancelled.set()
                    continue
                call = ScriptedCall(self.agent, self, message["id"], method, params)
                self.calls[call.id] = call
                task = asyncio.create_task(self._serve(call))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
        except ConnectionClosed:
            pass
        finally:
            for task in list(self.tasks):
                task.cancel()
            if self.tasks:
                await asyncio.wait(list(self.tasks))
            self.agent.changed()

    async def _serve(self, call: ScriptedCall) -> None:
        handler = self.agent.handlers.get(call.method) or self.agent.defaults.get(call.method)
        try:
            if handler is None:
                raise ScriptedError(-32601, "Method not found")
            result = await handler(call)
            answer: dict[str, Any] = {"jsonrpc": "2.0", "id": call.id, "result": result}
        except ScriptedError as exc:
            answer = {"jsonrpc": "2.0", "id": call.id, "error": {"code": exc.code, "message": exc.message}}
        self.agent.answered.append((self.number, call.method, call.params, answer))
        await self.send(answer)
        self.agent.changed()


class ScriptedAgent:
    """A tiny ACP agent (v1 or v2) on a real loopback WebSocket server (``127.0.0.1``, a free port).

    ``status``/``list_``/``load``/``resume`` choose what ``initialize`` advertises (v2 always offers resume
    and list). Out of the box it creates sessions, attaches known ones (``session/resume``, ``session/load``),
    answers ``session/status`` with ``active``, lists its sessions and ends every prompt with ``end_turn``;
    an unknown session answers ``-32002``. Put a coroutine function in ``handlers[method]`` to answer that
    method yourself: it receives the :class:`ScriptedCall` and returns the JSON-RPC result, or raises
    :class:`ScriptedError`. Observe it through ``log`` (every frame received: connection number, method,
    params), ``answered``, :meth:`requests`, :meth:`for_session` and :meth:`wait_for`.
    """

    def __init__(
        self,
        version: int = 2,
        *,
        status: bool = False,
        list_: bool = True,
        load: bool = True,
        resume: bool = True,
        timeout_scale: float = 1.0,
    ) -> None:
        self.version = version
        self.timeout_scale = timeout_scale
        self.status, self.list, self.load, self.resume = status, list_, load, resume
        self.sessions: dict[str, str] = {}
        self.log: list[tuple[int, str, dict[str, Any]]] = []
        self.answered: list[tuple[int, str, dict[str, Any], dict[str, Any]]] = []
        self.handlers: dict[str, ScriptedHandler] = {}
        self.links: list[ScriptedLink] = []
        self._server: Server | None = None
        self._waiters = Waiters()
        self._ids = itertools.count(1)
        self.defaults: dict[str, ScriptedHandler] = {
            "initialize": self._initialize,
            "session/new": self._new,
            "session/resume": self._attach,
            "session/load": self._attach,
            "session/status": self._status,
            "session/list": self._list,
            "session/prompt": self._prompt,
        }

    async def __aenter__(self) -> ScriptedAgent:
        self._server = await serve(self._accept, "127.0.0.1", 0, max_size=None, ping_interval=None, close_timeout=1)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close(close_connections=True)
        await self._server.wait_closed()
        self._waiters.fail_all(RuntimeError("the scripted agent has stopped"))

    @property
    def url(self) -> str:
        """``ws://127.0.0.1:PORT/acp`` (inside ``async with`` only)."""
        assert self._server is not None
        return f"ws://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/acp"

    async def _accept(self, ws: ServerConnection) -> None:
        link = ScriptedLink(self, ws, len(self.links) + 1)
        self.links.append(link)
        self.changed()
        await link.run()

    # ------------------------------------------------------------------ observation

    def changed(self) -> None:
        """Re-check the predicates of every :meth:`wait_for` (called on each frame and connection change)."""
        self._waiters.changed()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Return once ``predicate()`` holds; ``TimeoutError`` after ``timeout`` seconds (times ``timeout_scale``)."""
        await self._waiters.wait_until(predicate, timeout * self.timeout_scale, "the scripted agent's state")

    def requests(self, method: str, session_id: str | None = None) -> list[tuple[int, dict[str, Any]]]:
        """``(connection number, params)`` of every ``method`` received (for ``session_id`` when given)."""
        return [
            (n, p) for n, m, p in self.log if m == method and (session_id is None or p.get("sessionId") == session_id)
        ]

    def for_session(self, session_id: str) -> list[str]:
        """Every method received that names ``session_id``."""
        return [m for _n, m, p in self.log if p.get("sessionId") == session_id]

    async def drop(self, code: int = 1011) -> None:
        """Close every open connection with ``code``."""
        for link in self.links:
            with contextlib.suppress(ConnectionClosed):
                await link.ws.close(code, "scripted drop")

    @property
    def live(self) -> ScriptedLink:
        """The connection accepted last."""
        return self.links[-1]

    # ------------------------------------------------------------------ default handlers

    async def _initialize(self, call: ScriptedCall) -> Any:
        if self.version >= 2:
            session: dict[str, Any] = {"prompt": {}, "mcp": {"stdio": {}, "http": {}}}
            if self.status:
                session["status"] = {}
            return {
                "protocolVersion": 2,
                "capabilities": {"session": session},
                "info": {"name": "scripted", "version": "1"},
            }
        caps: dict[str, Any] = {}
        for name, on in (("status", self.status), ("list", self.list), ("resume", self.resume)):
            if on:
                caps[name] = {}
        return {
            "protocolVersion": 1,
            "agentCapabilities": {"loadSession": self.load, "sessionCapabilities": caps},
            "agentInfo": {"name": "scripted", "version": "1"},
            "authMethods": [],
        }

    async def _new(self, call: ScriptedCall) -> Any:
        session_id = f"s{next(self._ids)}"
        self.sessions[session_id] = str(call.params.get("cwd"))
        return {"sessionId": session_id}

    def known(self, call: ScriptedCall) -> None:
        """Raise ``-32002`` (resource not found) unless the call's session is one the agent knows."""
        if call.session_id not in self.sessions:
            raise ScriptedError(-32002, "Resource not found")

    async def _attach(self, call: ScriptedCall) -> Any:
        self.known(call)
        return {}

    async def _status(self, call: ScriptedCall) -> Any:
        self.known(call)
        return {"status": "active"}

    async def _list(self, call: ScriptedCall) -> Any:
        return {"sessions": [{"sessionId": s, "cwd": cwd} for s, cwd in self.sessions.items()]}

    async def _prompt(self, call: ScriptedCall) -> Any:
        if self.version >= 2:
            await call.update({"sessionUpdate": "state_update", "state": "running"})
            await call.update({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"})
            return {}
        return {"stopReason": "end_turn"}

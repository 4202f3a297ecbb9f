"""The Streamable HTTP side of ``_stream_agent.py``: the same minimal agent over HTTP/1.1 and h2c, on the port
and path of its WebSocket.

The socket side is the reference agent's (its first-bytes sniffer, its h11 and h2 servers: HTTP/1.1 keep-alive
with chunked event streams, h2c with prior knowledge); the ACP side is the least the binding asks for:

- ``POST initialize`` answers ``200`` with the JSON response and ``Acp-Connection-Id``;
- a ``GET`` with the connection id opens the connection's event stream, with ``Acp-Session-Id`` too that
  session's stream;
- every other POST answers ``202``; its response goes to the session stream when the POST named a session
  whose stream is open here, else to the connection stream (the TypeScript server's rule);
- ``stream N``: the prompt's response (v2), then the N updates as pre-encoded ``data:`` events, ``BATCH`` per
  write, then the ``state_update`` that ends a v2 turn (v1: the prompt's response after the updates);
- ``DELETE`` ends the link.

Events carry no ids and there are no keepalive comments. After each stream it reports ``sent n wall cpu`` on
stdout like the WebSocket side.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from acp_client.testing.agent._http_wire import _Gone, _Request, _Responder
from acp_client.testing.agent._sniff import _DualConnection

_JSON = [("content-type", "application/json")]


class _Out:
    """One event stream of a link: its writer once the GET came, and what was sent before it came."""

    def __init__(self) -> None:
        self.responder: _Responder | None = None
        self.pending: list[bytes] = []
        self.lock = asyncio.Lock()
        self.ended = asyncio.Event()

    async def write(self, data: bytes) -> None:
        if self.responder is None:
            self.pending.append(data)
            return
        async with self.lock:
            with contextlib.suppress(_Gone):
                await self.responder.data(data)


class _Link:
    def __init__(self, version: int) -> None:
        self.version = version
        self.streams: dict[str | None, _Out] = {None: _Out()}

    def out(self, session_id: str | None) -> _Out:
        """Where a response to a POST naming ``session_id`` goes."""
        if session_id is not None:
            stream = self.streams.get(session_id)
            if stream is not None and stream.responder is not None:
                return stream
        return self.streams[None]


def _event(frame: bytes) -> bytes:
    return b"data: " + frame + b"\n\n"


class HttpSide:
    """What the reference agent's HTTP servers call: ``handle`` one request (and ``spawn``, ``_conns``)."""

    serve_websocket = True
    h2_max_concurrent_streams: int | None = 100

    def __init__(
        self,
        frames: list[bytes],
        encode: Callable[[dict[str, Any]], bytes],
        initialize_result: Callable[[int], dict[str, Any]],
        prompt_count: Callable[[Any], int],
        session_id: str,
        status: dict[str, Any],
        batch: int,
    ) -> None:
        self._events = [_event(f) for f in frames]
        self._encode = encode
        self._initialize_result = initialize_result
        self._prompt_count = prompt_count
        self._session_id = session_id
        self._status = status
        self._batch = batch
        self._links: dict[str, _Link] = {}
        self._ids = itertools.count(1)
        self._conns: set[_DualConnection] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    def serve_options(self) -> dict[str, Any]:
        """Keyword arguments for ``websockets.serve`` that add HTTP on the same socket."""
        side = self

        class _Conn(_DualConnection):
            _endpoint = side  # type: ignore[assignment]

        return {"create_connection": _Conn, "open_timeout": None}

    def spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def handle(self, request: _Request, responder: _Responder, version: str) -> None:
        if request.method == "POST":
            await self._post(request, responder)
        elif request.method == "GET":
            await self._get(request, responder)
        elif request.method == "DELETE":
            link = self._links.pop(request.headers.get("acp-connection-id", ""), None)
            if link is not None:
                for out in link.streams.values():
                    out.ended.set()
            await self._empty(responder, 202 if link is not None else 404)
        else:
            await self._empty(responder, 405)

    @staticmethod
    async def _empty(responder: _Responder, status: int) -> None:
        await responder.start(status, [("content-length", "0")])
        await responder.end()

    async def _post(self, request: _Request, responder: _Responder) -> None:
        message = json.loads(request.body)
        method, id_, params = message.get("method"), message.get("id"), message.get("params")
        connection_id = request.headers.get("acp-connection-id")
        if connection_id is None:
            if method != "initialize":
                await self._empty(responder, 400)
                return
            offered = params.get("protocolVersion") if isinstance(params, dict) else None
            version = 1 if offered == 1 else 2
            connection_id = f"bench-{next(self._ids)}"
            self._links[connection_id] = _Link(version)
            body = self._encode({"jsonrpc": "2.0", "id": id_, "result": self._initialize_result(version)})
            headers = [*_JSON, ("content-length", str(len(body))), ("acp-connection-id", connection_id)]
            await responder.start(200, headers)
            await responder.data(body)
            await responder.end()
            return
        link = self._links.get(connection_id)
        if link is None:
            await self._empty(responder, 404)
            return
        await self._empty(responder, 202)
        if id_ is None or method is None:
            return  # a notification, or our client's answer to a request: nothing to do
        out = link.out(request.headers.get("acp-session-id"))
        if method == "session/new":
            await out.write(_event(self._reply(id_, {"sessionId": self._session_id})))
        elif method == "session/status":
            await out.write(_event(self._reply(id_, self._status)))
        elif method == "session/prompt":
            self.spawn(self._stream(link, out, id_, min(self._prompt_count(params), len(self._events))), "stream")
        else:
            error = {"code": -32601, "message": "Method not found"}
            await out.write(_event(self._encode({"jsonrpc": "2.0", "id": id_, "error": error})))

    def _reply(self, id_: Any, result: Any) -> bytes:
        return self._encode({"jsonrpc": "2.0", "id": id_, "result": result})

    async def _stream(self, link: _Link, out: _Out, id_: Any, n: int) -> None:
        if link.version >= 2:
            await out.write(_event(self._reply(id_, {})))
        c0, t0 = time.process_time(), time.perf_counter()
        events = self._events
        for start in range(0, n, self._batch):
            await out.write(b"".join(events[start : min(n, start + self._batch)]))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if link.version >= 2:
            idle = {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
            params = {"sessionId": self._session_id, "update": idle}
            await out.write(_event(self._encode({"jsonrpc": "2.0", "method": "session/update", "params": params})))
        else:
            await out.write(_event(self._reply(id_, {"stopReason": "end_turn"})))
        sys.stdout.write(f"sent {n} {wall:.6f} {cpu:.6f}\n")
        sys.stdout.flush()

    async def _get(self, request: _Request, responder: _Responder) -> None:
        link = self._links.get(request.headers.get("acp-connection-id", ""))
        if link is None:
            await self._empty(responder, 404)
            return
        session_id = request.headers.get("acp-session-id")
        out = link.streams.setdefault(session_id, _Out())
        await responder.start(200, [("content-type", "text/event-stream"), ("cache-control", "no-cache")])
        pending, out.pending = out.pending, []
        out.responder = responder
        if pending:
            await out.write(b"".join(pending))
        gone = asyncio.ensure_future(out.ended.wait())
        try:
            await asyncio.wait([gone, responder.gone], return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        with contextlib.suppress(_Gone):
            await responder.end()

"""The reference agent's Streamable HTTP endpoint, served on the same port and path as its WebSocket.

Why h11 + h2 (the sans-I/O HTTP/1.1 and HTTP/2 parsers under httpx and hypercorn) and not an ASGI server:
the agent's fault controls act on sockets (pause reading, TCP reset) and its WebSocket side is
``websockets``' server, which owns the listening socket. A ``websockets`` connection class
(``serve(create_connection=...)``) looks at the first bytes of every accepted connection: an HTTP/2
preface or an HTTP/1.1 request without ``Upgrade: websocket`` is served here, on the same socket object the
fault controls reach; a WebSocket upgrade goes on to ``websockets`` untouched. Both HTTP/1.1 (keep-alive,
chunked event streams) and HTTP/2 cleartext with prior knowledge (h2c) are served.

The ACP side follows the RFD: ``POST initialize`` (no connection id) makes a link and answers ``200`` with
the JSON response and ``Acp-Connection-Id``; other POSTs answer ``202`` and their responses travel on the
connection-scoped or session-scoped SSE stream (GET); ``DELETE`` ends the link. Each link is a
:class:`~acp_client.testing.agent._channel.FrameChannel`, so the agent's connection handler is the same as for
a WebSocket; a link whose connection stream ends (the client went away) closes like a dropped WebSocket,
unless events carry ids (``event_ids``): then the link waits ``resume_grace`` seconds for the client to
reopen the stream with ``Last-Event-ID``. With ``ReferenceAgent(resumable=Resumable(...))`` (PR 2208) every event
carries its cursor as SSE ``id:`` and ``_meta["acp/cursor"]``, the replay buffer and the wait follow the
retention, a resume gets ``409`` when refused or its cursor is unknown or evicted, and a v2 session stream gets
its ``state_update`` after the replay (see :mod:`._http_out`).

Controls (attributes of :class:`HttpEndpoint`, reachable as ``agent.http``): ``keepalive_interval``,
``event_ids``, ``resume_grace``, ``refuse_session_streams`` (an HTTP status for every session GET, to
emulate a server that cannot attach a session to a new link), ``session_stream_delay`` (seconds every
session-stream event waits, to reorder it behind the connection stream), ``h2_max_concurrent_streams``
(``None``: the HTTP/2 SETTINGS never name a maximum, as Node's server does); with ``resumable``, hostile ones:
``cursor_ids`` (``False``: cursors only in ``_meta``), ``cursor_prefix`` (oversize cursors), ``replay_overlap``
(a resume repeats events the client had), ``end_resumed_streams`` (a resume accepted, then ended at once).

This module is the ACP side; the socket side lives beside it: :mod:`._agent_sniff` (the first-bytes sniffer),
:mod:`._agent_http1` (h11), :mod:`._agent_h2` (h2) and :mod:`._agent_http_wire` (what they exchange).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from acp_client._logging import get_logger
from acp_client.testing.agent._channel import ChannelClosed
from acp_client.testing.agent._http_out import Event, ReplayRules, SseOut
from acp_client.testing.agent._http_wire import _Gone, _Request, _Responder
from acp_client.testing.agent._sniff import _DualConnection

if TYPE_CHECKING:
    from acp_client.testing.reference_agent import ReferenceAgent

__all__ = ["HttpEndpoint", "HttpLink"]

_log = get_logger(__name__)

_CONNECTION_SCOPED = frozenset({"session/new", "session/load", "session/resume", "session/fork", "session/list"})


class HttpLink:
    """One Streamable HTTP connection (``Acp-Connection-Id``) as a FrameChannel for the agent."""

    def __init__(self, endpoint: HttpEndpoint, connection_id: str) -> None:
        """A link with no stream yet."""
        self.endpoint = endpoint
        self.id = connection_id
        self.inbound: asyncio.Queue[str | None] = asyncio.Queue()
        self.streams: dict[str | None, SseOut] = {None: SseOut(endpoint.replay_rules())}
        self.routes: dict[int | str, tuple[str, str | None]] = {}
        self.init_waiter: tuple[int | str, asyncio.Future[str]] | None = None
        self.closed = False
        self.paused = False
        self._unpaused = asyncio.Event()
        self._unpaused.set()
        #: the protocol version its ``initialize`` answer named (the v2 ``state_update`` after a resume)
        self.protocol_version: int | None = None
        self._grace: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ FrameChannel

    async def send(self, frame: str) -> None:
        """Route one agent frame to the connection or session stream (or the initialize POST)."""
        if self.closed:
            raise ChannelClosed("link closed")
        key = self._route(frame)
        if key == "__init__":
            return
        out = self.stream(key)
        if key is not None and self.endpoint.session_stream_delay:
            await asyncio.sleep(self.endpoint.session_stream_delay)
        out.add(frame)

    def stream(self, key: str | None) -> SseOut:
        """The stream of ``key`` (``None``: the connection stream), made on first use."""
        out = self.streams.get(key)
        if out is None:
            out = self.streams[key] = SseOut(self.endpoint.replay_rules())
        return out

    def _route(self, frame: str) -> str | None:
        try:
            message = json.loads(frame)
        except ValueError:
            return None
        if not isinstance(message, dict):
            return None
        request_id = message.get("id")
        if "method" not in message and request_id is not None:
            waiter = self.init_waiter
            if waiter is not None and waiter[0] == request_id:
                self.init_waiter = None
                result = message.get("result")
                version = result.get("protocolVersion") if isinstance(result, dict) else None
                self.protocol_version = version if isinstance(version, int) else None
                if not waiter[1].done():
                    waiter[1].set_result(frame)
                return "__init__"
            method, session_id = self.routes.pop(request_id, ("", None))
            if session_id is not None and method not in _CONNECTION_SCOPED:
                return session_id
            return None
        params = message.get("params")
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        return session_id if isinstance(session_id, str) else None

    async def recv(self) -> str:
        """The next frame POSTed by the client."""
        item = await self.inbound.get()
        if item is None:
            self.inbound.put_nowait(None)
            raise ChannelClosed("link closed")
        return item

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """End the link: its event streams end, later requests naming it get 404."""
        self._shutdown()

    def abort(self) -> None:
        """End the link and reset the TCP connections that carry its streams."""
        responders = [out.responder for out in self.streams.values() if out.responder is not None]
        self._shutdown()
        for responder in responders:
            responder.abort()

    def pause_reading(self) -> None:
        """Stall: no event (not even a keepalive) is written and POSTs are not answered."""
        self.paused = True
        self._unpaused.clear()

    def resume_reading(self) -> None:
        """Undo :meth:`pause_reading`."""
        self.paused = False
        self._unpaused.set()

    async def wait_unpaused(self) -> None:
        """Return once the link is not stalled."""
        await self._unpaused.wait()

    def _shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.endpoint.links.pop(self.id, None)
        self.inbound.put_nowait(None)
        for out in self.streams.values():
            out.queue.put_nowait(None)
        if self.init_waiter is not None and not self.init_waiter[1].done():
            self.init_waiter[1].set_exception(ChannelClosed("link closed"))
        if self._grace is not None:
            self._grace.cancel()
        self.resume_reading()

    # ------------------------------------------------------------------ streams

    def note_inbound(self, message: Any, session_header: str | None) -> None:
        """Remember where the answer to a client request goes: the session stream when the POST named the
        session (``Acp-Session-Id``), else the connection stream."""
        if isinstance(message, dict) and "method" in message and message.get("id") is not None:
            self.routes[message["id"]] = (message["method"], session_header)

    def stream_ended(self, key: str | None, out: SseOut) -> None:
        """A GET carrying a stream ended (client gone). The connection stream's end ends the link, at once
        or after the resume grace (with ``resumable``: its ``retention_seconds``)."""
        out.responder = None
        if key is not None or self.closed:
            return
        grace = self.endpoint.grace()
        if grace > 0:
            self._grace = asyncio.get_running_loop().call_later(grace, self._shutdown)
        else:
            self._shutdown()

    def state_update(self, session_id: str | None) -> str | None:
        """The v2 ``state_update`` of ``session_id`` a resumed session stream gets before live data (PR 2208);
        ``None`` for the connection stream, a v1 link, or a session not attached to this link."""
        record = self.endpoint.agent.sessions.get(session_id) if session_id is not None else None
        if record is None or self.protocol_version != 2 or record.connection_id != self.id:
            return None
        params = {"sessionId": session_id, "update": record.state_update()}
        return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params})

    def expect_stream(self, within: float) -> None:
        """End the link unless its connection stream is opened within ``within`` seconds."""
        if self._grace is None:
            self._grace = asyncio.get_running_loop().call_later(within, self._shutdown)

    def stream_reopened(self) -> None:
        """A stream was reopened: cancel a pending grace timeout."""
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None


class HttpEndpoint:
    """The Streamable HTTP side of one :class:`~acp_client.testing.ReferenceAgent` (``agent.http``)."""

    #: seconds between ``: keepalive`` comments on an idle stream
    keepalive_interval: float = 15.0
    #: label events with ``id:`` and honour ``Last-Event-ID``
    event_ids: bool = False
    #: with ``event_ids``: how long a link whose connection stream ended waits for the client to resume
    resume_grace: float = 5.0
    #: an HTTP status every session-scoped GET answers (``None``: served)
    refuse_session_streams: int | None = None
    #: seconds every session-stream event is held back (ordering across streams)
    session_stream_delay: float = 0.0
    #: HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS to announce (``None``: never named, as Node)
    h2_max_concurrent_streams: int | None = 100
    #: seconds a new link waits for its connection stream before it is ended (the client went away)
    stream_wait: float = 2.0
    #: ``False``: WebSocket upgrades are not served (answered like any GET: 406), for ``transport="auto"``
    serve_websocket: bool = True
    #: with ``resumable``: also write each cursor as the SSE ``id:`` (``False``: only ``_meta["acp/cursor"]``)
    cursor_ids: bool = True
    #: with ``resumable``: put before every cursor (a hostile server's oversize cursors)
    cursor_prefix: str = ""
    #: a resume also replays this many events at or before its cursor (a hostile server replaying too much)
    replay_overlap: int = 0
    #: a resume is answered ``200`` and its stream ended at once, nothing replayed (a hostile resume loop)
    end_resumed_streams: bool = False

    def __init__(self, agent: ReferenceAgent) -> None:
        """Bound to ``agent``; serves nothing until the agent listens."""
        self.agent = agent
        self.links: dict[str, HttpLink] = {}
        #: every HTTP request seen: (method, path, selected headers, status)
        self.requests: list[tuple[str, str, dict[str, str], int]] = []
        #: how many requests used each HTTP version ("HTTP/1.1", "HTTP/2")
        self.versions: dict[str, int] = {}
        self._conns: set[_DualConnection] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ plumbing for the agent

    def replay_rules(self) -> ReplayRules:
        """How a new stream labels and keeps its events: ``agent.resumable`` (PR 2208), else ``event_ids``."""
        resumable = self.agent.resumable
        if resumable is not None:
            return ReplayRules(
                sse_ids=self.cursor_ids,
                meta=True,
                prefix=self.cursor_prefix,
                max_messages=resumable.retention_messages,
                max_seconds=resumable.retention_seconds,
            )
        return ReplayRules(sse_ids=True, max_messages=4096) if self.event_ids else ReplayRules()

    def grace(self) -> float:
        """Seconds a link whose connection stream dropped waits for a resume (``0``: it ends at once)."""
        if self.agent.resumable is not None:
            return self.agent.resumable.retention_seconds
        return self.resume_grace if self.event_ids else 0.0

    def keepalive(self) -> float:
        """Seconds between ``: keepalive`` comments on an idle stream."""
        resumable = self.agent.resumable
        if resumable is not None and resumable.keepalive_seconds is not None:
            return resumable.keepalive_seconds
        return self.keepalive_interval

    def serve_options(self) -> dict[str, Any]:
        """Keyword arguments for ``websockets.serve`` that add this endpoint on the same socket."""
        endpoint = self

        class _Conn(_DualConnection):
            _endpoint = endpoint

        return {"create_connection": _Conn, "open_timeout": None}

    async def aclose(self) -> None:
        """End every link and HTTP connection (the agent is shutting down)."""
        for link in list(self.links.values()):
            link.abort()
        for conn in list(self._conns):
            conn.http_close()
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def drop_streams(self) -> int:
        """Reset the TCP connection of every open event stream, keeping the links (a network blip between
        the client and the streams). With ``event_ids`` a client can resume them; without, the links end.
        Returns how many streams were cut."""
        cut = 0
        for link in list(self.links.values()):
            for out in list(link.streams.values()):
                if out.responder is not None:
                    out.responder.abort()
                    cut += 1
        return cut

    def spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        """A task owned by the endpoint (cancelled by :meth:`aclose`)."""
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------ requests

    async def handle(self, request: _Request, responder: _Responder, version: str) -> None:
        """Serve one request to completion."""
        self.versions[version] = self.versions.get(version, 0) + 1
        path = request.path.split("?", 1)[0]
        if path != self.agent.path:
            await self._reply(request, responder, 404, {"error": "not found"})
            return
        if request.method == "POST":
            await self._post(request, responder)
        elif request.method == "GET":
            await self._get(request, responder)
        elif request.method == "DELETE":
            link = self.links.get(request.headers.get("acp-connection-id", ""))
            if link is None:
                await self._reply(request, responder, 404, {"error": "Unknown connection id"})
                return
            await link.close()
            await self._reply(request, responder, 202, None)
        else:
            await self._reply(request, responder, 405, {"error": "method not allowed"})

    async def _reply(
        self,
        request: _Request,
        responder: _Responder,
        status: int,
        body: Any,
        headers: list[tuple[str, str]] | None = None,
        raw: bytes | None = None,
    ) -> None:
        self._record(request, status)
        payload = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
        all_headers = [("content-type", "application/json"), *(headers or [])]
        await responder.start(status, all_headers)
        if payload:
            await responder.data(payload)
        await responder.end()

    def _record(self, request: _Request, status: int) -> None:
        keep = {
            k: v
            for k, v in request.headers.items()
            if k in ("acp-connection-id", "acp-session-id", "acp-protocol-version", "cookie", "last-event-id")
        }
        self.requests.append((request.method, request.path, keep, status))
        self.agent.records.notify_changed()

    async def _post(self, request: _Request, responder: _Responder) -> None:
        if "application/json" not in request.headers.get("content-type", "").lower():
            await self._reply(request, responder, 415, {"error": "Content-Type must be application/json"})
            return
        try:
            message = json.loads(request.body)
        except ValueError:
            await self._reply(request, responder, 400, {"error": "Invalid JSON"})
            return
        if isinstance(message, list):
            await self._reply(request, responder, 501, {"error": "Batch requests are not supported"})
            return
        if not isinstance(message, dict):
            await self._reply(request, responder, 400, {"error": "Invalid JSON-RPC message"})
            return
        method = message.get("method")
        self.agent.records.record_trace_headers("http", method if isinstance(method, str) else None, request.headers)
        connection_id = request.headers.get("acp-connection-id")
        if connection_id is None and message.get("method") == "initialize" and "id" in message:
            await self._initialize(request, responder, message)
            return
        if connection_id is None:
            await self._reply(request, responder, 400, {"error": "Missing connection id"})
            return
        link = self.links.get(connection_id)
        if link is None:
            await self._reply(request, responder, 404, {"error": "Unknown connection id"})
            return
        await link.wait_unpaused()
        link.note_inbound(message, request.headers.get("acp-session-id"))
        link.inbound.put_nowait(request.body.decode("utf-8", "replace"))
        await self._reply(request, responder, 202, None)

    async def _initialize(self, request: _Request, responder: _Responder, message: dict[str, Any]) -> None:
        agent = self.agent
        refusal = agent.faults.refuse_handshake(request.path, dict(request.headers))  # as for WebSocket handshakes
        if refusal is not None:
            headers = [] if refusal.retry_after is None else [("retry-after", refusal.retry_after)]
            await self._reply(request, responder, refusal.status, {"error": "rejected"}, headers)
            return
        connection_id = agent.next_connection_id()
        link = HttpLink(self, connection_id)
        self.links[connection_id] = link
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        link.init_waiter = (message["id"], future)
        self.spawn(agent.serve_channel(link, connection_id=connection_id), f"acp-ref-http-{connection_id}")
        link.inbound.put_nowait(request.body.decode("utf-8", "replace"))
        agent.records.record_handshake(request.path, dict(request.headers), 200)
        try:
            async with asyncio.timeout(30.0):
                answer = await future
        except (TimeoutError, ChannelClosed):
            link.abort()
            await self._reply(request, responder, 504, {"error": "initialize got no answer"})
            return
        headers = [("acp-connection-id", connection_id)]
        if agent.set_cookie is not None:
            headers.append(("set-cookie", agent.set_cookie))
        if responder.gone.done():  # the client left before it learned the connection id
            link.abort()
            raise _Gone
        # a client that never opens the connection stream is gone (it may have been cancelled mid-answer)
        link.expect_stream(self.stream_wait)
        await self._reply(request, responder, 200, None, headers, raw=answer.encode())

    async def _get(self, request: _Request, responder: _Responder) -> None:
        if "text/event-stream" not in request.headers.get("accept", ""):
            await self._reply(request, responder, 406, {"error": "Accept must include text/event-stream"})
            return
        connection_id = request.headers.get("acp-connection-id")
        if connection_id is None:
            await self._reply(request, responder, 400, {"error": "Missing connection id"})
            return
        link = self.links.get(connection_id)
        if link is None:
            await self._reply(request, responder, 404, {"error": "Unknown connection id"})
            return
        session_id = request.headers.get("acp-session-id")
        if session_id is not None and self.refuse_session_streams is not None:
            await self._reply(request, responder, self.refuse_session_streams, {"error": "Unknown session id"})
            return
        out = link.stream(session_id)
        replay: list[Event] = []
        last = request.headers.get("last-event-id")
        if last is not None:
            resumed = self._resume(out, last)
            if isinstance(resumed, str):
                await self._reply(request, responder, 409, {"error": resumed})
                return
            replay = resumed
            update = link.state_update(session_id)
            if update is not None:
                out.add(update)  # first in the queue: after the replay, before any live event
        if out.responder is not None:  # a newer GET replaces an older one
            out.responder.abort()
        out.responder = responder
        if session_id is None:
            link.stream_reopened()
        self._record(request, 200)
        await responder.start(200, [("content-type", "text/event-stream"), ("cache-control", "no-cache")])
        try:
            if last is not None and self.end_resumed_streams:
                await responder.end()
                return
            for event in replay:
                await responder.data(out.encode(event))
            await self._pump(link, session_id, out, responder)
        except _Gone:
            pass
        finally:
            if out.responder is responder:
                link.stream_ended(session_id, out)

    def _resume(self, out: SseOut, cursor: str) -> list[Event] | str:
        """The events a GET with ``Last-Event-ID: cursor`` replays, or why it is refused (answered ``409``)."""
        resumable = self.agent.resumable
        if resumable is not None and resumable.refuse:
            return "resume refused"
        if resumable is None and not self.event_ids:
            return "cannot resume"
        replay = out.replay_after(cursor, self.replay_overlap)
        return "cursor unknown or no longer retained" if replay is None else replay

    async def _pump(self, link: HttpLink, key: str | None, out: SseOut, responder: _Responder) -> None:
        gone = responder.gone
        while True:
            if not out.queue.empty() and not gone.done() and not link.paused and out.responder is responder:
                if not await self._write(out, responder, out.queue.get_nowait()):  # a burst: no waiting per event
                    return
                continue
            getter = asyncio.ensure_future(out.queue.get())
            waitables: list[asyncio.Future[Any]] = [getter, gone]
            try:
                done, _ = await asyncio.wait(waitables, timeout=self.keepalive(), return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not getter.done():
                    getter.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await getter
            if gone.done() or out.responder is not responder:
                if getter.done() and not getter.cancelled():
                    item = getter.result()
                    if item is not None:  # not written: keep it for the next GET
                        _requeue_front(out.queue, item)
                raise _Gone
            await link.wait_unpaused()
            if getter not in done:
                await responder.data(b": keepalive\n\n")
                continue
            if not await self._write(out, responder, getter.result()):
                return

    async def _write(self, out: SseOut, responder: _Responder, item: Event | None) -> bool:
        """Write one queued event; ``None`` ends the stream (``False``). An event not written goes back first;
        one at or below ``out.written`` (replayed already, or put back by an older GET) is skipped."""
        if item is None:
            await responder.end()
            return False
        if item[0] <= out.written:
            return True
        try:
            await responder.data(out.encode(item))
        except _Gone:
            _requeue_front(out.queue, item)
            raise
        out.written = item[0]
        return True


def _requeue_front(queue: asyncio.Queue[Event | None], item: Event) -> None:
    rest: list[Event | None] = []
    while not queue.empty():
        rest.append(queue.get_nowait())
    queue.put_nowait(item)
    for other in rest:
        queue.put_nowait(other)

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
:class:`~acp_client.testing._channel.FrameChannel`, so the agent's connection handler is the same as for
a WebSocket; a link whose connection stream ends (the client went away) closes like a dropped WebSocket,
unless events carry ids (``event_ids``): then the link waits ``resume_grace`` seconds for the client to
reopen the stream with ``Last-Event-ID``.

Controls (attributes of :class:`HttpEndpoint`, reachable as ``agent.http``): ``keepalive_interval``,
``event_ids``, ``resume_grace``, ``refuse_session_streams`` (an HTTP status for every session GET, to
emulate a server that cannot attach a session to a new link), ``session_stream_delay`` (seconds every
session-stream event waits, to reorder it behind the connection stream), ``h2_max_concurrent_streams``
(``None``: the HTTP/2 SETTINGS never name a maximum, as Node's server does).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import struct
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import h11
from hyperframe.frame import SettingsFrame
from websockets.asyncio.server import ServerConnection

from acp_client._logging import get_logger
from acp_client.testing._channel import ChannelClosed

if TYPE_CHECKING:
    from acp_client.testing.reference_agent import ReferenceAgent

__all__ = ["HttpEndpoint", "HttpLink"]

_log = get_logger(__name__)

_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_SNIFF_LIMIT = 64 * 1024
_CONNECTION_SCOPED = frozenset({"session/new", "session/load", "session/resume", "session/fork", "session/list"})
_HANDSHAKE_TIMEOUT = 10.0


class _Gone(Exception):
    """The client went away while a response was being written."""


@dataclass
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class _Responder:
    """Writes one response (HTTP/1.1 or HTTP/2); ``data`` raises :class:`_Gone` once the client left."""

    async def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        raise NotImplementedError

    async def data(self, chunk: bytes) -> None:
        raise NotImplementedError

    async def end(self) -> None:
        raise NotImplementedError

    @property
    def gone(self) -> asyncio.Future[None]:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError


# ---------------------------------------------------------------------------- the ACP endpoint


@dataclass(eq=False)
class _SseOut:
    """One SSE stream of a link: queued events (id, frame) and, with ``event_ids``, a replay buffer."""

    queue: asyncio.Queue[tuple[int, str] | None] = field(default_factory=asyncio.Queue)
    history: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=4096))
    responder: _Responder | None = None
    reader_task: asyncio.Task[None] | None = None


class HttpLink:
    """One Streamable HTTP connection (``Acp-Connection-Id``) as a FrameChannel for the agent."""

    def __init__(self, endpoint: HttpEndpoint, connection_id: str) -> None:
        """A link with no stream yet."""
        self.endpoint = endpoint
        self.id = connection_id
        self.inbound: asyncio.Queue[str | None] = asyncio.Queue()
        self.streams: dict[str | None, _SseOut] = {None: _SseOut()}
        self.routes: dict[int | str, tuple[str, str | None]] = {}
        self.init_waiter: tuple[int | str, asyncio.Future[str]] | None = None
        self.closed = False
        self.paused = False
        self._unpaused = asyncio.Event()
        self._unpaused.set()
        self._ids = itertools.count(1)
        self._grace: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ FrameChannel

    async def send(self, frame: str) -> None:
        """Route one agent frame to the connection or session stream (or the initialize POST)."""
        if self.closed:
            raise ChannelClosed("link closed")
        key = self._route(frame)
        if key == "__init__":
            return
        out = self.streams.setdefault(key, _SseOut())
        if key is not None and self.endpoint.session_stream_delay:
            await asyncio.sleep(self.endpoint.session_stream_delay)
        event = (next(self._ids), frame)
        out.history.append(event)
        out.queue.put_nowait(event)

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

    def stream_ended(self, key: str | None, out: _SseOut) -> None:
        """A GET carrying a stream ended (client gone). The connection stream's end ends the link, at once
        or after the resume grace."""
        if out.responder is not None:
            out.responder = None
        if key is not None or self.closed:
            return
        if self.endpoint.event_ids and self.endpoint.resume_grace > 0:
            loop = asyncio.get_running_loop()
            self._grace = loop.call_later(self.endpoint.resume_grace, self._shutdown)
        else:
            self._shutdown()

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
        self.agent.notify_changed()

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
        rejection = agent._rejection  # the same fault control as for WebSocket handshakes
        if rejection is not None:
            if rejection.remaining is not None:
                rejection.remaining -= 1
                if rejection.remaining <= 0:
                    agent._rejection = None
            agent.rejected_handshakes += 1
            headers = []
            if rejection.retry_after is not None:
                headers.append(("retry-after", _retry_after(rejection.retry_after)))
            agent._record_handshake(request.path, dict(request.headers), rejection.status)
            await self._reply(request, responder, rejection.status, {"error": "rejected"}, headers)
            return
        connection_id = agent._next_connection_id()
        link = HttpLink(self, connection_id)
        self.links[connection_id] = link
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        link.init_waiter = (message["id"], future)
        self.spawn(agent.serve_channel(link, connection_id=connection_id), f"acp-ref-http-{connection_id}")
        link.inbound.put_nowait(request.body.decode("utf-8", "replace"))
        agent._record_handshake(request.path, dict(request.headers), 200)
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
        out = link.streams.setdefault(session_id, _SseOut())
        replay: list[tuple[int, str]] = []
        last = request.headers.get("last-event-id")
        if last is not None:
            if not self.event_ids or not last.isdigit():
                await self._reply(request, responder, 409, {"error": "cannot resume"})
                return
            after = int(last)
            known = [e for e in out.history if e[0] <= after]
            if out.history and not known and out.history[0][0] > after + 1:
                await self._reply(request, responder, 409, {"error": "events no longer buffered"})
                return
            replay = [e for e in out.history if e[0] > after]
            # what is replayed now must not be written again from the queue
            queued: list[tuple[int, str] | None] = []
            while not out.queue.empty():
                item = out.queue.get_nowait()
                if item is None or item[0] <= after or all(item[0] != r[0] for r in replay):
                    queued.append(item)
            for item in queued:
                if item is None or item[0] > after:
                    out.queue.put_nowait(item)
        if out.responder is not None:  # a newer GET replaces an older one
            out.responder.abort()
        out.responder = responder
        if session_id is None:
            link.stream_reopened()
        self._record(request, 200)
        await responder.start(200, [("content-type", "text/event-stream"), ("cache-control", "no-cache")])
        try:
            for event in replay:
                await responder.data(self._event(event))
            await self._pump(link, session_id, out, responder)
        except _Gone:
            pass
        finally:
            if out.responder is responder:
                link.stream_ended(session_id, out)

    async def _pump(self, link: HttpLink, key: str | None, out: _SseOut, responder: _Responder) -> None:
        gone = responder.gone
        while True:
            if not out.queue.empty() and not gone.done() and not link.paused and out.responder is responder:
                ready = out.queue.get_nowait()  # a burst: no waiting machinery per event
                if ready is None:
                    await responder.end()
                    return
                try:
                    await responder.data(self._event(ready))
                except _Gone:
                    _requeue_front(out.queue, ready)
                    raise
                continue
            getter = asyncio.ensure_future(out.queue.get())
            waitables: list[asyncio.Future[Any]] = [getter, gone]
            try:
                done, _ = await asyncio.wait(
                    waitables, timeout=self.keepalive_interval, return_when=asyncio.FIRST_COMPLETED
                )
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
            item = getter.result()
            if item is None:
                await responder.end()
                return
            try:
                await responder.data(self._event(item))
            except _Gone:
                _requeue_front(out.queue, item)
                raise

    def _event(self, event: tuple[int, str]) -> bytes:
        lines = "".join(f"data: {line}\n" for line in event[1].split("\n"))
        prefix = f"id: {event[0]}\n" if self.event_ids else ""
        return f"{prefix}{lines}\n".encode()


def _requeue_front(queue: asyncio.Queue[tuple[int, str] | None], item: tuple[int, str]) -> None:
    rest: list[tuple[int, str] | None] = []
    while not queue.empty():
        rest.append(queue.get_nowait())
    queue.put_nowait(item)
    for other in rest:
        queue.put_nowait(other)


def _retry_after(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)


# ---------------------------------------------------------------------------- the socket side


class _DualConnection(ServerConnection):
    """A ``websockets`` server connection that serves plain HTTP requests itself (see the module docstring)."""

    _endpoint: HttpEndpoint

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._mode: str | None = None
        self._sniffed = b""
        self._decided: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._http: _H11Server | _H2Server | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._endpoint._conns.add(self)

    def data_received(self, data: bytes) -> None:
        if self._mode == "ws":
            super().data_received(data)
            return
        if self._http is not None:
            self._http.data_received(data)
            return
        self._sniffed += data
        buffered = self._sniffed
        if buffered.startswith(_H2_PREFACE[: len(buffered)]) and len(buffered) < len(_H2_PREFACE):
            return  # maybe an HTTP/2 preface: wait for the rest
        if buffered.startswith(_H2_PREFACE):
            self._become_http(_H2Server(self, self._endpoint), buffered)
            return
        end = buffered.find(b"\r\n\r\n")
        if end == -1 and len(buffered) < _SNIFF_LIMIT:
            return
        head = buffered[: end if end != -1 else len(buffered)].decode("latin-1").lower()
        upgrade = "\nupgrade: websocket" in head or "\nupgrade:websocket" in head
        if upgrade and self._endpoint.serve_websocket:
            self._mode = "ws"
            self._sniffed = b""
            if not self._decided.done():
                self._decided.set_result("ws")
            super().data_received(buffered)
            return
        self._become_http(_H11Server(self, self._endpoint), buffered)

    def _become_http(self, server: _H11Server | _H2Server, data: bytes) -> None:
        self._mode = "http"
        self._http = server
        self._sniffed = b""
        if not self._decided.done():
            self._decided.set_result("http")
        server.start()
        server.data_received(data)

    def eof_received(self) -> None:
        if self._mode == "ws":
            super().eof_received()
            return
        if self._http is not None:
            self._http.eof_received()
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._endpoint._conns.discard(self)
        if self._http is not None:
            self._http.connection_lost()
        if not self._decided.done():
            self._decided.set_result("lost")
        super().connection_lost(exc)

    def http_close(self) -> None:
        """Close an HTTP (or still undecided) connection at once."""
        if self._mode != "ws":
            self.transport.abort()

    async def handshake(self, *args: Any, **kwargs: Any) -> None:
        try:
            async with asyncio.timeout(_HANDSHAKE_TIMEOUT):
                mode = await asyncio.shield(self._decided)
        except TimeoutError:
            self.transport.abort()
            return
        if mode == "ws":
            async with asyncio.timeout(_HANDSHAKE_TIMEOUT):
                await super().handshake(*args, **kwargs)
            return
        if mode == "http" and self._http is not None:
            await self._http.serve()

    def abort_tcp(self) -> None:
        """Reset the TCP connection (SO_LINGER 0, then abort)."""
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def write(self, data: bytes) -> None:
        """Write raw bytes (HTTP side)."""
        if not self.transport.is_closing():
            self.transport.write(data)


class _H11Responder(_Responder):
    def __init__(self, server: _H11Server) -> None:
        self.server = server
        self._started = False

    @property
    def gone(self) -> asyncio.Future[None]:
        return self.server.lost

    async def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        self.server.send(h11.Response(status_code=status, headers=headers, reason=b""))
        self._started = True
        await self.server.drain()

    async def data(self, chunk: bytes) -> None:
        if self.server.lost.done():
            raise _Gone
        self.server.send(h11.Data(data=chunk))
        await self.server.drain()

    async def end(self) -> None:
        if self.server.lost.done():
            raise _Gone
        self.server.send(h11.EndOfMessage())
        await self.server.drain()

    def abort(self) -> None:
        self.server.conn_owner.abort_tcp()


class _H11Server:
    """HTTP/1.1 keep-alive server over one TCP connection (requests served one after another)."""

    def __init__(self, owner: _DualConnection, endpoint: HttpEndpoint) -> None:
        self.conn_owner = owner
        self.endpoint = endpoint
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=16 * 1024 * 1024)
        self.events: asyncio.Queue[Any] = asyncio.Queue()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.done = asyncio.Event()

    def start(self) -> None:
        pass

    async def serve(self) -> None:
        """Serve requests until the connection ends (runs in the connection's own handler task)."""
        await self._run()

    def data_received(self, data: bytes) -> None:
        self.h11.receive_data(data)
        self._pull()

    def eof_received(self) -> None:
        with contextlib.suppress(h11.RemoteProtocolError):
            self.h11.receive_data(b"")
        self._pull()

    def _pull(self) -> None:
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self.events.put_nowait(exc)
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            self.events.put_nowait(event)
            if isinstance(event, h11.ConnectionClosed):
                return

    def connection_lost(self) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        self.events.put_nowait(h11.ConnectionClosed())

    def send(self, event: Any) -> None:
        data = self.h11.send(event)
        if data:
            self.conn_owner.write(data)

    async def drain(self) -> None:
        if self.lost.done():
            raise _Gone
        try:
            await self.conn_owner.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise _Gone from exc

    async def _run(self) -> None:
        try:
            while True:
                event = await self.events.get()
                if isinstance(event, h11.RemoteProtocolError):
                    with contextlib.suppress(h11.LocalProtocolError):
                        self.send(h11.Response(status_code=400, headers=[("content-length", "0")]))
                    return
                if isinstance(event, h11.ConnectionClosed):
                    return
                if not isinstance(event, h11.Request):
                    continue
                body = bytearray()
                while True:
                    part = await self.events.get()
                    if isinstance(part, h11.Data):
                        body.extend(part.data)
                    elif isinstance(part, h11.EndOfMessage):
                        break
                    else:
                        return
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
                request = _Request(event.method.decode(), event.target.decode("latin-1"), headers, bytes(body))
                try:
                    await self.endpoint.handle(request, _H11Responder(self), "HTTP/1.1")
                except _Gone:
                    return
                if self.h11.our_state is h11.MUST_CLOSE or self.h11.their_state is h11.MUST_CLOSE:
                    return
                try:
                    self.h11.start_next_cycle()
                except h11.LocalProtocolError:
                    return
                self._pull()
        finally:
            self.done.set()
            if not self.conn_owner.transport.is_closing():
                self.conn_owner.transport.close()


class _H2Stream(_Responder):
    def __init__(self, server: _H2Server, stream_id: int, headers: dict[str, str]) -> None:
        self.server = server
        self.stream_id = stream_id
        self.headers = headers
        self.body = bytearray()
        self._gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.window = asyncio.Event()

    @property
    def gone(self) -> asyncio.Future[None]:
        return self._gone

    def mark_gone(self) -> None:
        if not self._gone.done():
            self._gone.set_result(None)
        self.window.set()

    async def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        if self._gone.done():
            raise _Gone
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.server.h2.send_headers(self.stream_id, [(":status", str(status)), *headers])
        self.server.flush()
        await self.server.drain()

    async def data(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            if self._gone.done():
                raise _Gone
            try:
                window = self.server.h2.local_flow_control_window(self.stream_id)
            except h2.exceptions.ProtocolError:
                raise _Gone from None
            size = min(window, self.server.h2.max_outbound_frame_size, len(view))
            if size <= 0:
                self.window.clear()
                await self.window.wait()
                continue
            try:
                self.server.h2.send_data(self.stream_id, bytes(view[:size]))
            except h2.exceptions.ProtocolError:
                raise _Gone from None
            view = view[size:]
            self.server.flush()
            await self.server.drain()

    async def end(self) -> None:
        if self._gone.done():
            raise _Gone
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.server.h2.end_stream(self.stream_id)
        self.server.flush()

    def abort(self) -> None:
        self.server.conn_owner.abort_tcp()


class _H2Server:
    """HTTP/2 cleartext (prior knowledge) over one TCP connection; each request in its own task."""

    def __init__(self, owner: _DualConnection, endpoint: HttpEndpoint) -> None:
        self.conn_owner = owner
        self.endpoint = endpoint
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="latin-1"))
        self.streams: dict[int, _H2Stream] = {}
        self.done = asyncio.Event()

    def start(self) -> None:
        self.h2.initiate_connection()
        self.h2.data_to_send()  # replaced: announce only the settings we mean
        settings = dict(self.h2.local_settings)
        limit = self.endpoint.h2_max_concurrent_streams
        code = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS
        if limit is None:
            settings.pop(code, None)
        else:
            settings[code] = limit
        self.conn_owner.write(SettingsFrame(0, settings={int(k): v for k, v in settings.items()}).serialize())

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.conn_owner.write(data)

    async def drain(self) -> None:
        try:
            await self.conn_owner.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise _Gone from exc

    def data_received(self, data: bytes) -> None:
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.flush()
            self.conn_owner.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                headers = {str(k).lower(): str(v) for k, v in event.headers}
                self.streams[event.stream_id] = _H2Stream(self, event.stream_id, headers)
            elif isinstance(event, h2.events.DataReceived):
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    stream.body.extend(event.data)
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    self.endpoint.spawn(self._serve(stream), f"acp-ref-h2-{event.stream_id}")
            elif isinstance(event, h2.events.StreamReset):
                stream = self.streams.pop(event.stream_id, None)
                if stream is not None:
                    stream.mark_gone()
            elif isinstance(event, h2.events.WindowUpdated):
                targets = self.streams.values() if event.stream_id == 0 else [self.streams.get(event.stream_id)]
                for target in targets:
                    if target is not None:
                        target.window.set()
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.conn_owner.transport.close()
        self.flush()

    async def _serve(self, stream: _H2Stream) -> None:
        h = stream.headers
        request = _Request(h.get(":method", ""), h.get(":path", ""), h, bytes(stream.body))
        try:
            await self.endpoint.handle(request, stream, "HTTP/2")
        except _Gone:
            pass
        finally:
            self.streams.pop(stream.stream_id, None)

    def eof_received(self) -> None:
        pass

    async def serve(self) -> None:
        """Wait until the connection ends (each request runs in its own task)."""
        await self.done.wait()

    def connection_lost(self) -> None:
        for stream in list(self.streams.values()):
            stream.mark_gone()
        self.done.set()

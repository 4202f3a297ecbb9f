"""The Streamable HTTP transport of the ACP remote-transport RFD, on ``httpx`` (HTTP/1.1 and HTTP/2).

This module (with its sans-I/O helper :mod:`acp_client.transports._sse`) is the only part of acp-client that
imports ``httpx``. It maps the RFD's POST/SSE exchange onto the text frames of
:class:`~acp_client.transports.Transport`:

- The first frame sent must be ``initialize``: it is POSTed without ``Acp-Connection-Id`` and answered
  ``200`` with the JSON response as body and the new ``Acp-Connection-Id`` header. The body becomes the
  first received frame; the connection-scoped SSE stream (``GET``) is opened before ``send`` returns.
- Every later frame is one POST with ``Acp-Connection-Id`` and ``Acp-Protocol-Version`` (the negotiated
  version), plus ``Acp-Session-Id`` when the message belongs to a session whose stream is open here; the
  server answers ``202`` and the response arrives on an SSE stream. A POST starts once the previous one's
  body was written (never waiting for an answer), so frames reach the server in the order ``send`` was
  called, as over a WebSocket; ``send`` returns once the POST is started.
- Session-scoped SSE streams: this transport reads the JSON of outgoing frames (it implements the ACP HTTP
  binding, which routes by method and ``sessionId``). Before POSTing ``session/load``/``session/resume``
  it opens the session's stream (so the replay is received); when a ``session/new``/``session/fork``
  (or a load/resume whose stream could not be opened beforehand) answers, the stream is opened *before*
  the result is handed to ``recv``, so nothing the session emits next is missed.

Design around two httpx/httpcore pitfalls: each SSE stream gets its own client, hence its own TCP
connection, and POSTs go through a client that never carries a stream. So (a) a POST never waits for a
second HTTP/2 stream on a connection whose server never raised ``SETTINGS_MAX_CONCURRENT_STREAMS`` above
httpcore's initial 1, and (b) no POST response waits behind another stream's read lock.

Failures, translated here once:

==========================================================  ==============================================
what happened                                                what the caller sees
==========================================================  ==============================================
URL not http(s), ``ssl`` with ``http://``                    :class:`UsageError` (before any I/O)
initialize refused, connect failure, TLS failure             :class:`ConnectError` / :class:`TLSError`
initialize answered with a status other than 200             :class:`HTTPTransportError` (``status_code``,
                                                             ``body_excerpt``; 401/403/429/5xx classified
                                                             as for a WebSocket handshake)
a 200 that is HTML or not JSON, or has no                    :class:`HTTPTransportError` with status 200
``Acp-Connection-Id``
later POST answered 400/406/415/501/... or 200 with HTML     a JSON-RPC error answer to that request
                                                             (``-32603``, ``data.httpStatus``,
                                                             ``data.bodyExcerpt``); counted in
                                                             ``stats.posts_rejected``; the link stays
404 for the connection, 401/403/5xx on a later POST, a       :class:`ConnectionLost`: the reconnect manager
network error, a stream that ends and cannot be resumed,     re-initializes and recovers as after a
a stream silent past ``ping_interval + ping_timeout``        WebSocket drop
a session stream refused (404/403) after load/resume         the load/resume answers a synthetic ``-32002``
succeeded                                                    error naming the HTTP status, so recovery ends
                                                             that session with a clear reason instead of
                                                             retrying it
SSE events that are not JSON, or whose ``event:`` is not     counted in ``stats.sse_discarded``, logged,
``message``                                                  dropped
==========================================================  ==============================================

Stream resumption: when a server labels its events with ``id:``, a stream that ends is reopened with
``Last-Event-ID``; if the server answers ``200`` nothing is re-initialized (``stats.streams_resumed``, log
event ``http_stream_resumed``). Without ids, when the server refuses (404/409), or when a resumed stream
ends again before delivering anything, the link is lost and the full recovery (re-initialize) runs.

Ordering across streams: a ``session/load`` result travels on the connection stream, its replay on the session
stream; as two HTTP requests they can arrive in either order. The result is held until the replay is in (a
v2 ``session/resume``: until its ``state_update`` snapshot; otherwise until the session stream was quiet for
``REPLAY_QUIET``; at most ``REPLAY_HOLD_MAX``), so what the layers above see follows the agent's order.

Liveness: every SSE stream has a read-idle watchdog (``ping_interval + ping_timeout`` without a byte, where
servers send a keepalive comment about every 15 s, fails the link), and after ``ping_interval`` without an
answered POST an ``OPTIONS`` request checks the client-to-server direction (:meth:`~StreamableHTTPTransport.ping`,
answered with any status within ``ping_timeout``).

Cookies: one :class:`~acp_client.transports.CookieJar` (the client's) receives every ``Set-Cookie`` and
supplies the ``Cookie`` header of every request; httpx's own cookie store is disabled. ``close()`` sends
``DELETE`` (bounded by ``close_timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import inspect
import json
import ssl as _ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

import httpx

from acp_client._logging import get_logger, redact_headers
from acp_client._version import __version__
from acp_client.exceptions import (
    ConnectError,
    ConnectionLost,
    HTTPTransportError,
    TLSError,
    UsageError,
)
from acp_client.transports._cookies import CookieJar, parse_retry_after
from acp_client.transports._sse import SSEParser
from acp_client.transports.base import Transport, TransportStats
from acp_client.transports.options import HeadersLike, HeadersProvider, TransportOptions

__all__ = [
    "CONNECTION_ID_HEADER",
    "PROTOCOL_VERSION_HEADER",
    "SESSION_ID_HEADER",
    "HTTPTransportStats",
    "StreamableHTTPTransport",
    "open_endpoint",
    "open_http",
]

_log = get_logger(__name__)

#: Names the transport-level connection (the ``initialize`` answer's header, then every request's).
CONNECTION_ID_HEADER = "Acp-Connection-Id"
#: Names the session of a session-scoped POST or GET.
SESSION_ID_HEADER = "Acp-Session-Id"
#: The negotiated protocol version, sent on every request after ``initialize``.
PROTOCOL_VERSION_HEADER = "Acp-Protocol-Version"

_USER_AGENT = f"acp-client/{__version__} httpx/{httpx.__version__}"
_ATTACH_METHODS = frozenset({"session/load", "session/resume"})
_CREATE_METHODS = frozenset({"session/new", "session/fork"})
_DETACH_METHODS = frozenset({"session/close", "session/delete"})
#: Bound on the agent's answer to the ``initialize`` POST (the answer is the response body).
INITIALIZE_TIMEOUT = 30.0
#: A watchdog that fires this late (seconds) was held up by a blocked event loop, not by a silent peer.
_STALL_GRACE = 0.1
#: A load/resume result waits until its session stream was quiet this long (seconds; see ``_replay_barrier``).
REPLAY_QUIET = 0.05
#: The longest a load/resume result is held back waiting for its replay.
REPLAY_HOLD_MAX = 2.0
_EXCERPT = 300
_LOST_STATUSES = frozenset({401, 403, 404, 408, 409, 410, 429, 500, 502, 503, 504})


@dataclass
class HTTPTransportStats(TransportStats):
    """:class:`TransportStats` plus the Streamable HTTP counters.

    ``posts`` counts POST requests; ``streams_opened`` SSE GETs answered 200; ``streams_resumed`` streams
    reopened with ``Last-Event-ID`` without a recovery; ``sse_discarded`` events dropped (not JSON, or an
    ``event:`` type other than ``message``); ``sse_comments`` comment lines (keepalives);
    ``session_streams_refused`` session-scoped GETs the server refused; ``posts_rejected`` POSTs answered
    with an unusable status (400, 415 ...).
    """

    posts: int = 0
    streams_opened: int = 0
    streams_resumed: int = 0
    sse_discarded: int = 0
    sse_comments: int = 0
    session_streams_refused: int = 0
    posts_rejected: int = 0


class _RejectAllCookies(http.cookiejar.DefaultCookiePolicy):
    """httpx's own cookie store stays empty: cookies live in the client's shared CookieJar."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False

    def return_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False


class _StreamRefused(Exception):
    """An SSE GET was answered with something other than a 200 event stream."""

    def __init__(self, status: int, content_type: str | None, excerpt: str) -> None:
        super().__init__(status)
        self.status = status
        self.content_type = content_type
        self.excerpt = excerpt


class _Exchange:
    """One POST in flight: the frame, its parsed message, and the release of the POST order lock (once the
    body is on the wire, or when the exchange ends, whichever comes first)."""

    def __init__(self, frame: str, message: Any, lock: asyncio.Lock) -> None:
        self.frame = frame
        self.message = message
        self._lock: asyncio.Lock | None = lock

    def release(self) -> None:
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.release()


class _Stream:
    """One SSE stream: its key (``None`` = the connection stream), task, and opening outcome."""

    def __init__(self, session_id: str | None) -> None:
        self.session_id = session_id
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.opened.add_done_callback(_retrieve)  # an opening nobody awaits any more is not an error
        self.task: asyncio.Task[None] | None = None
        self.detached = False  # the client closed/deleted the session: its stream may end quietly
        self.events = 0  # JSON-RPC messages delivered from this stream
        #: loop time since which the reader waits for bytes (``None`` while it delivers what it read): the
        #: read-idle watchdog's clock
        self.waiting_since: float | None = None
        self.state_updates = 0  # v2 ``state_update`` notifications among them
        self.changed = asyncio.Event()  # set on every delivered message

    @property
    def label(self) -> str:
        return "connection" if self.session_id is None else f"session {self.session_id}"


class StreamableHTTPTransport:
    """An ACP Streamable HTTP link. Implements :class:`~acp_client.transports.Transport`.

    Made by :func:`open_http`; nothing touches the network before the first :meth:`send` (which must be the
    ``initialize`` request). :attr:`connection_id` is the server's ``Acp-Connection-Id`` once initialized;
    :attr:`http_version` the HTTP version the POSTs use (``"HTTP/1.1"`` or ``"HTTP/2"``).
    """

    def __init__(
        self,
        url: httpx.URL,
        options: TransportOptions,
        headers: list[tuple[str, str]],
        *,
        description: str,
    ) -> None:
        """Prepare the link; use :func:`open_http` instead."""
        self._url = url
        self._options = options
        self._headers = headers
        self._description = description
        self._host = url.host
        self._secure = url.scheme == "https"
        self._cookies: CookieJar = options.cookies
        self._http1, self._http2 = _http_versions(options)
        self._verify: _ssl.SSLContext = options.ssl if options.ssl is not None else _default_ssl_context()
        self._inbound: asyncio.Queue[str | None] = asyncio.Queue()
        self._failure: ConnectionLost | None = None
        self._reader_woken = False
        self._post_lock = asyncio.Lock()
        self._post_client: httpx.AsyncClient | None = None
        self._post_tasks: set[asyncio.Task[None]] = set()
        self._keepalive_task: asyncio.Task[None] | None = None
        self._last_answer = 0.0
        self._streams: dict[str | None, _Stream] = {}
        self._attaching: dict[int | str, tuple[str, str | None, int]] = {}
        self._inbound_routes: dict[int | str, str] = {}
        self._detaching: dict[int | str, str] = {}  # close/delete request id -> session id
        self._refusals: dict[str, int] = {}  # session id -> the status its stream was last refused with
        self._close_task: asyncio.Task[None] | None = None
        self._initialized = False
        self.connection_id: str | None = None
        """The server's ``Acp-Connection-Id`` (``None`` before ``initialize`` was answered)."""
        self.protocol_version: int | None = None
        """The protocol version of the ``initialize`` answer, sent as ``Acp-Protocol-Version``."""
        self.http_version: str | None = None
        """The HTTP version of the last POST response (``"HTTP/1.1"``, ``"HTTP/2"``)."""
        self.stats = HTTPTransportStats()
        """Live counters (see :class:`HTTPTransportStats`)."""

    # ------------------------------------------------------------------ properties

    @property
    def description(self) -> str:
        """``http(s)://host:port/path`` without user info or query."""
        return self._description

    @property
    def closed(self) -> bool:
        """``True`` once the link was closed or found dead."""
        return self._failure is not None

    @property
    def cookies(self) -> CookieJar:
        """The jar every request of this link uses (the client's shared one)."""
        return self._cookies

    @property
    def session_streams(self) -> list[str]:
        """Ids of the sessions whose SSE stream is open on this link."""
        return [k for k, s in self._streams.items() if k is not None and s.opened.done() and not s.opened.exception()]

    # ------------------------------------------------------------------ I/O

    async def send(self, frame: str) -> None:
        """POST one frame (see the module docstring). Raises ``ConnectionLost`` once the link is gone,
        :class:`HTTPTransportError` for an answer the transport cannot use."""
        if not isinstance(frame, str):
            raise UsageError(f"a frame must be str, not {type(frame).__name__}")
        if self._failure is not None:
            raise self._lost()
        message = _loads(frame)
        if not self._initialized:
            if not (isinstance(message, dict) and message.get("method") == "initialize" and "id" in message):
                raise UsageError("the first frame sent over Streamable HTTP must be the initialize request")
            await self._initialize(frame)
            return
        if isinstance(message, dict) and message.get("method") in _ATTACH_METHODS and "id" in message:
            session_id = _session_id(message.get("params"))
            if session_id is not None and session_id not in self._streams:
                # open the session stream first, so the replay the agent sends is received
                await self._open_stream(session_id, required=False)
        session_header = self._route_outgoing(message)
        await self._post(frame, session_header, message)

    async def recv(self) -> str:
        """The next frame from any stream (or the ``initialize`` body). Raises ``ConnectionLost`` after the
        link is gone and every frame received before was delivered."""
        item = await self._inbound.get()
        if item is None:
            self._inbound.put_nowait(None)  # every later recv fails too
            raise self._lost()
        self.stats.frames_in += 1
        self.stats.bytes_in += len(item.encode())
        return item

    async def ping(self, timeout: float | None = None) -> float:
        """Check the request path now: an ``OPTIONS`` request to the endpoint, answered with any status, within
        ``timeout`` (default ``ping_timeout``). Returns the round trip in seconds. When no answer comes the
        link is failed (``ConnectionLost``), as a WebSocket whose Pong does not come. (The event streams
        are watched by their read-idle watchdog; this covers the client-to-server direction.)"""
        if self._failure is not None:
            raise self._lost()
        if timeout is None:
            timeout = self._options.ping_timeout
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout(timeout):
                response = await self._client_for_posts().request(
                    "OPTIONS", self._url, headers=self._request_headers(content=False)
                )
        except (httpx.HTTPError, TimeoutError) as exc:
            self._fail(
                ConnectionLost(
                    f"{self._description} did not answer a liveness check: {_describe_error(exc)}",
                    reason="liveness check failed",
                )
            )
            raise self._lost() from None
        self._store_cookies(response)
        self._last_answer = loop.time()
        return self._last_answer - started

    async def _keepalive(self, interval: float) -> None:
        """Every ``interval`` without an answered POST, :meth:`ping` (a link silent towards the server)."""
        loop = asyncio.get_running_loop()
        while self._failure is None:
            await asyncio.sleep(max(0.0, self._last_answer + interval - loop.time()))
            if loop.time() - self._last_answer >= interval and self._failure is None:
                with contextlib.suppress(ConnectionLost):
                    await self.ping()

    async def close(self) -> None:
        """Stop every stream, ``DELETE`` the connection (bounded by ``close_timeout``), release the
        sockets. Idempotent; concurrent callers wait for the same close."""
        if self._close_task is None:
            self._close_task = asyncio.get_running_loop().create_task(
                self._close_impl(), name=f"acp-client close {self._description}"
            )
        await asyncio.shield(self._close_task)

    # ------------------------------------------------------------------ initialize

    async def _initialize(self, frame: str) -> None:
        client = self._client_for_posts()
        headers = self._request_headers(content=True)
        timeout = httpx.Timeout(
            connect=self._options.open_timeout,
            read=INITIALIZE_TIMEOUT,
            write=self._options.open_timeout,
            pool=self._options.open_timeout,
        )
        self.stats.posts += 1
        try:
            response = await client.post(self._url, content=frame.encode(), headers=headers, timeout=timeout)
        except httpx.HTTPError as exc:
            await self._abandon()
            raise _connect_error(exc, self._description, self._options.open_timeout) from exc
        self._store_cookies(response)
        self.http_version = response.http_version
        self.stats.frames_out += 1
        self.stats.bytes_out += len(frame.encode())
        if response.status_code != 200:
            await self._abandon()
            raise _http_error(f"{self._description} answered initialize with HTTP {response.status_code}", response)
        body = response.text
        content_type = response.headers.get("content-type", "")
        message = _loads(body)
        if "json" not in content_type.lower() or not isinstance(message, dict):
            await self._abandon()
            raise _http_error(
                f"{self._description} answered initialize with a body that is not a JSON-RPC response "
                f"({content_type or 'no content type'}): not an ACP Streamable HTTP endpoint",
                response,
            )
        connection_id = response.headers.get(CONNECTION_ID_HEADER)
        if not connection_id:
            if "error" in message:  # e.g. authentication required: let the client see the agent's error
                self._initialized = True
                self._inbound.put_nowait(body)
                self._fail(ConnectionLost(f"{self._description} refused initialize", reason="initialize refused"))
                return
            await self._abandon()
            raise _http_error(
                f"{self._description} answered initialize without an {CONNECTION_ID_HEADER} header: "
                "the server does not speak the ACP Streamable HTTP transport",
                response,
            )
        self.connection_id = connection_id
        result = message.get("result")
        if isinstance(result, dict) and isinstance(result.get("protocolVersion"), int):
            self.protocol_version = result["protocolVersion"]
        self._initialized = True
        self._inbound.put_nowait(body)
        if "error" in message:
            return
        try:
            await self._open_stream(None, required=True)
        except HTTPTransportError as exc:
            if exc.status_code not in (404, 410):
                await self._abandon()
                raise
            # the server forgot the connection right after answering initialize (it closed it): a link that
            # dropped, as a WebSocket closed after its initialize answer, not an endpoint that is missing
            self._fail(
                ConnectionLost(
                    f"{self._description} ended connection {connection_id} right after initialize "
                    f"(HTTP {exc.status_code} for its event stream)",
                    reason=f"http {exc.status_code}",
                )
            )
            return
        except BaseException:
            await self._abandon()
            raise
        self._last_answer = asyncio.get_running_loop().time()
        if self._options.ping_interval is not None:
            self._keepalive_task = asyncio.get_running_loop().create_task(
                self._keepalive(self._options.ping_interval), name=f"acp-client keepalive {self._description}"
            )
        _log.info(
            "http_connected",
            transport=self._description,
            connection_id=connection_id,
            http_version=self.http_version,
        )

    # ------------------------------------------------------------------ POST

    async def _post(self, frame: str, session_id: str | None, message: Any) -> None:
        """Hand one frame to the POST sequence and return (as a WebSocket send returns once the frame is in
        the socket's buffer). POSTs stay strictly ordered: a POST starts only after the previous one was
        answered, so ``send`` waits while the previous POST is unanswered, never for its own. A caller
        cancelled after ``send`` returned has sent its request (so the connection sends
        ``$/cancel_request``). The answer is handled by the exchange: a lost link fails the transport;
        another rejection of a request becomes a JSON-RPC error response (``-32603``, ``data.httpStatus``)
        so the caller is not left waiting."""
        await self._post_lock.acquire()
        if self._failure is not None:
            self._post_lock.release()
            raise self._lost()
        headers = self._request_headers(content=True, session_id=session_id)
        exchange = _Exchange(frame, message, self._post_lock)
        task = asyncio.get_running_loop().create_task(
            self._post_exchange(exchange, headers), name=f"acp-client post {self._description}"
        )
        self._post_tasks.add(task)
        task.add_done_callback(lambda done: self._post_done(done, exchange))

    def _post_done(self, task: asyncio.Task[None], exchange: _Exchange) -> None:
        self._post_tasks.discard(task)
        exchange.release()
        if not task.cancelled():
            task.exception()  # a bug in the exchange would show in the log, not as "never retrieved"

    async def _post_exchange(self, exchange: _Exchange, headers: list[tuple[str, str]]) -> None:
        async def trace(name: str, info: Mapping[str, Any]) -> None:
            # the body is written: the next POST may start (it cannot overtake this one any more)
            if name.endswith("send_request_body.complete"):
                exchange.release()

        client = self._client_for_posts()
        frame = exchange.frame
        self.stats.posts += 1
        try:
            response = await client.post(
                self._url, content=frame.encode(), headers=headers, extensions={"trace": trace}
            )
        except httpx.HTTPError as exc:
            self._fail(
                ConnectionLost(f"POST to {self._description} failed: {_describe_error(exc)}", reason="post failed")
            )
            return
        self._last_answer = asyncio.get_running_loop().time()
        self._store_cookies(response)
        self.http_version = response.http_version
        status = response.status_code
        body = response.text.strip() if status == 200 else ""
        inline = self._inline_frames(response, body)
        if status in (202, 204) or (status == 200 and inline is not None):
            self.stats.frames_out += 1
            self.stats.bytes_out += len(frame.encode())
            for text in inline or ():  # a server may answer inline (JSON, or an event stream as body)
                self._inbound.put_nowait(text)
            return
        if status in _LOST_STATUSES:
            what = "no longer knows connection" if status == 404 else "refused a request on connection"
            self._fail(
                ConnectionLost(
                    f"{self._description} {what} {self.connection_id} (HTTP {status})",
                    reason=f"http {status}",
                )
            )
            return
        error = _http_error(f"{self._description} rejected a POST with HTTP {status}", response)
        self.stats.posts_rejected += 1
        message = exchange.message
        request_id = message.get("id") if isinstance(message, dict) and "method" in message else None
        _log.warning("http_post_rejected", transport=self._description, status_code=status, request_id=request_id)
        if _is_id(request_id):
            self._inbound.put_nowait(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "error": {
                            "code": -32603,
                            "message": str(error),
                            "data": {
                                "httpStatus": status,
                                "contentType": error.content_type,
                                "bodyExcerpt": error.body_excerpt,
                            },
                        },
                    }
                )
            )

    def _inline_frames(self, response: httpx.Response, body: str) -> list[str] | None:
        """The frames of a ``200`` POST answer: none for an empty body, the body when it is JSON, the events
        of an event-stream body; ``None`` when the body is something else (an HTML page: a rejection)."""
        if not body:
            return []
        if "text/event-stream" in response.headers.get("content-type", "").lower():
            frames = []
            for event in SSEParser().feed(body.encode() + b"\n\n"):
                if event.event == "message" and isinstance(_loads(event.data), dict | list):
                    frames.append(event.data)
                else:
                    self.stats.sse_discarded += 1
            return frames
        return [body] if isinstance(_loads(body), dict | list) else None

    def _route_outgoing(self, message: Any) -> str | None:
        """Note what an outgoing message means for routing; return its ``Acp-Session-Id`` (or ``None``)."""
        if not isinstance(message, dict):
            return None
        method = message.get("method")
        if isinstance(method, str):
            session_id = _session_id(message.get("params"))
            request_id = message.get("id")
            if _is_id(request_id) and (method in _ATTACH_METHODS or method in _CREATE_METHODS):
                attached = self._streams.get(session_id) if method in _ATTACH_METHODS else None
                self._attaching[request_id] = (
                    method,
                    session_id if method in _ATTACH_METHODS else None,
                    attached.state_updates if attached is not None else 0,
                )
            if method in _DETACH_METHODS and session_id is not None and session_id in self._streams:
                self._streams[session_id].detached = True
                if _is_id(request_id):
                    self._detaching[request_id] = session_id
            stream = self._streams.get(session_id) if session_id is not None else None
            if stream is not None and stream.opened.done() and not stream.opened.exception():
                return session_id
            return None
        request_id = message.get("id")
        if _is_id(request_id):  # our answer to an agent request: back to the session it came from
            return self._inbound_routes.pop(request_id, None)
        return None

    # ------------------------------------------------------------------ SSE streams

    async def _open_stream(self, session_id: str | None, *, required: bool) -> bool:
        """Open an SSE stream and wait until the server answered it. ``False`` (or, when ``required``, the
        typed error) when it was refused."""
        stream = _Stream(session_id)
        self._streams[session_id] = stream
        stream.task = asyncio.get_running_loop().create_task(
            self._run_stream(stream), name=f"acp-client sse {stream.label} {self._description}"
        )
        try:
            async with asyncio.timeout(self._options.open_timeout):
                await asyncio.shield(stream.opened)
        except TimeoutError:
            stream.task.cancel()
            self._streams.pop(session_id, None)
            error = ConnectError(f"opening the {stream.label} stream of {self._description} timed out")
            if required:
                raise error from None
            _log.warning("http_stream_open_timeout", transport=self._description, stream=stream.label)
            return False
        except _StreamRefused as refused:
            self._streams.pop(session_id, None)
            if session_id is not None:
                self.stats.session_streams_refused += 1
                self._refusals[session_id] = refused.status
            if required:
                raise HTTPTransportError(
                    f"{self._description} refused the {stream.label} stream with HTTP {refused.status}",
                    status_code=refused.status,
                    content_type=refused.content_type,
                    body_excerpt=refused.excerpt,
                ) from None
            _log.info(
                "http_session_stream_refused",
                transport=self._description,
                session_id=session_id,
                status_code=refused.status,
            )
            return False
        except (ConnectError, ConnectionLost):
            self._streams.pop(session_id, None)
            if required:
                raise
            return False
        return True

    async def _run_stream(self, stream: _Stream) -> None:
        parser = SSEParser(max_event_bytes=self._options.max_frame_bytes)
        resuming = False
        try:
            while True:
                try:
                    async with self._open_sse(stream.session_id, parser.last_event_id if resuming else None) as resp:
                        if not stream.opened.done():
                            stream.opened.set_result(None)
                        self.stats.streams_opened += 1
                        if resuming:
                            self.stats.streams_resumed += 1
                            _log.info(
                                "http_stream_resumed",
                                transport=self._description,
                                stream=stream.label,
                                last_event_id=parser.last_event_id,
                            )
                        bytes_before = parser.bytes_in
                        ended = await self._read_stream(stream, resp, parser)
                except _StreamRefused as refused:
                    if not stream.opened.done():
                        stream.opened.set_exception(refused)
                        return
                    ended = f"the server refused to resume it (HTTP {refused.status})"
                    self._lose_stream(stream, ended)
                    return
                except (ConnectError, ConnectionLost) as exc:
                    if not stream.opened.done():
                        stream.opened.set_exception(exc)
                        return
                    self._lose_stream(stream, str(exc))
                    return
                if self._failure is not None:
                    return
                if stream.detached and stream.session_id is not None:
                    self._streams.pop(stream.session_id, None)
                    return
                if parser.last_event_id is None or (resuming and parser.bytes_in == bytes_before):
                    # no ids, or a resumed stream that ended again before delivering anything: full recovery
                    self._lose_stream(stream, ended)
                    return
                # the server labels its events: reopen with Last-Event-ID, no re-initialize, no replay
                _log.info("http_stream_resuming", transport=self._description, stream=stream.label, reason=ended)
                resuming = True
        except asyncio.CancelledError:
            if not stream.opened.done():
                stream.opened.cancel()
            raise
        except Exception as exc:  # a bug must not leave recv waiting forever
            _log.exception("http_stream_failed", transport=self._description, stream=stream.label)
            if not stream.opened.done():
                stream.opened.set_exception(ConnectionLost(f"the {stream.label} stream failed: {exc!r}"))
            self._lose_stream(stream, f"the stream reader failed: {exc!r}")

    @contextlib.asynccontextmanager
    async def _open_sse(self, session_id: str | None, last_event_id: str | None) -> AsyncIterator[httpx.Response]:
        headers = self._request_headers(content=False, session_id=session_id)
        headers.append(("Accept", "text/event-stream"))
        headers.append(("Cache-Control", "no-cache"))
        headers.append(("Accept-Encoding", "identity"))
        if last_event_id is not None:
            headers.append(("Last-Event-ID", last_event_id))
        # a client (hence a TCP connection) per long-lived stream: see the module docstring
        client = self._new_client(httpx.Timeout(self._options.open_timeout, read=None))
        try:
            request = client.build_request("GET", self._url, headers=headers)
            try:
                async with asyncio.timeout(self._options.open_timeout):
                    response = await client.send(request, stream=True)
            except TimeoutError as exc:
                raise ConnectError(f"opening an event stream of {self._description} timed out") from exc
            except httpx.HTTPError as exc:
                raise ConnectionLost(
                    f"opening an event stream of {self._description} failed: {_describe_error(exc)}",
                    reason="stream open failed",
                ) from exc
            try:
                self._store_cookies(response)
                content_type = response.headers.get("content-type", "")
                if response.status_code != 200 or "text/event-stream" not in content_type.lower():
                    excerpt = ""
                    with contextlib.suppress(httpx.HTTPError, TimeoutError):
                        async with asyncio.timeout(self._options.close_timeout):
                            excerpt = (await response.aread()).decode("utf-8", "replace")[:_EXCERPT]
                    raise _StreamRefused(response.status_code, content_type or None, excerpt)
                yield response
            finally:
                await response.aclose()
        finally:
            await client.aclose()

    async def _read_stream(self, stream: _Stream, response: httpx.Response, parser: SSEParser) -> str:
        """Read events until the stream ends; return why it ended. With liveness on, a watchdog ends the read
        after ``ping_interval + ping_timeout`` without a byte."""
        idle = None
        if self._options.ping_interval is not None and self._options.ping_timeout is not None:
            idle = self._options.ping_interval + self._options.ping_timeout
        if idle is None:
            return await self._read_chunks(stream, response, parser)
        loop = asyncio.get_running_loop()
        reader = asyncio.ensure_future(self._read_chunks(stream, response, parser))
        try:
            planned = loop.time() + idle
            while True:
                done, _ = await asyncio.wait({reader}, timeout=max(0.0, planned - loop.time()))
                if done:
                    return reader.result()
                now = loop.time()
                if now - planned > max(_STALL_GRACE, idle / 2):
                    # this process's loop was blocked past the deadline (not the peer's fault): the data may
                    # be waiting in the socket; give the read a full interval again
                    planned = now + idle
                    continue
                waiting_since = stream.waiting_since
                if waiting_since is None or now - waiting_since < idle:  # busy delivering, or read recently
                    planned = (now if waiting_since is None else waiting_since) + idle
                    continue
                _log.warning("http_stream_idle_timeout", transport=self._description, stream=stream.label, idle=idle)
                return f"no data or keepalive for {idle:g} s"
        finally:
            if not reader.done():
                reader.cancel()
                await asyncio.wait({reader})
            elif not reader.cancelled():
                reader.exception()  # retrieved (it is re-raised above when it matters)

    async def _read_chunks(self, stream: _Stream, response: httpx.Response, parser: SSEParser) -> str:
        loop = asyncio.get_running_loop()
        stream.waiting_since = loop.time()
        try:
            async for chunk in response.aiter_raw():
                stream.waiting_since = None
                comments = parser.comments
                try:
                    events = parser.feed(chunk)
                except ValueError:
                    return f"an event exceeded max_frame_bytes ({self._options.max_frame_bytes})"
                self.stats.sse_comments += parser.comments - comments
                for event in events:
                    if event.event != "message":
                        self.stats.sse_discarded += 1
                        _log.debug("http_sse_event_discarded", transport=self._description, sse_event=event.event)
                        continue
                    message = _loads(event.data)
                    if not isinstance(message, dict | list):
                        self.stats.sse_discarded += 1
                        _log.warning("http_sse_data_not_json", transport=self._description, stream=stream.label)
                        continue
                    await self._deliver(stream, event.data, message)
                stream.waiting_since = loop.time()
        except httpx.HTTPError as exc:
            return f"the stream broke: {_describe_error(exc)}"
        return "the server ended the stream"

    async def _deliver(self, stream: _Stream, text: str, message: Any) -> None:
        stream.events += 1
        if stream.session_id is not None and isinstance(message, dict) and message.get("method") == "session/update":
            params = message.get("params")
            update = params.get("update") if isinstance(params, dict) else None
            if isinstance(update, dict) and update.get("sessionUpdate") == "state_update":
                stream.state_updates += 1
        stream.changed.set()
        if isinstance(message, dict):
            request_id = message.get("id")
            if "method" in message:
                if _is_id(request_id):  # an agent request: its answer goes back with the session header
                    session_id = stream.session_id or _session_id(message.get("params"))
                    if session_id is not None:
                        self._inbound_routes[request_id] = session_id
            elif _is_id(request_id) and request_id in self._attaching:
                text = await self._settle_attach(request_id, message, text)
            elif _is_id(request_id) and request_id in self._detaching:
                self._end_session_stream(self._detaching.pop(request_id), closed="error" not in message)
        self._inbound.put_nowait(text)

    def _end_session_stream(self, session_id: str, *, closed: bool) -> None:
        """The session was closed or deleted: its stream is no longer needed (on failure it stays)."""
        stream = self._streams.get(session_id)
        if stream is None:
            return
        if not closed:
            stream.detached = False
            return
        del self._streams[session_id]
        if stream.task is not None and stream.task is not asyncio.current_task():
            stream.task.cancel()

    async def _settle_attach(self, request_id: int | str, message: dict[str, Any], text: str) -> str:
        """A load/resume/new answer: make sure the session's stream is open before the result is seen."""
        method, session_id, state_updates = self._attaching.pop(request_id)
        result = message.get("result")
        if "error" in message:
            return text
        if session_id is None and isinstance(result, dict):
            session_id = _session_id(result)
        if session_id is None:
            return text
        stream = self._streams.get(session_id)
        if stream is not None:
            replays = method == "session/load" or self.protocol_version == 2  # v1 resume replays nothing
            if method in _ATTACH_METHODS and replays and stream.opened.done() and not stream.opened.exception():
                await self._replay_barrier(stream, method, state_updates)
            return text
        if await self._open_stream(session_id, required=False):
            return text
        if method not in _ATTACH_METHODS:
            _log.warning("http_new_session_stream_refused", transport=self._description, session_id=session_id)
            return text
        # the agent accepted the load/resume but its HTTP server will not route the session here
        status = self._refusals.get(session_id)
        return json.dumps(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "error": {
                    "code": -32002,
                    "message": (
                        f"session {session_id} cannot be attached over this HTTP connection: the server "
                        f"refused its session stream (HTTP {status})"
                    ),
                    "data": {
                        "sessionId": session_id,
                        "transport": "streamable-http",
                        "reason": "session stream refused",
                        "httpStatus": status,
                    },
                },
            }
        )

    async def _replay_barrier(self, stream: _Stream, method: str, state_updates: int) -> None:
        """Hold a load/resume result (connection stream) until its replay (session stream) is in.

        The two streams are separate HTTP requests, so the result can overtake the replay sent before it.
        A v2 ``session/resume`` ends its replay with a ``state_update`` snapshot: wait for it. Otherwise
        (v1, or an agent without the snapshot) wait until the session stream was quiet for
        ``REPLAY_QUIET`` seconds. Either wait is capped by ``REPLAY_HOLD_MAX``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REPLAY_HOLD_MAX
        snapshot = method == "session/resume" and self.protocol_version == 2
        while self._failure is None:
            if snapshot and stream.state_updates > state_updates:
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                if snapshot:
                    _log.debug("http_replay_snapshot_not_seen", transport=self._description, session=stream.label)
                return
            stream.changed.clear()
            try:
                async with asyncio.timeout(remaining if snapshot else min(remaining, REPLAY_QUIET)):
                    await stream.changed.wait()
            except TimeoutError:
                if not snapshot:
                    return  # quiet long enough

    def _lose_stream(self, stream: _Stream, why: str) -> None:
        if self._failure is not None:
            return
        if stream.detached:
            self._streams.pop(stream.session_id, None)
            return
        self._fail(
            ConnectionLost(
                f"the {stream.label} event stream of {self._description} was lost: {why}",
                reason=why,
            )
        )

    # ------------------------------------------------------------------ helpers

    def _new_client(self, timeout: httpx.Timeout) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            http1=self._http1,
            http2=self._http2,
            verify=self._verify,
            timeout=timeout,
            cookies=http.cookiejar.CookieJar(policy=_RejectAllCookies()),
            follow_redirects=False,
            trust_env=True,
        )

    def _client_for_posts(self) -> httpx.AsyncClient:
        if self._post_client is None:
            timeout = self._options.ping_timeout
            self._post_client = self._new_client(
                httpx.Timeout(
                    connect=self._options.open_timeout, read=timeout, write=timeout, pool=self._options.open_timeout
                )
            )
        return self._post_client

    def _request_headers(self, *, content: bool, session_id: str | None = None) -> list[tuple[str, str]]:
        headers = [("User-Agent", _USER_AGENT), *self._headers]
        if content:
            headers.append(("Content-Type", "application/json"))
            headers.append(("Accept", "application/json, text/event-stream"))
        if self.connection_id is not None:
            headers.append((CONNECTION_ID_HEADER, self.connection_id))
        if self.protocol_version is not None:
            headers.append((PROTOCOL_VERSION_HEADER, str(self.protocol_version)))
        if session_id is not None:
            headers.append((SESSION_ID_HEADER, session_id))
        cookie = self._cookies.header_value(self._host, secure=self._secure)
        if cookie is not None:
            headers.append(("Cookie", cookie))
        return headers

    def _store_cookies(self, response: httpx.Response) -> None:
        values = response.headers.get_list("set-cookie")
        if values:
            self._cookies.store(self._host, values)

    def _fail(self, loss: ConnectionLost, *, cancel: bool = True, wake: bool = True) -> None:
        if wake:
            self._wake_reader()
        if self._failure is not None:
            return
        self._failure = loss
        if not cancel:  # a local close: the streams end after the DELETE
            return
        _log.info("http_link_lost", transport=self._description, connection_id=self.connection_id, reason=loss.reason)
        current = asyncio.current_task()
        for stream in self._streams.values():
            if stream.task is not None and stream.task is not current:
                stream.task.cancel()
        if self._keepalive_task is not None and self._keepalive_task is not current:
            self._keepalive_task.cancel()

    def _wake_reader(self) -> None:
        """Let ``recv`` raise (once every frame received before was delivered)."""
        if not self._reader_woken:
            self._reader_woken = True
            self._inbound.put_nowait(None)

    def _lost(self) -> ConnectionLost:
        assert self._failure is not None
        return self._failure.with_request_sent(False)

    async def _abandon(self) -> None:
        """Opening failed: release everything (no DELETE: there is no connection to end). ``recv`` is woken
        only by ``close()``: the error raised from ``send`` is the one the caller must see."""
        self._fail(ConnectionLost(f"opening {self._description} failed", reason="open failed"), wake=False)
        await self._release()

    async def _release(self) -> None:
        tasks: list[asyncio.Task[Any]] = [
            s.task for s in self._streams.values() if s.task is not None and s.task is not asyncio.current_task()
        ]
        tasks.extend(self._post_tasks)
        if self._keepalive_task is not None and self._keepalive_task is not asyncio.current_task():
            tasks.append(self._keepalive_task)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._streams.clear()
        if self._post_client is not None:
            client, self._post_client = self._post_client, None
            await client.aclose()

    async def _close_impl(self) -> None:
        lost_before = self._failure is not None
        self._fail(ConnectionLost("the connection was closed by the client", reason="closed locally"), cancel=False)
        if self.connection_id is not None and not lost_before:
            client = self._client_for_posts()
            try:
                async with asyncio.timeout(self._options.close_timeout):
                    response = await client.delete(self._url, headers=self._request_headers(content=False))
                self._store_cookies(response)
            except (httpx.HTTPError, TimeoutError) as exc:
                _log.debug("http_delete_failed", transport=self._description, error=_describe_error(exc))
        await self._release()
        _log.debug("transport_closed", transport=self._description, stats=self.stats.as_dict())

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        cid = f" connection_id={self.connection_id}" if self.connection_id else ""
        return f"<StreamableHTTPTransport {self._description} {state}{cid}>"


# ---------------------------------------------------------------------------- module helpers


_SSL_CONTEXT: _ssl.SSLContext | None = None


def _default_ssl_context() -> _ssl.SSLContext:
    """One verifying context per process: building one loads the trust store (tens of ms), and every
    stream's client would otherwise build its own."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = _ssl.create_default_context()
    return _SSL_CONTEXT


def _http_versions(options: TransportOptions) -> tuple[bool, bool]:
    """(HTTP/1.1 allowed, HTTP/2 allowed) for httpx; ``prior_knowledge`` allows only HTTP/2 (h2c)."""
    return options.http2 != "prior_knowledge", bool(options.http2)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _is_id(value: Any) -> TypeGuard[int | str]:
    return isinstance(value, int | str) and not isinstance(value, bool)


def _session_id(params: Any) -> str | None:
    if isinstance(params, dict):
        value = params.get("sessionId")
        if isinstance(value, str):
            return value
    return None


def _describe_error(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _http_error(message: str, response: httpx.Response) -> HTTPTransportError:
    try:
        excerpt = response.text[:_EXCERPT]
    except (httpx.HTTPError, UnicodeDecodeError):
        excerpt = ""
    safe = redact_headers(response.headers.multi_items())
    return HTTPTransportError(
        message,
        status_code=response.status_code,
        content_type=response.headers.get("content-type"),
        body_excerpt=excerpt,
        retry_after=parse_retry_after(response.headers.get("retry-after")),
        headers={k: v for k, v in safe.items() if v != "<redacted>"},
    )


def _connect_error(exc: httpx.HTTPError, description: str, open_timeout: float | None) -> ConnectError:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, _ssl.SSLCertVerificationError):
            return TLSError(f"the TLS handshake with {description} failed: {cause}")
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, httpx.TimeoutException):
        return ConnectError(f"opening {description} timed out ({_describe_error(exc)}, open_timeout={open_timeout})")
    return ConnectError(f"could not connect to {description}: {_describe_error(exc)}")


def _describe_url(url: httpx.URL) -> str:
    host = f"[{url.host}]" if ":" in url.host else url.host
    port = url.port or (443 if url.scheme == "https" else 80)
    return f"{url.scheme}://{host}:{port}{url.path or '/'}"


async def _resolve_headers(headers: HeadersLike | HeadersProvider | None) -> list[tuple[str, str]]:
    if headers is None:
        return []
    if callable(headers):
        produced = headers()
        if inspect.isawaitable(produced):
            produced = await produced
        headers = produced
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(str(name), str(value)) for name, value in items]


async def open_http(url: str, options: TransportOptions) -> StreamableHTTPTransport:
    """Prepare a Streamable HTTP link to ``url`` (``http://`` or ``https://``) with a client's options.

    The header provider (if any) is called here, once per link. No request is made until the first
    :meth:`~StreamableHTTPTransport.send`, which must be ``initialize``: its failures (refused, TLS,
    HTTP status) are raised from there as :class:`ConnectError` subclasses.
    """
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise UsageError(f"not an HTTP URL: {type(exc).__name__}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise UsageError("a Streamable HTTP URL must be http:// or https:// with a host")
    description = _describe_url(parsed)
    if parsed.scheme == "http" and options.ssl is not None:
        raise UsageError(f"an ssl context was given for {description}; use an https:// URL for TLS")
    headers = await _resolve_headers(options.headers)
    _log.debug("http_opening", transport=description, headers=redact_headers(headers))
    return StreamableHTTPTransport(parsed, options, headers, description=description)


async def open_endpoint(url: str, options: TransportOptions) -> Transport:
    """Open ``url`` with the transport ``options.transport`` asks for.

    ``"http"`` (or ``None`` with an http(s) URL): Streamable HTTP. ``"websocket"``: a WebSocket on the same
    endpoint (``http`` → ``ws``). ``"auto"``: try the WebSocket upgrade first and fall back to Streamable
    HTTP when the server refuses it with an HTTP status (it does not serve WebSocket there); other
    failures (refused, TLS) are raised as they are.
    """
    from acp_client.exceptions import HandshakeRejected
    from acp_client.transports.websocket import open_websocket

    kind = options.transport
    scheme, _, rest = url.partition("://")
    ws_url = ("wss" if scheme in ("https", "wss") else "ws") + "://" + rest
    http_url = ("https" if scheme in ("https", "wss") else "http") + "://" + rest
    if kind == "websocket":
        return await open_websocket(ws_url, options)
    if kind == "auto":
        try:
            return await open_websocket(ws_url, options)
        except HandshakeRejected as exc:
            _log.info("http_websocket_refused_fallback", transport=http_url.split("?", 1)[0], status=exc.status_code)
    return await open_http(http_url, options)

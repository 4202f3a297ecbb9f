"""The Streamable HTTP transport of the ACP remote-transport RFD, on ``httpx`` (HTTP/1.1 and HTTP/2).

This package is the only part of acp-client that imports ``httpx``. The transport is composed of objects that
each own their state: ``_base.LinkState`` (what the link shares: headers, cookies, httpx clients, the
negotiated connection id and version, the counters) and ``_base.Inbox`` (the frames for ``recv``, the link's
failure), ``_order.StreamRouter`` (routing and ordering across streams; it owns the ``_streams.StreamReader``:
SSE readers, resumption, watchdog), and ``_posts.PostPipeline`` (the ordered POSTs, status mapping,
liveness); the sans-I/O :mod:`acp_client.transports.http._sse` parses event streams.

The transport maps the RFD's POST/SSE exchange onto the text frames of :class:`~acp_client.transports.Transport`:

- The first frame sent must be ``initialize``: it is POSTed without ``Acp-Connection-Id`` and answered
  ``200`` with the JSON response as body and the new ``Acp-Connection-Id`` header. The body becomes the
  first received frame; the connection-scoped SSE stream (``GET``) is opened before ``send`` returns.
- Every later frame is one POST with ``Acp-Connection-Id`` and ``Acp-Protocol-Version`` (the negotiated
  version), plus ``Acp-Session-Id`` when the message belongs to a session whose stream is open here; the
  server answers ``202`` and the response arrives on an SSE stream. A request whose params name a session
  not attached here (a ``session/status`` probe, a close/delete) opens that session's stream first, so it
  carries the header and its answer, which the server routes to that stream, is received (see
  ``_order.StreamRouter.outgoing``). A POST starts once the previous one's
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
event ``http_stream_resumed``, and ``TransportOptions.on_stream_resumed`` is called with the stream's session
id, ``None`` for the connection stream). Without ids, when the server refuses (404/409), or when the stream
was reopened :data:`RESUME_ATTEMPTS` times in a row without a message back, the link is lost and the
full recovery (re-initialize) runs. An agent that advertises ``capabilities.transport.resumable`` (PR 2208)
stamps messages with ``_meta["acp/cursor"]``: the resume point when there is no ``id:``, and a replayed
message whose cursor was delivered before is dropped (``stats.replayed_duplicates``); its ``keepaliveSeconds``
sets the read-idle bound (:data:`SILENT_INTERVALS` silent intervals). Cursors over :data:`MAX_CURSOR_BYTES` are
never sent back; :data:`DEDUP_WINDOW` recent cursors per stream are remembered.

Ordering across streams: a ``session/load`` result travels on the connection stream, its replay on the session
stream; as two HTTP requests they can arrive in either order. The result is held until the replay is in (a
v2 ``session/resume``: until its ``state_update`` snapshot; a v1 ``session/load``: until the answer to a
``REPLAY_BARRIER_METHOD`` request of the transport's own, POSTed with the session's header after the result
came, arrives on the session stream behind the replay; at most ``REPLAY_HOLD_MAX``), so what the layers
above see follows the agent's order.

Liveness: every SSE stream has a read-idle watchdog (``ping_interval + ping_timeout`` without a byte, where
servers send a keepalive comment about every 15 s, fails the link), and after ``ping_interval`` without an
answered POST an ``OPTIONS`` request checks the client-to-server direction (:meth:`~StreamableHTTPTransport.ping`,
answered with any status within ``ping_timeout``).

Cookies: one :class:`~acp_client.transports.CookieJar` (the client's) receives every ``Set-Cookie`` and
supplies the ``Cookie`` header of every request; httpx's own cookie store is disabled. ``close()`` first lets
the POSTs already queued be answered (a ``session/cancel`` sent just before it still arrives), then sends
``DELETE``; each step is bounded by ``close_timeout``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from acp_client._logging import loggable_headers, redact_headers
from acp_client.exceptions import (
    ConnectError,
    ConnectionLost,
    H2COnlyServer,
    HTTPTransportError,
    NotAnACPEndpoint,
    UsageError,
)
from acp_client.schema.transport import ResumableTransport
from acp_client.transports._answer import is_definite_status, shown
from acp_client.transports._cookies import CookieJar
from acp_client.transports.base import Decoded, Transport
from acp_client.transports.http._base import (
    CONNECTION_ID_HEADER,
    HTTPX_LOG_SCRUBBER,
    PROTOCOL_VERSION_HEADER,
    SESSION_ID_HEADER,
    BoundedResponse,
    HTTPTransportStats,
    LinkState,
    _connect_error,
    _describe_error,
    _http_error,
    _loads,
    _log,
)
from acp_client.transports.http._cursors import DEDUP_WINDOW as DEDUP_WINDOW
from acp_client.transports.http._cursors import MAX_CURSOR_BYTES as MAX_CURSOR_BYTES
from acp_client.transports.http._h2c import speaks_h2c
from acp_client.transports.http._inbox import Inbox
from acp_client.transports.http._order import REPLAY_BARRIER_METHOD as REPLAY_BARRIER_METHOD
from acp_client.transports.http._order import REPLAY_HOLD_MAX as REPLAY_HOLD_MAX
from acp_client.transports.http._order import StreamRouter
from acp_client.transports.http._posts import INITIALIZE_TIMEOUT as INITIALIZE_TIMEOUT
from acp_client.transports.http._posts import PostPipeline
from acp_client.transports.http._streams import RESUME_ATTEMPTS as RESUME_ATTEMPTS
from acp_client.transports.http._streams import SILENT_INTERVALS as SILENT_INTERVALS
from acp_client.transports.options import TransportOptions, resolve_headers

__all__ = [
    "CONNECTION_ID_HEADER",
    "PROTOCOL_VERSION_HEADER",
    "SESSION_ID_HEADER",
    "HTTPTransportStats",
    "StreamableHTTPTransport",
    "open_endpoint",
    "open_http",
]


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
        tried_first: str | None = None,
    ) -> None:
        """Prepare the link; use :func:`open_http` instead. ``tried_first`` (from ``transport="auto"``) says
        what was tried before this link; a failed ``initialize`` adds it to its error's text."""
        self._tried_first = tried_first
        self._link = LinkState(url, options, headers, description=description, versions=_http_versions(options))
        self._inbox = Inbox(on_lost=self._on_lost)
        self._posts = PostPipeline(self._link, self._inbox)
        self._router = StreamRouter(self._link, self._inbox, self._posts.post)
        self._close_task: asyncio.Task[None] | None = None
        self._initialized = False
        # httpx logs every request URL at INFO: a URL with a password or a token is scrubbed there
        self._scrubbed_url = str(url) if HTTPX_LOG_SCRUBBER.hide(str(url)) else None

    @property
    def connection_id(self) -> str | None:
        """The server's ``Acp-Connection-Id`` (``None`` before ``initialize`` was answered)."""
        return self._link.connection_id

    @property
    def protocol_version(self) -> int | None:
        """The protocol version of the ``initialize`` answer, sent as ``Acp-Protocol-Version``."""
        return self._link.protocol_version

    @property
    def http_version(self) -> str | None:
        """The HTTP version of the last POST response (``"HTTP/1.1"``, ``"HTTP/2"``)."""
        return self._posts.http_version

    @property
    def stats(self) -> HTTPTransportStats:
        """Live counters (see :class:`HTTPTransportStats`)."""
        return self._link.stats

    @property
    def description(self) -> str:
        """``http(s)://host:port/path`` without user info or query."""
        return self._link.description

    @property
    def closed(self) -> bool:
        """``True`` once the link was closed or found dead."""
        return self._inbox.failed

    @property
    def cookies(self) -> CookieJar:
        """The jar every request of this link uses (the client's shared one)."""
        return self._link.cookies

    @property
    def session_streams(self) -> list[str]:
        """Ids of the sessions whose SSE stream is open on this link."""
        return self._router.session_streams

    async def send(self, frame: str) -> None:
        """POST one frame (see the module docstring). Raises ``ConnectionLost`` once the link is gone,
        :class:`HTTPTransportError` for an answer the transport cannot use."""
        if not isinstance(frame, str):
            raise UsageError(f"a frame must be str, not {type(frame).__name__}")
        if self._inbox.failed:
            raise self._inbox.lost()
        message = _loads(frame)
        if not self._initialized:
            if not (isinstance(message, dict) and message.get("method") == "initialize" and "id" in message):
                raise UsageError("the first frame sent over Streamable HTTP must be the initialize request")
            try:
                await self._initialize(frame)
            except ConnectError as exc:
                if self._tried_first:  # the error was made for this call alone: retell it, keep its type
                    exc.args = (f"{exc} (transport='auto' tried Streamable HTTP second; {self._tried_first})",)
                raise
            return
        session_header = await self._router.outgoing(message)
        await self._posts.post(frame, session_header, message)

    async def recv(self) -> str:
        """The next frame from any stream (or the ``initialize`` body). Raises ``ConnectionLost`` after the
        link is gone and every frame received before was delivered."""
        item = await self._inbox.get()
        self._link.stats.frames_in += 1
        self._link.stats.bytes_in += len(item) if item.isascii() else len(item.encode())  # isascii is O(1)
        return item

    async def recv_batch(self) -> list[str | Decoded]:
        """Every frame received and not yet taken (at least one), in order; the notifications the stream
        reader decoded to route them come decoded (see :class:`~acp_client.transports.base.BatchTransport`).
        Raises like :meth:`recv`."""
        items = await self._inbox.get_batch()
        stats = self._link.stats
        stats.frames_in += len(items)
        text = "".join([item if type(item) is str else item[0] for item in items])
        stats.bytes_in += len(text) if text.isascii() else len(text.encode())
        return items

    async def ping(self, timeout: float | None = None) -> float:
        """Check the request path now: an ``OPTIONS`` request to the endpoint, answered with any status, within
        ``timeout`` (default ``ping_timeout``). Returns the round trip in seconds. When no answer comes the
        link is failed (``ConnectionLost``), as a WebSocket whose Pong does not come. (The event streams
        are watched by their read-idle watchdog; this covers the client-to-server direction.)"""
        return await self._posts.ping(timeout)

    async def close(self) -> None:
        """Let the POSTs already queued be answered, stop every stream, ``DELETE`` the connection (each
        bounded by ``close_timeout``), release the sockets. Idempotent; concurrent callers wait for the same
        close."""
        if self._close_task is None:
            self._close_task = asyncio.get_running_loop().create_task(
                self._close_impl(), name=f"acp-client close {self._link.description}"
            )
        await asyncio.shield(self._close_task)

    async def _initialize(self, frame: str) -> None:
        description = self._link.description
        try:
            response = await self._posts.initialize(frame)
        except httpx.HTTPError as exc:
            await self._abandon()
            if await self._h2c_only(exc):
                raise H2COnlyServer(
                    f"{description} speaks only HTTP/2 over cleartext (h2c): it answered the HTTP/1.1 "
                    f"initialize POST with HTTP/2 frames ({_describe_error(exc)}); connect with "
                    'TransportOptions(http2="prior_knowledge")'
                ) from exc
            raise _connect_error(exc, description, self._link.options.open_timeout) from exc
        message = await self._check_initialize_answer(response)
        body = response.text
        connection_id = response.headers.get(CONNECTION_ID_HEADER)
        if not connection_id:
            if "error" in message:  # e.g. authentication required: let the client see the agent's error
                self._initialized = True
                self._inbox.put(body)
                self._inbox.fail(ConnectionLost(f"{description} refused initialize", reason="initialize refused"))
                return
            await self._abandon()
            raise _http_error(
                f"{description} answered initialize without an {CONNECTION_ID_HEADER} header: "
                "the server does not speak the ACP Streamable HTTP transport",
                response,
            )
        result = message.get("result")
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        resumable = ResumableTransport.from_initialize(result if isinstance(result, dict) else None)
        self._link.negotiated(connection_id, version if isinstance(version, int) else None, resumable)
        self._initialized = True
        self._inbox.put(body)
        if "error" in message:
            return
        if not await self._open_connection_stream(connection_id):
            return
        self._posts.start_keepalive()
        _log.info(
            "http_connected",
            transport=description,
            connection_id=connection_id,
            http_version=self._posts.http_version,
        )

    async def _h2c_only(self, exc: httpx.HTTPError) -> bool:
        """An HTTP/1.1 ``initialize`` to an ``http://`` URL got an answer HTTP/1.1 cannot parse: is the
        server one that speaks only h2c? (One HTTP/2 preface exchange tells; see :mod:`._h2c`.)"""
        url = self._link.url
        if not isinstance(exc, httpx.RemoteProtocolError) or url.scheme != "http":
            return False
        if self._link.options.http2 == "prior_knowledge":
            return False
        # only bytes that are not HTTP/1.1 ("illegal status line", ...) point at h2c: a server that closed
        # without answering (restarting, overloaded) is retried, though a dual-stack server also answers the
        # HTTP/2 preface
        if "illegal" not in str(exc).lower():
            return False
        return await speaks_h2c(url.host, url.port or 80, self._link.options.open_timeout or 10.0)

    async def _check_initialize_answer(self, response: BoundedResponse) -> dict[str, Any]:
        """The JSON-RPC message of a ``200`` JSON answer to ``initialize``; otherwise abandon the link and
        raise the typed error."""
        description = self._link.description
        answered = _answer_line(response)
        if response.http_version not in ("HTTP/1.1", "HTTP/2"):  # an HTTP/1.0 server: never an ACP endpoint
            await self._abandon()
            server = response.headers.get("server")
            raise NotAnACPEndpoint(
                description,
                status_line=answered,
                server=shown(server) if server else None,
                status_code=response.status_code,
                request="the initialize POST",
                headers=_safe_headers(response),
            )
        if response.status_code != 200:
            await self._abandon()
            definite = ""
            if is_definite_status(response.status_code):
                server = response.headers.get("server")
                by = f", Server: {shown(server)}" if server else ""
                definite = f" ({answered!r}{by}): not an ACP endpoint"
            raise _http_error(
                f"{description} answered initialize with HTTP {response.status_code}{definite}", response
            )
        if response.truncated:
            await self._abandon()
            limit = self._link.options.max_frame_bytes
            raise _http_error(
                f"{description} answered initialize with a body over {limit} bytes (max_frame_bytes); "
                "the rest was not read",
                response,
            )
        content_type = response.headers.get("content-type", "")
        message = _loads(response.text)
        if "json" not in content_type.lower() or not isinstance(message, dict):
            await self._abandon()
            raise _http_error(
                f"{description} answered initialize with a body that is not a JSON-RPC response "
                f"({content_type or 'no content type'}): not an ACP Streamable HTTP endpoint",
                response,
            )
        return message

    async def _open_connection_stream(self, connection_id: str) -> bool:
        """Open the connection's event stream; ``False`` when the server ended the connection meanwhile."""
        try:
            await self._router.open_connection_stream()
        except HTTPTransportError as exc:
            if exc.status_code not in (404, 410):
                await self._abandon()
                raise
            # the server forgot the connection right after answering initialize (it closed it): a link that
            # dropped, as a WebSocket closed after its initialize answer, not an endpoint that is missing
            self._inbox.fail(
                ConnectionLost(
                    f"{self._link.description} ended connection {connection_id} right after initialize "
                    f"(HTTP {exc.status_code} for its event stream)",
                    reason=f"http {exc.status_code}",
                )
            )
            return False
        except BaseException:
            await self._abandon()
            raise
        return True

    def _on_lost(self, loss: ConnectionLost) -> None:
        """The link failed (not by a local close): stop reading the streams and pinging."""
        _log.info(
            "http_link_lost",
            transport=self._link.description,
            connection_id=self._link.connection_id,
            reason=loss.reason,
        )
        self._router.cancel()
        self._posts.cancel_keepalive()

    async def _abandon(self) -> None:
        """Opening failed: release everything (no DELETE: there is no connection to end). ``recv`` is woken
        only by ``close()``: the error raised from ``send`` is the one the caller must see."""
        self._inbox.fail(ConnectionLost(f"opening {self._link.description} failed", reason="open failed"), wake=False)
        await self._release()

    async def _release(self) -> None:
        tasks: list[asyncio.Task[None]] = [*self._router.tasks(), *self._posts.tasks()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._router.clear()
        await self._posts.aclose()
        if self._scrubbed_url is not None:
            url, self._scrubbed_url = self._scrubbed_url, None
            HTTPX_LOG_SCRUBBER.show(url)

    async def _close_impl(self) -> None:
        lost_before = self._inbox.failed
        self._inbox.fail(
            ConnectionLost("the connection was closed by the client", reason="closed locally"), cancel=False
        )
        if self._link.connection_id is not None and not lost_before:
            await self._posts.drain()  # what was sent before close() goes out before the DELETE
            await self._posts.delete()
        await self._release()
        _log.debug("transport_closed", transport=self._link.description, stats=self._link.stats.as_dict())

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        cid = f" connection_id={self.connection_id}" if self.connection_id else ""
        return f"<StreamableHTTPTransport {self._link.description} {state}{cid}>"


def _answer_line(response: BoundedResponse) -> str:
    """The status line of ``response`` as the server sent it (shown in a message: cut and escaped)."""
    reason = response.response.reason_phrase
    return shown(f"{response.http_version} {response.status_code} {reason}".rstrip())


def _safe_headers(response: BoundedResponse) -> dict[str, str]:
    safe = redact_headers(response.headers.multi_items())
    return {k: v for k, v in safe.items() if v != "<redacted>"}


def _http_versions(options: TransportOptions) -> tuple[bool, bool]:
    """(HTTP/1.1 allowed, HTTP/2 allowed) for httpx; ``prior_knowledge`` allows only HTTP/2 (h2c)."""
    return options.http2 != "prior_knowledge", bool(options.http2)


def _describe_url(url: httpx.URL) -> str:
    host = f"[{url.host}]" if ":" in url.host else url.host
    port = url.port or (443 if url.scheme == "https" else 80)
    return f"{url.scheme}://{host}:{port}{url.path or '/'}"


async def open_http(
    url: str, options: TransportOptions, *, tried_first: str | None = None
) -> StreamableHTTPTransport:
    """Prepare a Streamable HTTP link to ``url`` (``http://`` or ``https://``) with a client's options.

    The header provider (if any) is called here, once per link. No request is made until the first
    :meth:`~StreamableHTTPTransport.send`, which must be ``initialize``: its failures (refused, TLS,
    HTTP status) are raised from there as :class:`ConnectError` subclasses; ``tried_first`` (a note on an
    earlier attempt, from ``transport="auto"``) is added to their text.
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
    headers = await resolve_headers(options.headers)
    _log.debug("http_opening", transport=description, headers=loggable_headers(headers))
    return StreamableHTTPTransport(parsed, options, headers, description=description, tried_first=tried_first)


async def open_endpoint(url: str, options: TransportOptions) -> Transport:
    """Open ``url`` with the transport ``options.transport`` asks for.

    ``"http"`` (or ``None`` with an http(s) URL): Streamable HTTP. ``"websocket"``: a WebSocket on the same
    endpoint (``http`` → ``ws``). ``"auto"``: try the WebSocket upgrade first and fall back to Streamable
    HTTP when the server refuses it with an HTTP status (it does not serve WebSocket there); other
    failures (refused, TLS, an answer that is not HTTP at all) are not retried over HTTP. Either way a
    failure under ``"auto"`` says so: its text names the URL the caller gave and every attempt made (the
    ``ws://`` one and, after a fallback, the ``http://`` one), so a ``ws://`` URL nobody wrote is never shown
    unexplained.
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
            if isinstance(exc, NotAnACPEndpoint) and exc.status_code == 0:
                raise  # the answer was not HTTP at all: there is no HTTP server to fall back to
            _log.info("http_websocket_refused_fallback", transport=http_url.split("?", 1)[0], status=exc.status_code)
            first = f"the WebSocket upgrade at {ws_url}, tried first, was refused: {exc}"
        except ConnectError as exc:
            # the error was made for this call alone: its text is retold, its type and fields stay
            exc.args = (
                f"could not connect to {url} (transport='auto' tries the WebSocket upgrade first, and only an HTTP "
                f"answer to it falls back to Streamable HTTP): {exc}",
            )
            raise
        return await open_http(http_url, options, tried_first=first)
    return await open_http(http_url, options)

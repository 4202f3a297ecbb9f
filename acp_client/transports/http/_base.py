"""What every part of the Streamable HTTP transport shares: its constants and counters, the state of one link
and the request plumbing (headers, cookies, httpx clients, failing the link). The transport is
:class:`acp_client.transports.http.StreamableHTTPTransport`; it is built in layers, each a module:
this base, the SSE stream readers (:mod:`._http_streams`), the ordering across streams
(:mod:`._http_order`) and the POST pipeline (:mod:`._http_posts`).
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import ssl as _ssl
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
)
from acp_client.transports._cookies import CookieJar, parse_retry_after
from acp_client.transports.base import TransportStats
from acp_client.transports.options import TransportOptions

_log = get_logger("acp_client.transports.http")  # one logger name for every module of the transport

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
_EXCERPT = 300


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


class _HTTPLinkBase:
    """The state of one link and the plumbing every layer of the transport uses."""

    connection_id: str | None
    protocol_version: int | None
    http_version: str | None
    stats: HTTPTransportStats

    def __init__(
        self,
        url: httpx.URL,
        options: TransportOptions,
        headers: list[tuple[str, str]],
        *,
        description: str,
        versions: tuple[bool, bool],
    ) -> None:
        self._url = url
        self._options = options
        self._headers = headers
        self._description = description
        self._host = url.host
        self._secure = url.scheme == "https"
        self._cookies: CookieJar = options.cookies
        self._http1, self._http2 = versions
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


_SSL_CONTEXT: _ssl.SSLContext | None = None


def _default_ssl_context() -> _ssl.SSLContext:
    """One verifying context per process: building one loads the trust store (tens of ms), and every
    stream's client would otherwise build its own."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = _ssl.create_default_context()
    return _SSL_CONTEXT


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

"""What every part of the Streamable HTTP transport shares: its constants and counters, the link's state and
request plumbing (:class:`LinkState`: headers, cookies, httpx clients, what ``initialize`` negotiated); the
inbound queue with the link's failure is :class:`~._inbox.Inbox`. The transport,
:class:`acp_client.transports.http.StreamableHTTPTransport`, owns one of each and composes them with a
stream reader (:mod:`._streams`), a router across the streams (:mod:`._order`) and a POST pipeline
(:mod:`._posts`); the parts see each other only through the Protocols their modules define."""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import logging
import ssl as _ssl
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard

import httpx

from acp_client import _observe
from acp_client._logging import get_logger, redact_headers, redact_url
from acp_client._version import __version__
from acp_client.exceptions import (
    ConnectError,
    HTTPTransportError,
    TLSError,
)
from acp_client.schema.transport import ResumableTransport
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
#: Bytes of an error body read at most (for its excerpt); the rest is never read.
ERROR_BODY_LIMIT = 4096


class BoundedResponse:
    """A response whose body was read with a bound: ``body`` holds at most the limit, and ``truncated``
    says the server sent more (which was not read). ``response`` is httpx's (headers, cookies, version;
    its body is not loaded)."""

    __slots__ = ("body", "response", "truncated")

    def __init__(self, response: httpx.Response, body: bytes, truncated: bool) -> None:
        self.response = response
        self.body = body
        self.truncated = truncated

    @property
    def status_code(self) -> int:
        return self.response.status_code

    @property
    def headers(self) -> httpx.Headers:
        return self.response.headers

    @property
    def http_version(self) -> str:
        return self.response.http_version

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


async def read_bounded(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes of an open streamed ``response`` (decoded), and whether there was more."""
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > limit:
            del data[limit:]
            return bytes(data), True
    return bytes(data), False


async def send_bounded(
    client: httpx.AsyncClient, method: str, url: httpx.URL | str, *, limit: int, **options: Any
) -> BoundedResponse:
    """Send a request and read at most ``limit`` bytes of a ``200`` answer's body, and at most
    :data:`ERROR_BODY_LIMIT` of any other (its excerpt): a hostile server's 200 MB body is never held."""
    async with client.stream(method, url, **options) as response:
        body, truncated = await read_bounded(response, limit if response.status_code == 200 else ERROR_BODY_LIMIT)
    return BoundedResponse(response, body, truncated)


@dataclass
class HTTPTransportStats(TransportStats):
    """:class:`TransportStats` plus the Streamable HTTP counters.

    ``posts`` counts POST requests; ``streams_opened`` SSE GETs answered 200; ``streams_resumed`` streams
    reopened with ``Last-Event-ID`` without a recovery; ``sse_discarded`` events dropped (not JSON, or an
    ``event:`` type other than ``message``); ``sse_comments`` comment lines (keepalives);
    ``session_streams_refused`` session-scoped GETs the server refused; ``posts_rejected`` POSTs answered
    with an unusable status (400, 415 ...); ``replayed_duplicates`` messages of a resumable stream dropped
    because their ``_meta["acp/cursor"]`` was delivered before (a server that replayed too much);
    ``stream_resumes_refused`` resumes (``Last-Event-ID``) the server refused (``409`` and the like), each
    followed by the full recovery.
    """

    posts: int = 0
    streams_opened: int = 0
    streams_resumed: int = 0
    sse_discarded: int = 0
    sse_comments: int = 0
    session_streams_refused: int = 0
    posts_rejected: int = 0
    replayed_duplicates: int = 0
    stream_resumes_refused: int = 0


class _RejectAllCookies(http.cookiejar.DefaultCookiePolicy):
    """httpx's own cookie store stays empty: cookies live in the client's shared CookieJar."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False

    def return_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False


class LinkView(Protocol):
    """What the stream reader, the router and the POST pipeline may read of a link's shared state."""

    @property
    def url(self) -> httpx.URL: ...

    @property
    def options(self) -> TransportOptions: ...

    @property
    def description(self) -> str: ...

    @property
    def connection_id(self) -> str | None: ...

    @property
    def protocol_version(self) -> int | None: ...

    @property
    def resumable(self) -> ResumableTransport | None: ...

    @property
    def stats(self) -> HTTPTransportStats: ...

    @property
    def ssl_context(self) -> _ssl.SSLContext: ...

    def new_client(self, timeout: httpx.Timeout) -> httpx.AsyncClient: ...

    def request_headers(self, *, content: bool, session_id: str | None = None) -> list[tuple[str, str]]: ...

    def store_cookies(self, response: httpx.Response) -> None: ...


class LinkState:
    """The shared state of one link: where it goes, how its requests are made (headers, cookies, httpx
    clients) and what ``initialize`` negotiated. The transport owns it and is the only writer of
    :attr:`connection_id` and :attr:`protocol_version` (through :meth:`negotiated`); its parts read it as a
    :class:`LinkView`. ``stats`` is the one live counter record; each counter has one writing part."""

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
        self._http1, self._http2 = versions  # (HTTP/1.1 allowed, HTTP/2 allowed)
        self._verify: _ssl.SSLContext = options.ssl if options.ssl is not None else _default_ssl_context()
        self._connection_id: str | None = None
        self._protocol_version: int | None = None
        self._resumable: ResumableTransport | None = None
        self._stats = HTTPTransportStats()

    @property
    def url(self) -> httpx.URL:
        return self._url

    @property
    def options(self) -> TransportOptions:
        return self._options

    @property
    def description(self) -> str:
        return self._description

    @property
    def cookies(self) -> CookieJar:
        return self._cookies

    @property
    def connection_id(self) -> str | None:
        return self._connection_id

    @property
    def protocol_version(self) -> int | None:
        return self._protocol_version

    @property
    def resumable(self) -> ResumableTransport | None:
        """What the agent advertised as ``capabilities.transport.resumable`` (``None``: not advertised)."""
        return self._resumable

    @property
    def stats(self) -> HTTPTransportStats:
        return self._stats

    @property
    def ssl_context(self) -> _ssl.SSLContext:
        """The TLS context every client of the link verifies with."""
        return self._verify

    def negotiated(
        self, connection_id: str, protocol_version: int | None, resumable: ResumableTransport | None = None
    ) -> None:
        """Record what the ``initialize`` answer established (sent on every later request), and whether the
        agent advertised resumable streams."""
        self._connection_id = connection_id
        self._protocol_version = protocol_version
        self._resumable = resumable

    def new_client(self, timeout: httpx.Timeout) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            http1=self._http1,
            http2=self._http2,
            verify=self._verify,
            timeout=timeout,
            cookies=http.cookiejar.CookieJar(policy=_RejectAllCookies()),
            follow_redirects=False,
            trust_env=True,
        )

    def request_headers(self, *, content: bool, session_id: str | None = None) -> list[tuple[str, str]]:
        headers = [("User-Agent", _USER_AGENT), *self._headers]
        if content:
            headers.append(("Content-Type", "application/json"))
            headers.append(("Accept", "application/json, text/event-stream"))
            headers += _observe.outgoing_headers()  # a POST carries the caller's trace context (otel extra)
        if self._connection_id is not None:
            headers.append((CONNECTION_ID_HEADER, self._connection_id))
        if self._protocol_version is not None:
            headers.append((PROTOCOL_VERSION_HEADER, str(self._protocol_version)))
        if session_id is not None:
            headers.append((SESSION_ID_HEADER, session_id))
        cookie = self._cookies.header_value(self._host, secure=self._secure)
        if cookie is not None:
            headers.append(("Cookie", cookie))
        return headers

    def store_cookies(self, response: httpx.Response) -> None:
        values = response.headers.get_list("set-cookie")
        if values:
            self._cookies.store(self._host, values)


class HttpxLogScrubber(logging.Filter):
    """httpx logs every request at INFO with its full URL (``HTTP Request: POST http://me:pw@host/acp?token=...``).
    While a link of ours uses a URL with userinfo or a token-like query value, this filter sits on the
    ``httpx`` logger and redacts exactly those URLs in its records (see :func:`~acp_client._logging.redact_url`);
    the application's own httpx requests are left alone, and the filter goes when the last such link closes."""

    def __init__(self) -> None:
        super().__init__("acp_client")
        self._urls: dict[str, int] = {}

    def hide(self, url: str) -> bool:
        """Scrub ``url`` from httpx's records until :meth:`show`; ``False`` (nothing to do) when it holds no secret."""
        if redact_url(url) == url:
            return False
        if not self._urls:
            logging.getLogger("httpx").addFilter(self)
        self._urls[url] = self._urls.get(url, 0) + 1
        return True

    def show(self, url: str) -> None:
        """One link of ``url`` closed."""
        count = self._urls.get(url, 0) - 1
        if count > 0:
            self._urls[url] = count
            return
        self._urls.pop(url, None)
        if not self._urls:
            logging.getLogger("httpx").removeFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(str(arg) in self._urls for arg in args if isinstance(arg, httpx.URL | str)):
            record.args = tuple(
                redact_url(str(arg)) if isinstance(arg, httpx.URL | str) and str(arg) in self._urls else arg
                for arg in args
            )
        return True


#: The one scrubber of the process (links of several clients share it).
HTTPX_LOG_SCRUBBER = HttpxLogScrubber()

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


def _http_error(message: str, response: BoundedResponse) -> HTTPTransportError:
    excerpt = response.text[:_EXCERPT]
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

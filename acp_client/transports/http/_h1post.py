"""The POSTs of an HTTP/1.1 link: an :class:`h11.Connection` per connection, driven over asyncio streams.

Why not httpx for these: one httpx request costs several times what the HTTP/1.1 exchange itself costs, and
a POST is on the path of every request the client sends (a ``session/status`` probe is a POST plus its answer
on an event stream). ``benchmarks/post_clients.py`` (one run, 2-core machine, keep-alive, POSTs answered
``202``, p50): httpx 624 µs, aiohttp 211 µs, h11 on asyncio streams 182 µs. h11 writes and parses the
messages (framing, header syntax, the connection's state); this module owns the sockets, the pool, the bounds
and the timeouts. httpx stays for everything else: HTTP/2, the SSE GETs, ``initialize``, ``OPTIONS``,
``DELETE``, and POSTs through a proxy.

What it keeps of httpx's behaviour as the transport uses it: keep-alive connections reused one request at a
time (a small pool: the POST pipeline lets the next POST start while the previous one waits for its answer);
no redirects followed (a 3xx is an answer like any other); TLS with the link's context, refusing a server
that picks another protocol than HTTP/1.1 by ALPN; the POST client's connect, write and read timeouts;
bodies read with a bound into a :class:`~._base.BoundedResponse` (``truncated`` past the limit, and the
connection is then dropped); failures raised as the ``httpx`` exception types the pipeline maps
(``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``, ``WriteTimeout``, ``WriteError``, ``ReadError``,
``RemoteProtocolError``, ``LocalProtocolError``). It never logs, so no URL can leak from it.

Stricter than h11 where a connection is reused or a request is written: a request header value must be
ASCII without control characters (h11 lets ``\\x01`` and ``\\x7f`` through); a connection is not reused
when bytes came that no request asked for (after an answer, or while it was idle: they would become the
next POST's answer), nor after an answer framed by both ``Content-Length`` and ``Transfer-Encoding``
(RFC 9112 6.3: close after such a message).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl as _ssl
import urllib.request
from collections.abc import Callable

import h11
import httpx

from acp_client.transports.http._base import ERROR_BODY_LIMIT, BoundedResponse

#: The longest response head (status line and headers) accepted, and the longest trailer block.
HEAD_LIMIT = 64 * 1024
#: interim (1xx) answers read before the real one, and trailer lines after a chunked body (a peer
#: that sends more is refused)
INTERIM_MAX = 8
TRAILERS_MAX = 64
_READ_SIZE = 65536
_FRAMING = frozenset({"content-length", "transfer-encoding"})  # ours to write: the caller's are dropped
_TOKEN = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")  # a header name (RFC 9110 5.1), as h11 checks it
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # control characters (a tab is allowed)
_WHITESPACE = " \t"


class NotHTTP11(Exception):
    """The server chose another protocol by ALPN: these POSTs must go through httpx."""


def usable(url: httpx.URL, http_version: str | None) -> bool:
    """Whether the POSTs of a link to ``url`` may go this way: the server answered ``initialize`` over
    HTTP/1.1 and no proxy from the environment applies (httpx honours those; this path does not)."""
    if http_version != "HTTP/1.1" or url.scheme not in ("http", "https"):
        return False
    proxies = urllib.request.getproxies()
    proxied = url.scheme in proxies or "all" in proxies
    return not proxied or bool(urllib.request.proxy_bypass(url.host))


def _nothing_buffered(reader: asyncio.StreamReader) -> bool:
    """Whether ``reader`` holds no bytes and no end of stream, asked without waiting: one step of
    ``read()`` returns at once when something is buffered, and suspends (closed again here) when not."""
    step = reader.read(_READ_SIZE)
    try:
        step.send(None)
    except StopIteration:
        return False  # bytes nobody asked for, or the end of the connection
    except Exception:  # the connection failed while idle (a reset): not reusable either
        return False
    finally:
        step.close()
    return True


class _Conn:
    """One connection: its streams and the h11 state of the exchange on it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=HEAD_LIMIT)

    def reusable(self) -> bool:
        """Idle, open, and nothing arrived since its last answer."""
        return not self.writer.is_closing() and _nothing_buffered(self.reader)

    def close(self) -> None:
        self.writer.close()


class H1Poster:
    """Sends requests to one origin over HTTP/1.1 keep-alive connections, each an h11 connection on asyncio
    streams."""

    def __init__(self, url: httpx.URL, ssl_context: _ssl.SSLContext | None, timeout: httpx.Timeout) -> None:
        self._host = url.host
        secure = url.scheme == "https"
        default = 443 if secure else 80
        self._port = url.port or default
        self._ssl = ssl_context if secure else None
        host = f"[{self._host}]" if ":" in self._host else self._host  # an IPv6 literal
        self._authority = (host if self._port == default else f"{host}:{self._port}").encode("ascii")
        self._target = url.raw_path
        self._timeout = timeout
        self._idle: list[_Conn] = []

    async def _connect(self) -> _Conn:
        try:
            async with asyncio.timeout(self._timeout.connect):
                reader, writer = await asyncio.open_connection(
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._host if self._ssl is not None else None,
                    limit=HEAD_LIMIT,
                )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connecting to {self._authority.decode()} timed out") from exc
        except OSError as exc:  # ssl.SSLError included (its chain names a certificate failure)
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        ssl_object = writer.get_extra_info("ssl_object")
        if ssl_object is not None and ssl_object.selected_alpn_protocol() not in (None, "http/1.1"):
            writer.close()
            raise NotHTTP11(ssl_object.selected_alpn_protocol())
        return _Conn(reader, writer)

    def _request(self, method: str, headers: list[tuple[str, str]], content: bytes) -> h11.Request:
        """The request h11 will write: our ``Host`` (unless the caller names one, as httpx lets it: a proxy in
        front, a virtual host), the caller's headers but its framing, our ``Content-Length``."""
        fields: list[tuple[bytes, bytes]] = [(b"Host", self._authority)]
        for name, value in headers:
            lowered = name.lower()
            if lowered in _FRAMING:
                continue  # the body is framed here, by its length
            if lowered == "host":
                del fields[0]
            if not _TOKEN.fullmatch(name) or not value.isascii() or _BAD_VALUE.search(value):
                raise httpx.LocalProtocolError(f"illegal header {name!r}")  # named, never its value
            fields.append((name.encode("ascii"), value.strip(_WHITESPACE).encode("ascii")))
        fields.append((b"Content-Length", str(len(content)).encode("ascii")))
        try:
            return h11.Request(method=method, target=self._target, headers=fields)
        except h11.LocalProtocolError:  # its text would quote the value, which may be a secret
            raise httpx.LocalProtocolError("illegal header: h11 refused a value") from None

    async def send(
        self,
        method: str,
        headers: list[tuple[str, str]],
        content: bytes,
        *,
        limit: int,
        body_sent: Callable[[], None] | None = None,
    ) -> BoundedResponse:
        """One request; at most ``limit`` bytes of a ``200`` answer's body are read (``ERROR_BODY_LIMIT`` of
        any other). ``body_sent`` is called once the request is written."""
        request = self._request(method, headers, content)
        conn = None
        while self._idle:
            candidate = self._idle.pop()
            if candidate.reusable():
                conn = candidate
                break
            candidate.close()
        if conn is None:
            conn = await self._connect()
        try:
            response, keep = await self._exchange(conn, request, content, limit, body_sent)
        except BaseException:
            conn.close()
            raise
        if keep:
            self._idle.append(conn)
        else:
            conn.close()
        return response

    async def _exchange(
        self, conn: _Conn, request: h11.Request, content: bytes, limit: int, body_sent: Callable[[], None] | None
    ) -> tuple[BoundedResponse, bool]:
        state = conn.h11
        try:
            data = state.send(request)
            if content:
                data += state.send(h11.Data(data=content))
            data += state.send(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc)) from None
        try:
            conn.writer.write(data)
            async with asyncio.timeout(self._timeout.write):
                await conn.writer.drain()
        except TimeoutError as exc:
            raise httpx.WriteTimeout("writing the request timed out") from exc
        except OSError as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__) from exc
        if body_sent is not None:
            body_sent()
        try:
            async with asyncio.timeout(self._timeout.read):
                return await self._response(conn, limit)
        except TimeoutError as exc:
            raise httpx.ReadTimeout("waiting for the response timed out") from exc
        except h11.RemoteProtocolError as exc:
            if exc.error_status_hint == 431:  # h11's bound on an incomplete event: a head or a trailer block
                what = f"a response head or trailer block over HEAD_LIMIT={HEAD_LIMIT} bytes"
                raise httpx.RemoteProtocolError(what) from None
            raise httpx.RemoteProtocolError(str(exc)) from None
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc

    async def _response(self, conn: _Conn, limit: int) -> tuple[BoundedResponse, bool]:
        """Read the answer: its head (after at most ``INTERIM_MAX`` interim ones) and its body, at most
        ``limit`` bytes of a ``200`` answer's and ``ERROR_BODY_LIMIT`` of any other."""
        state, reader = conn.h11, conn.reader
        interim = 0
        while True:
            event = state.next_event()
            if event is h11.NEED_DATA:
                state.receive_data(await reader.read(_READ_SIZE))
            elif isinstance(event, h11.InformationalResponse):
                interim += 1
                if interim > INTERIM_MAX:
                    raise httpx.RemoteProtocolError(f"more than INTERIM_MAX={INTERIM_MAX} interim (1xx) answers")
            elif isinstance(event, h11.Response):
                break
            else:  # h11 yields a Response (or raises) before anything else
                raise httpx.RemoteProtocolError(f"unexpected {type(event).__name__} before the response")
        head = event
        bound = limit if head.status_code == 200 else ERROR_BODY_LIMIT
        body = bytearray()
        truncated = False
        while True:
            event = state.next_event()
            if event is h11.NEED_DATA:
                state.receive_data(await reader.read(_READ_SIZE))
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > bound:
                    del body[bound:]
                    truncated = True
                    break
            elif isinstance(event, h11.EndOfMessage):
                if len(event.headers) > TRAILERS_MAX:
                    raise httpx.RemoteProtocolError(f"more than TRAILERS_MAX={TRAILERS_MAX} trailer lines")
                break
            else:  # ConnectionClosed before the end: h11 raises instead; anything else is not ours to read
                raise httpx.RemoteProtocolError(f"unexpected {type(event).__name__} in the response body")
        keep = not truncated and self._next_cycle(state, head)
        response = httpx.Response(
            head.status_code,
            headers=list(head.headers),
            extensions={"http_version": b"HTTP/" + head.http_version, "reason_phrase": bytes(head.reason)},
        )
        return BoundedResponse(response, bytes(body), truncated), keep

    @staticmethod
    def _next_cycle(state: h11.Connection, head: h11.Response) -> bool:
        """Whether the connection may carry another request, and if so, readied for it."""
        if state.our_state is not h11.DONE or state.their_state is not h11.DONE:
            return False  # Connection: close, HTTP/1.0, a body delimited by the end of the connection
        if state.trailing_data[0]:
            return False  # bytes past the answer (a body after a 204, an answer nobody asked for)
        names = {name for name, _ in head.headers}
        if b"content-length" in names and b"transfer-encoding" in names:
            return False  # framed two ways: whoever read it the other way is out of step (RFC 9112 6.3)
        state.start_next_cycle()
        return True

    async def aclose(self) -> None:
        """Close every idle connection."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        for conn in idle:
            with contextlib.suppress(OSError):
                await conn.writer.wait_closed()

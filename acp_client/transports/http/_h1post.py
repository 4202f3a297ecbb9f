"""The POSTs of an HTTP/1.1 link, written and read on asyncio streams without an HTTP library, beside httpx.

Why: one httpx request costs several times what the HTTP/1.1 exchange itself costs, and a POST is on the
path of every request the client sends (a ``session/status`` probe is a POST plus its answer on an event
stream). ``benchmarks/post_clients.py`` (one run, 2-core machine, keep-alive, POSTs answered ``202``, p50):
httpx 624 µs, aiohttp 211 µs, h11 on asyncio streams 182 µs, this module's way 110 µs. h11 is a dependency
already and was the first choice; its per-request validation and state machine cost more than the exchange,
and a POST answered with a status and a small body needs neither: the request is a few known header lines,
the answer a status line, headers and a body framed by ``Content-Length``, chunks or the end of the
connection. httpx stays for everything else: HTTP/2, the SSE GETs, ``initialize``, ``OPTIONS``, ``DELETE``,
and POSTs through a proxy.

What it keeps of httpx's behaviour as the transport uses it: keep-alive connections reused one request at a
time (a small pool: the POST pipeline lets the next POST start while the previous one waits for its answer);
no redirects followed (a 3xx is an answer like any other); TLS with the link's context, refusing a server
that picks another protocol than HTTP/1.1 by ALPN; the POST client's connect, write and read timeouts;
header names and values checked as h11 checks them (no CR, LF or NUL in a value, names are tokens), so
nothing can be smuggled into the request; bodies read with a bound into a
:class:`~._base.BoundedResponse` (``truncated`` past the limit, and the connection is then dropped);
failures raised as the ``httpx`` exception types the pipeline maps (``ConnectError``, ``ConnectTimeout``,
``ReadTimeout``, ``WriteTimeout``, ``WriteError``, ``ReadError``, ``RemoteProtocolError``,
``LocalProtocolError``). It never logs, so no URL can leak from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl as _ssl
import urllib.request
from collections.abc import Callable

import httpx

from acp_client.transports.http._base import ERROR_BODY_LIMIT, BoundedResponse

#: The longest response head (status line and headers) accepted.
HEAD_LIMIT = 64 * 1024
_FRAMING = frozenset({"content-length", "transfer-encoding"})  # ours to write: the caller's are dropped
_TOKEN = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(r"[\x00\r\n]")
#: interim (1xx) answers read before the real one, and trailer lines after a chunked body (a peer
#: that sends more is refused: each line is bounded by HEAD_LIMIT, their number by these)
INTERIM_MAX = 8
TRAILERS_MAX = 64
_CHECKED_MAX = 1024  # distinct header lines remembered as valid (then the memory is cleared)
_NO_BODY = frozenset({204, 304})
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


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def reusable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class H1Poster:
    """Sends requests to one origin over HTTP/1.1 keep-alive connections on asyncio streams."""

    def __init__(self, url: httpx.URL, ssl_context: _ssl.SSLContext | None, timeout: httpx.Timeout) -> None:
        self._host = url.host
        secure = url.scheme == "https"
        default = 443 if secure else 80
        self._port = url.port or default
        self._ssl = ssl_context if secure else None
        host = f"[{self._host}]" if ":" in self._host else self._host  # an IPv6 literal
        self._authority = host if self._port == default else f"{host}:{self._port}"
        self._target = url.raw_path.decode("ascii")
        self._timeout = timeout
        self._idle: list[_Conn] = []
        self._checked: set[tuple[str, str]] = set()

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
            raise httpx.ConnectTimeout(f"connecting to {self._authority} timed out") from exc
        except OSError as exc:  # ssl.SSLError included (its chain names a certificate failure)
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        ssl_object = writer.get_extra_info("ssl_object")
        if ssl_object is not None and ssl_object.selected_alpn_protocol() not in (None, "http/1.1"):
            writer.close()
            raise NotHTTP11(ssl_object.selected_alpn_protocol())
        return _Conn(reader, writer)

    def _request(self, method: str, headers: list[tuple[str, str]], content: bytes) -> bytes:
        lines = [f"{method} {self._target} HTTP/1.1\r\nHost: {self._authority}\r\n"]
        checked = self._checked
        for item in headers:
            lowered = item[0].lower()
            if lowered in _FRAMING:
                continue  # the body is framed here, by its length
            if lowered == "host":  # the caller's Host wins, as with httpx (a proxy in front, a virtual host)
                lines[0] = f"{method} {self._target} HTTP/1.1\r\n"
            if item not in checked:
                name, value = item
                if not _TOKEN.fullmatch(name) or _BAD_VALUE.search(value) or not value.isascii():
                    raise httpx.LocalProtocolError(f"illegal header {name!r}")
                if len(checked) >= _CHECKED_MAX:
                    checked.clear()
                checked.add(item)
            lines.append(f"{item[0]}: {item[1].strip(_WHITESPACE)}\r\n")
        lines.append(f"Content-Length: {len(content)}\r\n\r\n")
        return "".join(lines).encode("ascii") + content

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
            response, keep = await self._exchange(conn, request, limit, body_sent)
        except BaseException:
            conn.close()
            raise
        if keep:
            self._idle.append(conn)
        else:
            conn.close()
        return response

    async def _exchange(
        self, conn: _Conn, request: bytes, limit: int, body_sent: Callable[[], None] | None
    ) -> tuple[BoundedResponse, bool]:
        try:
            conn.writer.write(request)
            async with asyncio.timeout(self._timeout.write):
                await conn.writer.drain()
        except TimeoutError as exc:
            raise httpx.WriteTimeout("writing the request timed out") from exc
        except OSError as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__) from exc
        if body_sent is not None:
            body_sent()
        reader = conn.reader
        try:
            async with asyncio.timeout(self._timeout.read):
                for _ in range(INTERIM_MAX + 1):
                    version, status, reason, fields = _head(await reader.readuntil(b"\r\n\r\n"))
                    if not 100 <= status < 200:
                        break  # 1xx: an interim answer, the real one follows
                else:
                    raise httpx.RemoteProtocolError(f"more than INTERIM_MAX={INTERIM_MAX} interim (1xx) answers")
                bound = limit if status == 200 else ERROR_BODY_LIMIT
                body, truncated, framed = await _body(reader, status, fields, bound)
        except TimeoutError as exc:
            raise httpx.ReadTimeout("waiting for the response timed out") from exc
        except asyncio.IncompleteReadError as exc:
            raise httpx.RemoteProtocolError("the server closed the connection in the middle of a response") from exc
        except asyncio.LimitOverrunError as exc:
            raise httpx.RemoteProtocolError(f"a response head or chunk line over {HEAD_LIMIT} bytes") from exc
        except (OSError, ValueError) as exc:  # ValueError: the stream's limit, or a malformed number
            raise httpx.RemoteProtocolError(str(exc) or type(exc).__name__) from exc
        connection = ",".join(v for k, v in fields if k == "connection").lower()
        keep = framed and not truncated and version == "1.1" and "close" not in connection
        response = httpx.Response(
            status,
            headers=fields,
            extensions={"http_version": f"HTTP/{version}".encode(), "reason_phrase": reason.encode("latin-1")},
        )
        return BoundedResponse(response, body, truncated), keep

    async def aclose(self) -> None:
        """Close every idle connection."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        for conn in idle:
            with contextlib.suppress(OSError):
                await conn.writer.wait_closed()


def _head(raw: bytes) -> tuple[str, int, str, list[tuple[str, str]]]:
    """Parse a response head: (version ``"1.1"``/``"1.0"``, status, reason, headers with lower-case names)."""
    lines = raw[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or parts[0] not in ("HTTP/1.1", "HTTP/1.0") or not (parts[1].isdigit() and len(parts[1]) == 3):
        raise httpx.RemoteProtocolError(f"illegal status line: {lines[0][:100]!r}")
    fields = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.fullmatch(name):
            raise httpx.RemoteProtocolError(f"illegal header line: {line[:100]!r}")
        fields.append((name.lower(), value.strip(_WHITESPACE)))
    return parts[0][5:], int(parts[1]), parts[2] if len(parts) > 2 else "", fields


async def _body(
    reader: asyncio.StreamReader, status: int, fields: list[tuple[str, str]], bound: int
) -> tuple[bytes, bool, bool]:
    """The body, at most ``bound`` bytes: (body, truncated, framed: the connection may carry another)."""
    if status in _NO_BODY:
        return b"", False, True
    encodings = [v.strip().lower() for k, value in fields if k == "transfer-encoding" for v in value.split(",")]
    if encodings:
        if encodings[-1] != "chunked":
            return await _until_eof(reader, bound)
        return await _chunked(reader, bound)
    lengths = {v for k, v in fields if k == "content-length"}
    if not lengths:
        return await _until_eof(reader, bound)
    if len(lengths) > 1 or not next(iter(lengths)).isdigit():
        raise httpx.RemoteProtocolError(f"illegal Content-Length: {sorted(lengths)!r}")
    length = int(next(iter(lengths)))
    if length > bound:
        return await reader.readexactly(bound) if bound else b"", True, False
    return await reader.readexactly(length) if length else b"", False, True


async def _chunked(reader: asyncio.StreamReader, bound: int) -> tuple[bytes, bool, bool]:
    body = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        size_text = line[:-2].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise httpx.RemoteProtocolError(f"illegal chunk size: {size_text[:20]!r}") from None
        if size == 0:
            for _ in range(TRAILERS_MAX + 1):  # trailers, ignored
                if await reader.readuntil(b"\r\n") == b"\r\n":
                    return bytes(body), False, True
            raise httpx.RemoteProtocolError(f"more than TRAILERS_MAX={TRAILERS_MAX} trailer lines")
        if len(body) + size > bound:
            body += await reader.readexactly(bound - len(body))
            return bytes(body), True, False
        body += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise httpx.RemoteProtocolError("a chunk did not end with CRLF")


async def _until_eof(reader: asyncio.StreamReader, bound: int) -> tuple[bytes, bool, bool]:
    """A body delimited by the end of the connection (which then cannot be reused)."""
    body = bytearray()
    while len(body) <= bound:
        chunk = await reader.read(65536)
        if not chunk:
            return bytes(body), False, False
        body += chunk
    return bytes(body[:bound]), True, False

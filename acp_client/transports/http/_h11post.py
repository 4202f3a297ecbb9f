"""The POSTs of an HTTP/1.1 link on h11 over asyncio streams, beside httpx.

Why: one httpx request costs about four times what the HTTP/1.1 exchange itself costs here
(``benchmarks/post_clients.py``: httpx 778 µs, aiohttp 219 µs, h11 on asyncio streams 185 µs at p50 on the
2-core machine), and a POST is on the path of every request the client sends (a ``session/status`` probe is
a POST plus its answer on an event stream). h11 is already a dependency (httpx's own HTTP/1.1 parser), so
this costs no new one. httpx stays for everything else: HTTP/2, the SSE GETs, ``initialize``, ``OPTIONS``,
``DELETE``, and POSTs through a proxy.

What it keeps of httpx's behaviour, as the transport uses it: keep-alive connections reused one request at a
time (a small pool: the POST pipeline lets the next POST start while the previous one waits for its answer);
no redirects followed (a 3xx is an answer like any other); TLS with the link's context, refusing a server
that picks another protocol than HTTP/1.1 by ALPN; the connect, write and read timeouts of the POST client;
bodies read with a bound (:class:`~._base.BoundedResponse`, ``truncated`` past the limit); failures raised
as the ``httpx`` exception types the pipeline maps (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``,
``WriteTimeout``, ``RemoteProtocolError``, ``ReadError``). It never logs, so no URL can leak from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl as _ssl
import urllib.request
from collections.abc import Callable

import h11
import httpx

from acp_client.transports.http._base import ERROR_BODY_LIMIT, BoundedResponse

_READ_SIZE = 65536


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
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=64 * 1024)

    def reusable(self) -> bool:
        return (
            self.h11.our_state is h11.IDLE
            and self.h11.their_state is h11.IDLE
            and not self.reader.at_eof()
            and not self.writer.is_closing()
        )

    def close(self) -> None:
        self.writer.close()


class H11Poster:
    """Sends requests to one origin over HTTP/1.1 keep-alive connections (h11 on asyncio streams)."""

    def __init__(self, url: httpx.URL, ssl_context: _ssl.SSLContext | None, timeout: httpx.Timeout) -> None:
        self._url = url
        self._host = url.host
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl = ssl_context if url.scheme == "https" else None
        default = 443 if url.scheme == "https" else 80
        self._authority = self._host if self._port == default else f"{self._host}:{self._port}"
        if ":" in self._host:  # an IPv6 literal
            self._authority = f"[{self._host}]" if self._port == default else f"[{self._host}]:{self._port}"
        self._target = url.raw_path
        self._timeout = timeout
        self._idle: list[_Conn] = []

    async def _connect(self) -> _Conn:
        try:
            async with asyncio.timeout(self._timeout.connect):
                reader, writer = await asyncio.open_connection(
                    self._host, self._port, ssl=self._ssl, server_hostname=self._host if self._ssl else None
                )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connecting to {self._authority} timed out") from exc
        except OSError as exc:  # ssl.SSLError included (its cause chain names a certificate failure)
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        ssl_object = writer.get_extra_info("ssl_object")
        if ssl_object is not None and ssl_object.selected_alpn_protocol() not in (None, "http/1.1"):
            writer.close()
            raise NotHTTP11(ssl_object.selected_alpn_protocol())
        return _Conn(reader, writer)

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
            response = await self._exchange(conn, method, headers, content, limit, body_sent)
        except BaseException:
            conn.close()
            raise
        return response

    async def _exchange(
        self,
        conn: _Conn,
        method: str,
        headers: list[tuple[str, str]],
        content: bytes,
        limit: int,
        body_sent: Callable[[], None] | None,
    ) -> BoundedResponse:
        fields = [("Host", self._authority), *headers, ("Content-Length", str(len(content)))]
        try:
            data = conn.h11.send(h11.Request(method=method, target=self._target, headers=fields))
            data = (data or b"") + (conn.h11.send(h11.Data(data=content)) or b"") if content else data or b""
            data += conn.h11.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc)) from exc
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
                head = await self._next(conn)
                while isinstance(head, h11.InformationalResponse):
                    head = await self._next(conn)
                if not isinstance(head, h11.Response):
                    raise httpx.RemoteProtocolError(f"unexpected {type(head).__name__} instead of a response")
                bound = limit if head.status_code == 200 else ERROR_BODY_LIMIT
                body = bytearray()
                truncated = False
                while True:
                    event = await self._next(conn)
                    if isinstance(event, h11.Data):
                        body += event.data
                        if len(body) > bound:
                            del body[bound:]
                            truncated = True
                            break
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    else:
                        raise httpx.RemoteProtocolError(f"unexpected {type(event).__name__} in a response body")
        except TimeoutError as exc:
            raise httpx.ReadTimeout("waiting for the response timed out") from exc
        if truncated:
            conn.close()  # the rest is never read
        elif conn.h11.our_state is h11.DONE and conn.h11.their_state is h11.DONE:
            conn.h11.start_next_cycle()
            self._idle.append(conn)
        else:
            conn.close()
        response = httpx.Response(
            head.status_code,
            headers=[(k, v) for k, v in head.headers],
            extensions={"http_version": b"HTTP/" + head.http_version, "reason_phrase": head.reason},
        )
        return BoundedResponse(response, bytes(body), truncated)

    async def _next(self, conn: _Conn) -> object:
        while True:
            try:
                event = conn.h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from exc
            if event is h11.NEED_DATA:
                try:
                    chunk = await conn.reader.read(_READ_SIZE)
                except OSError as exc:
                    raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
                if not chunk and conn.h11.their_state is h11.SEND_RESPONSE:
                    raise httpx.RemoteProtocolError("the server closed the connection without sending a response")
                conn.h11.receive_data(chunk)
                continue
            if isinstance(event, h11.ConnectionClosed):
                raise httpx.RemoteProtocolError("the server closed the connection in the middle of a response")
            return event

    async def aclose(self) -> None:
        """Close every idle connection."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        for conn in idle:
            with contextlib.suppress(OSError):
                await conn.writer.wait_closed()

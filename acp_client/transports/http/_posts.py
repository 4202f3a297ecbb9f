"""The POST side of a Streamable HTTP link: the ordered POST pipeline (a POST starts once the previous one's
body is written), the mapping of POST answers to frames, lost links and JSON-RPC errors, and the liveness
check of the client-to-server direction (``OPTIONS``). The :class:`PostPipeline` owns the httpx client that
carries every request but the SSE GETs (``initialize``, the POSTs, ``OPTIONS``, the closing ``DELETE``), and,
on a link ``initialize`` found to be HTTP/1.1, the plain HTTP/1.1 path its POSTs take instead (:mod:`._h1post`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any

import httpx

from acp_client.exceptions import (
    ConnectionLost,
)
from acp_client.transports.http._base import (
    BoundedResponse,
    LinkView,
    _describe_error,
    _http_error,
    _is_id,
    _loads,
    _log,
    send_bounded,
)
from acp_client.transports.http._h1post import H1Poster, NotHTTP11, usable
from acp_client.transports.http._inbox import Inbound
from acp_client.transports.http._sse import SSEParser

_LOST_STATUSES = frozenset({401, 403, 404, 408, 409, 410, 429, 500, 502, 503, 504})


class _Exchange:
    """One POST in flight: the frame, its parsed message, and the release of the POST order lock (once the
    body is on the wire, or when the exchange ends, whichever comes first)."""

    def __init__(self, frame: str, message: object, lock: asyncio.Lock) -> None:
        self.frame = frame
        self.message = message
        self._lock: asyncio.Lock | None = lock

    def release(self) -> None:
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.release()


#: Bound on the agent's answer to the ``initialize`` POST (the answer is the response body).
INITIALIZE_TIMEOUT = 30.0


class PostPipeline:
    """Sends frames as ordered POSTs and checks that the server still answers. Owns the POST client, the
    order lock, the exchanges in flight, the keepalive task and the time of the last answer."""

    def __init__(self, link: LinkView, inbox: Inbound) -> None:
        self._link = link
        self._inbox = inbox
        self._lock = asyncio.Lock()
        self._client: httpx.AsyncClient | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._keepalive_task: asyncio.Task[None] | None = None
        self._last_answer = 0.0
        self._http_version: str | None = None
        self._h1: H1Poster | None = None  # the POSTs of an HTTP/1.1 link (see _h1post)
        self._h1_refused = False  # the server picked another protocol by ALPN: httpx only

    @property
    def http_version(self) -> str | None:
        """The HTTP version of the last POST response (``None`` before the first)."""
        return self._http_version

    def _client_for_posts(self) -> httpx.AsyncClient:
        if self._client is None:
            options = self._link.options
            timeout = options.ping_timeout
            self._client = self._link.new_client(
                httpx.Timeout(connect=options.open_timeout, read=timeout, write=timeout, pool=options.open_timeout)
            )
        return self._client

    def _h1_poster(self) -> H1Poster | None:
        """The HTTP/1.1 POST path, once ``initialize`` was answered over HTTP/1.1 (``None``: httpx)."""
        if self._h1 is None and not self._h1_refused and usable(self._link.url, self._http_version):
            options = self._link.options
            timeout = options.ping_timeout
            self._h1 = H1Poster(
                self._link.url,
                self._link.ssl_context,
                httpx.Timeout(connect=options.open_timeout, read=timeout, write=timeout, pool=options.open_timeout),
            )
        return self._h1

    async def _send_post(self, frame: str, headers: list[tuple[str, str]], exchange: _Exchange) -> BoundedResponse:
        """POST ``frame`` (by hand on an HTTP/1.1 link, else httpx); the exchange is released once the body is
        written."""

        async def trace(name: str, info: Mapping[str, Any]) -> None:
            # the body is written: the next POST may start (it cannot overtake this one any more)
            if name.endswith("send_request_body.complete"):
                exchange.release()

        limit = self._link.options.max_frame_bytes
        poster = self._h1_poster()
        if poster is not None:
            try:
                return await poster.send("POST", headers, frame.encode(), limit=limit, body_sent=exchange.release)
            except NotHTTP11:
                self._h1_refused = True
                self._h1 = None
                await poster.aclose()
        return await send_bounded(
            self._client_for_posts(),
            "POST",
            self._link.url,
            limit=limit,
            content=frame.encode(),
            headers=headers,
            extensions={"trace": trace},
        )

    async def initialize(self, frame: str) -> BoundedResponse:
        """POST the ``initialize`` frame (the answer is the body, within ``INITIALIZE_TIMEOUT``; at most
        ``max_frame_bytes`` of it are read). Raises ``httpx.HTTPError`` when no answer came."""
        open_timeout = self._link.options.open_timeout
        timeout = httpx.Timeout(connect=open_timeout, read=INITIALIZE_TIMEOUT, write=open_timeout, pool=open_timeout)
        stats = self._link.stats
        stats.posts += 1
        response = await send_bounded(
            self._client_for_posts(),
            "POST",
            self._link.url,
            limit=self._link.options.max_frame_bytes,
            content=frame.encode(),
            headers=self._link.request_headers(content=True),
            timeout=timeout,
        )
        self._link.store_cookies(response.response)
        self._http_version = response.http_version
        stats.frames_out += 1
        stats.bytes_out += len(frame.encode())
        return response

    async def post(self, frame: str, session_id: str | None, message: object) -> None:
        """Hand one frame to the POST sequence and return (as a WebSocket send returns once the frame is in
        the socket's buffer). POSTs stay strictly ordered: a POST starts only after the previous one was
        answered, so ``send`` waits while the previous POST is unanswered, never for its own. A caller
        cancelled after ``send`` returned has sent its request (so the connection sends
        ``$/cancel_request``). The answer is handled by the exchange: a lost link fails the transport;
        another rejection of a request becomes a JSON-RPC error response (``-32603``, ``data.httpStatus``)
        so the caller is not left waiting."""
        await self._lock.acquire()
        if self._inbox.failed:
            self._lock.release()
            raise self._inbox.lost()
        headers = self._link.request_headers(content=True, session_id=session_id)
        exchange = _Exchange(frame, message, self._lock)
        task = asyncio.get_running_loop().create_task(
            self._post_exchange(exchange, headers), name=f"acp-client post {self._link.description}"
        )
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._post_done(done, exchange))

    def _post_done(self, task: asyncio.Task[None], exchange: _Exchange) -> None:
        self._tasks.discard(task)
        exchange.release()
        if not task.cancelled():
            task.exception()  # a bug in the exchange would show in the log, not as "never retrieved"

    async def _post_exchange(self, exchange: _Exchange, headers: list[tuple[str, str]]) -> None:
        """Send one POST and hand on its answer. Any failure fails the link, the unforeseen ones too (a bug, a
        user's cookie jar raising): a request whose answer was to come in this response would otherwise wait
        for its timeout, forever for ``session/prompt``."""
        try:
            await self._exchange(exchange, headers)
        except Exception as exc:
            _log.exception("http_post_failed", transport=self._link.description)
            self._fail_post(exc)

    def _fail_post(self, exc: BaseException) -> None:
        loss = ConnectionLost(f"POST to {self._link.description} failed: {_describe_error(exc)}", reason="post failed")
        loss.__cause__ = exc
        self._inbox.fail(loss)

    async def _exchange(self, exchange: _Exchange, headers: list[tuple[str, str]]) -> None:
        frame = exchange.frame
        self._link.stats.posts += 1
        try:
            response = await self._send_post(frame, headers, exchange)
        except httpx.HTTPError as exc:
            self._fail_post(exc)
            return
        self._last_answer = asyncio.get_running_loop().time()
        self._link.store_cookies(response.response)
        self._http_version = response.http_version
        status = response.status_code
        if status == 200 and response.truncated:
            limit = self._link.options.max_frame_bytes
            self._inbox.fail(
                ConnectionLost(
                    f"{self._link.description} answered a POST with a body over {limit} bytes (max_frame_bytes)",
                    reason="frame too large",
                )
            )
            return
        body = response.text.strip() if status == 200 else ""
        inline = self._inline_frames(response, body)
        if status in (202, 204) or (status == 200 and inline is not None):
            self._link.stats.frames_out += 1
            self._link.stats.bytes_out += len(frame.encode())
            for text in inline or ():  # a server may answer inline (JSON, or an event stream as body)
                self._inbox.put(text)
            return
        if status in _LOST_STATUSES:
            what = "no longer knows connection" if status == 404 else "refused a request on connection"
            self._inbox.fail(
                ConnectionLost(
                    f"{self._link.description} {what} {self._link.connection_id} (HTTP {status})",
                    reason=f"http {status}",
                )
            )
            return
        self._reject(exchange, response)

    def _reject(self, exchange: _Exchange, response: BoundedResponse) -> None:
        """A POST answered with a status that neither carries its answer nor ends the link (400, 415 ...): a
        request gets a JSON-RPC error response instead, so its caller is not left waiting."""
        status = response.status_code
        error = _http_error(f"{self._link.description} rejected a POST with HTTP {status}", response)
        self._link.stats.posts_rejected += 1
        message = exchange.message
        request_id = message.get("id") if isinstance(message, dict) and "method" in message else None
        _log.warning("http_post_rejected", transport=self._link.description, status_code=status, request_id=request_id)
        if not _is_id(request_id):
            return
        data = {"httpStatus": status, "contentType": error.content_type, "bodyExcerpt": error.body_excerpt}
        self._inbox.put(
            json.dumps(
                {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32603, "message": str(error), "data": data}}
            )
        )

    def _inline_frames(self, response: BoundedResponse, body: str) -> list[str] | None:
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
                    self._link.stats.sse_discarded += 1
            return frames
        return [body] if isinstance(_loads(body), dict | list) else None

    async def ping(self, timeout: float | None = None) -> float:
        """Check the request path now: an ``OPTIONS`` request to the endpoint, answered with any status, within
        ``timeout`` (default ``ping_timeout``). Returns the round trip in seconds. When no answer comes the
        link is failed (``ConnectionLost``), as a WebSocket whose Pong does not come. (The event streams
        are watched by their read-idle watchdog; this covers the client-to-server direction.)"""
        if self._inbox.failed:
            raise self._inbox.lost()
        if timeout is None:
            timeout = self._link.options.ping_timeout
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout(timeout):
                response = await send_bounded(
                    self._client_for_posts(),
                    "OPTIONS",
                    self._link.url,
                    limit=0,  # any answer will do; its body is not wanted
                    headers=self._link.request_headers(content=False),
                )
            self._link.store_cookies(response.response)
        except (httpx.HTTPError, TimeoutError) as exc:
            self._inbox.fail(
                ConnectionLost(
                    f"{self._link.description} did not answer a liveness check: {_describe_error(exc)}",
                    reason="liveness check failed",
                )
            )
            raise self._inbox.lost() from None
        except Exception as exc:  # unforeseen (see _post_exchange): the link fails with the cause
            _log.exception("http_ping_failed", transport=self._link.description)
            self._inbox.fail(
                ConnectionLost(
                    f"the liveness check of {self._link.description} failed: {_describe_error(exc)}",
                    reason="liveness check failed",
                )
            )
            raise self._inbox.lost() from exc
        self._last_answer = loop.time()
        return self._last_answer - started

    async def _keepalive(self, interval: float) -> None:
        """Every ``interval`` without an answered POST, :meth:`ping` (a link silent towards the server)."""
        loop = asyncio.get_running_loop()
        while not self._inbox.failed:
            await asyncio.sleep(max(0.0, self._last_answer + interval - loop.time()))
            if loop.time() - self._last_answer >= interval and not self._inbox.failed:
                with contextlib.suppress(ConnectionLost):
                    await self.ping()

    def start_keepalive(self) -> None:
        """The link is open: count its quiet time from now and, with ``ping_interval`` set, ping when it
        passes (see :meth:`ping`)."""
        self._last_answer = asyncio.get_running_loop().time()
        interval = self._link.options.ping_interval
        if interval is not None:
            self._keepalive_task = asyncio.get_running_loop().create_task(
                self._keepalive(interval), name=f"acp-client keepalive {self._link.description}"
            )

    def cancel_keepalive(self) -> None:
        """The link failed: stop pinging (unless the keepalive is the caller)."""
        if self._keepalive_task is not None and self._keepalive_task is not asyncio.current_task():
            self._keepalive_task.cancel()

    async def drain(self) -> None:
        """Wait (bounded by ``close_timeout``) until every frame already handed to :meth:`post` was answered:
        a ``session/cancel`` sent just before ``close()`` reaches the server before the ``DELETE`` ends the
        connection. A drain that times out is logged; the close goes on."""
        if not self._lock.locked():
            return
        try:
            async with asyncio.timeout(self._link.options.close_timeout):
                await self._lock.acquire()
            self._lock.release()
        except TimeoutError:
            _log.debug("http_posts_not_drained", transport=self._link.description, in_flight=len(self._tasks))

    async def delete(self) -> None:
        """End the connection on the server (``DELETE``, bounded by ``close_timeout``; failures are logged)."""
        client = self._client_for_posts()
        try:
            async with asyncio.timeout(self._link.options.close_timeout):
                response = await send_bounded(
                    client, "DELETE", self._link.url, limit=0, headers=self._link.request_headers(content=False)
                )
            self._link.store_cookies(response.response)
        except (httpx.HTTPError, TimeoutError) as exc:
            _log.debug("http_delete_failed", transport=self._link.description, error=_describe_error(exc))

    def tasks(self) -> list[asyncio.Task[None]]:
        """The exchanges in flight and the keepalive (unless it is the caller): what a release stops."""
        tasks = list(self._tasks)
        if self._keepalive_task is not None and self._keepalive_task is not asyncio.current_task():
            tasks.append(self._keepalive_task)
        return tasks

    async def aclose(self) -> None:
        """Release the POST clients (after :meth:`tasks` ended)."""
        if self._h1 is not None:
            poster, self._h1 = self._h1, None
            await poster.aclose()
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

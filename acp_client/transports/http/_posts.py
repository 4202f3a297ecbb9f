"""The POST side of a Streamable HTTP link: the ordered POST pipeline (a POST starts once the previous one's
body is written), the mapping of POST answers to frames, lost links and JSON-RPC errors, and the liveness
check of the client-to-server direction (``OPTIONS``)."""

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
    _describe_error,
    _http_error,
    _is_id,
    _loads,
    _log,
)
from acp_client.transports.http._order import _StreamRouter
from acp_client.transports.http._sse import SSEParser

_LOST_STATUSES = frozenset({401, 403, 404, 408, 409, 410, 429, 500, 502, 503, 504})


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


class _PostPipeline(_StreamRouter):
    """Sends frames as ordered POSTs and checks that the server still answers."""

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

"""The SSE stream readers of the Streamable HTTP transport: opening a stream (its own httpx client, hence
its own TCP connection), reading and parsing its events, resuming it with ``Last-Event-ID`` when it ends,
and the read-idle watchdog. What a delivered message means is the ordering layer's business
(:mod:`._http_order`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from acp_client.exceptions import (
    ConnectError,
    ConnectionLost,
    HTTPTransportError,
)
from acp_client.transports.http._base import (
    _EXCERPT,
    _describe_error,
    _HTTPLinkBase,
    _loads,
    _log,
    _Stream,
)
from acp_client.transports.http._sse import SSEParser

#: A watchdog that fires this late (seconds) was held up by a blocked event loop, not by a silent peer.
_STALL_GRACE = 0.1


class _StreamRefused(Exception):
    """An SSE GET was answered with something other than a 200 event stream."""

    def __init__(self, status: int, content_type: str | None, excerpt: str) -> None:
        super().__init__(status)
        self.status = status
        self.content_type = content_type
        self.excerpt = excerpt


class _StreamReader(_HTTPLinkBase):
    """Opens, reads, resumes and watches the SSE streams of a link."""

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
                            self._report_resumed(stream)
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

    def _report_resumed(self, stream: _Stream) -> None:
        """Tell ``options.on_stream_resumed`` that ``stream`` was resumed (a failing callback is logged)."""
        callback = self._options.on_stream_resumed
        if callback is None:
            return
        try:
            callback(stream.session_id)
        except Exception:
            _log.exception("http_stream_resumed_callback_failed", transport=self._description, stream=stream.label)

    async def _deliver(self, stream: _Stream, text: str, message: Any) -> None:
        """Hand one JSON-RPC message read from ``stream`` on (implemented by the ordering layer)."""
        raise NotImplementedError

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

"""The SSE stream readers of the Streamable HTTP transport: opening a stream (its own httpx client, hence
its own TCP connection), reading and parsing its events, resuming it with ``Last-Event-ID`` when it ends,
and the read-idle watchdog. The :class:`StreamReader` owns the streams of a link; what a delivered message
means is the business of its :class:`MessageSink` (the router, :mod:`._order`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol

import httpx

from acp_client._backoff import Backoff
from acp_client.exceptions import (
    ConnectError,
    ConnectionLost,
    HTTPTransportError,
)
from acp_client.jsonrpc import decode
from acp_client.transports.base import Decoded
from acp_client.transports.http._base import (
    _EXCERPT,
    ERROR_BODY_LIMIT,
    LinkView,
    _describe_error,
    _log,
    read_bounded,
)
from acp_client.transports.http._cursors import MAX_CURSOR_BYTES, CursorTrack, cursor_of, cursor_too_long
from acp_client.transports.http._inbox import Inbound
from acp_client.transports.http._sse import SSEParser
from acp_client.transports.http._stream import Stream, StreamView

#: A watchdog that fires this late (seconds) was held up by a blocked event loop, not by a silent peer.
_STALL_GRACE = 0.1
#: How many times in a row a dropped stream is reopened with ``Last-Event-ID`` without getting a message back
#: (the GET failed, or the stream ended again at once) before the link is given up to the full recovery.
RESUME_ATTEMPTS = 3
#: The silent keepalive intervals after which a stream of an agent that advertised ``keepaliveSeconds`` is
#: dead (PR 2208).
SILENT_INTERVALS = 5


class StreamRefused(Exception):
    """An SSE GET was answered with something other than a 200 event stream."""

    def __init__(self, status: int, content_type: str | None, excerpt: str) -> None:
        super().__init__(status)
        self.status = status
        self.content_type = content_type
        self.excerpt = excerpt


def _looks_like_object(text: str) -> bool:
    """Whether ``text`` that is not JSON is to be reported by the connection (it looks like a JSON object:
    a message gone wrong) rather than discarded here as not a message at all."""
    return text.startswith("{") and text.endswith("}")


def _is_state_update(message: dict[str, Any]) -> bool:
    """Whether ``message`` (a notification) is a v2 ``state_update``: the router watches for those."""
    params = message.get("params")
    update = params.get("update") if type(params) is dict else None
    return type(update) is dict and update.get("sessionUpdate") == "state_update"


class MessageSink(Protocol):
    """Where the reader hands each JSON-RPC message it read (the router)."""

    async def deliver(self, stream: StreamView, text: str, message: dict[str, Any] | list[Any]) -> None: ...

    async def deliver_plain(self, texts: list[str | Decoded]) -> None:
        """Queue messages that need no routing (notifications without an id, most of them decoded; text the
        connection is to report as not JSON), in order."""
        ...


class StreamReader:
    """Opens, reads, resumes and watches the SSE streams of a link, and owns them: each stream is keyed by its
    session id (``None`` for the connection stream). Every message read goes to the ``sink``; a stream that
    cannot be resumed fails the link through ``inbox``."""

    def __init__(self, link: LinkView, inbox: Inbound, sink: MessageSink) -> None:
        self._link = link
        self._inbox = inbox
        self._sink = sink
        self._streams: dict[str | None, Stream] = {}
        self._refusals: dict[str, int] = {}  # session id -> the status its stream was last refused with
        # the pause before each reopening of a dropped stream: full jitter, at most 50 ms, then 100, 200 ...
        self._backoff = Backoff(base=0.025, cap=2.0)

    def get(self, session_id: str) -> StreamView | None:
        """The stream of ``session_id`` (opening, open or detaching), if there is one."""
        return self._streams.get(session_id)

    def has(self, session_id: str) -> bool:
        return session_id in self._streams

    @property
    def session_ids(self) -> list[str]:
        """The sessions whose stream is open."""
        return [k for k, s in self._streams.items() if k is not None and s.is_open]

    def refusal(self, session_id: str) -> int | None:
        """The HTTP status the stream of ``session_id`` was last refused with."""
        return self._refusals.get(session_id)

    def detaching(self, session_id: str) -> bool:
        """A close/delete of ``session_id`` is on its way: its stream may end quietly. ``False`` when the
        session has no stream here."""
        stream = self._streams.get(session_id)
        if stream is None:
            return False
        stream.detached = True
        return True

    def end(self, session_id: str, *, closed: bool) -> None:
        """The close/delete of ``session_id`` was answered: stop its stream (``closed``), or keep it (the
        request failed)."""
        stream = self._streams.get(session_id)
        if stream is None:
            return
        if not closed:
            stream.detached = False
            return
        del self._streams[session_id]
        stream.cancel()

    def cancel(self) -> None:
        """The link failed: stop every reading task (but the caller's)."""
        for stream in self._streams.values():
            stream.cancel()

    def tasks(self) -> list[asyncio.Task[None]]:
        """The reading tasks still to be stopped (not the caller's)."""
        current = asyncio.current_task()
        return [s.task for s in self._streams.values() if s.task is not None and s.task is not current]

    def clear(self) -> None:
        self._streams.clear()

    async def open(self, session_id: str | None, *, required: bool) -> bool:
        """Open an SSE stream and wait until the server answered it. ``False`` (or, when ``required``, the
        typed error) when it was refused."""
        stream = Stream(session_id)
        if self._link.resumable is not None:
            stream.cursors = CursorTrack()
        self._streams[session_id] = stream
        description = self._link.description
        stream.task = asyncio.get_running_loop().create_task(
            self._run_stream(stream), name=f"acp-client sse {stream.label} {description}"
        )
        try:
            async with asyncio.timeout(self._link.options.open_timeout):
                await asyncio.shield(stream.opened)
        except TimeoutError:
            stream.cancel()
            self._streams.pop(session_id, None)
            error = ConnectError(f"opening the {stream.label} stream of {description} timed out")
            if required:
                raise error from None
            _log.warning("http_stream_open_timeout", transport=description, stream=stream.label)
            return False
        except StreamRefused as refused:
            self._streams.pop(session_id, None)
            if session_id is not None:
                self._link.stats.session_streams_refused += 1
                self._refusals[session_id] = refused.status
            if required:
                raise HTTPTransportError(
                    f"{description} refused the {stream.label} stream with HTTP {refused.status}",
                    status_code=refused.status,
                    content_type=refused.content_type,
                    body_excerpt=refused.excerpt,
                ) from None
            _log.info(
                "http_session_stream_refused",
                transport=description,
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

    async def _run_stream(self, stream: Stream) -> None:
        parser = SSEParser(max_event_bytes=self._link.options.max_frame_bytes)
        try:
            await self._keep_reading(stream, parser)
        except asyncio.CancelledError:
            if not stream.opened.done():
                stream.opened.cancel()
            raise
        except Exception as exc:  # a bug must not leave recv waiting forever
            _log.exception("http_stream_failed", transport=self._link.description, stream=stream.label)
            if not stream.opened.done():
                stream.opened.set_exception(ConnectionLost(f"the {stream.label} stream failed: {exc!r}"))
            self._lose_stream(stream, f"the stream reader failed: {exc!r}", "reader failed")

    async def _keep_reading(self, stream: Stream, parser: SSEParser) -> None:
        """Read ``stream`` and, each time it ends, resume it from its last cursor (``Last-Event-ID``) after a
        jittered delay, until it is refused, cannot be resumed, or failed :data:`RESUME_ATTEMPTS` times in a
        row (an attempt fails when the GET fails or the stream ends again before delivering a message)."""
        resume_from: str | None = None
        failures = 0
        while True:
            delivered = stream.delivered
            try:
                ended = await self._read_once(stream, parser, resume_from)
            except StreamRefused as refused:
                if not stream.opened.done():
                    stream.opened.set_exception(refused)
                    return
                self._link.stats.stream_resumes_refused += 1
                why = f"the server refused to resume it (HTTP {refused.status})"
                self._lose_stream(stream, why, f"was refused: HTTP {refused.status}")
                return
            except (ConnectError, ConnectionLost) as exc:
                if not stream.opened.done():
                    stream.opened.set_exception(exc)
                    return
                ended, failures = str(exc), failures + 1
                if failures >= RESUME_ATTEMPTS:
                    self._lose_stream(stream, ended, f"could not be reopened ({RESUME_ATTEMPTS} attempts): {exc}")
                    return
            else:
                failures = 0 if stream.delivered > delivered or resume_from is None else failures + 1
            if self._inbox.failed:
                return
            if stream.detached and stream.session_id is not None:
                self._streams.pop(stream.session_id, None)  # closed or deleted: never resumed
                return
            point, not_resumed = self._resume_point(stream, parser)
            if point is None or failures >= RESUME_ATTEMPTS:
                if point is not None:
                    not_resumed = f"ended again {RESUME_ATTEMPTS} times, resumed each time, without delivering anything"
                self._lose_stream(stream, ended, not_resumed)
                return
            _log.info("http_stream_resuming", transport=self._link.description, stream=stream.label, reason=ended)
            await asyncio.sleep(self._backoff.delay(failures + 1))  # jitter: a herd of clients spreads out
            resume_from = point

    async def _read_once(self, stream: Stream, parser: SSEParser, resume_from: str | None) -> str:
        """Open (``resume_from``: resume with ``Last-Event-ID``) and read ``stream`` once; why it ended."""
        async with self._open_sse(stream.session_id, resume_from) as resp:
            if not stream.opened.done():
                stream.opened.set_result(None)
            self._link.stats.streams_opened += 1
            if resume_from is not None:
                self._link.stats.streams_resumed += 1
                _log.info(
                    "http_stream_resumed", transport=self._link.description, stream=stream.label, cursor=resume_from
                )
                self._report_resumed(stream)
            return await self._read_stream(stream, resp, parser)

    def _resume_point(self, stream: Stream, parser: SSEParser) -> tuple[str | None, str]:
        """Where ``stream`` resumes from: its last SSE ``id:``, else (when the agent advertised resumable
        streams) its last ``_meta["acp/cursor"]``; ``None`` and why not when it has none that can be sent."""
        cursors = stream.cursors
        point = parser.last_event_id
        if point is None and cursors is not None:
            if cursors.oversize:
                return None, f"sent a cursor over {MAX_CURSOR_BYTES} bytes (MAX_CURSOR_BYTES): it has no resume point"
            point = cursors.last
        if point is None:
            return None, "carries no event ids" if cursors is None else "carries no event ids or cursors"
        if cursor_too_long(point):
            return None, f"sent an event id over {MAX_CURSOR_BYTES} bytes (MAX_CURSOR_BYTES): it has no resume point"
        return point, ""

    @contextlib.asynccontextmanager
    async def _open_sse(self, session_id: str | None, last_event_id: str | None) -> AsyncIterator[httpx.Response]:
        headers = self._link.request_headers(content=False, session_id=session_id)
        headers.append(("Accept", "text/event-stream"))
        headers.append(("Cache-Control", "no-cache"))
        headers.append(("Accept-Encoding", "identity"))
        if last_event_id is not None:
            headers.append(("Last-Event-ID", last_event_id))
        # a client (hence a TCP connection) per long-lived stream: see the module docstring
        client = self._link.new_client(httpx.Timeout(self._link.options.open_timeout, read=None))
        try:
            request = client.build_request("GET", self._link.url, headers=headers)
            try:
                async with asyncio.timeout(self._link.options.open_timeout):
                    response = await client.send(request, stream=True)
            except TimeoutError as exc:
                raise ConnectError(f"opening an event stream of {self._link.description} timed out") from exc
            except httpx.HTTPError as exc:
                raise ConnectionLost(
                    f"opening an event stream of {self._link.description} failed: {_describe_error(exc)}",
                    reason="stream open failed",
                ) from exc
            try:
                self._link.store_cookies(response)
                content_type = response.headers.get("content-type", "")
                if response.status_code != 200 or "text/event-stream" not in content_type.lower():
                    excerpt = ""
                    with contextlib.suppress(httpx.HTTPError, TimeoutError):
                        async with asyncio.timeout(self._link.options.close_timeout):
                            body, _more = await read_bounded(response, ERROR_BODY_LIMIT)  # never the whole body
                            excerpt = body.decode("utf-8", "replace")[:_EXCERPT]
                    raise StreamRefused(response.status_code, content_type or None, excerpt)
                yield response
            finally:
                await response.aclose()
        finally:
            await client.aclose()

    async def _read_stream(self, stream: Stream, response: httpx.Response, parser: SSEParser) -> str:
        """Read events until the stream ends; return why it ended. With liveness on, a watchdog ends the read
        after ``ping_interval + ping_timeout`` without a byte."""
        idle = self._idle_limit()
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
                _log.warning(
                    "http_stream_idle_timeout", transport=self._link.description, stream=stream.label, idle=idle
                )
                return f"no data or keepalive for {idle:g} s"
        finally:
            if not reader.done():
                reader.cancel()
                await asyncio.wait({reader})
            elif not reader.cancelled():
                reader.exception()  # retrieved (it is re-raised above when it matters)

    def _idle_limit(self) -> float | None:
        """Seconds without a byte after which a stream is dead: :data:`SILENT_INTERVALS` of the keepalive
        interval the agent advertised (``keepaliveSeconds``), else ``ping_interval + ping_timeout``; ``None``
        (no watchdog) when liveness is off (``ping_interval=None``)."""
        options = self._link.options
        if options.ping_interval is None:
            return None
        resumable = self._link.resumable
        if resumable is not None and resumable.keepalive_seconds is not None:
            return SILENT_INTERVALS * resumable.keepalive_seconds
        if options.ping_timeout is None:
            return None
        return options.ping_interval + options.ping_timeout

    async def _read_chunks(self, stream: Stream, response: httpx.Response, parser: SSEParser) -> str:
        loop = asyncio.get_running_loop()
        stats = self._link.stats
        stream.waiting_since = loop.time()
        try:
            async for chunk in response.aiter_raw():
                stream.waiting_since = None
                comments, skipped = parser.comments, parser.skipped
                try:
                    texts = parser.feed_messages(chunk)
                except ValueError:
                    return f"an event exceeded max_frame_bytes ({self._link.options.max_frame_bytes})"
                stats.sse_comments += parser.comments - comments
                if parser.skipped != skipped:
                    stats.sse_discarded += parser.skipped - skipped
                    _log.debug(
                        "http_sse_event_discarded", transport=self._link.description, sse_event=parser.last_skipped
                    )
                if texts:
                    await self._deliver_each(stream, texts)
                stream.waiting_since = loop.time()
        except httpx.HTTPError as exc:
            return f"the stream broke: {_describe_error(exc)}"
        return "the server ended the stream"

    async def _deliver_each(self, stream: Stream, texts: list[str]) -> None:
        """Decode the messages of one read (once: the connection takes the decoded notifications as they
        are) and deliver them in order: notifications together, the rest one by one through the router."""
        plain: list[str | Decoded] = []  # routine notifications, handed on together (no await per event)
        session_stream = stream.session_id is not None
        cursors = stream.cursors
        for text in texts:
            try:
                message = decode(text)
            except ValueError:
                message = None
            if cursors is not None and type(message) is dict and not self._first_delivery(cursors, message):
                continue  # replayed although delivered before
            if type(message) is dict and "id" not in message:
                # a state_update names itself in the text, unless the server escaped a letter of it (a "\\")
                if not (session_stream and ("state_update" in text or "\\" in text) and _is_state_update(message)):
                    plain.append((text, message))
                    continue
            elif type(message) is not dict and type(message) is not list:
                if message is None and _looks_like_object(text):
                    plain.append(text)  # not JSON: the connection reports it (a counted parse error)
                else:
                    self._link.stats.sse_discarded += 1
                    _log.warning("http_sse_data_not_json", transport=self._link.description, stream=stream.label)
                continue
            if plain:
                stream.note_plain(len(plain))
                await self._sink.deliver_plain(plain)
                plain = []
            await self._deliver(stream, text, message)
        if plain:
            stream.note_plain(len(plain))
            await self._sink.deliver_plain(plain)

    def _first_delivery(self, cursors: CursorTrack, message: dict[str, Any]) -> bool:
        """Whether ``message`` is to be delivered: ``False`` for a message whose cursor was delivered before
        (counted in ``stats.replayed_duplicates``); a message without a (string) cursor is delivered."""
        cursor = cursor_of(message)
        if type(cursor) is not str or cursors.accept(cursor):
            return True
        self._link.stats.replayed_duplicates += 1
        _log.debug("http_replayed_duplicate_dropped", transport=self._link.description)
        return False

    def _report_resumed(self, stream: Stream) -> None:
        """Tell ``options.on_stream_resumed`` that ``stream`` was resumed (a failing callback is logged)."""
        callback = self._link.options.on_stream_resumed
        if callback is None:
            return
        try:
            callback(stream.session_id)
        except Exception:
            _log.exception("http_stream_resumed_callback_failed", transport=self._link.description, stream=stream.label)

    async def _deliver(self, stream: Stream, text: str, message: dict[str, Any] | list[Any]) -> None:
        stream.note(message)
        await self._sink.deliver(stream, text, message)

    def _lose_stream(self, stream: Stream, why: str, not_resumed: str) -> None:
        """Fail the connection: ``stream`` ended for ``why`` and was not resumed because it ``not_resumed``
        (kept as ``ConnectionLost.stream_resumption``)."""
        if self._inbox.failed:
            return
        if stream.detached:
            self._streams.pop(stream.session_id, None)
            return
        self._inbox.fail(
            ConnectionLost(
                f"the {stream.label} event stream of {self._link.description} was lost: {why}",
                reason=why,
                stream_resumption=f"not resumed: the {stream.label} stream {not_resumed}",
            )
        )

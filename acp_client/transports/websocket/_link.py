"""An open ACP WebSocket link: :class:`WebSocketTransport` (sending, receiving, the keepalive, closing).

:mod:`acp_client.transports.websocket` opens it (the handshake) and re-exports it; the two are the only
modules of acp-client that import ``websockets``. ``ConnectionClosed*`` in ``send``/``recv`` becomes
:class:`~acp_client.exceptions.ConnectionLost` with ``close_code`` and ``reason``.

Liveness: the transport runs its own keepalive task (websockets' built-in one is off) that sends a Ping every
``ping_interval`` seconds and bounds *both* writing it and waiting for the Pong by ``ping_timeout``. When the
Pong does not come, the link is failed with close code 1011 ``"keepalive ping timeout"`` and the TCP
connection is aborted at once (a peer that answers no ping will not complete a closing handshake). So a
blackholed peer makes ``recv`` raise ``ConnectionLost`` within ``ping_interval + ping_timeout``, even when
the socket's write buffer is full (where websockets' own keepalive would wait for buffer space forever).

Stream resume (the durable transport draft, PR 2208; off until :meth:`WebSocketTransport.enable_stream_resume`):
a socket lost for a reason other than a terminal close is replaced underneath the same connection after the
agent acknowledged a ``stream/resume`` (see :mod:`acp_client.transports.websocket._resume` for the wire);
``recv`` and ``send`` wait meanwhile. Only a refused or impossible resume raises ``ConnectionLost``, with
``stream_resumption`` saying why.

Frames: only text frames are delivered; binary frames are discarded and counted in
``stats.binary_discarded`` (the RFD: "binary frames are ignored"). An inbound message larger than
``max_frame_bytes`` fails the link with close code 1009.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterable
from typing import cast

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConcurrencyError, ConnectionClosed
from websockets.frames import Close
from websockets.protocol import State

from acp_client._logging import get_logger, redact_headers
from acp_client.exceptions import ConnectionLost, UsageError
from acp_client.schema.transport import ResumableTransport
from acp_client.transports._cookies import CookieJar
from acp_client.transports.base import TransportStats
from acp_client.transports.options import TransportOptions
from acp_client.transports.websocket._resume import (
    MAX_REMEMBERED,
    CursorTracker,
    NotResumed,
    Reopen,
    StreamResumer,
    StreamResumeStats,
)

__all__ = ["CONNECTION_ID_HEADER", "WebSocketTransport", "join_headers"]

_log = get_logger("acp_client.transports.websocket")  # one logger name for the whole transport

#: The response header of the ``101`` that names the server's transport-level connection (RFD).
CONNECTION_ID_HEADER = "Acp-Connection-Id"

_ABNORMAL_CLOSURE = 1006
_MESSAGE_TOO_BIG = 1009
_INTERNAL_ERROR = 1011
#: Close codes after which a stream is never resumed: a normal closure (the agent's terminal signal), the
#: agent's verdicts on what this client sent, and the client's own closes.
_TERMINAL_CODES = frozenset({1000, 1002, 1003, 1007, 1008, 1009, 1010})
#: A resumable agent's keepalive: this many silent intervals end the link (the draft's rule).
SILENT_INTERVALS = 5

#: Linux's TCP_CORK: frames written while it is set leave as one train of full segments when it is cleared.
_TCP_CORK: int | None = getattr(socket, "TCP_CORK", None)


class WebSocketTransport:
    """An open ACP WebSocket link. Implements :class:`~acp_client.transports.Transport`.

    Made by :func:`connect_websocket`; the constructor starts nothing. After the handshake,
    :attr:`connection_id` holds the server's ``Acp-Connection-Id`` and :attr:`response_headers` the ``101``
    headers (secret values redacted). After the link closed, :attr:`close_code` and :attr:`close_reason`
    say how.

    Stream resume (the durable transport draft, PR 2208) is off until :meth:`enable_stream_resume` (an
    :class:`~acp_client.ACPClient` calls it when ``initialize`` advertised ``transport.resumable``). Then a
    dropped socket is replaced underneath: the transport reconnects with the same ``Acp-Connection-Id``, sends
    ``stream/resume`` with its last cursor as the first frame, and, once the agent acknowledged, delivers the
    replay (a cursor already delivered is dropped) and the live traffic as if nothing happened: ``recv`` and
    ``send`` wait meanwhile, and requests in flight are answered on the new socket. Only a refused or
    impossible resume makes ``recv`` raise ``ConnectionLost``, with the reason in ``stream_resumption``.
    """

    def __init__(
        self,
        connection: ClientConnection,
        *,
        description: str,
        options: TransportOptions,
        reopen: Reopen | None = None,
    ) -> None:
        """Wrap an open ``websockets`` connection. Use :func:`connect_websocket` instead."""
        self._conn = connection
        self._reopen = reopen  # opens the same URL again (stream resume), else None
        self._resumer: StreamResumer | None = None
        self._tracker: CursorTracker | None = None  # the resumer's, read on the hot path
        self._resume_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._heard = 0.0  # when the agent last answered a keepalive ping (stream resume's silence watch)
        self._description = description
        self._options = options  # read where used: the keepalive, the close, the frame bound
        self._failure: tuple[int, str] | None = None
        self._keepalive_task: asyncio.Task[None] | None = None
        self._close_task: asyncio.Task[None] | None = None
        self.cookies: CookieJar = options.cookies
        """The jar the handshake's cookies went to; pass it to the next :func:`connect_websocket`."""
        response = connection.response
        raw_headers = list(response.headers.raw_items()) if response is not None else []
        self.response_headers: dict[str, str] = redact_headers(join_headers(raw_headers))
        """Headers of the ``101`` response, secret values (``Set-Cookie`` ...) redacted."""
        self.connection_id: str | None = response.headers.get(CONNECTION_ID_HEADER) if response else None
        """The server's ``Acp-Connection-Id`` from the ``101`` response, when it sent one (a resumed stream
        keeps the first one: it names the connection the agent kept)."""
        self.subprotocol: str | None = connection.subprotocol
        """The subprotocol the server selected, if any."""
        self.stats = TransportStats()
        """Live counters of frames moved and discarded (see :class:`TransportStats`)."""
        self.stream_resumption: str | None = None
        """How the last stream resume went (``"resumed with stream/resume: ..."``); ``None`` before one."""
        self._cork_with: tuple[socket.socket, int] | None = None
        self._corked = False
        self._set_cork(connection)

    def _set_cork(self, connection: ClientConnection) -> None:
        # frames written in one turn of the event loop are corked and leave together at the next turn: a
        # recovery round's hundreds of requests cost a few socket sends, not one (and one wake-up of the
        # peer) each
        sock = connection.transport.get_extra_info("socket") if _TCP_CORK is not None else None
        self._cork_with = (sock, _TCP_CORK) if sock is not None and _TCP_CORK is not None else None

    def _start(self) -> None:
        if self._options.ping_interval is not None:
            self._keepalive_task = asyncio.get_running_loop().create_task(
                self._keepalive(self._options.ping_interval), name=f"acp-client keepalive {self._description}"
            )

    # ------------------------------------------------------------------ properties

    @property
    def description(self) -> str:
        """``ws://host:port/path`` without user info or query (they may hold secrets)."""
        return self._description

    @property
    def closed(self) -> bool:
        """``True`` once the link is closing, closed, or failed its keepalive."""
        return self._failure is not None or self._conn.state in (State.CLOSING, State.CLOSED)

    @property
    def resume_stats(self) -> StreamResumeStats | None:
        """Counters of stream resumes (see :class:`StreamResumeStats`); ``None`` until it was enabled."""
        return self._resumer.stats if self._resumer is not None else None

    @property
    def turn_state(self) -> dict[str, object] | None:
        """The v1 ``acp/turnState`` hint (``{"state", "promptRequestId"}``) of the last acknowledged resume."""
        return self._resumer.turn_state if self._resumer is not None else None

    def watch_cursors(self) -> None:
        """Note the cursors of inbound messages from now on (:class:`~acp_client.ACPClient` calls it before
        ``initialize``), until :meth:`enable_stream_resume` says whether the agent offers stream resume."""
        if self._reopen is not None and self._tracker is None:
            self._tracker = CursorTracker(MAX_REMEMBERED, StreamResumeStats())

    def enable_stream_resume(self, capability: ResumableTransport | None) -> None:
        """Resume this link's stream after a drop (see the class docstring): the agent advertised
        ``capability``; ``None`` turns the cursor watch of :meth:`watch_cursors` off (the agent offers none).

        With ``capability.keepalive_seconds`` the transport also pings at that interval, and
        :data:`SILENT_INTERVALS` intervals without an answer end the socket (then resumed, if the agent
        is there). Does nothing when called again after a capability, or on a transport made without a way
        to reopen it.
        """
        if self._reopen is None or self._resumer is not None or self.closed:
            return
        if capability is None:
            self._tracker = None
            return
        self._resumer = StreamResumer(
            capability, self._reopen, answer_timeout=self._options.open_timeout, cursors=self._tracker
        )
        self._tracker = self._resumer.cursors
        interval = capability.keepalive_seconds
        if interval is not None:
            self._watch_task = asyncio.get_running_loop().create_task(
                self._watch_silence(interval), name=f"acp-client silence watch {self._description}"
            )
        _log.info("websocket_stream_resume_enabled", transport=self._description, keepalive_seconds=interval)

    @property
    def latency(self) -> float:
        """Round-trip time of the last Ping/Pong, in seconds (``0.0`` before the first one)."""
        return self._conn.latency

    @property
    def close_code(self) -> int | None:
        """How the link closed: the close code of whichever side closed first; ``None`` while open.

        ``1006`` when it ended without a close frame; ``1011`` after a keepalive timeout.
        """
        return self._close_info()[0] if self._conn.state is State.CLOSED or self._failure else None

    @property
    def close_reason(self) -> str | None:
        """The close reason that goes with :attr:`close_code`; ``None`` while open."""
        return self._close_info()[1] if self._conn.state is State.CLOSED or self._failure else None

    # ------------------------------------------------------------------ I/O

    async def send(self, frame: str) -> None:
        """Send one text frame. Waits while the socket's write buffer is full (or a stream resume runs);
        raises ``ConnectionLost``."""
        if not isinstance(cast(object, frame), str):
            raise UsageError(f"a frame must be str, not {type(frame).__name__}")
        if self._failure is not None or self._resume_task is not None:
            if not self._may_resume():
                raise self._lost()
            await self._resume_link()  # raises ConnectionLost when the stream was not resumed
            return await self.send(frame)
        if not self._corked and self._cork_with is not None:
            self._cork(*self._cork_with)
        try:
            await self._conn.send(frame)
        except ConnectionClosed as exc:
            if not self._may_resume():
                raise self._lost() from exc
            await self._resume_link()  # the frame was not written: it goes on the resumed socket
            return await self.send(frame)
        if self._aborted():
            # the keepalive aborted the link while this frame waited for buffer space: it was not sent
            if not self._may_resume():
                raise self._lost()
            await self._resume_link()
            return await self.send(frame)
        self.stats.frames_out += 1
        self.stats.bytes_out += len(frame) if frame.isascii() else len(frame.encode())

    async def recv(self) -> str:
        """Next text frame; binary frames are discarded and counted. Raises ``ConnectionLost`` when closed."""
        while True:
            try:
                message = await self._conn.recv()
            except ConnectionClosed as exc:
                if not self._may_resume():
                    raise self._lost() from exc
                await self._resume_link()  # raises ConnectionLost when the stream was not resumed
                continue
            except ConcurrencyError as exc:
                raise UsageError("only one task may wait in recv() at a time") from exc
            if isinstance(message, str):
                tracker = self._tracker
                if tracker is not None and not tracker.take(message):
                    continue  # a replayed message already delivered
                self.stats.frames_in += 1
                self.stats.bytes_in += len(message) if message.isascii() else len(message.encode())
                return message
            self.stats.binary_discarded += 1
            _log.debug("websocket_binary_discarded", transport=self._description, size=len(message))

    async def ping(self, timeout: float | None = None) -> float:
        """Check liveness now: send a Ping and wait for its Pong; return the round-trip time in seconds.

        ``timeout`` defaults to ``ping_timeout``. When no Pong comes in time the link is failed exactly as by
        the keepalive (close code 1011) and ``ConnectionLost`` is raised. Useful after a sleep or a network
        change, when the next scheduled keepalive Ping is far away.
        """
        if self._failure is not None:
            raise self._lost()
        if timeout is None:
            timeout = self._options.ping_timeout
        try:
            async with asyncio.timeout(timeout):
                pong = await self._conn.ping()
                return await pong
        except ConnectionClosed as exc:
            raise self._lost() from exc
        except TimeoutError:
            await self._fail(_INTERNAL_ERROR, "keepalive ping timeout")
            raise self._lost() from None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the link with ``code`` and ``reason``: closing handshake bounded by ``close_timeout``, then
        abort. Idempotent; concurrent callers all wait for the same close; cancelling a caller does not
        interrupt the close itself.
        """
        if self._close_task is None:
            self._close_task = asyncio.get_running_loop().create_task(
                self._close_impl(code, reason), name=f"acp-client close {self._description}"
            )
        await asyncio.shield(self._close_task)

    # ------------------------------------------------------------------ internals

    def _cork(self, sock: socket.socket, option: int) -> None:
        """Hold this turn's frames in the kernel until the loop's next turn (:meth:`_uncork`)."""
        try:
            sock.setsockopt(socket.IPPROTO_TCP, option, 1)
        except OSError:  # not TCP after all, or gone: frames go out one by one
            self._cork_with = None
            return
        self._corked = True
        asyncio.get_running_loop().call_soon(self._uncork, sock, option)

    def _uncork(self, sock: socket.socket, option: int) -> None:
        self._corked = False
        with contextlib.suppress(OSError):  # the link closed meanwhile: nothing left to send
            sock.setsockopt(socket.IPPROTO_TCP, option, 0)

    async def _close_impl(self, code: int, reason: str) -> None:
        tasks = [t for t in (self._keepalive_task, self._watch_task, self._resume_task) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        try:
            async with asyncio.timeout(self._options.close_timeout):
                await self._conn.close(code, reason)
        except TimeoutError:
            self._conn.transport.abort()
        await self._wait_connection_lost()
        _log.debug(
            "transport_closed",
            transport=self._description,
            close_code=self.close_code,
            reason=self.close_reason,
            stats=self.stats.as_dict(),
        )

    async def _wait_connection_lost(self) -> None:
        # abort() makes asyncio call connection_lost() on the next loop iterations; bound it all the same
        try:
            async with asyncio.timeout(1.0):
                await self._conn.wait_closed()
        except TimeoutError:
            _log.warning("websocket_not_closed", transport=self._description)

    async def _keepalive(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                async with asyncio.timeout(self._options.ping_timeout):
                    pong = await self._conn.ping()
                    await pong
            except ConnectionClosed:
                return
            except TimeoutError:
                await self._fail(_INTERNAL_ERROR, "keepalive ping timeout")
                return

    async def _fail(self, code: int, reason: str) -> None:
        """Declare the link dead and abort the TCP link at once: a peer that answers no ping will not answer
        a closing handshake either, so waiting ``close_timeout`` for one would only delay detection."""
        if self._failure is None:
            self._failure = (code, reason)
            _log.warning(
                "websocket_keepalive_timeout",
                transport=self._description,
                reason=reason,
                ping_interval=self._options.ping_interval,
                ping_timeout=self._options.ping_timeout,
            )
        self._conn.transport.abort()
        await self._wait_connection_lost()

    # ------------------------------------------------------------------ stream resume

    def _aborted(self) -> bool:
        """The keepalive (or the silence watch) failed the current socket (an await may have passed since the
        last look)."""
        return self._failure is not None

    def _may_resume(self) -> bool:
        """Whether the loss of the current socket is one to resume: stream resume is on, the client is not
        closing, and the socket did not end with a terminal close code (or the client's own close)."""
        if self._resumer is None or self._close_task is not None:
            return False
        if self._resume_task is not None:
            return True
        code, _reason, ours = self._close_info()
        if ours:
            return self._failure is not None  # a keepalive failure, not a close this client chose
        return code not in _TERMINAL_CODES

    async def _resume_link(self) -> None:
        """Run (or join) the stream resume; returns once a new socket is in place, else raises
        ``ConnectionLost`` (with ``stream_resumption`` saying why)."""
        task = self._resume_task
        if task is None:
            task = asyncio.get_running_loop().create_task(
                self._run_resume(), name=f"acp-client stream resume {self._description}"
            )
            self._resume_task = task
        await asyncio.wait([task])
        if task.cancelled():  # the client closed the link meanwhile
            raise self._lost()
        error = task.exception()
        if error is not None:
            raise error

    async def _run_resume(self) -> None:
        resumer = self._resumer
        assert resumer is not None
        lost = self._lost()
        _log.info("websocket_stream_resuming", transport=self._description, reason=lost.reason)
        try:
            resumer.note_progress(self.stats.frames_in)
            connection = await resumer.resume(self.connection_id)
        except NotResumed as why:
            self.stream_resumption = f"not resumed: {why}"
            _log.warning("websocket_stream_not_resumed", transport=self._description, reason=str(why))
            self._tracker = None
            self._resumer = None
            lost.stream_resumption = self.stream_resumption
            raise lost from None
        finally:
            self._resume_task = None
        self._swap(connection)
        self.stream_resumption = resumer.outcome
        _log.info("websocket_stream_resumed", transport=self._description, how=resumer.outcome)
        callback = self._options.on_stream_resumed
        if callback is not None:
            try:
                callback(None)
            except Exception:
                _log.exception("websocket_stream_resumed_callback_failed", transport=self._description)

    def _swap(self, connection: ClientConnection) -> None:
        """Put the acknowledged socket in place of the dead one (its keepalive restarts)."""
        if self._keepalive_task is not None:
            self._keepalive_task.cancel()
            self._keepalive_task = None
        self._conn = connection
        self._failure = None
        self._corked = False
        self._set_cork(connection)
        self._heard = asyncio.get_running_loop().time()
        self._start()

    async def _watch_silence(self, interval: float) -> None:
        """Ping every ``interval`` seconds; :data:`SILENT_INTERVALS` intervals without a pong end the socket."""
        loop = asyncio.get_running_loop()
        self._heard = loop.time()

        def heard(pong: asyncio.Future[float]) -> None:
            if not pong.cancelled() and pong.exception() is None:
                self._heard = loop.time()

        while True:
            await asyncio.sleep(interval)
            connection = self._conn
            if self._resume_task is not None or connection.state is not State.OPEN:
                self._heard = loop.time()
                continue
            silent = loop.time() - self._heard
            if silent > SILENT_INTERVALS * interval:
                why = f"no keepalive answer for {SILENT_INTERVALS} intervals ({silent:.3g} s)"
                await self._fail(_INTERNAL_ERROR, why)
                continue
            try:
                pong = await connection.ping()
            except (ConnectionClosed, ConcurrencyError):
                continue
            cast("asyncio.Future[float]", pong).add_done_callback(heard)

    def _close_info(self) -> tuple[int, str, bool]:
        """The close code, its reason, and whether this client sent it first."""
        if self._failure is not None:
            return (*self._failure, True)
        protocol = self._conn.protocol
        rcvd: Close | None = protocol.close_rcvd
        sent: Close | None = protocol.close_sent
        if sent is not None and (rcvd is None or protocol.close_rcvd_then_sent is False):
            if sent.code == _MESSAGE_TOO_BIG:
                return (
                    sent.code,
                    (f"the agent sent a message larger than max_frame_bytes ({self._options.max_frame_bytes} bytes)"),
                    True,
                )
            return sent.code, sent.reason, True
        if rcvd is not None:
            return rcvd.code, rcvd.reason, False
        return _ABNORMAL_CLOSURE, "the connection ended without a close frame", False

    def _lost(self) -> ConnectionLost:
        code, reason, ours = self._close_info()
        detail = f" ({reason})" if reason else ""
        return ConnectionLost(
            f"the WebSocket connection to {self._description} was lost: close code {code}{detail}",
            close_code=code,
            reason=reason,
            closed_by_client=ours,
        )

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        cid = f" connection_id={self.connection_id}" if self.connection_id else ""
        return f"<WebSocketTransport {self._description} {state}{cid}>"


def join_headers(items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Header pairs with repeated names joined into one comma-separated value (first spelling kept)."""
    joined: dict[str, tuple[str, str]] = {}
    for name, value in items:
        key = name.lower()
        if key in joined:
            joined[key] = (joined[key][0], f"{joined[key][1]}, {value}")
        else:
            joined[key] = (name, value)
    return list(joined.values())

"""The WebSocket transport of the ACP remote-transport RFD, on ``websockets``' asyncio client.

This is the only module of acp-client that imports ``websockets``; every error it raises is translated here,
once, into :mod:`acp_client.exceptions`:

================================================  ==========================================================
``websockets`` / stdlib error                     acp-client error
================================================  ==========================================================
malformed URL, scheme other than ws/wss           :class:`~acp_client.exceptions.UsageError` (before any I/O)
``InvalidStatus`` (HTTP status, not 101)          :class:`~acp_client.exceptions.HandshakeRejected`
                                                  (``status_code``, ``retry_after``, redacted ``headers``)
``ssl.SSLError`` (certificate not trusted ...)    :class:`~acp_client.exceptions.TLSError` (but EOF/reset in
                                                  mid-handshake: ``ConnectError``, it is the network)
``TimeoutError`` after ``open_timeout``           :class:`~acp_client.exceptions.ConnectError`, whose
                                                  ``__cause__`` is the ``TimeoutError``
``OSError`` (refused, DNS, reset), other          :class:`~acp_client.exceptions.ConnectError`
handshake failures (bad HTTP, proxy, redirects)
``ConnectionClosed*`` in ``send``/``recv``        :class:`~acp_client.exceptions.ConnectionLost` with
                                                  ``close_code`` and ``reason``
================================================  ==========================================================

Liveness: the transport runs its own keepalive task (websockets' built-in one is off) that sends a Ping every
``ping_interval`` seconds and bounds *both* writing it and waiting for the Pong by ``ping_timeout``. When the
Pong does not come, the link is failed with close code 1011 ``"keepalive ping timeout"`` and the TCP
connection is aborted at once (a peer that answers no ping will not complete a closing handshake). So a
blackholed peer makes ``recv`` raise ``ConnectionLost`` within ``ping_interval + ping_timeout``, even when
the socket's write buffer is full (where websockets' own keepalive would wait for buffer space forever).

Frames: only text frames are delivered; binary frames are discarded and counted in
``stats.binary_discarded`` (the RFD: "binary frames are ignored"). An inbound message larger than
``max_frame_bytes`` fails the link with close code 1009.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as _ssl
from collections.abc import Iterable, Sequence
from typing import Literal, cast

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as _ws_connect
from websockets.exceptions import (
    ConcurrencyError,
    ConnectionClosed,
    InvalidStatus,
    InvalidURI,
    WebSocketException,
)
from websockets.frames import Close
from websockets.protocol import State
from websockets.typing import Subprotocol
from websockets.uri import WebSocketURI, parse_uri
from websockets.version import version as _websockets_version

from acp_client._logging import SECRET_HEADER_NAMES, get_logger, redact_headers
from acp_client._version import __version__
from acp_client.exceptions import (
    ConnectError,
    ConnectionLost,
    HandshakeRejected,
    TLSError,
    UsageError,
)
from acp_client.transports._cookies import CookieJar, parse_retry_after
from acp_client.transports.base import DEFAULT_MAX_FRAME_BYTES, TransportStats
from acp_client.transports.options import HeadersLike, HeadersProvider, TransportOptions, resolve_headers

__all__ = [
    "CONNECTION_ID_HEADER",
    "CookieJar",
    "HeadersLike",
    "HeadersProvider",
    "WebSocketTransport",
    "connect_websocket",
    "open_websocket",
    "parse_retry_after",
]

_log = get_logger(__name__)

#: The response header of the ``101`` that names the server's transport-level connection (RFD).
CONNECTION_ID_HEADER = "Acp-Connection-Id"


_USER_AGENT = f"acp-client/{__version__} websockets/{_websockets_version}"
_ABNORMAL_CLOSURE = 1006
_MESSAGE_TOO_BIG = 1009
_INTERNAL_ERROR = 1011


class _NoWireDebug(logging.LoggerAdapter[logging.Logger]):
    """``websockets``' own stdlib logger minus its DEBUG wire dumps.

    At DEBUG, websockets writes every handshake header (``Authorization``, ``Cookie``) and frame to its
    logger; an application that turns on DEBUG globally would leak secrets. Warnings and errors still reach
    ``websockets.client``. (acp-client's own events go through structlog, see :mod:`acp_client._logging`.)
    """

    def isEnabledFor(self, level: int) -> bool:
        return level > logging.DEBUG and self.logger.isEnabledFor(level)


_WEBSOCKETS_LOGGER = _NoWireDebug(logging.getLogger("websockets.client"), {})


# --------------------------------------------------------------------------- transport


class WebSocketTransport:
    """An open ACP WebSocket link. Implements :class:`~acp_client.transports.Transport`.

    Made by :func:`connect_websocket`; the constructor starts nothing. After the handshake,
    :attr:`connection_id` holds the server's ``Acp-Connection-Id`` and :attr:`response_headers` the ``101``
    headers (secret values redacted). After the link closed, :attr:`close_code` and :attr:`close_reason`
    say how.
    """

    def __init__(
        self,
        connection: ClientConnection,
        *,
        description: str,
        cookies: CookieJar,
        ping_interval: float | None,
        ping_timeout: float | None,
        close_timeout: float,
        max_frame_bytes: int | None,
    ) -> None:
        """Wrap an open ``websockets`` connection. Use :func:`connect_websocket` instead."""
        self._conn = connection
        self._description = description
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._close_timeout = close_timeout
        self._max_frame_bytes = max_frame_bytes
        self._failure: tuple[int, str] | None = None
        self._keepalive_task: asyncio.Task[None] | None = None
        self._close_task: asyncio.Task[None] | None = None
        self.cookies = cookies
        """The jar the handshake's cookies went to; pass it to the next :func:`connect_websocket`."""
        response = connection.response
        raw_headers = list(response.headers.raw_items()) if response is not None else []
        self.response_headers: dict[str, str] = redact_headers(_join_headers(raw_headers))
        """Headers of the ``101`` response, secret values (``Set-Cookie`` ...) redacted."""
        self.connection_id: str | None = response.headers.get(CONNECTION_ID_HEADER) if response else None
        """The server's ``Acp-Connection-Id`` from the ``101`` response, when it sent one."""
        self.subprotocol: str | None = connection.subprotocol
        """The subprotocol the server selected, if any."""
        self.stats = TransportStats()
        """Live counters of frames moved and discarded (see :class:`TransportStats`)."""

    def _start(self) -> None:
        if self._ping_interval is not None:
            self._keepalive_task = asyncio.get_running_loop().create_task(
                self._keepalive(self._ping_interval), name=f"acp-client keepalive {self._description}"
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
        """Send one text frame. Waits while the socket's write buffer is full; raises ``ConnectionLost``."""
        if not isinstance(cast(object, frame), str):
            raise UsageError(f"a frame must be str, not {type(frame).__name__}")
        if self._failure is not None:
            raise self._lost()
        try:
            await self._conn.send(frame)
        except ConnectionClosed as exc:
            raise self._lost() from exc
        if self._failure is not None:
            # the keepalive aborted the link while this frame waited for buffer space: it was not sent
            raise self._lost()
        self.stats.frames_out += 1
        self.stats.bytes_out += len(frame) if frame.isascii() else len(frame.encode())

    async def recv(self) -> str:
        """Next text frame; binary frames are discarded and counted. Raises ``ConnectionLost`` when closed."""
        while True:
            try:
                message = await self._conn.recv()
            except ConnectionClosed as exc:
                raise self._lost() from exc
            except ConcurrencyError as exc:
                raise UsageError("only one task may wait in recv() at a time") from exc
            if isinstance(message, str):
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
            timeout = self._ping_timeout
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

    async def _close_impl(self, code: int, reason: str) -> None:
        if self._keepalive_task is not None:
            self._keepalive_task.cancel()
            await asyncio.wait([self._keepalive_task])
        try:
            async with asyncio.timeout(self._close_timeout):
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
                async with asyncio.timeout(self._ping_timeout):
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
                ping_interval=self._ping_interval,
                ping_timeout=self._ping_timeout,
            )
        self._conn.transport.abort()
        await self._wait_connection_lost()

    def _close_info(self) -> tuple[int, str, bool]:
        """The close code, its reason, and whether this client sent it first."""
        if self._failure is not None:
            return (*self._failure, True)
        protocol = self._conn.protocol
        rcvd: Close | None = protocol.close_rcvd
        sent: Close | None = protocol.close_sent
        if sent is not None and (rcvd is None or protocol.close_rcvd_then_sent is False):
            if sent.code == _MESSAGE_TOO_BIG:
                return sent.code, (
                    f"the agent sent a message larger than max_frame_bytes ({self._max_frame_bytes} bytes)"
                ), True
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


def _join_headers(items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    joined: dict[str, tuple[str, str]] = {}
    for name, value in items:
        key = name.lower()
        if key in joined:
            joined[key] = (joined[key][0], f"{joined[key][1]}, {value}")
        else:
            joined[key] = (name, value)
    return list(joined.values())


def _describe(uri: WebSocketURI) -> str:
    host = f"[{uri.host}]" if ":" in uri.host else uri.host
    return f"{'wss' if uri.secure else 'ws'}://{host}:{uri.port}{uri.path or '/'}"


async def connect_websocket(
    url: str,
    *,
    headers: HeadersLike | HeadersProvider | None = None,
    cookies: CookieJar | None = None,
    ssl: _ssl.SSLContext | None = None,
    subprotocols: Sequence[str] | None = None,
    open_timeout: float | None = 10.0,
    ping_interval: float | None = 20.0,
    ping_timeout: float | None = 20.0,
    close_timeout: float = 10.0,
    max_frame_bytes: int | None = DEFAULT_MAX_FRAME_BYTES,
    max_queue: int | None = 16,
    proxy: str | bool | None = True,
    compression: str | None = "deflate",
) -> WebSocketTransport:
    """Open a WebSocket to an ACP agent at ``url`` (``ws://`` or ``wss://``).

    Handshake:
        ``headers`` are added to the upgrade request; a zero-argument callable (sync or async) returning
        them is called on every connect, for tokens that rotate. ``cookies`` is the jar whose cookies are
        sent for this host and which receives the ``Set-Cookie`` of the response (a fresh jar when
        ``None``; reuse :attr:`WebSocketTransport.cookies` for the next connect to the same endpoint).
        ``subprotocols`` are offered in ``Sec-WebSocket-Protocol``. ``proxy``: ``True`` uses the proxy of
        the environment (``https_proxy`` ...), ``None``/``False`` none, a string that proxy URL.

    TLS:
        ``wss://`` verifies the server certificate with :func:`ssl.create_default_context` unless ``ssl``
        is given. ``ws://`` never uses TLS; passing ``ssl`` with it is a :class:`UsageError`.

    Timeouts (float seconds; ``None`` disables, except ``close_timeout``):
        ``open_timeout`` bounds TCP + TLS + HTTP upgrade. ``ping_interval``/``ping_timeout`` drive the
        keepalive (see the module docstring); ``close_timeout`` bounds every closing handshake before the
        TCP connection is aborted.

    Limits:
        ``max_frame_bytes`` bounds one inbound message (larger: close 1009, ``ConnectionLost``);
        ``max_queue`` is how many inbound messages are buffered before reading from the socket pauses.
        ``compression``: ``"deflate"`` offers permessage-deflate, ``None`` turns it off (cheaper on CPU
        for the many small frames of a streaming turn, at the cost of bytes on the wire).

    Raises :class:`UsageError` for a malformed URL, :class:`HandshakeRejected` for an HTTP answer other than
    ``101``, :class:`TLSError` for a TLS failure and :class:`ConnectError` for everything else that keeps
    the link from opening (refused, unresolvable, timed out: then ``__cause__`` is the ``TimeoutError``).
    """
    try:
        uri = parse_uri(url)
    except InvalidURI as exc:
        # the message names the problem but not the URL, which may carry a token in its query
        raise UsageError(f"not a WebSocket URL (ws:// or wss://): {exc.msg}") from None
    description = _describe(uri)
    if not uri.secure and ssl is not None:
        raise UsageError(f"an ssl context was given for {description}; use a wss:// URL for TLS")
    jar = cookies if cookies is not None else CookieJar()

    request_headers = await resolve_headers(headers)
    cookie_value = jar.header_value(uri.host, secure=uri.secure)
    if cookie_value is not None:
        request_headers.append(("Cookie", cookie_value))

    ws_proxy: str | Literal[True] | None = proxy if isinstance(proxy, str) else (True if proxy is True else None)
    tls: _ssl.SSLContext | None = None
    if uri.secure:
        tls = ssl if ssl is not None else _ssl.create_default_context()
    _log.debug("websocket_connecting", transport=description, headers=redact_headers(request_headers))
    try:
        connection = await _ws_connect(
            url,
            additional_headers=request_headers,
            user_agent_header=_USER_AGENT,
            subprotocols=[Subprotocol(s) for s in subprotocols] if subprotocols is not None else None,
            proxy=ws_proxy,
            open_timeout=open_timeout,
            ping_interval=None,  # our own keepalive, see the module docstring
            ping_timeout=None,
            close_timeout=close_timeout,
            max_size=max_frame_bytes,
            max_queue=max_queue,
            compression=compression,
            ssl=tls,  # None for ws://
            logger=_WEBSOCKETS_LOGGER,
        )
    except InvalidStatus as exc:
        response = exc.response
        jar.store(uri.host, response.headers.get_all("Set-Cookie"))
        safe = {
            name: value
            for name, value in _join_headers(response.headers.raw_items())
            if name.lower() not in SECRET_HEADER_NAMES
        }
        rejected = HandshakeRejected(
            response.status_code,
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
            headers=safe,
        )
        _log.info(
            "websocket_handshake_rejected",
            transport=description,
            status_code=response.status_code,
            retry_after=rejected.retry_after,
        )
        raise rejected from exc
    except (_ssl.SSLEOFError, _ssl.SSLZeroReturnError, _ssl.SSLSyscallError) as exc:
        # the link dropped in the middle of the TLS handshake: a network failure, not a TLS verdict
        raise ConnectError(f"the connection to {description} dropped during the TLS handshake: {exc}") from exc
    except _ssl.SSLError as exc:  # before OSError: SSLError is one
        raise TLSError(f"the TLS handshake with {description} failed: {exc}") from exc
    except TimeoutError as exc:  # before OSError: TimeoutError is one
        raise ConnectError(f"opening {description} timed out after {open_timeout:g} s") from exc
    except OSError as exc:
        raise ConnectError(f"could not connect to {description}: {exc}") from exc
    except WebSocketException as exc:
        raise ConnectError(f"the WebSocket handshake with {description} failed: {exc}") from exc

    if connection.response is not None:
        jar.store(uri.host, connection.response.headers.get_all("Set-Cookie"))
    transport = WebSocketTransport(
        connection,
        description=description,
        cookies=jar,
        ping_interval=ping_interval,
        ping_timeout=ping_timeout,
        close_timeout=close_timeout,
        max_frame_bytes=max_frame_bytes,
    )
    transport._start()
    _log.info("websocket_connected", transport=description, connection_id=transport.connection_id)
    return transport


async def open_websocket(url: str, options: TransportOptions) -> WebSocketTransport:
    """Open a WebSocket to ``url`` with a client's shared :class:`TransportOptions`."""
    return await connect_websocket(
        url,
        headers=options.headers,
        cookies=options.cookies,
        ssl=options.ssl,
        open_timeout=options.open_timeout,
        ping_interval=options.ping_interval,
        ping_timeout=options.ping_timeout,
        close_timeout=options.close_timeout,
        max_frame_bytes=options.max_frame_bytes,
        compression=options.compression,
    )

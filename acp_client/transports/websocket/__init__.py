"""The WebSocket transport of the ACP remote-transport RFD, on ``websockets``' asyncio client.

This module opens the link (the handshake); with its private ``_websocket_link.py`` it is the only code of
acp-client that imports ``websockets``, and every error that raises is translated once, into
:mod:`acp_client.exceptions`:

================================================  ==========================================================
``websockets`` / stdlib error                     acp-client error
================================================  ==========================================================
malformed URL, scheme other than ws/wss           :class:`~acp_client.exceptions.UsageError` (before any I/O)
``InvalidStatus`` (HTTP status, not 101)          :class:`~acp_client.exceptions.HandshakeRejected`
                                                  (``status_code``, ``retry_after``, redacted ``headers``);
                                                  a 2xx or a definite 4xx (see ``_answer``):
                                                  :class:`~acp_client.exceptions.NotAnACPEndpoint`
``InvalidMessage``: an answer that is not         :class:`~acp_client.exceptions.NotAnACPEndpoint` naming
HTTP/1.1 (HTTP/1.0 server, another protocol)      its first line and ``Server`` header, at once
``ssl.SSLError`` (certificate not trusted ...)    :class:`~acp_client.exceptions.TLSError` (but EOF/reset in
                                                  mid-handshake: ``ConnectError``, it is the network)
``TimeoutError`` after ``open_timeout``           :class:`~acp_client.exceptions.ConnectError`, whose
                                                  ``__cause__`` is the ``TimeoutError``
``OSError`` (refused, DNS, reset), other          :class:`~acp_client.exceptions.ConnectError`
handshake failures (bad HTTP, proxy, redirects)
``ConnectionClosed*`` in ``send``/``recv``        :class:`~acp_client.exceptions.ConnectionLost` with
                                                  ``close_code`` and ``reason``
================================================  ==========================================================

The open link itself (sending, receiving, the keepalive, closing, resuming a dropped stream from its cursor
when the agent offers it, with :class:`StreamResumeStats`) is :class:`WebSocketTransport` in
:mod:`acp_client.transports.websocket._link`, re-exported here.
"""

from __future__ import annotations

import ipaddress
import logging
import ssl as _ssl
from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import urljoin

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as _ws_connect
from websockets.exceptions import InvalidMessage, InvalidStatus, InvalidURI, WebSocketException
from websockets.protocol import State
from websockets.typing import Subprotocol
from websockets.uri import WebSocketURI, parse_uri
from websockets.version import version as _websockets_version

from acp_client import _observe
from acp_client._logging import SECRET_HEADER_NAMES, get_logger, loggable_headers, redact_url
from acp_client._version import __version__
from acp_client.exceptions import ConnectError, HandshakeRejected, NotAnACPEndpoint, TLSError, UsageError
from acp_client.transports._answer import ANSWER_HEAD_BYTES, is_definite_status, parse_answer_head, shown
from acp_client.transports._cookies import CookieJar, parse_retry_after
from acp_client.transports.base import DEFAULT_MAX_FRAME_BYTES
from acp_client.transports.options import HeadersLike, HeadersProvider, TransportOptions, resolve_headers
from acp_client.transports.websocket._link import CONNECTION_ID_HEADER, WebSocketTransport, join_headers
from acp_client.transports.websocket._resume import StreamResumeStats

__all__ = [
    "CONNECTION_ID_HEADER",
    "CookieJar",
    "HeadersLike",
    "HeadersProvider",
    "StreamResumeStats",
    "WebSocketTransport",
    "connect_websocket",
    "open_websocket",
    "parse_retry_after",
]

_log = get_logger(__name__)

_USER_AGENT = f"acp-client/{__version__} websockets/{_websockets_version}"


class _NoWireDebug(logging.LoggerAdapter[logging.Logger]):
    """``websockets``' own stdlib logger minus its DEBUG wire dumps.

    At DEBUG, websockets writes every handshake header (``Authorization``, ``Cookie``) and frame to its
    logger; an application that turns on DEBUG globally would leak secrets. Warnings and errors still reach
    ``websockets.client``. (acp-client's own events go through structlog, see :mod:`acp_client._logging`.)
    """

    def isEnabledFor(self, level: int) -> bool:
        return level > logging.DEBUG and self.logger.isEnabledFor(level)


_WEBSOCKETS_LOGGER = _NoWireDebug(logging.getLogger("websockets.client"), {})


_REDIRECTS = frozenset({300, 301, 302, 303, 307, 308})


def _recording(head: bytearray) -> type[ClientConnection]:
    """A websockets connection class that keeps the first bytes of the answer to the upgrade in ``head``
    (at most ``ANSWER_HEAD_BYTES``; each new connection, after a redirect, starts it afresh), so that an
    answer websockets cannot parse (HTTP/1.0, another protocol) can still be named in the error."""

    class _Recording(ClientConnection):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            head.clear()

        def data_received(self, data: bytes) -> None:
            room = ANSWER_HEAD_BYTES - len(head)
            if room > 0 and self.protocol.state is State.CONNECTING:
                head.extend(data[:room])
            super().data_received(data)

    return _Recording


class _Connect(_ws_connect):
    """websockets' ``connect`` with our redirect rule: none followed unless asked, and then only within the
    origin (scheme, host, port). websockets itself follows up to 10 redirects to any origin and drops only
    ``Authorization`` and ``Cookie`` on the way, so ``X-Api-Key`` and friends would reach the other host.
    ``head`` holds the first bytes of the last answer to the upgrade (see :func:`_recording`)."""

    def __init__(self, *args: Any, follow_redirects: bool, **kwargs: Any) -> None:
        self.head = bytearray()
        super().__init__(*args, create_connection=_recording(self.head), **kwargs)
        self._follow_redirects = follow_redirects
        #: why the last redirect was refused (for the error), ``None`` when none was
        self.refused: str | None = None

    def process_redirect(self, exc: Exception) -> Exception | str:
        if not (
            isinstance(exc, InvalidStatus)
            and exc.response.status_code in _REDIRECTS
            and "Location" in exc.response.headers
        ):
            return exc
        target = urljoin(self.uri, exc.response.headers["Location"])
        shown = redact_url(target)
        if not self._follow_redirects:
            self.refused = f"a redirect to {shown}, not followed (follow_redirects is off)"
            return exc
        try:
            new = parse_uri(target)
        except InvalidURI:
            self.refused = f"a redirect to {shown}, which is not a WebSocket URL"
            return exc
        old = self.ws_uri
        if (new.secure, new.host, new.port) != (old.secure, old.host, old.port):
            self.refused = f"a redirect to another origin ({shown}), never followed"
            return exc
        return super().process_redirect(exc)


def _rejected(exc: InvalidStatus, description: str, opening: _Connect) -> HandshakeRejected:
    """The error for an HTTP answer other than ``101``: :class:`NotAnACPEndpoint` when the status says so
    for certain (a page served, most 4xx), else :class:`HandshakeRejected` (redacted headers kept)."""
    response = exc.response
    safe = {
        name: value
        for name, value in join_headers(response.headers.raw_items())
        if name.lower() not in SECRET_HEADER_NAMES
    }
    status = response.status_code
    if is_definite_status(status) and opening.refused is None:
        server = response.headers.get("Server")
        return NotAnACPEndpoint(
            description,
            status_line=shown(f"HTTP/1.1 {status} {response.reason_phrase}".rstrip()),
            server=shown(server) if server else None,
            status_code=status,
            headers=safe,
        )
    return HandshakeRejected(
        status,
        retry_after=parse_retry_after(response.headers.get("Retry-After")),
        headers=safe,
        reason=opening.refused,
    )


def _invalid_answer(exc: InvalidMessage, description: str, head: bytes) -> ConnectError:
    """The error for an answer websockets could not parse: :class:`NotAnACPEndpoint` when it is not HTTP/1.1
    (an HTTP/1.0 server, another protocol's banner), else a :class:`ConnectError` (a connection closed
    before answering may be a server restarting: retried)."""
    if head and not b"HTTP/1.1 ".startswith(head[:9]):  # a cut "HTTP/1" may be a server dying mid-answer
        status_line, server, status = parse_answer_head(head)
        return NotAnACPEndpoint(description, status_line=status_line, server=server, status_code=status)
    return ConnectError(f"the WebSocket handshake with {description} failed: {exc}")


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
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    max_queue: int | None = 16,
    proxy: str | bool | None = True,
    compression: str | None = "auto",
    follow_redirects: bool = False,
) -> WebSocketTransport:
    """Open a WebSocket to an ACP agent at ``url`` (``ws://`` or ``wss://``).

    Handshake:
        ``headers`` are added to the upgrade request; a zero-argument callable (sync or async) returning
        them is called on every connect, for tokens that rotate. ``cookies`` is the jar whose cookies are
        sent for this host and which receives the ``Set-Cookie`` of the response (a fresh jar when
        ``None``; reuse :attr:`WebSocketTransport.cookies` for the next connect to the same endpoint).
        ``subprotocols`` are offered in ``Sec-WebSocket-Protocol``. ``proxy``: ``True`` uses the proxy of
        the environment (``https_proxy`` ...), ``None``/``False`` none, a string that proxy URL.
        ``follow_redirects``: ``False`` (default) reports a ``3xx`` answer as :class:`HandshakeRejected`
        saying where it pointed; ``True`` follows redirects within the same origin only. A redirect to
        another origin is never followed: the headers you give never reach a server you did not name, and
        a cookie is only ever stored under the host that set it.

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
        for the many small frames of a streaming turn, at the cost of bytes on the wire), ``"auto"``
        (default) offers it except to a loopback host (``localhost``, ``127.0.0.0/8``, ``::1``), where bytes
        cost nothing.

    The keywords are gathered into one :class:`~acp_client.transports.TransportOptions` (which checks
    them) and handed to :func:`open_websocket`; a client opens its links with that function directly.

    Raises :class:`UsageError` for a malformed URL, :class:`HandshakeRejected` for an HTTP answer other than
    ``101``, :class:`TLSError` for a TLS failure and :class:`ConnectError` for everything else that keeps
    the link from opening (refused, unresolvable, timed out: then ``__cause__`` is the ``TimeoutError``).
    """
    options = TransportOptions(
        headers=headers,
        cookies=cookies if cookies is not None else CookieJar(),
        ssl=ssl,
        open_timeout=open_timeout,
        ping_interval=ping_interval,
        ping_timeout=ping_timeout,
        close_timeout=close_timeout,
        max_frame_bytes=max_frame_bytes,
        compression=compression,  # type: ignore[arg-type]
        follow_redirects=follow_redirects,
    )
    return await open_websocket(url, options, subprotocols=subprotocols, max_queue=max_queue, proxy=proxy)


def _compression(setting: str | None, host: str) -> str | None:
    """What to offer the agent at ``host``: ``"auto"`` is deflate, except to a loopback host."""
    if setting != "auto":
        return setting
    return None if _is_loopback_host(host) else "deflate"


def _is_loopback_host(host: str) -> bool:
    """``True`` for ``localhost`` (and its subdomains, RFC 6761) and the loopback addresses ``127.0.0.0/8``
    and ``::1`` (also written in brackets or IPv4-mapped)."""
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


async def open_websocket(
    url: str,
    options: TransportOptions,
    *,
    subprotocols: Sequence[str] | None = None,
    max_queue: int | None = 16,
    proxy: str | bool | None = True,
) -> WebSocketTransport:
    """Open a WebSocket to ``url`` with a client's shared :class:`TransportOptions`, read where used.

    ``subprotocols``, ``max_queue`` and ``proxy`` are the WebSocket-only settings of
    :func:`connect_websocket` (see it for them and for the errors raised). The transport keeps a way to open
    the same URL again with the same settings, which it uses only once stream resume was enabled
    (:meth:`WebSocketTransport.enable_stream_resume`).
    """

    async def reopen(connection_id: str | None) -> tuple[ClientConnection, str]:
        return await _open_connection(
            url, options, subprotocols=subprotocols, max_queue=max_queue, proxy=proxy, connection_id=connection_id
        )

    connection, description = await reopen(None)
    transport = WebSocketTransport(connection, description=description, options=options, reopen=reopen)
    transport._start()
    _log.info("websocket_connected", transport=description, connection_id=transport.connection_id)
    return transport


async def _open_connection(
    url: str,
    options: TransportOptions,
    *,
    subprotocols: Sequence[str] | None,
    max_queue: int | None,
    proxy: str | bool | None,
    connection_id: str | None,
) -> tuple[ClientConnection, str]:
    """Run the handshake (with ``Acp-Connection-Id: connection_id`` when resuming a stream); the open
    ``websockets`` connection and the link's description."""
    try:
        uri = parse_uri(url)
    except InvalidURI as exc:
        # the message names the problem but not the URL, which may carry a token in its query
        raise UsageError(f"not a WebSocket URL (ws:// or wss://): {exc.msg}") from None
    description = _describe(uri)
    if not uri.secure and options.ssl is not None:
        raise UsageError(f"an ssl context was given for {description}; use a wss:// URL for TLS")
    jar = options.cookies

    request_headers = await resolve_headers(options.headers)
    request_headers += _observe.outgoing_headers()  # the handshake carries the trace context (otel extra)
    if connection_id is not None:
        request_headers.append((CONNECTION_ID_HEADER, connection_id))
    cookie_value = jar.header_value(uri.host, secure=uri.secure)
    if cookie_value is not None:
        request_headers.append(("Cookie", cookie_value))

    ws_proxy: str | Literal[True] | None = proxy if isinstance(proxy, str) else (True if proxy is True else None)
    tls: _ssl.SSLContext | None = None
    if uri.secure:
        tls = options.ssl if options.ssl is not None else _ssl.create_default_context()
    _log.debug("websocket_connecting", transport=description, headers=loggable_headers(request_headers))
    opening = _Connect(
        url,
        follow_redirects=options.follow_redirects,
        additional_headers=request_headers,
        user_agent_header=_USER_AGENT,
        subprotocols=[Subprotocol(s) for s in subprotocols] if subprotocols is not None else None,
        proxy=ws_proxy,
        open_timeout=options.open_timeout,
        ping_interval=None,  # our own keepalive, see the module docstring
        ping_timeout=None,
        close_timeout=options.close_timeout,
        max_size=options.max_frame_bytes,
        max_queue=max_queue,
        compression=_compression(options.compression, uri.host),
        ssl=tls,  # None for ws://
        logger=_WEBSOCKETS_LOGGER,
    )
    try:
        connection = await opening
    except InvalidStatus as exc:
        jar.store(uri.host, exc.response.headers.get_all("Set-Cookie"))
        rejected = _rejected(exc, description, opening)
        _log.info(
            "websocket_handshake_rejected",
            transport=description,
            status_code=rejected.status_code,
            retry_after=rejected.retry_after,
        )
        raise rejected from exc
    except InvalidMessage as exc:
        raise _invalid_answer(exc, description, bytes(opening.head)) from exc
    except (_ssl.SSLEOFError, _ssl.SSLZeroReturnError, _ssl.SSLSyscallError) as exc:
        # the link dropped in the middle of the TLS handshake: a network failure, not a TLS verdict
        raise ConnectError(f"the connection to {description} dropped during the TLS handshake: {exc}") from exc
    except _ssl.SSLError as exc:  # before OSError: SSLError is one
        raise TLSError(f"the TLS handshake with {description} failed: {exc}") from exc
    except TimeoutError as exc:  # before OSError: TimeoutError is one
        raise ConnectError(f"opening {description} timed out after {options.open_timeout:g} s") from exc
    except OSError as exc:
        raise ConnectError(f"could not connect to {description}: {exc}") from exc
    except WebSocketException as exc:
        raise ConnectError(f"the WebSocket handshake with {description} failed: {exc}") from exc

    if connection.response is not None:
        jar.store(uri.host, connection.response.headers.get_all("Set-Cookie"))
    return connection, description

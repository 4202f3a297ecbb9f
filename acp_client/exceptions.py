"""Every error acp-client raises, in one tree.

Catch :class:`ACPError` to catch everything the SDK raises on purpose. Lower-layer errors
(``OSError``, ``websockets`` exceptions, ``ssl.SSLError``, ``json`` errors) are translated into this
tree exactly once, at the transport seam, so no caller ever needs to import ``websockets``.

::

    ACPError
    ├── TransportError                   the link to the agent failed
    │   ├── ConnectError                 could not open a connection (refused, DNS, timeout, spawn)
    │   │   ├── AgentNotFound            the stdio agent's program is missing or not executable (fatal)
    │   │   ├── HandshakeRejected        the WebSocket upgrade got an HTTP status (401, 404, 429, 503 ...)
    │   │   │   └── HTTPTransportError   a Streamable HTTP answer the transport cannot use (415, HTML ...)
    │   │   ├── TLSError                 the TLS handshake failed (certificate not trusted, ...)
    │   │   └── H2COnlyServer            an http:// server speaks only HTTP/2 cleartext: use
    │   │                                http2="prior_knowledge" (fatal)
    │   ├── ConnectionLost               an open connection died; ``request_sent`` says if the request
    │   │                                had been written before the loss
    │   └── NotConnected                 there is no usable connection right now (reconnecting)
    ├── ACPTimeoutError (TimeoutError)   a request or handshake ran out of time
    ├── RPCError                         the agent answered with a JSON-RPC error object
    │   ├── ParseError                   -32700
    │   ├── InvalidRequest               -32600
    │   ├── MethodNotFound               -32601
    │   ├── InvalidParams                -32602
    │   ├── InternalError                -32603
    │   ├── AuthRequired                 -32000
    │   ├── SessionNotFound              -32002 (carries ``session_id`` from ``data.sessionId``)
    │   └── RequestCancelled             -32800
    ├── ProtocolError                    the agent broke the protocol (bad frame, wrong shape, lie)
    │   └── UnsupportedProtocolVersion   the agent only speaks a version we do not
    ├── UsageError                       the caller misused the SDK
    │   ├── CapabilityNotSupported       the agent did not advertise what this call needs
    │   ├── ClientClosed                 the client or connection was closed by its owner
    ├── RecoveryError                    the reconnect manager could not keep a session or a link
    │   ├── SessionLost                  the agent no longer knows the session; it was forgotten
    │   ├── RecoveryFailed               recovering a session failed for another reason (retried)
    │   └── ReconnectFailed              the manager stopped reconnecting (fatal error or breaker)
    └── StoreError                       the session store failed or refused a write
        ├── StoreUnavailable             the store's server cannot be reached (after bounded retries)
        ├── StoreLocked                  another process owns the store (SQLite file lock)
        └── LeaseLost                    this worker does not hold the session's lease; write rejected

``ACPTimeoutError`` also derives from the builtin ``TimeoutError`` so ``except TimeoutError`` and
``asyncio.timeout()`` users are served too.

A :class:`ConnectError` or :class:`ConnectionLost` caused by a stdio agent that died carries its
``exit_code`` (negative: killed by that signal) and ``stderr_tail``, the last lines it wrote to stderr;
both are empty (``None`` / ``()``) for other transports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from acp_client._redact import scrub_urls

__all__ = [
    "ACPError",
    "ACPTimeoutError",
    "AgentNotFound",
    "AuthRequired",
    "CapabilityNotSupported",
    "ClientClosed",
    "ConnectError",
    "ConnectionLost",
    "H2COnlyServer",
    "HTTPTransportError",
    "HandshakeRejected",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "LeaseLost",
    "MethodNotFound",
    "NotConnected",
    "ParseError",
    "ProtocolError",
    "RPCError",
    "ReconnectFailed",
    "RecoveryError",
    "RecoveryFailed",
    "RequestCancelled",
    "SessionLost",
    "SessionNotFound",
    "StoreError",
    "StoreLocked",
    "StoreUnavailable",
    "TLSError",
    "TransportError",
    "UnsupportedProtocolVersion",
    "UsageError",
    "rpc_error_from_object",
]


class ACPError(Exception):
    """Root of every error acp-client raises on purpose.

    Its text never shows a URL's userinfo or the value of a token-like query parameter, even when it quotes
    a lower library's message (see :func:`acp_client._redact.scrub_urls`).
    """

    def __str__(self) -> str:
        return scrub_urls(super().__str__())


# --------------------------------------------------------------------------- transport


class TransportError(ACPError):
    """The link to the agent failed (connect, I/O, or close)."""


class ConnectError(TransportError):
    """A connection could not be opened: refused, unresolvable, timed out, or the agent would not start.

    ``exit_code`` and ``stderr_tail`` describe a stdio agent that exited while the connection was being
    opened (``None`` and ``()`` otherwise).
    """

    def __init__(
        self,
        message: str = "could not connect to the agent",
        *,
        exit_code: int | None = None,
        stderr_tail: tuple[str, ...] = (),
    ) -> None:
        self.exit_code = exit_code
        self.stderr_tail = tuple(stderr_tail)
        super().__init__(message)


class AgentNotFound(ConnectError):
    """The stdio agent could not be started: its program is missing, not executable, or not permitted.

    Retrying cannot help, so the reconnect manager treats it as fatal. ``program`` is the command's first
    word; ``os_error`` the operating system's error (``FileNotFoundError``, ``PermissionError`` ...).
    """

    def __init__(self, program: str, os_error: OSError) -> None:
        self.program = program
        self.os_error = os_error
        super().__init__(f"could not start the agent {program!r}: {os_error}")


class HandshakeRejected(ConnectError):
    """The WebSocket upgrade was answered with an HTTP status instead of ``101``.

    ``status_code`` is the HTTP status; ``retry_after`` holds the parsed ``Retry-After`` header in seconds
    when the server sent one (429 and 503 usually do). Header values are kept only for the names that are
    safe to show (never ``Authorization`` or cookies). ``reason``, when given, ends the message (e.g. why a
    ``3xx`` redirect was not followed).
    """

    def __init__(
        self,
        status_code: int,
        *,
        retry_after: float | None = None,
        headers: Mapping[str, str] | None = None,
        reason: str | None = None,
    ) -> None:
        self.status_code = status_code
        self.retry_after = retry_after
        self.headers: dict[str, str] = dict(headers or {})
        hint = f", retry after {retry_after:g} s" if retry_after is not None else ""
        why = f": {reason}" if reason else ""
        super().__init__(f"the agent rejected the WebSocket handshake with HTTP {status_code}{hint}{why}")


class HTTPTransportError(HandshakeRejected):
    """A Streamable HTTP endpoint answered something the transport cannot use.

    ``status_code`` is the HTTP status (``200`` for a success answer of the wrong shape: an HTML page, a
    body that is not JSON, no ``Acp-Connection-Id``); ``content_type`` and ``body_excerpt`` (the first
    few hundred characters of the body, of which at most a few KiB were read) show what came instead. The
    message quotes a short excerpt, and for an HTML page only says so. As a :class:`HandshakeRejected` it is
    classified by its status: 401/403 are authentication failures, 408/429/5xx are retried, other 4xx and a
    wrong-shaped 200 stop the reconnect manager (the endpoint does not speak the ACP HTTP transport).
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        content_type: str | None = None,
        body_excerpt: str = "",
        retry_after: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(status_code, retry_after=retry_after, headers=headers)
        self.content_type = content_type
        self.body_excerpt = body_excerpt
        if "html" in (content_type or "").lower() or body_excerpt.lstrip()[:1] == "<":
            shown = " (the body is an HTML page: not an ACP endpoint)" if "not an ACP" not in message else ""
        else:
            short = body_excerpt if len(body_excerpt) <= 120 else body_excerpt[:117] + "..."
            shown = f": {short!r}" if short else ""
        self.args = (f"{message}{shown}",)


class TLSError(ConnectError):
    """The TLS handshake failed, for example because the certificate is not trusted."""


class H2COnlyServer(ConnectError):
    """An ``http://`` server answered an HTTP/1.1 request in HTTP/2: it speaks only HTTP/2 over cleartext
    (h2c with prior knowledge). Connect with ``TransportOptions(http2="prior_knowledge")``. Retrying with
    the same options cannot help, so the reconnect manager treats it as fatal (reason ``h2c_only``)."""


class ConnectionLost(TransportError):
    """An open connection died.

    ``request_sent`` is ``True`` when the request this error fails had already been written to the wire:
    the agent may have executed it, so the outcome is unknown. ``False`` means it never left the client.
    ``close_code`` and ``reason`` carry what the transport knew about the loss (WebSocket close code,
    process exit status, ...). For a stdio agent that exited, ``exit_code`` is its exit status (negative:
    killed by that signal) and ``stderr_tail`` the last lines it wrote to stderr, oldest first.
    ``stream_resumption`` (Streamable HTTP) says why the transport could not resume its event stream with
    ``Last-Event-ID`` instead of dropping the connection; ``None`` for transports that cannot resume at all.
    """

    def __init__(
        self,
        message: str = "the connection to the agent was lost",
        *,
        request_sent: bool = False,
        close_code: int | None = None,
        reason: str | None = None,
        closed_by_client: bool = False,
        exit_code: int | None = None,
        stderr_tail: tuple[str, ...] = (),
        stream_resumption: str | None = None,
    ) -> None:
        self.stream_resumption = stream_resumption
        self.exit_code = exit_code
        self.stderr_tail = tuple(stderr_tail)
        self.request_sent = request_sent
        self.close_code = close_code
        self.reason = reason
        #: ``True`` when this client sent ``close_code`` (e.g. 1009 because the agent sent an oversized
        #: frame): a fault of the link, not the agent's verdict on the client.
        self.closed_by_client = closed_by_client
        super().__init__(message)

    def with_request_sent(self, request_sent: bool) -> ConnectionLost:
        """Return a copy of this error that says whether one particular request had been written."""
        copy = type(self)(
            str(self),
            request_sent=request_sent,
            close_code=self.close_code,
            reason=self.reason,
            closed_by_client=self.closed_by_client,
        )
        copy.__dict__.update(vars(self))  # attributes added by subclasses or transports (stderr tail ...)
        copy.request_sent = request_sent
        return copy


class NotConnected(TransportError):
    """No usable connection exists right now (the client is reconnecting or was never connected)."""


# --------------------------------------------------------------------------- timeouts


class ACPTimeoutError(ACPError, TimeoutError):
    """A request, handshake or recovery step ran out of time."""


# --------------------------------------------------------------------------- peer errors


class RPCError(ACPError):
    """The agent answered a request with a JSON-RPC error object.

    ``code``, ``message`` and ``data`` are exactly what the agent sent. The text is ``[code] message``,
    followed by ``data.reason`` and ``data.message`` when the agent gave them and they add something (many
    agents put the useful part there: ``[-32602] Invalid params: 'cwd' must be an absolute path``). Use
    :func:`rpc_error_from_object` to get the most specific subclass for a code.
    """

    default_code: ClassVar[int | None] = None

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        self.code = code
        self.message = message
        self.data = data
        detail = _data_detail(message, data)
        super().__init__(f"[{code}] {message}: {detail}" if detail else f"[{code}] {message}")

    def to_object(self) -> dict[str, Any]:
        """The JSON-RPC error object (``code``, ``message`` and ``data`` when present)."""
        obj: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            obj["data"] = self.data
        return obj


#: the longest ``data.reason``/``data.message`` text an :class:`RPCError`'s message quotes
_DETAIL_LIMIT = 200


def _data_detail(message: str, data: Any) -> str:
    """The agent's own explanation from ``data.reason`` / ``data.message``, when it adds to ``message``."""
    if not isinstance(data, Mapping):
        return ""
    parts: list[str] = []
    for key in ("reason", "message"):
        value = data.get(key)
        if isinstance(value, str) and value.strip() and value not in message and value not in parts:
            parts.append(" ".join(value.split()))
    text = "; ".join(parts)
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 3] + "..."


class ParseError(RPCError):
    """-32700: the peer could not parse what it received."""

    default_code = -32700


class InvalidRequest(RPCError):
    """-32600: the peer received something that is not a valid JSON-RPC request."""

    default_code = -32600


class MethodNotFound(RPCError):
    """-32601: the agent does not implement the method (even if it advertised it)."""

    default_code = -32601


class InvalidParams(RPCError):
    """-32602: the agent rejected the request's parameters."""

    default_code = -32602


class InternalError(RPCError):
    """-32603: the agent failed internally."""

    default_code = -32603


class AuthRequired(RPCError):
    """-32000: the agent needs ``authenticate`` (v1) or ``auth/login`` (v2) first."""

    default_code = -32000


class SessionNotFound(RPCError):
    """-32002: the agent does not know the resource, here a session.

    ``session_id`` comes from ``data.sessionId`` when the agent sent it, else it is ``None``. Whether a
    ``-32002`` means "forget this session" depends on which method answered it: only ``session/status``,
    ``session/resume`` and ``session/load`` say so (a ``session/prompt`` on a not-yet-attached session may
    answer it too).
    """

    default_code = -32002

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(code, message, data)
        sid = data.get("sessionId") if isinstance(data, dict) else None
        self.session_id: str | None = sid if isinstance(sid, str) else None


class RequestCancelled(RPCError):
    """-32800: the request was cancelled (after ``$/cancel_request`` or an internal cancellation)."""

    default_code = -32800


_BY_CODE: dict[int, type[RPCError]] = {
    cls.default_code: cls
    for cls in (
        ParseError,
        InvalidRequest,
        MethodNotFound,
        InvalidParams,
        InternalError,
        AuthRequired,
        SessionNotFound,
        RequestCancelled,
    )
    if cls.default_code is not None
}


def rpc_error_from_object(code: int, message: str, data: Any = None) -> RPCError:
    """Build the most specific :class:`RPCError` subclass for a JSON-RPC error object."""
    return _BY_CODE.get(code, RPCError)(code, message, data)


# --------------------------------------------------------------------------- protocol violations


class ProtocolError(ACPError):
    """The agent broke the protocol: a malformed frame or message, a wrong shape, an impossible answer."""


class UnsupportedProtocolVersion(ProtocolError):
    """The agent answered ``initialize`` with a protocol version this client does not speak."""

    def __init__(self, offered: int, answered: object, *, accepted: tuple[int, ...] = (1, 2)) -> None:
        self.offered = offered
        self.answered = answered
        wanted = " or ".join(str(v) for v in accepted)
        super().__init__(
            f"offered protocol version {offered}, the agent answered {answered!r}; this connection accepts {wanted}"
        )


# --------------------------------------------------------------------------- usage


class UsageError(ACPError):
    """The SDK was used in a way it does not support; the message says what to do instead."""


class CapabilityNotSupported(UsageError):
    """The agent did not advertise the capability a call needs, so nothing was sent."""

    def __init__(
        self, method: str, capability: str | None, protocol_version: int | None = None, *, hint: str | None = None
    ) -> None:
        self.method = method
        self.capability = capability
        self.protocol_version = protocol_version
        version = f" (protocol v{protocol_version})" if protocol_version is not None else ""
        if capability is None:  # the call does not exist in this protocol version at all
            message = f"{method} does not exist in protocol v{protocol_version}"
        else:
            message = f"{method} needs the agent capability {capability}, which it did not advertise{version}"
        super().__init__(f"{message}; {hint}" if hint else message)


class ClientClosed(UsageError):
    """The client or connection was closed by its owner; it cannot be used or reopened."""


class RecoveryError(ACPError):
    """The reconnect manager could not keep a session or a connection."""


class SessionLost(RecoveryError):
    """The agent does not know the session any more (``-32002``); the client forgot it.

    ``reason`` is the machine-readable cause, as in :class:`~acp_client.SessionForgotten`: ``"unknown"``
    (the agent answered -32002 to status, resume or load), ``"not_listed"`` (recovery failed and
    ``session/list`` does not name it), ``"application"`` or ``"forgotten"`` (the application forgot it),
    or a short phrase. The message says it as a sentence.
    """

    def __init__(self, session_id: str, reason: str = "unknown") -> None:
        self.session_id = session_id
        self.reason = reason
        why = _LOSS_REASONS.get(reason, reason)
        super().__init__(f"session {session_id} is lost: {why}")


#: the sentence a :class:`SessionLost` message gives for each machine-readable reason
_LOSS_REASONS: dict[str, str] = {
    "unknown": "the agent no longer knows it",
    "not_listed": "the agent could not restore it and no longer lists it",
    "application": "it was forgotten by your application",
    "forgotten": "it was forgotten by your application",
}


class RecoveryFailed(RecoveryError):
    """Recovering a session failed for a reason other than -32002; the manager retries it with backoff."""

    def __init__(self, session_id: str, cause: BaseException | None = None) -> None:
        self.session_id = session_id
        self.cause = cause
        detail = f": {cause}" if cause is not None else ""
        super().__init__(f"recovery of session {session_id} failed{detail}")


class ReconnectFailed(RecoveryError):
    """The manager gave up reconnecting: a fatal error, an exhausted budget, or the crash-loop breaker.

    ``reason`` is the verdict's stable name (``"http_406"``, ``"flapping"`` ...), ``cause`` the last error;
    ``detail``, when given, ends the message (which bound ran out, for example).
    """

    def __init__(self, reason: str, cause: BaseException | None = None, *, detail: str | None = None) -> None:
        self.reason = reason
        self.cause = cause
        text = f": {cause}" if cause is not None else ""
        more = f"; {detail}" if detail else ""
        super().__init__(f"reconnecting failed ({reason}){text}{more}")


# --------------------------------------------------------------------------- session stores


class StoreError(ACPError):
    """The session store failed or refused an operation."""


class StoreUnavailable(StoreError):
    """The store's server could not be reached, even after the store's own bounded retries.

    ``operation`` names what was attempted (``"save"``, ``"claim"`` ...); ``cause`` is the last error of
    the client library (its text never contains the URL's password).
    """

    def __init__(self, operation: str, cause: BaseException | None = None) -> None:
        self.operation = operation
        self.cause = cause
        detail = f": {type(cause).__name__}: {cause}" if cause is not None else ""
        super().__init__(f"the session store is unavailable ({operation}){detail}")


class StoreLocked(StoreError):
    """Another process (or another store object) already owns this store; ``holder`` describes it."""

    def __init__(self, path: str, holder: str | None = None) -> None:
        self.path = path
        self.holder = holder
        who = f" by {holder}" if holder else ""
        super().__init__(
            f"the session store {path} is in use{who}; one process owns a SQLite store at a time "
            "(use RedisSessionStore for several workers)"
        )


class LeaseLost(StoreError):
    """A write was rejected because this worker does not hold the session's lease (fencing).

    ``reason``: ``"expired"`` (the lease ran out before it was renewed), ``"taken"`` (another worker holds
    it now, ``holder`` says which), ``"stale"`` (the write carried an older fencing ``token`` than the one
    stored), or ``"reset"`` (the store lost its data).
    """

    def __init__(
        self, session_id: str, reason: str, *, holder: str | None = None, token: int | None = None
    ) -> None:
        self.session_id = session_id
        self.reason = reason
        self.holder = holder
        self.token = token
        who = f" (held by {holder})" if holder else ""
        super().__init__(f"lease on session {session_id} lost: {reason}{who}")

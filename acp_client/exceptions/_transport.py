"""The link to the agent failed or ran out of time (see :mod:`acp_client.exceptions`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acp_client.exceptions._root import ACPError

__all__ = [
    "ACPTimeoutError",
    "AgentNotFound",
    "ConnectError",
    "ConnectionLost",
    "H2COnlyServer",
    "HTTPTransportError",
    "HandshakeRejected",
    "NotAnACPEndpoint",
    "NotConnected",
    "TLSError",
    "TransportError",
]


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


class NotAnACPEndpoint(HandshakeRejected):
    """A server answered at the URL, and its answer shows it is not an ACP endpoint.

    Raised at once (no wait for a timeout) when the answer is definite: it is not HTTP/1.1 at all (an
    HTTP/1.0 server such as ``python -m http.server``, or the banner of another protocol), or an HTTP status
    no ACP endpoint gives to the opening request (a 4xx other than 401/403/404/406/408/425/429, or a page
    served to a WebSocket upgrade). ``endpoint`` is the URL (without credentials), ``status_line`` the first
    line of the answer as received (cut and escaped: the peer controls it), ``server`` its ``Server``
    header when it sent one. ``status_code`` is the HTTP status, ``0`` when the answer was not HTTP.
    Retrying cannot help: the reconnect manager stops at once (reason ``not_acp``).
    """

    def __init__(
        self,
        endpoint: str,
        *,
        status_line: str,
        server: str | None = None,
        status_code: int = 0,
        request: str = "the WebSocket upgrade",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(status_code, headers=headers)
        self.endpoint = endpoint
        self.status_line = status_line
        self.server = server
        by = f" (Server: {server})" if server else ""
        self.args = (f"{endpoint} is not an ACP endpoint: it answered {request} with {status_line!r}{by}",)


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
    ``stream_resumption`` says why the transport could not resume its stream instead of dropping the
    connection (Streamable HTTP with ``Last-Event-ID``, WebSocket with ``stream/resume``); ``None`` when it
    did not try.
    ``prompt_entry``, on the error a waiting ``Session.prompt()``/``send_prompt()`` raises, is that prompt's
    :class:`~acp_client.PromptEntry` in the session's prompt ledger: its ``state`` says what is known now
    (``not_sent``, ``sent``, ``inserted``, ``finished``) and is classified once the session is recovered
    (``await entry.wait_classified(timeout)``; ``PromptClassified`` is reported too). ``None`` elsewhere.
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
        self.prompt_entry: Any = None  # a PromptEntry (sessions layer) on a failed prompt
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


class ACPTimeoutError(ACPError, TimeoutError):
    """A request, handshake or recovery step ran out of time."""

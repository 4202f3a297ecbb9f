"""One frozen set of transport options, built once per client and shared by every transport it opens.

``connect()`` and ``ReconnectingClient`` take it as ``transport_options=``; ``open_transport`` hands the
same object to the transport for the target (WebSocket, Streamable HTTP, stdio), which reads its fields
where it uses them. So every reconnect of one client uses the same settings and the same
:class:`CookieJar` (the RFD's load-balancer affinity).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import ssl as _ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from acp_client._checks import check_bool, check_callable, check_count, check_path, check_seconds, check_str_mapping
from acp_client.exceptions import UsageError
from acp_client.transports._cookies import CookieJar
from acp_client.transports.base import DEFAULT_MAX_FRAME_BYTES

__all__ = ["TRANSPORT_FIELDS", "HeadersLike", "HeadersProvider", "TransportKind", "TransportOptions", "resolve_headers"]

#: Headers as a mapping or as ``(name, value)`` pairs (pairs allow a name twice).
HeadersLike: TypeAlias = Mapping[str, str] | Iterable[tuple[str, str]]
#: A zero-argument callable, sync or async, called on every connect (e.g. a token provider).
HeadersProvider: TypeAlias = Callable[[], HeadersLike | Awaitable[HeadersLike]]
#: Which transport a URL opens: by its scheme (``None``), ``"websocket"``, ``"http"`` (Streamable HTTP),
#: or ``"auto"`` (try the WebSocket upgrade on the endpoint, fall back to Streamable HTTP if refused).
TransportKind: TypeAlias = Literal["websocket", "http", "auto"] | None


@dataclass(frozen=True, slots=True, repr=False)
class TransportOptions:
    """Settings of every transport a client opens, and of the link itself (float seconds).

    One instance is built per client and shared by every transport it opens (so every reconnect uses the
    same settings and the same :class:`CookieJar`). The transports read it as it is: nothing is copied out.

    Handshake and TLS:

    ``headers`` (default ``None``)
        added to every WebSocket handshake / HTTP request; a zero-argument callable (sync or async) is
        called before every connection attempt, for tokens that rotate. The repr never shows them.
    ``cookies`` (default: a new :class:`CookieJar`)
        the jar shared by every connection of this client (the RFD's load-balancer affinity).
    ``ssl`` (default ``None``)
        an :class:`ssl.SSLContext` for ``wss://``/``https://``; ``None`` verifies with the system's trust
        store.

    The link's own waits (float seconds):

    ``open_timeout`` (default ``10.0``, or ``None``)
        opening the link: TCP + TLS + WebSocket upgrade, or the first HTTP exchange.
    ``ping_interval`` (default ``20.0``, or ``None``: no keepalive)
        how often an idle link is checked (WebSocket ping; SSE read-idle watchdog).
    ``ping_timeout`` (default ``20.0``, or ``None``)
        how long the answer to that check may take before the link counts as dead.
    ``close_timeout`` (default ``10.0``)
        a closing handshake (and a stdio agent's exit after its stdin closed) before the link is aborted.

    Bounds and wire format:

    ``max_frame_bytes`` (default 16 MiB, an int >= 1)
        one inbound message (WebSocket message, SSE event, stdio line); larger fails the link.
    ``compression`` (default ``"auto"``)
        ``"deflate"`` offers WebSocket permessage-deflate, ``None`` turns it off, ``"auto"`` offers it
        unless the host is a loopback address (``localhost``, ``127.0.0.0/8``, ``::1``): bytes on loopback
        cost nothing, while compressing every small frame costs both processes CPU (about a tenth of the
        client's CPU in a recovery round) and each connection a compression context.
    ``transport`` (default ``None``)
        which transport a URL opens, see :data:`TransportKind`.
    ``http2`` (default ``True``)
        Streamable HTTP: ``True`` offers HTTP/2 by ALPN on ``https://`` (plain ``http://`` then speaks
        HTTP/1.1), ``"prior_knowledge"`` speaks HTTP/2 cleartext (h2c) to ``http://`` URLs, ``False`` keeps
        to HTTP/1.1.

    A spawned stdio agent:

    ``stdio_env`` (default ``None``: inherit)
        the environment of the agent's process (replaces it, as :mod:`subprocess` does).
    ``stdio_cwd`` (default ``None``: inherit)
        its working directory.

    ``follow_redirects`` (default ``False``; WebSocket)
        ``False`` treats a ``3xx`` answer to the upgrade as a refusal; ``True`` follows redirects within the
        same origin (scheme, host and port) only. A redirect to another origin is never followed, so the
        headers given here never reach a server you did not name.

    ``on_stream_resumed`` (default ``None``; Streamable HTTP)
        called with the session id (``None`` for the connection-scoped stream) when a dropped event
        stream was reopened with ``Last-Event-ID`` and the server resumed it, so nothing was recovered
        (a ``ReconnectingClient`` reports ``SessionRecovered(path="stream_resumed")`` first, then calls
        the one given here); not compared, not shown.

    Every invalid value raises :class:`~acp_client.exceptions.UsageError` at construction, naming the
    field and what it accepts. Change a copy with :meth:`replace` or :func:`dataclasses.replace`.
    """

    headers: HeadersLike | HeadersProvider | None = None
    cookies: CookieJar = field(default_factory=CookieJar)
    ssl: _ssl.SSLContext | None = None
    open_timeout: float | None = 10.0
    ping_interval: float | None = 20.0
    ping_timeout: float | None = 20.0
    close_timeout: float = 10.0
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    compression: Literal["deflate", "auto"] | None = "auto"
    transport: TransportKind = None
    stdio_env: Mapping[str, str] | None = None
    stdio_cwd: str | os.PathLike[str] | None = None
    http2: bool | Literal["prior_knowledge"] = True
    on_stream_resumed: Callable[[str | None], None] | None = field(default=None, compare=False)
    follow_redirects: bool = False

    def __post_init__(self) -> None:
        def bad(name: str, accepted: str) -> UsageError:
            return UsageError(f"TransportOptions.{name} must be {accepted}, not {getattr(self, name)!r}")

        owner = "TransportOptions"
        check_bool(owner, "follow_redirects", self.follow_redirects)
        headers: object = self.headers
        if headers is not None and not callable(headers) and isinstance(headers, str | bytes):
            # the value is never shown: it is likely a credential ("Authorization: Bearer ...")
            raise UsageError(
                f"{owner}.headers must be a mapping, (name, value) pairs, a zero-argument callable or None, "
                f"not a {type(headers).__name__}"
            )
        if not isinstance(self.cookies, CookieJar):
            raise bad("cookies", "a CookieJar")
        if self.ssl is not None and not isinstance(self.ssl, _ssl.SSLContext):
            raise bad("ssl", "an ssl.SSLContext or None")
        for name in ("open_timeout", "ping_interval", "ping_timeout"):
            check_seconds(owner, name, getattr(self, name), optional=True)
        check_seconds(owner, "close_timeout", self.close_timeout)
        check_count(owner, "max_frame_bytes", self.max_frame_bytes)
        if self.compression not in ("deflate", "auto", None):
            raise bad("compression", "'deflate', 'auto' or None")
        if self.transport not in (None, "websocket", "http", "auto"):
            raise bad("transport", "'websocket', 'http', 'auto' or None")
        if self.http2 not in (True, False, "prior_knowledge") or (self.http2 in (0, 1) and type(self.http2) is int):
            raise bad("http2", "True, False or 'prior_knowledge'")
        check_str_mapping(owner, "stdio_env", self.stdio_env)  # an environment's values are never shown
        check_path(owner, "stdio_cwd", self.stdio_cwd, optional=True)
        check_callable(owner, "on_stream_resumed", self.on_stream_resumed, optional=True)

    @property
    def refreshes_headers(self) -> bool:
        """``True`` when ``headers`` is a provider called on every attempt (it may fix an auth failure)."""
        return callable(self.headers)

    def replace(self, **changes: Any) -> TransportOptions:
        """A copy with some fields changed (the cookie jar is shared unless replaced)."""
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:
        headers = "provider" if callable(self.headers) else ("set" if self.headers else None)
        return (
            f"TransportOptions(headers={headers}, cookies={self.cookies!r}, ssl={'set' if self.ssl else None}, "
            f"open_timeout={self.open_timeout}, ping_interval={self.ping_interval}, "
            f"ping_timeout={self.ping_timeout}, close_timeout={self.close_timeout}, "
            f"max_frame_bytes={self.max_frame_bytes}, compression={self.compression!r}, "
            f"transport={self.transport!r}, http2={self.http2!r}, follow_redirects={self.follow_redirects})"
        )


#: The fields an application sets (every one but the client's own ``on_stream_resumed`` hook).
TRANSPORT_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(TransportOptions) if f.name != "on_stream_resumed"
)


async def resolve_headers(headers: HeadersLike | HeadersProvider | None) -> list[tuple[str, str]]:
    """The ``(name, value)`` pairs to send: a mapping or pairs as they are, a provider called (and awaited
    when it returns an awaitable) once per connection attempt. Checked before any I/O: a name that is not
    an HTTP token, or a value holding a line break or another control character, is a
    :class:`~acp_client.exceptions.UsageError` that names the header and never shows its value."""
    if headers is None:
        return []
    if callable(headers):
        produced = headers()
        if inspect.isawaitable(produced):
            produced = await produced
        headers = produced
    items = headers.items() if isinstance(headers, Mapping) else headers
    pairs = [(str(name), str(value)) for name, value in items]
    for name, value in pairs:
        if not _TOKEN.fullmatch(name):
            raise UsageError(f"{name!r} is not a valid HTTP header name")
        if _BAD_VALUE.search(value):
            # the value is never shown: it is usually a secret
            raise UsageError(
                f"the value of header {name!r} contains a line break or another control character; a token read "
                "from a file often ends in a newline: strip it (the value is not shown here)"
            )
    return pairs


#: an HTTP header name (RFC 9110 token)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: what no header value may hold: CR, LF, NUL and the other controls but tab
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

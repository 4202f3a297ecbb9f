"""One frozen set of transport options, built once per client and shared by every transport it opens.

``connect()`` and ``ReconnectingClient`` take these settings as flat keywords (``headers=``, ``ssl=``,
``ping_interval=`` ...) and build one :class:`TransportOptions`; :func:`acp_client.open_transport` hands
it to the transport for the target (WebSocket, Streamable HTTP, stdio). So every reconnect of one client
uses the same settings and the same :class:`CookieJar` (the RFD's load-balancer affinity).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import ssl as _ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from acp_client.exceptions import UsageError
from acp_client.transports._cookies import CookieJar
from acp_client.transports.base import DEFAULT_MAX_FRAME_BYTES

__all__ = ["HeadersLike", "HeadersProvider", "TransportKind", "TransportOptions", "resolve_headers"]

#: Headers as a mapping or as ``(name, value)`` pairs (pairs allow a name twice).
HeadersLike: TypeAlias = Mapping[str, str] | Iterable[tuple[str, str]]
#: A zero-argument callable, sync or async, called on every connect (e.g. a token provider).
HeadersProvider: TypeAlias = Callable[[], HeadersLike | Awaitable[HeadersLike]]
#: Which transport a URL opens: by its scheme (``None``), ``"websocket"``, ``"http"`` (Streamable HTTP),
#: or ``"auto"`` (try the WebSocket upgrade on the endpoint, fall back to Streamable HTTP if refused).
TransportKind: TypeAlias = Literal["websocket", "http", "auto"] | None


@dataclass(frozen=True, slots=True, repr=False)
class TransportOptions:
    """Settings of every transport a client opens (float seconds; ``None`` disables a timeout).

    ``headers``: added to every WebSocket handshake / HTTP request; a zero-argument callable (sync or
    async) is called before every connection attempt, for tokens that rotate. ``cookies``: the jar shared
    by every connection of this client. ``ssl``: an :class:`ssl.SSLContext` for ``wss://``/``https://``
    (default: verify with the system's trust store). ``open_timeout`` bounds opening the link;
    ``ping_interval``/``ping_timeout`` drive the liveness check (WebSocket ping, SSE read-idle watchdog);
    ``close_timeout`` bounds a closing handshake. ``max_frame_bytes`` bounds one inbound message.
    ``compression``: ``"deflate"`` offers WebSocket permessage-deflate, ``None`` turns it off.
    ``transport``: see :data:`TransportKind`. ``stdio_env``/``stdio_cwd``: the environment and working
    directory of a spawned stdio agent (``None`` inherits). ``http2`` (Streamable HTTP): ``True`` offers
    HTTP/2 by ALPN on ``https://`` (plain ``http://`` then speaks HTTP/1.1), ``"prior_knowledge"`` speaks
    HTTP/2 cleartext (h2c) to ``http://`` URLs, ``False`` keeps to HTTP/1.1. ``on_stream_resumed``
    (Streamable HTTP): called with the session id (``None`` for the connection-scoped stream) when a dropped
    event stream was reopened with ``Last-Event-ID`` and the server resumed it, so nothing was recovered
    (``ReconnectingClient`` sets it to report ``SessionRecovered(path="stream_resumed")``); not compared,
    not shown. ``follow_redirects`` (WebSocket): ``False`` (default) treats a ``3xx`` answer to the upgrade
    as a refusal; ``True`` follows redirects within the same origin (scheme, host and port) only. A redirect
    to another origin is never followed, so the headers given here never reach a server you did not name.

    The repr never shows header values or cookies.
    """

    headers: HeadersLike | HeadersProvider | None = None
    cookies: CookieJar = field(default_factory=CookieJar)
    ssl: _ssl.SSLContext | None = None
    open_timeout: float | None = 10.0
    ping_interval: float | None = 20.0
    ping_timeout: float | None = 20.0
    close_timeout: float = 10.0
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    compression: Literal["deflate"] | None = "deflate"
    transport: TransportKind = None
    stdio_env: Mapping[str, str] | None = None
    stdio_cwd: str | None = None
    http2: bool | Literal["prior_knowledge"] = True
    on_stream_resumed: Callable[[str | None], None] | None = field(default=None, compare=False)
    follow_redirects: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.follow_redirects, bool):
            raise UsageError(f"follow_redirects must be True or False, not {self.follow_redirects!r}")
        if self.max_frame_bytes < 1:
            raise UsageError(f"max_frame_bytes must be positive, not {self.max_frame_bytes}")
        if self.compression not in ("deflate", None):
            raise UsageError(f"compression must be 'deflate' or None, not {self.compression!r}")
        if self.transport not in (None, "websocket", "http", "auto"):
            raise UsageError(f"transport must be 'websocket', 'http', 'auto' or None, not {self.transport!r}")
        if self.http2 not in (True, False, "prior_knowledge"):
            raise UsageError(f"http2 must be True, False or 'prior_knowledge', not {self.http2!r}")
        if self.on_stream_resumed is not None and not callable(self.on_stream_resumed):
            raise UsageError("on_stream_resumed must be a callable or None")
        for name in ("open_timeout", "ping_interval", "ping_timeout"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise UsageError(f"{name} must be positive or None, not {value!r}")

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

"""The cookie jar shared by every transport of one endpoint, and the ``Retry-After`` parser.

The RFD asks clients to store the cookies a server sets (load balancers use them for affinity) and to
send them back on the next connection. One :class:`CookieJar` lives in a client's
:class:`~acp_client.transports.options.TransportOptions` and is reused by every WebSocket handshake and
every Streamable HTTP request of that client, across reconnects. Stdlib only.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Iterable
from datetime import UTC

__all__ = ["CookieJar", "parse_retry_after"]


class _Cookie:
    __slots__ = ("expires", "name", "secure", "value")

    def __init__(self, name: str, value: str, *, secure: bool, expires: float | None) -> None:
        self.name = name
        self.value = value
        self.secure = secure
        self.expires = expires  # wall-clock (time.time()) deadline, None = session cookie


class CookieJar:
    """A small cookie store for load-balancer affinity across reconnects (the RFD: clients MUST store
    server cookies and return them).

    Cookies are kept per host (not per port, as browsers do), from the ``Set-Cookie`` headers of the
    handshake responses (the ``101``, and also a rejection such as a ``503``, since balancers set affinity
    there too). ``Max-Age``/``Expires`` are honoured (an expired cookie is deleted), ``Secure`` cookies are
    only returned over ``wss://``; ``Domain`` and ``Path`` are ignored (host-only, every path). Pass the same
    jar to every :func:`connect_websocket` of one endpoint. Values never appear in logs or ``repr``.
    """

    def __init__(self) -> None:
        """An empty jar."""
        self._by_host: dict[str, dict[str, _Cookie]] = {}

    def store(self, host: str, set_cookie_values: Iterable[str]) -> None:
        """Record the cookies of ``Set-Cookie`` header values received from ``host``."""
        jar = self._by_host.setdefault(host.lower(), {})
        now = time.time()
        for header in set_cookie_values:
            first, *attributes = header.split(";")
            name, sep, value = first.partition("=")
            name, value = name.strip(), value.strip()
            if not sep or not name:
                continue
            secure = False
            expires: float | None = None
            max_age: float | None = None
            for attribute in attributes:
                key, _, arg = attribute.partition("=")
                key, arg = key.strip().lower(), arg.strip()
                if key == "secure":
                    secure = True
                elif key == "max-age":
                    negative = arg.startswith("-")
                    seconds = _seconds(arg[1:] if negative else arg)
                    if negative and arg[1:].isascii() and arg[1:].isdigit():
                        max_age = -1.0  # expired, however long the number (RFC 6265 5.2.2)
                    elif seconds is not None:
                        max_age = seconds
                elif key == "expires":
                    expires = _parse_http_date(arg)
            if max_age is not None:  # Max-Age wins over Expires (RFC 6265 5.3)
                expires = now + max_age
            if expires is not None and expires <= now:
                jar.pop(name, None)
            else:
                jar[name] = _Cookie(name, value, secure=secure, expires=expires)

    def header_value(self, host: str, *, secure: bool) -> str | None:
        """The ``Cookie`` header value to send to ``host`` (``None`` when there is nothing to send)."""
        jar = self._by_host.get(host.lower())
        if not jar:
            return None
        now = time.time()
        for name in [n for n, c in jar.items() if c.expires is not None and c.expires <= now]:
            del jar[name]
        pairs = [f"{c.name}={c.value}" for c in jar.values() if secure or not c.secure]
        return "; ".join(pairs) or None

    def get(self, host: str, name: str) -> str | None:
        """The value of cookie ``name`` for ``host``, or ``None``."""
        cookie = self._by_host.get(host.lower(), {}).get(name)
        return cookie.value if cookie is not None else None

    def clear(self, host: str | None = None) -> None:
        """Forget the cookies of ``host``, or of every host."""
        if host is None:
            self._by_host.clear()
        else:
            self._by_host.pop(host.lower(), None)

    def __len__(self) -> int:
        """How many cookies the jar holds."""
        return sum(len(jar) for jar in self._by_host.values())

    def __repr__(self) -> str:
        return f"<CookieJar {len(self)} cookies for {len([h for h, j in self._by_host.items() if j])} hosts>"


#: The most digits of a count of seconds read (about 31 million years): a peer's longer number would not fit
#: a float, or raise past Python's limit on integer conversion; it is ignored instead.
SECONDS_DIGITS_MAX = 15


def _seconds(digits: str) -> float | None:
    """Seconds from a string of ASCII digits; ``None`` when it is not one, or longer than
    :data:`SECONDS_DIGITS_MAX`."""
    if not (digits.isascii() and digits.isdigit()) or len(digits) > SECONDS_DIGITS_MAX:
        return None
    return float(int(digits))


def _parse_http_date(value: str) -> float | None:
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date; ``None`` if unusable.

    A date in the past gives ``0.0``. ``now`` is the wall-clock time to measure a date against.
    """
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return _seconds(value)
    deadline = _parse_http_date(value)
    if deadline is None:
        return None
    return max(0.0, deadline - (time.time() if now is None else now))

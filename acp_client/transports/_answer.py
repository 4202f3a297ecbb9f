"""What answered at an endpoint that is not an ACP agent: the first line and ``Server`` of its reply.

The reply is peer-controlled, so only its head is looked at (at most :data:`ANSWER_HEAD_BYTES`), each shown
part is cut to :data:`SHOWN_CHARS` characters and anything unprintable is escaped. Shared by the WebSocket
and the Streamable HTTP transports, so both name a wrong endpoint in the same words.
"""

from __future__ import annotations

__all__ = [
    "ANSWER_HEAD_BYTES",
    "DEFINITE_STATUSES",
    "SHOWN_CHARS",
    "is_definite_status",
    "parse_answer_head",
    "shown",
]

#: how many bytes of a reply are kept to name what answered
ANSWER_HEAD_BYTES = 4096
#: how many characters of the status line or the ``Server`` header an error message shows
SHOWN_CHARS = 120

# statuses that may come from an ACP endpoint too: authentication (401, 403), a route not there yet while the
# server starts (404, 406: a bounded run is retried), time or rate limits (408, 425, 429)
_MAYBE_ACP = frozenset({401, 403, 404, 406, 408, 425, 429})
#: the 4xx answers that say for certain the endpoint does not speak ACP (every 4xx but those above)
DEFINITE_STATUSES = frozenset(range(400, 500)) - _MAYBE_ACP


def is_definite_status(status: int) -> bool:
    """``True`` when an HTTP status to the opening request means "not an ACP endpoint" at once: a 4xx other
    than 401/403/404/406/408/425/429, or a 2xx other than ``101`` to a WebSocket upgrade (a page served)."""
    return status in DEFINITE_STATUSES or 200 <= status < 300


def shown(text: str) -> str:
    """``text`` fit for an error message: unprintable characters escaped, cut to :data:`SHOWN_CHARS`."""
    safe = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return safe if len(safe) <= SHOWN_CHARS else safe[: SHOWN_CHARS - 3] + "..."


def parse_answer_head(head: bytes) -> tuple[str, str | None, int]:
    """``(status_line, server, status_code)`` of the first bytes of a reply.

    ``status_line`` is the first line (shown as by :func:`shown`; ``"nothing"`` when empty), ``server`` the
    ``Server`` header when the head holds it, ``status_code`` the HTTP status, ``0`` when the reply is not
    HTTP (a banner of another protocol).
    """
    text = head[:ANSWER_HEAD_BYTES].decode("latin-1")
    lines = text.replace("\r\n", "\n").split("\n")
    first = lines[0]
    status = 0
    parts = first.split(" ", 2)
    if len(parts) >= 2 and parts[0].startswith("HTTP/") and parts[1].isdigit() and len(parts[1]) == 3:
        status = int(parts[1])
    server: str | None = None
    if status:
        for line in lines[1:]:
            if not line:
                break  # end of the headers
            name, sep, value = line.partition(":")
            if sep and name.strip().lower() == "server":
                server = shown(value.strip())
                break
    return (shown(first) if first else "nothing"), server, status

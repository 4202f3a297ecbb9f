"""The cursors of one resumable SSE stream (agent-client-protocol PR 2208, the durable transport draft).

A server that advertised ``capabilities.transport.resumable`` stamps every message of a stream with an opaque
cursor, ``_meta["acp/cursor"]`` (in ``params`` or ``result``), besides the SSE ``id:``. :class:`CursorTrack`
keeps what the client needs of them: the last one (the resume point when the server sent no SSE ``id:``) and
a bounded window of the recent ones, so that a message the server replays although it was already delivered
is dropped instead of shown twice. Cursors are opaque: they are compared for equality only, never parsed or
ordered. Both the size of a cursor and the window are bounded, since the peer controls them.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from acp_client.schema.transport import CURSOR_META_KEY

__all__ = ["DEDUP_WINDOW", "MAX_CURSOR_BYTES", "CursorTrack", "cursor_of", "cursor_too_long"]

#: The longest cursor (SSE ``id:`` or ``_meta["acp/cursor"]``, UTF-8 bytes) the client keeps or sends back as
#: ``Last-Event-ID``; a longer one leaves the stream without a resume point (it is recovered by the ladder).
MAX_CURSOR_BYTES = 1024
#: How many recent cursors of a stream are remembered to drop a replayed duplicate.
DEDUP_WINDOW = 4096


def cursor_of(message: dict[str, Any]) -> Any:
    """The ``_meta["acp/cursor"]`` of a message (in ``params``, else ``result``), or ``None``."""
    for key in ("params", "result"):
        body = message.get(key)
        if type(body) is dict:
            meta = body.get("_meta")
            if type(meta) is dict:
                return meta.get(CURSOR_META_KEY)
    return None


def cursor_too_long(cursor: str) -> bool:
    """Whether ``cursor`` is over :data:`MAX_CURSOR_BYTES` (a character is at most 4 bytes in UTF-8)."""
    return len(cursor) * 4 > MAX_CURSOR_BYTES and len(cursor.encode("utf-8", "replace")) > MAX_CURSOR_BYTES


class CursorTrack:
    """The cursors one stream delivered; the stream's reader is the only writer.

    :meth:`accept` is asked for every message that carries a cursor: ``False`` means the cursor was delivered
    before (among the last ``window``) and the message is to be dropped. :attr:`last` is the newest cursor
    delivered (the resume point); :attr:`oversize` says the newest cursor was over :data:`MAX_CURSOR_BYTES`,
    so the stream has no usable resume point until a later message brings a shorter one.
    """

    __slots__ = ("_recent", "_seen", "last", "oversize")

    def __init__(self, window: int = DEDUP_WINDOW) -> None:
        self._recent: deque[str] = deque(maxlen=window)
        self._seen: set[str] = set()
        self.last: str | None = None
        self.oversize = False

    def accept(self, cursor: str) -> bool:
        """Record a delivered ``cursor``; ``False`` when it was delivered before (a replayed duplicate)."""
        if cursor_too_long(cursor):
            self.last = None
            self.oversize = True
            return True  # delivered (it is new as far as anyone can tell), but never kept nor sent back
        if cursor in self._seen:
            return False
        recent = self._recent
        if len(recent) == recent.maxlen:
            self._seen.discard(recent[0])
        recent.append(cursor)
        self._seen.add(cursor)
        self.last = cursor
        self.oversize = False
        return True

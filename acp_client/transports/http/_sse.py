"""A sans-I/O parser for ``text/event-stream`` (Server-Sent Events), as the Streamable HTTP transport reads it.

Bytes go in (:meth:`SSEParser.feed`), whole events come out. It follows the event-stream interpretation of
the HTML standard: lines end in CRLF, LF or CR; a line starting with ``:`` is a comment (servers send
``: keepalive`` about every 15 s); ``data`` lines of one event are joined with ``\\n``; ``id`` sets the
last event id (an id containing NUL is ignored); ``event`` names the type; ``retry`` is a reconnection
delay in milliseconds; a blank line dispatches. An event with no ``data`` line is not dispatched.

No I/O, no asyncio, no JSON: the transport decides what an event means. Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

__all__ = ["SSEEvent", "SSEParser"]


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event: ``event`` is ``"message"`` when the server named none; ``id`` is the last
    event id in effect when it was dispatched (``None`` if the stream never set one)."""

    data: str
    event: str = "message"
    id: str | None = None


class SSEParser:
    """Incremental event-stream parser. ``comments`` counts comment lines; ``retry`` holds the last valid
    ``retry:`` value in milliseconds; ``bytes_in`` counts everything fed; ``skipped`` counts the events
    :meth:`feed_messages` left out (named other than ``message``), ``last_skipped`` the last one's name."""

    def __init__(self, *, max_event_bytes: int | None = None) -> None:
        """``max_event_bytes`` bounds the buffered data of one event (``ValueError`` past it)."""
        self._buffer = bytearray()
        self._scanned = 0  # the buffer's first bytes known to hold no line end (never searched twice)
        self._data: list[str] = []
        self._data_size = 0
        self._event = ""
        self._max = max_event_bytes
        self._first = True
        self._pending_cr = False
        self._texts = False  # the call in progress is feed_messages
        self.last_event_id: str | None = None
        self.retry: int | None = None
        self.comments = 0
        self.bytes_in = 0
        self.skipped = 0
        self.last_skipped: str | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk``; return the events it completed (possibly none).

        Linear in the bytes fed: a line split over many chunks is searched for its end once (only the new
        bytes), and a chunk of many lines finds each CR and LF in one forward pass. Bytes without a CR (what
        servers send) take a fast path: the complete events are decoded at once and split on their blank
        lines, and an event of one ``data`` line (the usual one) costs no line-by-line work.
        """
        self._texts = False
        return cast(list[SSEEvent], self._feed(chunk))

    def feed_messages(self, chunk: bytes) -> list[str]:
        """Like :meth:`feed`, but only the data of the ``message`` events (those a Streamable HTTP transport
        reads), without an :class:`SSEEvent` each; events of any other name are counted in ``skipped``."""
        self._texts = True
        return cast(list[str], self._feed(chunk))

    def _feed(self, chunk: bytes) -> list[SSEEvent | str]:
        self.bytes_in += len(chunk)
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the LF of a CRLF split across chunks
        self._pending_cr = False
        data = self._buffer
        data += chunk
        out: list[SSEEvent | str] = []
        if data.find(b"\r", self._scanned) == -1:
            self._feed_lf(data, out)
        else:
            self._feed_any(data, out)
        self._scanned = len(data)
        if self._max is not None and len(data) + self._data_size > self._max:
            raise ValueError(f"an event-stream event exceeded {self._max} bytes (max_event_bytes)")
        return out

    def _put(self, out: list[SSEEvent | str], event: SSEEvent | None) -> None:
        if event is None:
            return
        if not self._texts:
            out.append(event)
        elif event.event == "message":
            out.append(event.data)
        else:
            self.skipped += 1
            self.last_skipped = event.event

    def _feed_lf(self, data: bytearray, out: list[SSEEvent | str]) -> None:
        """The complete lines of ``data`` when they all end in LF."""
        end = data.rfind(b"\n", self._scanned)
        if end == -1:
            return
        start = 0
        if self._first or self._data or self._event:
            # an event in progress (or the first line: the BOM rule): line by line up to its blank line
            blank = 0 if data[0] == 0x0A else data.find(b"\n\n", 0, end + 1) + 1
            if blank == 0 and data[0] != 0x0A:
                blank = end  # no blank line yet: every complete line belongs to the event in progress
            self._lines(bytes(data[:blank]).decode("utf-8", "replace"), out)
            start = blank + 1
        last = data.rfind(b"\n\n", start, end + 1)
        if last != -1:
            # whole events: each block between blank lines is an event's lines (the common block is a
            # single data line: dispatched as it is). Split where a blank line is followed by "data: ": when
            # no other line end is left, every piece is the data of a one-line event (a whole read at once)
            texts = self._texts
            last_id = self.last_event_id
            # decoded from a view (a temporary, released at once: ``data`` is resized below), not a copy
            whole = str(memoryview(data)[start:last], "utf-8", "replace")
            pieces = whole.split("\n\ndata: ")
            first = pieces[0]
            if first.startswith("data: ") and whole.count("\n") == 2 * (len(pieces) - 1):
                pieces[0] = first[6:]
                out.extend(pieces if texts else [SSEEvent(value, "message", last_id) for value in pieces])
            else:
                for index, piece in enumerate(pieces):
                    block = piece if index == 0 else "data: " + piece  # what the split took off it
                    if block.startswith("data:") and "\n" not in block:
                        value = block[6:] if block[5:6] == " " else block[5:]
                        out.append(value if texts else SSEEvent(value, "message", last_id))
                    else:
                        self._lines(block + "\n", out)  # its lines, then the blank line after it
                        last_id = self.last_event_id
            start = last + 2
        if start <= end:
            self._lines(bytes(data[start:end]).decode("utf-8", "replace"), out)  # the lines of a partial event
        del data[: end + 1]

    def _lines(self, text: str, out: list[SSEEvent | str]) -> None:
        """Each line of ``text`` (lines split on LF; the last one ends where ``text`` ends)."""
        for line in text.split("\n"):
            self._put(out, self._line(line))

    def _feed_any(self, data: bytearray, out: list[SSEEvent | str]) -> None:
        """The complete lines of ``data``, each ending in CR, LF or CRLF."""
        start = 0
        length = len(data)
        cr = data.find(b"\r", self._scanned)
        lf = data.find(b"\n", self._scanned)
        while cr != -1 or lf != -1:
            if cr != -1 and (lf == -1 or cr < lf):
                end, nxt = cr, cr + 1
                if nxt < length and data[nxt] == 0x0A:
                    nxt += 1
                elif nxt == length:
                    self._pending_cr = True
            else:
                end, nxt = lf, lf + 1
            line = bytes(data[start:end]).decode("utf-8", "replace")
            start = nxt
            if cr != -1 and cr < start:
                cr = data.find(b"\r", start)
            if lf != -1 and lf < start:
                lf = data.find(b"\n", start)
            self._put(out, self._line(line))
        del data[:start]

    def _line(self, text: str) -> SSEEvent | None:
        if self._first:
            self._first = False
            if text.startswith("\ufeff"):
                text = text[1:]
        if not text:
            return self._dispatch()
        if text.startswith(":"):
            self.comments += 1
            return None
        name, sep, value = text.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._data_size += len(value) + 1
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\x00" not in value:
                self.last_event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = SSEEvent("\n".join(self._data), self._event or "message", self.last_event_id)
        self._data = []
        self._data_size = 0
        self._event = ""
        return event

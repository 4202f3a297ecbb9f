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
    ``retry:`` value in milliseconds; ``bytes_in`` counts everything fed."""

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
        self.last_event_id: str | None = None
        self.retry: int | None = None
        self.comments = 0
        self.bytes_in = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk``; return the events it completed (possibly none).

        Linear in the bytes fed: a line split over many chunks is searched for its end once (only the new
        bytes), and a chunk of many lines finds each CR and LF in one forward pass. Bytes without a CR (what
        servers send) take a fast path: one split of the complete lines, ``data`` lines handled inline.
        """
        self.bytes_in += len(chunk)
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the LF of a CRLF split across chunks
        self._pending_cr = False
        data = self._buffer
        data += chunk
        lf_only = data.find(b"\r", self._scanned) == -1
        events = self._feed_lf(data) if lf_only else self._feed_any(data)
        self._scanned = len(data)
        if self._max is not None and len(data) + self._data_size > self._max:
            raise ValueError(f"an event-stream event exceeded {self._max} bytes (max_event_bytes)")
        return events

    def _feed_lf(self, data: bytearray) -> list[SSEEvent]:
        """The complete lines of ``data`` when they all end in LF."""
        end = data.rfind(b"\n", self._scanned)
        if end == -1:
            return []
        lines = bytes(data[:end]).split(b"\n")
        del data[: end + 1]
        events: list[SSEEvent] = []
        if self._first:
            event = self._line(lines[0])  # the BOM rule
            if event is not None:
                events.append(event)
            del lines[0]
        pending = self._data
        for line in lines:
            if line.startswith(b"data:"):
                value = line[6:] if line[5:6] == b" " else line[5:]
                text = value.decode("utf-8", "replace")
                pending.append(text)
                self._data_size += len(text) + 1
            elif not line:
                if pending:
                    events.append(
                        SSEEvent(
                            pending[0] if len(pending) == 1 else "\n".join(pending),
                            self._event or "message",
                            self.last_event_id,
                        )
                    )
                    pending = self._data = []
                    self._data_size = 0
                self._event = ""
            else:
                event = self._line(line)  # every other field, comments
                if event is not None:
                    events.append(event)
                pending = self._data
        return events

    def _feed_any(self, data: bytearray) -> list[SSEEvent]:
        """The complete lines of ``data``, each ending in CR, LF or CRLF."""
        events: list[SSEEvent] = []
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
            line = bytes(data[start:end])
            start = nxt
            if cr != -1 and cr < start:
                cr = data.find(b"\r", start)
            if lf != -1 and lf < start:
                lf = data.find(b"\n", start)
            event = self._line(line)
            if event is not None:
                events.append(event)
        del data[:start]
        return events

    def _line(self, raw: bytes) -> SSEEvent | None:
        text = raw.decode("utf-8", errors="replace")
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

"""One SSE stream of the reference agent's Streamable HTTP link, as the agent writes it: the events queued for
its GET and the replay buffer a resume (``Last-Event-ID``) reads (:class:`SseOut`), and the rules they follow
(:class:`ReplayRules`).

Two modes label events. ``agent.http.event_ids`` (an agent that labels events without advertising anything,
as qwen's daemon does): SSE ``id:`` only, the last 4096 events kept. ``ReferenceAgent(resumable=Resumable(...))``
(agent-client-protocol PR 2208): every event's cursor is its SSE ``id:`` and its ``_meta["acp/cursor"]``
(``params._meta`` or ``result._meta``), and the buffer keeps at most ``retention_messages`` events, none older
than ``retention_seconds``. Cursors count from 1 on each stream; a resume names the last one the client
received and gets every later one, identical, or a refusal (``None`` from :meth:`SseOut.replay_after`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import deque
from dataclasses import dataclass, field

from acp_client.schema.transport import CURSOR_META_KEY
from acp_client.testing.agent._http_wire import _Responder

__all__ = ["Event", "ReplayRules", "SseOut"]

#: One queued or buffered event: (sequence number on its stream, its JSON-RPC frame).
Event = tuple[int, str]


@dataclass(frozen=True, slots=True)
class ReplayRules:
    """How a link's streams label and keep their events.

    ``sse_ids``: write ``id:`` lines; ``meta``: stamp ``_meta["acp/cursor"]`` into each frame; ``prefix``: put
    before every cursor (a hostile server's huge cursors); ``max_messages`` / ``max_seconds``: the replay
    buffer's bounds (``max_messages=0``: no buffer at all)."""

    sse_ids: bool = False
    meta: bool = False
    prefix: str = ""
    max_messages: int = 0
    max_seconds: float | None = None

    def cursor(self, seq: int) -> str:
        return f"{self.prefix}{seq}"

    def sequence(self, cursor: str) -> int | None:
        """The sequence number a cursor names, ``None`` for one this agent never issued."""
        if not cursor.startswith(self.prefix):
            return None
        digits = cursor[len(self.prefix) :]
        return int(digits) if digits.isascii() and digits.isdigit() and len(digits) < 19 else None


def stamp(frame: str, cursor: str) -> str:
    """``frame`` with ``_meta["acp/cursor"]`` in its ``params`` or ``result`` (unchanged when it has neither
    as an object: an error answer, a ``null`` result)."""
    try:
        message = json.loads(frame)
    except ValueError:
        return frame
    if not isinstance(message, dict):
        return frame
    for key in ("params", "result"):
        body = message.get(key)
        if isinstance(body, dict):
            meta = body.get("_meta")
            body["_meta"] = {**(meta if isinstance(meta, dict) else {}), CURSOR_META_KEY: cursor}
            return json.dumps(message)
    return frame


@dataclass(eq=False)
class SseOut:
    """One SSE stream of a link: the events waiting for its GET, the replay buffer, and the GET writing it.

    ``written`` is the last sequence number written to the current GET: an event at or below it (one an
    older GET put back, or replayed already) is not written again."""

    rules: ReplayRules
    queue: asyncio.Queue[Event | None] = field(default_factory=asyncio.Queue)
    history: deque[tuple[int, str, float]] = field(default_factory=deque)
    responder: _Responder | None = None
    last_seq: int = 0
    written: int = 0
    _seqs: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def add(self, frame: str) -> Event:
        """Label ``frame`` with the stream's next cursor, keep it for replay, and queue it."""
        seq = next(self._seqs)
        self.last_seq = seq
        if self.rules.meta:
            frame = stamp(frame, self.rules.cursor(seq))
        if self.rules.max_messages:
            self.history.append((seq, frame, asyncio.get_running_loop().time()))
            self._evict()
        event = (seq, frame)
        self.queue.put_nowait(event)
        return event

    def _evict(self) -> None:
        history, rules = self.history, self.rules
        while len(history) > rules.max_messages:
            history.popleft()
        if rules.max_seconds is not None:
            oldest = asyncio.get_running_loop().time() - rules.max_seconds
            while history and history[0][2] < oldest:
                history.popleft()

    def replay_after(self, cursor: str, overlap: int = 0) -> list[Event] | None:
        """Every buffered event after ``cursor``; ``None`` when the cursor is unknown or evicted (what was
        after it is no longer all here). ``overlap`` adds that many events at or before the cursor (a hostile
        server replaying too much). Takes the replayed events out of the queue: the resuming GET writes them."""
        after = self.rules.sequence(cursor)
        if after is None or after > self.last_seq or not self.rules.max_messages:
            return None
        self._evict()
        first = self.history[0][0] if self.history else self.last_seq + 1
        if after < first - 1:
            return None
        replay = [(seq, frame) for seq, frame, _ in self.history if seq > after - overlap]
        self._drain()
        self.written = self.last_seq
        return replay

    def _drain(self) -> None:
        """Drop the queued events (all of them are replayed), keeping an end-of-stream mark."""
        ended = False
        while not self.queue.empty():
            ended = self.queue.get_nowait() is None or ended
        if ended:
            self.queue.put_nowait(None)

    def encode(self, event: Event) -> bytes:
        """The SSE bytes of ``event``."""
        lines = "".join(f"data: {line}\n" for line in event[1].split("\n"))
        prefix = f"id: {self.rules.cursor(event[0])}\n" if self.rules.sse_ids else ""
        return f"{prefix}{lines}\n".encode()

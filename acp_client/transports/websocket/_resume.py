"""Stream resume over WebSocket (the durable transport draft, agent-client-protocol PR 2208): the parts of
:class:`~acp_client.transports.websocket.WebSocketTransport` that know the wire.

Wire choices (the draft leaves the shape of ``stream/resume`` open; written down in ``docs/design.md``):

- the resume is a JSON-RPC request, the first frame on the new socket (upgraded with the dropped link's
  ``Acp-Connection-Id``): ``{"jsonrpc":"2.0","id":"acp-client/stream-resume-N","method":"stream/resume",
  "params":{"cursor":<the last cursor received, or null when none was>}}``;
- the first frame the agent sends back decides: a result for that id acknowledges (its ``_meta`` may carry
  the v1 ``acp/turnState`` hint), after which the agent replays every message after the cursor, identical,
  then goes live; an error answer for that id or a ``stream/resume_failed`` notification (``{"reason"}``)
  refuses. Anything else (live traffic without an acknowledgment, garbage) is treated as a refusal: the
  stream is never taken live with a gap;
- a cursor is the JSON string under the last ``"acp/cursor"`` key of a frame (the agent stamps it in
  ``params._meta`` or ``result._meta``); it is never parsed, only compared for equality, and one longer than
  :data:`MAX_CURSOR_CHARS` (or not a string) turns stream resume off for the link: the next drop takes the
  recovery ladder instead of risking a gap or a duplicate.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from acp_client._backoff import Backoff
from acp_client.exceptions import ConnectError, HandshakeRejected
from acp_client.schema.transport import (
    CURSOR_META_KEY,
    STREAM_RESUME,
    STREAM_RESUME_FAILED,
    TURN_STATE_META_KEY,
    ResumableTransport,
)

__all__ = [
    "MAX_CURSOR_CHARS",
    "MAX_REASON_CHARS",
    "MAX_REMEMBERED",
    "RESUME_ATTEMPTS",
    "CursorTracker",
    "NotResumed",
    "Reopen",
    "ResumeAnswer",
    "StreamResumeStats",
    "StreamResumer",
    "read_resume_answer",
    "resume_request",
]

#: A cursor longer than this (in characters) is malformed: stream resume is turned off for the link.
MAX_CURSOR_CHARS = 1024
#: The part of an agent's refusal reason that is kept (and shown); the rest is cut.
MAX_REASON_CHARS = 200
#: How many delivered cursors are remembered to drop a replayed duplicate (at most; see :class:`CursorTracker`).
MAX_REMEMBERED = 1024

_KEY = json.dumps(CURSOR_META_KEY)  # '"acp/cursor"'
_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\r\n"


@dataclass
class StreamResumeStats:
    """Counters of one WebSocket link's stream resumes (``WebSocketTransport.resume_stats``).

    ``resumes``: sockets swapped after an acknowledged ``stream/resume``; ``refusals``: resumes the agent
    refused (or answered with something else than its acknowledgment); ``attempts_failed``: reconnects that
    did not reach an answer; ``duplicates_dropped``: replayed messages whose cursor was already delivered;
    ``malformed_cursors``: frames whose cursor was not a string of at most :data:`MAX_CURSOR_CHARS` characters.
    """

    resumes: int = 0
    refusals: int = 0
    attempts_failed: int = 0
    duplicates_dropped: int = 0
    malformed_cursors: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain ``dict``."""
        return asdict(self)


class CursorTracker:
    """The last cursor of a stream and the recently delivered ones (to drop a replayed duplicate).

    Memory is bounded: the last ``remember`` cursors are kept (a deque and a set). A frame without a cursor is
    delivered and changes nothing; a malformed cursor is delivered too and sets :attr:`broken` (why), after
    which the tracker no longer offers a cursor to resume from.
    """

    __slots__ = ("_order", "_seen", "broken", "last", "stats", "uncursored")

    def __init__(self, remember: int, stats: StreamResumeStats) -> None:
        """Remember up to ``remember`` (clamped to 16..:data:`MAX_REMEMBERED`) delivered cursors."""
        bound = max(16, min(remember, MAX_REMEMBERED))
        self._order: deque[str] = deque(maxlen=bound)
        self._seen: set[str] = set()
        self.stats = stats
        #: the cursor of the last delivered message (``None`` before the first)
        self.last: str | None = None
        #: why stream resume is off for this link (a malformed cursor), else ``None``
        self.broken: str | None = None
        #: frames delivered without a cursor (never deduplicated: a replay of one cannot be recognised)
        self.uncursored = 0

    def take(self, frame: str) -> bool:
        """``True``: deliver ``frame`` (and note its cursor); ``False``: a duplicate of a delivered one, drop it."""
        at = frame.rfind(_KEY)
        if at < 0:
            self.uncursored += 1
            return True
        cursor = _cursor_after(frame, at + len(_KEY))
        if cursor is None:
            self.stats.malformed_cursors += 1
            if self.broken is None:
                self.broken = f"the agent sent a cursor that is not a string of at most {MAX_CURSOR_CHARS} characters"
            return True
        if cursor in self._seen:
            self.stats.duplicates_dropped += 1
            return False
        order = self._order
        if len(order) == order.maxlen:
            self._seen.discard(order[0])
        order.append(cursor)
        self._seen.add(cursor)
        self.last = cursor
        return True


def _cursor_after(frame: str, at: int) -> str | None:
    """The JSON string value after the key ending at ``at`` (``: "..."``), or ``None`` when it is not one (or
    too long)."""
    end = len(frame)
    while at < end and frame[at] in _WHITESPACE:
        at += 1
    if at >= end or frame[at] != ":":
        return None
    at += 1
    while at < end and frame[at] in _WHITESPACE:
        at += 1
    if at >= end or frame[at] != '"':
        return None
    close = frame.find('"', at + 1)
    if close < 0:
        return None
    if close - at - 1 > MAX_CURSOR_CHARS * 6:  # even fully \u-escaped it would be too long: do not decode it
        return None
    try:
        value, _ = _DECODER.raw_decode(frame, at)
    except ValueError:
        return None
    return value if isinstance(value, str) and len(value) <= MAX_CURSOR_CHARS else None


def resume_request(request_id: str, cursor: str | None) -> str:
    """The ``stream/resume`` request (the first frame of a resumed socket)."""
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": STREAM_RESUME, "params": {"cursor": cursor}},
        separators=(",", ":"),
    )


@dataclass(frozen=True, slots=True)
class ResumeAnswer:
    """How the agent answered ``stream/resume``: ``"accepted"`` (with the v1 ``turn_state`` hint, if sent),
    ``"refused"`` (with its reason) or ``"violation"`` (something else came first: never taken live)."""

    verdict: Literal["accepted", "refused", "violation"]
    reason: str = ""
    turn_state: dict[str, Any] | None = None
    #: how many messages the agent said it replays (its optional ``replayed`` result field)
    replayed: int | None = None


def _reason(value: object) -> str:
    """A peer's reason, made safe to show: a string, printable, at most :data:`MAX_REASON_CHARS` characters."""
    if not isinstance(value, str) or not value.strip():
        return "no reason given"
    shown = "".join(c if c.isprintable() else "?" for c in value[:MAX_REASON_CHARS])
    return shown + ("…" if len(value) > MAX_REASON_CHARS else "")


def read_resume_answer(frame: str, request_id: str) -> ResumeAnswer:
    """Read the first frame the agent sent after ``stream/resume`` (see the module docstring)."""
    try:
        message = json.loads(frame)
    except ValueError:
        return ResumeAnswer("violation", "the agent answered stream/resume with a frame that is not JSON")
    if not isinstance(message, dict):
        return ResumeAnswer("violation", "the agent answered stream/resume with something else than an object")
    if message.get("method") == STREAM_RESUME_FAILED and "id" not in message:
        params = message.get("params")
        return ResumeAnswer("refused", _reason(params.get("reason") if isinstance(params, dict) else None))
    if message.get("id") == request_id:
        if "error" in message:
            error = message["error"]
            return ResumeAnswer("refused", _reason(error.get("message") if isinstance(error, dict) else None))
        if "result" in message:
            result = message["result"]
            meta = result.get("_meta") if isinstance(result, dict) else None
            state = meta.get(TURN_STATE_META_KEY) if isinstance(meta, dict) else None
            replayed = result.get("replayed") if isinstance(result, dict) else None
            return ResumeAnswer(
                "accepted",
                turn_state=state if isinstance(state, dict) else None,
                replayed=replayed if type(replayed) is int and replayed >= 0 else None,
            )
    return ResumeAnswer(
        "violation", "the agent sent other traffic before acknowledging stream/resume (it would go live with a gap)"
    )


#: Reopens the link's URL with its settings, sending ``Acp-Connection-Id`` when given: the new socket and
#: the link's description.
Reopen = Callable[[str | None], Awaitable[tuple[ClientConnection, str]]]

#: How many reconnects one stream resume tries before it gives up (the draft: a bounded number).
RESUME_ATTEMPTS = 5
#: The backoff between them: full jitter, starting small (the agent's buffer is waiting).
RESUME_BACKOFF = Backoff(base=0.02, cap=2.0)
#: A handshake refused with one of these says the connection is gone: no further attempt.
_GONE_STATUSES = frozenset({401, 403, 404, 409, 410})


class NotResumed(Exception):
    """The stream could not be resumed; the text says why (it becomes ``ConnectionLost.stream_resumption``)."""


class StreamResumer:
    """The stream-resume state of one WebSocket link: the capability, the cursors, the counters, and the
    reconnect that sends ``stream/resume`` and reads the agent's verdict. The transport swaps the socket it
    returns under its JSON-RPC connection."""

    def __init__(
        self,
        capability: ResumableTransport,
        reopen: Reopen,
        *,
        answer_timeout: float | None,
        cursors: CursorTracker | None = None,
        backoff: Backoff = RESUME_BACKOFF,
        attempts: int = RESUME_ATTEMPTS,
    ) -> None:
        """Resume with ``reopen``; ``cursors`` are the ones noted so far (a new tracker when ``None``)."""
        self.capability = capability
        self.cursors = cursors if cursors is not None else CursorTracker(MAX_REMEMBERED, StreamResumeStats())
        self.stats = self.cursors.stats
        self._reopen = reopen
        self._backoff = backoff
        self._attempts = attempts
        self._answer_timeout = answer_timeout if answer_timeout is not None else 10.0
        self._requests = 0
        self._fruitless = 0  # resumed sockets in a row that dropped before delivering a frame
        self._frames_at_resume = -1
        #: the v1 ``acp/turnState`` hint of the last acknowledgment (``None`` when it sent none)
        self.turn_state: dict[str, Any] | None = None
        #: how the last resume went, for ``SessionRecovered.stream_resumption``
        self.outcome: str | None = None

    def note_progress(self, frames_in: int) -> None:
        """Before a resume: ``frames_in`` frames were delivered on the link so far. A socket resumed and lost
        again before delivering one is fruitless; :data:`RESUME_ATTEMPTS` of them in a row end the resumes
        (an agent that acknowledges and drops would otherwise be resumed forever)."""
        self._fruitless = self._fruitless + 1 if frames_in == self._frames_at_resume else 0
        self._frames_at_resume = frames_in

    async def resume(self, connection_id: str | None) -> ClientConnection:
        """Open the link again and resume the stream; the acknowledged socket, or :class:`NotResumed`."""
        if self.cursors.broken is not None:
            raise NotResumed(self.cursors.broken)
        if self.cursors.last is None and self.cursors.uncursored:
            raise NotResumed("the agent sent messages without a cursor: its replay could not be told from them")
        if self._fruitless >= self._attempts:
            raise NotResumed(f"the last {self._fruitless} resumed sockets dropped before delivering anything")
        if connection_id is None:
            raise NotResumed("the agent named no Acp-Connection-Id to resume")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.capability.retention_seconds or 300.0)
        last = "none tried"
        for attempt in range(1, self._attempts + 1):
            await asyncio.sleep(self._backoff.delay(attempt))
            if loop.time() > deadline:
                break
            try:
                connection, _ = await self._reopen(connection_id)
            except HandshakeRejected as exc:
                if exc.status_code in _GONE_STATUSES:
                    self.stats.refusals += 1
                    raise NotResumed(f"the agent refused the upgrade with HTTP {exc.status_code}") from None
                self.stats.attempts_failed += 1
                last = f"HTTP {exc.status_code}"
                continue
            except ConnectError as exc:
                self.stats.attempts_failed += 1
                last = str(exc)
                continue
            answer = await self._ask(connection)
            if answer is None:
                self.stats.attempts_failed += 1
                last = "the new socket gave no answer to stream/resume"
                continue
            if answer.verdict == "accepted":
                self.stats.resumes += 1
                self.turn_state = answer.turn_state
                replayed = f": the agent replays {answer.replayed} messages" if answer.replayed is not None else ""
                self.outcome = f"resumed with stream/resume{replayed}"
                return connection
            self.stats.refusals += 1
            raise NotResumed(
                f"the agent refused stream/resume: {answer.reason}"
                if answer.verdict == "refused"
                else answer.reason
            )
        raise NotResumed(f"{self._attempts} reconnects gave no resumed stream (last: {last})")

    async def _ask(self, connection: ClientConnection) -> ResumeAnswer | None:
        """Send ``stream/resume`` and read the verdict; ``None`` when the socket died or said nothing in time.
        Any socket but an acknowledged one is aborted."""
        self._requests += 1
        request_id = f"acp-client/stream-resume-{self._requests}"
        answer: ResumeAnswer | None = None
        try:
            async with asyncio.timeout(self._answer_timeout):
                await connection.send(resume_request(request_id, self.cursors.last))
                while True:
                    frame = await connection.recv()
                    if isinstance(frame, str):
                        break
            answer = read_resume_answer(frame, request_id)
        except (ConnectionClosed, TimeoutError):
            answer = None
        finally:
            if answer is None or answer.verdict != "accepted":
                connection.transport.abort()
        return answer

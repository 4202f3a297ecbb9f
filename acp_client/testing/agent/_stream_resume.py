"""The reference agent's side of stream resume over WebSocket (the durable transport draft, PR 2208).

With ``ReferenceAgent(resumable=...)`` every WebSocket connection runs over a :class:`ResumableChannel`: each
server→client message gets the connection's next cursor (``_meta["acp/cursor"]`` in ``params``, ``result`` or
``error.data``), a ring buffer keeps the last ``retention_messages`` of them for ``retention_seconds``, and
when the socket drops the connection (its sessions, its running turns) lives on for ``retention_seconds``:
its messages are buffered meanwhile. A new socket whose upgrade names the connection
(``Acp-Connection-Id``) and whose first frame is ``stream/resume {"cursor"}`` takes it over: the agent
acknowledges (a result ``{"replayed": n}``; v1: ``_meta["acp/turnState"]``), replays every buffered message
after the cursor, identical, sends a v2 ``state_update`` for each session attached to the connection, then
goes live. A refusal is a ``stream/resume_failed {"reason"}`` notification followed by an error answer to
the request; the socket is then served as a fresh connection. Cursors are ``<epoch>-<n>``: the epoch is
random per connection, so a cursor of another connection is unknown.

:class:`ResumableStreams` (``agent.streams``) keeps the channels by connection id and records every resume
attempt in :attr:`ResumableStreams.attempts`.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import ServerConnection

from acp_client._logging import get_logger
from acp_client.schema.transport import CURSOR_META_KEY, STREAM_RESUME, STREAM_RESUME_FAILED, TURN_STATE_META_KEY
from acp_client.testing.agent._channel import ChannelClosed, WebSocketChannel
from acp_client.testing.agent._resumable import Resumable

if TYPE_CHECKING:
    from acp_client.testing.reference_agent import ReferenceAgent

__all__ = ["RESUME_REFUSED", "ResumableChannel", "ResumableStreams", "ResumeAttempt"]

_log = get_logger(__name__)

#: The JSON-RPC error code of a refused ``stream/resume`` (its answer after the ``stream/resume_failed``).
RESUME_REFUSED = -32010
#: A cursor longer than this is refused without a look.
_MAX_CURSOR = 1024


@dataclass(frozen=True, slots=True)
class ResumeAttempt:
    """One ``stream/resume`` the agent received: for which connection, from which cursor, and the outcome
    (``"resumed"`` with ``replayed`` messages, or ``"refused"`` with ``reason``)."""

    connection_id: str | None
    cursor: Any
    outcome: str
    replayed: int = 0
    reason: str | None = None


def _stamp(frame: str, cursor: str) -> str:
    """``frame`` with ``cursor`` in the ``_meta`` of each message (params, result or error data)."""
    message = json.loads(frame)
    for one in message if isinstance(message, list) else [message]:
        if not isinstance(one, dict):
            continue
        if "method" in one:
            holder = one.setdefault("params", {})
        elif "result" in one:
            holder = one["result"]
        elif isinstance(one.get("error"), dict):
            holder = one["error"].setdefault("data", {})
        else:
            continue
        if isinstance(holder, dict):
            meta = holder.setdefault("_meta", {})
            if isinstance(meta, dict):
                meta[CURSOR_META_KEY] = cursor
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


class ResumableChannel:
    """A :class:`~acp_client.testing.agent._channel.FrameChannel` over a WebSocket that can be replaced.

    ``send`` stamps and buffers every frame; with no socket (dropped, or a resume replaying) the frame waits in
    the buffer. ``recv`` reads the current socket and, when it drops, waits up to ``retention_seconds`` for a
    resume (then raises :class:`ChannelClosed`: the connection ends). ``close``/``abort`` end it for good.
    """

    def __init__(self, resumable: Resumable, socket: WebSocketChannel, first_frame: str | None = None) -> None:
        """Serve ``socket``; ``first_frame`` was read from it already (it is ``recv``'s first answer)."""
        self.resumable = resumable
        self.epoch = secrets.token_hex(4)
        self._counter = 0
        self._ring: deque[tuple[int, str, float]] = deque()
        self._socket: WebSocketChannel | None = socket
        self._pending: list[str] = [first_frame] if first_frame is not None else []
        self._replaying = False
        self._attached = asyncio.Event()
        self._attached.set()
        #: no resume is possible any more (ended for good, or not resumed in time)
        self.ended = False

    # ------------------------------------------------------------------ FrameChannel

    async def send(self, frame: str) -> None:
        """Stamp ``frame`` with the next cursor, keep it for replay, and send it if a socket is live."""
        if self.ended:
            raise ChannelClosed("the connection ended")
        self._counter += 1
        stamped = _stamp(frame, f"{self.epoch}-{self._counter}")
        loop = asyncio.get_running_loop()
        self._ring.append((self._counter, stamped, loop.time()))
        self._evict(loop.time())
        socket = self._socket
        if socket is None or self._replaying:
            return
        try:
            await socket.send(stamped)
        except ChannelClosed:
            self._detach(socket)  # kept in the ring: a resume replays it

    async def recv(self) -> str:
        """The next frame from the current socket; across a drop, from the socket that resumes."""
        while True:
            if self._pending:
                return self._pending.pop(0)
            socket = self._socket
            if socket is not None:
                try:
                    return await socket.recv()
                except ChannelClosed:
                    self._detach(socket)
                    continue
            if self.ended:
                raise ChannelClosed("the connection ended")
            try:
                async with asyncio.timeout(self.resumable.retention_seconds):
                    await self._attached.wait()
            except TimeoutError:
                self.ended = True
                raise ChannelClosed(f"not resumed within {self.resumable.retention_seconds:g} s") from None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """End the connection for good (the agent's own decision: no resume) and close the socket."""
        self.ended = True
        self._attached.set()
        if self._socket is not None:
            await self._socket.close(code, reason)

    def abort(self) -> None:
        """End the connection for good and reset the socket."""
        self.ended = True
        self._attached.set()
        if self._socket is not None:
            self._socket.abort()

    def pause_reading(self) -> None:
        """Pause the current socket (see :class:`WebSocketChannel`)."""
        if self._socket is not None:
            self._socket.pause_reading()

    def resume_reading(self) -> None:
        """Resume the current socket."""
        if self._socket is not None:
            self._socket.resume_reading()

    # ------------------------------------------------------------------ resume

    def refusal(self, cursor: object) -> str | None:
        """Why a resume from ``cursor`` is refused, or ``None`` when it can be served."""
        if self.ended:
            return "the connection is gone"
        self._evict(asyncio.get_running_loop().time())
        first = self._ring[0][0] if self._ring else self._counter + 1
        if cursor is None:
            return None if first == 1 else "no cursor given and the first messages are no longer retained"
        if not isinstance(cursor, str) or len(cursor) > _MAX_CURSOR:
            return f"the cursor is not a string of at most {_MAX_CURSOR} characters"
        epoch, _, number = cursor.rpartition("-")
        if epoch != self.epoch or not number.isdigit() or int(number) > self._counter:
            return "unknown cursor"
        if int(number) < first - 1:
            return "the cursor is outside the retention window"
        return None

    async def take_over(self, socket: WebSocketChannel, cursor: str | None, after_replay: list[str]) -> int:
        """Make ``socket`` the live one: send every message after ``cursor`` (checked by :meth:`refusal`), then
        ``after_replay`` (stamped like any message), then go live. Returns how many messages were replayed."""
        old = self._socket
        self._socket = socket
        self._replaying = True
        if old is not None and old is not socket:
            old.abort()  # a half-open socket the client gave up on
        sent_upto = int(cursor.rpartition("-")[2]) if cursor is not None else 0
        replayed = 0
        try:
            for frame in after_replay:
                await self.send(frame)  # buffered (replaying): the loop below sends it in order
            while True:
                batch = [(n, text) for n, text, _ in self._ring if n > sent_upto]
                if not batch:
                    break
                for n, text in batch:
                    await socket.send(text)
                    sent_upto = n
                    replayed += 1
        except ChannelClosed:
            self._detach(socket)
        finally:
            self._replaying = False
        if self._socket is socket:
            self._attached.set()
        return replayed

    def pending_after(self, cursor: str | None) -> int:
        """How many retained messages come after ``cursor`` (checked by :meth:`refusal`)."""
        after = int(cursor.rpartition("-")[2]) if cursor is not None else 0
        return sum(1 for n, _, _ in self._ring if n > after)

    def _detach(self, socket: WebSocketChannel) -> None:
        if self._socket is socket:
            self._socket = None
            self._attached.clear()

    def _evict(self, now: float) -> None:
        ring, keep = self._ring, self.resumable.retention_messages
        while len(ring) > keep:
            ring.popleft()
        horizon = now - self.resumable.retention_seconds
        while ring and ring[0][2] < horizon:
            ring.popleft()


class ResumableStreams:
    """The agent's resumable WebSocket connections (``agent.streams``) and the log of resume attempts."""

    def __init__(self, agent: ReferenceAgent, resumable: Resumable) -> None:
        """Serve ``agent``'s WebSocket connections resumably, as ``resumable`` says."""
        self._agent = agent
        self.resumable = resumable
        self._channels: dict[str, ResumableChannel] = {}
        #: every ``stream/resume`` received, in order
        self.attempts: list[ResumeAttempt] = []
        #: for every socket accepted, in order: the ``Acp-Connection-Id`` its upgrade named (``None``: none) and
        #: the method of its first frame (``None``: not a request or notification)
        self.first_frames: list[tuple[str | None, str | None]] = []

    def channel(self, connection_id: str) -> ResumableChannel | None:
        """The channel of a connection (``None`` when unknown)."""
        return self._channels.get(connection_id)

    async def serve_socket(self, ws: ServerConnection, connection_id: str) -> None:
        """Serve one accepted socket: a resume of the connection its upgrade names, or a fresh connection
        with id ``connection_id``. Returns when the socket is closed (the connection may live on)."""
        socket = WebSocketChannel(ws)
        requested = ws.request.headers.get("Acp-Connection-Id") if ws.request is not None else None
        try:
            first = await socket.recv()
        except ChannelClosed:
            return
        request = _resume_request(first)
        self.first_frames.append((requested, STREAM_RESUME if request is not None else _method(first)))
        if request is not None and await self._resume(socket, requested, *request):
            await ws.wait_closed()
            return
        # a fresh connection; after a refusal, the stream/resume it began with was answered already
        channel = ResumableChannel(self.resumable, socket, first if request is None else None)
        self._channels[connection_id] = channel
        self._agent.spawn(self._serve(channel, connection_id), name=f"acp-ref-{connection_id}")
        await ws.wait_closed()

    async def _serve(self, channel: ResumableChannel, connection_id: str) -> None:
        try:
            await self._agent.serve_channel(channel, connection_id=connection_id)
        finally:
            self._channels.pop(connection_id, None)
            if not channel.ended:
                channel.abort()  # the connection's work was stopped (a restart): its socket goes with it

    async def _resume(self, socket: WebSocketChannel, connection_id: str | None, request_id: Any, cursor: Any) -> bool:
        channel = self._channels.get(connection_id) if connection_id is not None else None
        if self.resumable.refuse:
            reason: str | None = "this agent keeps no replay buffer"
        elif channel is None:
            reason = f"connection {connection_id} is unknown or gone"
        else:
            reason = channel.refusal(cursor)
        connection = self._agent.connection(connection_id) if connection_id is not None else None
        if reason is None and (channel is None or connection is None):
            reason = "the connection is gone"
        if reason is not None or channel is None or connection is None:
            self.attempts.append(ResumeAttempt(connection_id, cursor, "refused", reason=reason))
            _log.info("reference_agent_stream_resume_refused", connection_id=connection_id, reason=reason)
            await _refuse(socket, request_id, reason or "refused")
            return False
        sessions = [s for s in self._agent.sessions.values() if s.connection is connection]
        v2 = (connection.protocol_version or self._agent.protocol_version) >= 2
        result: dict[str, Any] = {"replayed": 0}
        if not v2:
            running = [s for s in sessions if s.turn is not None and not s.turn.done.done()]
            turn = running[0].turn if running else None
            result["_meta"] = {
                TURN_STATE_META_KEY: {
                    "state": "running" if turn is not None else "idle",
                    "promptRequestId": turn.request_id if turn is not None else None,
                }
            }
        after = [
            connection.core.notification("session/update", {"sessionId": s.session_id, "update": s.state_update()})
            for s in sessions
            if v2
        ]
        result["replayed"] = channel.pending_after(cursor)
        try:
            await socket.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}))
        except ChannelClosed:
            return False
        replayed = await channel.take_over(socket, cursor, after)
        self.attempts.append(ResumeAttempt(connection_id, cursor, "resumed", replayed=replayed))
        _log.info("reference_agent_stream_resumed", connection_id=connection_id, replayed=replayed)
        return True


async def _refuse(socket: WebSocketChannel, request_id: Any, reason: str) -> None:
    """Send the refusal: the ``stream/resume_failed`` notification, then the error answer."""
    failed = {"jsonrpc": "2.0", "method": STREAM_RESUME_FAILED, "params": {"reason": reason}}
    error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": RESUME_REFUSED, "message": reason}}
    try:
        await socket.send(json.dumps(failed))
        await socket.send(json.dumps(error))
    except ChannelClosed:
        pass


def _resume_request(frame: str) -> tuple[Any, Any] | None:
    """``(id, cursor)`` when ``frame`` is a ``stream/resume`` request, else ``None``."""
    try:
        message = json.loads(frame)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("method") != STREAM_RESUME or "id" not in message:
        return None
    params = message.get("params")
    return message["id"], params.get("cursor") if isinstance(params, dict) else None


def _method(frame: str) -> str | None:
    try:
        message = json.loads(frame)
    except ValueError:
        return None
    method = message.get("method") if isinstance(message, dict) else None
    return method if isinstance(method, str) else None

"""The reading half of a :class:`~acp_client.client.connection.Connection`: frames in, until the transport
raises. A :class:`FrameReader` decodes each frame with the connection's JSON-RPC core, settles the answers
the connection waits for (:class:`~acp_client.client._answers.Answers`), hands agent requests to the
inbound queue and notifications to the handler, and counts and logs what it discards (it owns
``last_discarded``). The connection runs it in its reader task and turns how it ended into the loss."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Final

from acp_client._logging import LibraryLogger
from acp_client.client._answers import Answers
from acp_client.client._inbound import InboundRequests
from acp_client.exceptions import ConnectionLost, rpc_error_from_object
from acp_client.jsonrpc import ErrorResponse, Event, JsonRpcCore, Notification, Request, Response
from acp_client.transports.base import BatchTransport, Transport

__all__ = ["CANCEL_METHOD", "FrameReader"]

#: the notification by which the agent cancels one of its requests to us
CANCEL_METHOD: Final = "$/cancel_request"
#: Notifications handled in a row before the reader yields to other tasks once.
_YIELD_EVERY = 64


class FrameReader:
    """Reads one connection's frames (see the module docstring)."""

    __slots__ = ("_answers", "_core", "_inbound", "_log", "_on_notification", "_stats", "_transport", "last_discarded")

    def __init__(
        self,
        transport: Transport,
        *,
        core: JsonRpcCore,
        answers: Answers,
        inbound: InboundRequests,
        on_notification: Callable[[str, Any], None] | None,
        stats: Callable[[], dict[str, int]],
        log: LibraryLogger,
    ) -> None:
        self._transport = transport
        self._core = core
        self._answers = answers
        self._inbound = inbound
        self._on_notification = on_notification
        # the connection's counters, looked up at each use (``Connection.stats`` is a plain attribute an
        # application or a test may replace); the read loops take them once per run, for the hot path
        self._stats = stats
        self._log = log
        #: the last frame from the agent that was discarded as unusable: its kind (``"parse_error"`` ...) and
        #: an excerpt. Error texts quote it (an agent that logs to stdout answers nothing readable).
        self.last_discarded: tuple[str, str] | None = None

    async def run(self) -> None:
        """Read until the transport raises (``ConnectionLost`` when it closes)."""
        transport = self._transport
        if isinstance(transport, BatchTransport):
            await self._read_batches(transport)
        else:
            await self._read_frames(transport)

    async def _read_frames(self, transport: Transport) -> None:
        """Read frame by frame (``recv``) until the transport raises."""
        recv, receive_one, stats = transport.recv, self._core.receive_one, self._stats()
        burst = 0
        while True:
            text = await recv()
            stats["frames_in"] += 1
            events = receive_one(text)
            if type(events) is Notification:  # the hot path (a stream of updates): no coroutine per frame
                stats["notifications_in"] += 1
                self._notification(events.method, events.params)
                burst += 1
                if burst >= _YIELD_EVERY:
                    # A fast agent's frames arrive in bursts of hundreds that recv() returns without
                    # suspending: let the tasks consuming them run now and then, so a subscriber keeps
                    # up (no overflowing buffer, no pile of live objects for the garbage collector).
                    burst = 0
                    await asyncio.sleep(0)
            else:
                await self._dispatch_all(events)

    async def _read_batches(self, transport: BatchTransport) -> None:
        """Read every frame the transport holds per wake-up (``recv_batch``), taking the ones it already
        decoded as they are, until the transport raises."""
        recv_batch, stats, core = transport.recv_batch, self._stats(), self._core
        receive_one, receive_decoded, receive_notification = (
            core.receive_one,
            core.receive_decoded,
            core.receive_notification,
        )
        notification = self._notification
        burst = 0
        while True:
            frames = await recv_batch()
            stats["frames_in"] += len(frames)
            for frame in frames:
                # the hot path, a decoded notification (a streamed update): its method and params, no event
                fields = None if type(frame) is str else receive_notification(*frame)
                if fields is None:
                    events = receive_one(frame) if type(frame) is str else receive_decoded(*frame)
                    if type(events) is not Notification:
                        await self._dispatch_all(events)
                        continue
                    fields = (events.method, events.params)
                stats["notifications_in"] += 1
                notification(*fields)
                burst += 1
                if burst >= _YIELD_EVERY:  # let the consumers run now and then (see _read_frames)
                    burst = 0
                    await asyncio.sleep(0)

    async def _dispatch_all(self, events: Event | list[Event]) -> None:
        """Handle what a frame held besides a notification: one event, or each of a batch's in order."""
        if isinstance(events, list):
            for event in events:
                await self._dispatch(event)
        else:
            await self._dispatch(events)

    async def _dispatch(self, event: Event) -> None:
        if isinstance(event, Response):
            first = self._answers.settle(event.id, event.result)
            if first is None:
                self._stats()["late_responses"] += 1
            elif first:
                await asyncio.sleep(0)  # the waiter, woken first, runs before the next frame
        elif isinstance(event, Notification):
            self._stats()["notifications_in"] += 1
            self._notification(event.method, event.params)
        elif isinstance(event, Request):
            self._stats()["requests_in"] += 1
            await self._inbound.admit(event)
        elif isinstance(event, ErrorResponse):
            if event.request is None:
                self._stats()["orphan_errors"] += 1
                self._log.warning("peer_reported_error", code=event.code, message=event.message)
                return
            error = rpc_error_from_object(event.code, event.message, event.data)
            first = self._answers.settle(event.request.id, error=error)
            if first is None:
                self._stats()["late_responses"] += 1
            elif first:
                await asyncio.sleep(0)  # as for a result
        else:
            if event.kind == "unknown_id" and self._answers.abandoned(event.id):
                self._stats()["late_responses"] += 1  # the answer to a request we gave up on
                self._log.debug("late_response_discarded", request_id=event.id)
                return
            self._stats()[f"invalid_{event.kind}"] += 1
            self.last_discarded = (event.kind, event.excerpt)
            self._log.warning("invalid_frame_discarded", kind=event.kind, detail=event.detail)
            self._log.debug("invalid_frame_excerpt", kind=event.kind, excerpt=event.excerpt)
            if event.reply is not None:
                with contextlib.suppress(ConnectionLost):
                    await self._transport.send(event.reply)

    def _notification(self, method: str, params: Any) -> None:
        """One notification from the agent (every read loop comes here): ``$/cancel_request`` cancels an
        inbound request; any other goes to the notification handler, whose errors are counted and logged."""
        if method == CANCEL_METHOD:
            target = params.get("requestId") if isinstance(params, dict) else None
            self._inbound.cancel(target, CANCEL_METHOD)
        elif self._on_notification is not None:
            try:
                self._on_notification(method, params)
            except Exception:
                self._stats()["notification_handler_errors"] += 1
                self._log.exception("notification_handler_failed", method=method)

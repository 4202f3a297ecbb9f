"""The agent->client requests of one connection: each admitted, queued or refused, then served in a task of
its own, and every one of them ended with the link.

:class:`InboundRequests` owns the requests being served and the ones waiting; the
:class:`~acp_client.client.connection.Connection` hands it each request the reader parses, the
``$/cancel_request`` notifications, and the link's end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from acp_client._logging import LibraryLogger
from acp_client.exceptions import ConnectionLost, RequestCancelled, RPCError, UsageError, rpc_error_from_object
from acp_client.jsonrpc import Request

__all__ = ["DEFAULT_MAX_INBOUND_REQUESTS", "DEFAULT_MAX_QUEUED_INBOUND", "InboundRequests"]

#: Agent->client requests served at once, by default (an IDE should not open 20,000 dialogs at once).
DEFAULT_MAX_INBOUND_REQUESTS = 16
#: Agent->client requests waiting for a free slot, by default; past it they are answered with an error.
DEFAULT_MAX_QUEUED_INBOUND = 1024

#: ``(request id, code, message, data)`` -> the error frame answering it
ErrorFrame = Callable[[int | str, int, str, Any], str]
#: ``(request id, result)`` -> the frame answering it
ResultFrame = Callable[[int | str, Any], str]


class InboundRequests:
    """At most ``max_running`` requests served at once, each in a task that runs ``handler`` and sends its
    answer; up to ``max_queued`` wait in arrival order; past that a request is answered ``-32603``
    ``client_busy`` naming both bounds. An id already in flight is answered ``-32600``
    ``duplicate_request_id`` and never served. ``gone()`` says the connection ended (a cancelled handler
    then answers nothing)."""

    def __init__(
        self,
        *,
        handler: Callable[[str, Any], Awaitable[Any]] | None,
        respond: ResultFrame,
        send: Callable[[str], Awaitable[None]],
        gone: Callable[[], bool],
        error_frame: ErrorFrame,
        spawn: Callable[[Awaitable[None], str], None],
        stats: dict[str, int],
        log: LibraryLogger,
        name: str,
        max_running: int = DEFAULT_MAX_INBOUND_REQUESTS,
        max_queued: int = DEFAULT_MAX_QUEUED_INBOUND,
    ) -> None:
        if max_running < 1 or max_queued < 0:
            raise UsageError(
                f"max_inbound_requests must be >= 1 and max_queued_inbound >= 0, not {max_running} and {max_queued}"
            )
        self._handler = handler
        self._respond = respond
        self._send = send  # raises ConnectionLost once the link is gone
        self._gone = gone
        self._error_frame = error_frame
        self._spawn = spawn
        self._stats = stats
        self._log = log
        self._name = name
        self._max_running = max_running
        self._max_queued = max_queued
        self._running: dict[int | str, asyncio.Task[None]] = {}
        self._queued: dict[int | str, Request] = {}  # in arrival order
        self._stopped = False

    @property
    def in_flight(self) -> int:
        """How many agent->client requests are served or waiting for their turn."""
        return len(self._running) + len(self._queued)

    async def admit(self, request: Request) -> None:
        """Serve ``request`` now, queue it, or refuse it (a duplicate id, or no room left)."""
        if request.id in self._running or request.id in self._queued:
            self._stats["duplicate_request_ids"] += 1
            self._log.warning("duplicate_request_id_refused", request_id=request.id, method=request.method)
            message = f"request id {request.id!r} is already in use by a request in flight"
            await self._send_quietly(self._error_frame(request.id, -32600, message, {"reason": "duplicate_request_id"}))
        elif len(self._running) < self._max_running:
            self._start(request)
        elif len(self._queued) < self._max_queued:
            self._queued[request.id] = request
            self._stats["requests_queued"] += 1
        else:
            self._stats["requests_refused_busy"] += 1
            self._log.warning("agent_request_refused_busy", request_id=request.id, method=request.method)
            message = (
                f"the client is busy: {self._max_running} agent requests in flight and {self._max_queued} "
                "waiting (max_inbound_requests, max_queued_inbound)"
            )
            data = {"reason": "client_busy", "maxInboundRequests": self._max_running, "maxQueued": self._max_queued}
            await self._send_quietly(self._error_frame(request.id, -32603, message, data))

    def cancel(self, request_id: object, msg: str) -> None:
        """The agent cancelled ``request_id``: a served one is cancelled (its handler answers ``-32800``), a
        queued one is answered ``-32800`` without being served."""
        if not isinstance(request_id, int | str):
            return
        task = self._running.get(request_id)
        if task is not None:
            task.cancel(msg=msg)
        elif request_id in self._queued:
            request = self._queued.pop(request_id)
            frame = self._error_frame(request.id, RequestCancelled.default_code or -32800, "Request cancelled", None)
            self._spawn(self._send_quietly(frame), f"acp-cancelled-{self._name}-{request.id}")

    def stop(self) -> None:
        """The link ended: every handler is cancelled (their ids belong to it) and the waiting ones dropped."""
        self._stopped = True
        for task in self._running.values():
            task.cancel()
        self._running.clear()
        self._queued.clear()

    def _start(self, request: Request) -> None:
        task = asyncio.create_task(self._serve(request), name=f"acp-inbound-{self._name}-{request.id}")
        self._running[request.id] = task
        key = request.id

        def done(_task: asyncio.Task[None]) -> None:
            if self._running.get(key) is _task:
                del self._running[key]
            if not self._stopped and self._queued and len(self._running) < self._max_running:
                self._start(self._queued.pop(next(iter(self._queued))))

        task.add_done_callback(done)

    async def _serve(self, request: Request) -> None:
        """Run the handler for ``request`` and send its answer: ``-32601`` without a handler, the error of an
        ``RPCError``, ``-32603`` for any other exception, ``-32800`` when the agent cancelled it."""
        try:
            if self._handler is None:
                raise rpc_error_from_object(-32601, "Method not found", {"method": request.method})
            frame = self._respond(request.id, await self._handler(request.method, request.params))
        except asyncio.CancelledError:
            if self._gone():
                raise  # the connection is gone: nothing can be answered
            # the agent asked us to cancel it ($/cancel_request): answer -32800 as the spec requires
            code = RequestCancelled.default_code or -32800
            await self._send_quietly(self._error_frame(request.id, code, "Request cancelled", None))
            raise
        except RPCError as exc:
            frame = self._error_frame(request.id, exc.code, exc.message, exc.data)
        except Exception as exc:
            self._log.exception("request_handler_failed", method=request.method)
            frame = self._error_frame(request.id, -32603, "Internal error", {"details": type(exc).__name__})
        try:
            await self._send(frame)
        except ConnectionLost:
            self._stats["responses_lost"] += 1

    async def _send_quietly(self, frame: str) -> None:
        with contextlib.suppress(ConnectionLost):  # a lost link is the connection's business
            await self._send(frame)

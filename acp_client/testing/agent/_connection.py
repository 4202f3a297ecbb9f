"""One client connection of the reference agent: read frames, dispatch requests, track the agent's own requests.

Independent of the link: it talks to a :class:`~acp_client.testing.agent._channel.FrameChannel`, so the same code
serves a WebSocket connection and a stdio stream.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from acp_client._logging import get_logger
from acp_client.jsonrpc import ErrorResponse, Event, Invalid, JsonRpcCore, Notification, Request, Response
from acp_client.testing.agent._channel import ChannelClosed, FrameChannel
from acp_client.testing.agent._errors import INTERNAL_ERROR, REQUEST_CANCELLED, AgentError, PeerError, PeerGone

if TYPE_CHECKING:
    from acp_client.testing.reference_agent import ReferenceAgent

__all__ = ["AgentConnection", "Reply"]

_log = get_logger(__name__)


class Reply:
    """The answer slot of one inbound request: a handler may answer early (v2 prompt acceptance) and go on."""

    def __init__(self, connection: AgentConnection, request_id: int | str) -> None:
        """Bind the slot to the connection and id the answer must go to."""
        self.connection = connection
        self.request_id = request_id
        self.sent = False

    async def result(self, value: Any) -> None:
        """Send the success response (once; later calls are ignored)."""
        if self.sent:
            return
        self._settle()
        await self.connection.send(self.connection.core.respond(self.request_id, value))

    async def error(self, code: int, message: str, data: Any = None) -> None:
        """Send an error response (once; later calls are ignored)."""
        if self.sent:
            return
        self._settle()
        await self.connection.send(self.connection.core.respond_error(self.request_id, code, message, data))

    def _settle(self) -> None:
        self.sent = True
        # answered: a later $/cancel_request for this id must not touch the task (it may run on, e.g. a v2 turn)
        self.connection.forget_inflight(self.request_id)


@dataclass(eq=False)
class AgentConnection:
    """The agent's side of one connection."""

    agent: ReferenceAgent
    channel: FrameChannel
    id: str
    core: JsonRpcCore = field(default_factory=JsonRpcCore)
    #: negotiated by ``initialize``; ``None`` before it
    protocol_version: int | None = None
    client_info: Any = None
    client_capabilities: Any = None
    authenticated: bool = False
    #: the link is gone (the reader loop ended)
    closed: bool = False
    _closing: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    _outbound: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    _inflight: dict[int | str, asyncio.Task[None]] = field(default_factory=dict)
    _peer_cancelled: set[int | str] = field(default_factory=set)
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    # ------------------------------------------------------------------ lifecycle

    @property
    def closing(self) -> bool:
        """The agent decided to close this connection, or it is closed."""
        return self.closed or self._closing.done()

    @property
    def closing_future(self) -> asyncio.Future[None]:
        """Resolved once the agent starts closing this connection or the link ends."""
        return self._closing

    def mark_closing(self) -> None:
        """Note that the agent is closing this connection: stalled reads and sends give up."""
        if not self._closing.done():
            self._closing.set_result(None)

    async def run(self) -> None:
        """Read and handle frames until the link ends."""
        try:
            while True:
                try:
                    text = await self.channel.recv()
                except ChannelClosed:
                    break
                if not await self.agent.faults.wait_flowing(self):
                    break
                for event in self.core.receive(text):
                    await self._on_event(event)
        finally:
            self._mark_closed()

    def _mark_closed(self) -> None:
        self.closed = True
        self.mark_closing()
        for fut in self._outbound.values():
            if not fut.done():
                fut.set_exception(PeerGone(f"connection {self.id} closed"))
                fut.exception()  # its awaiter may be gone already: never "exception was never retrieved"
        self._outbound.clear()
        self.core.drop_all()
        self.finished.set()
        self.agent.connection_closed(self)

    # ------------------------------------------------------------------ outbound

    async def send(self, frame: str) -> bool:
        """Send one frame; ``False`` if the connection is gone (nothing is raised: the agent never crashes)."""
        if self.closed or not await self.agent.faults.wait_flowing(self):
            return False
        try:
            await self.channel.send(frame)
        except ChannelClosed:
            return False
        return True

    async def notify(self, method: str, params: Any) -> bool:
        """Send a notification; ``False`` if the connection is gone."""
        return await self.send(self.core.notification(method, params))

    async def start_request(self, method: str, params: Any) -> tuple[int, asyncio.Future[Any]]:
        """Send a request of the agent's own; the future resolves to the result or fails with
        :class:`PeerError` / :class:`PeerGone`."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.closed:
            fut.set_exception(PeerGone(f"connection {self.id} closed"))
            return -1, fut
        id_, frame = self.core.request(method, params)
        self._outbound[id_] = fut
        if not await self.send(frame):
            # the same future is returned (the connection may already have failed it while we sent)
            self._outbound.pop(id_, None)
            self.core.forget(id_)
            if not fut.done():
                fut.set_exception(PeerGone(f"connection {self.id} closed"))
        return id_, fut

    def forget_request(self, id_: int) -> None:
        """Stop waiting for the answer to one of our requests (a late answer is then ignored)."""
        self.core.forget(id_)
        fut = self._outbound.pop(id_, None)
        if fut is not None and not fut.done():
            fut.cancel()

    async def cancel_request(self, id_: int) -> None:
        """Abandon one of our requests and tell the client with ``$/cancel_request``."""
        self.forget_request(id_)
        await self.notify("$/cancel_request", {"requestId": id_})

    # ------------------------------------------------------------------ inbound

    def forget_inflight(self, request_id: int | str) -> None:
        """Drop an inbound request from the in-flight table (it has been answered)."""
        self._inflight.pop(request_id, None)
        self._peer_cancelled.discard(request_id)

    async def _on_event(self, event: Event) -> None:
        if isinstance(event, Request):
            self.agent.records.record(self, event.method, event.params)
            task = self.agent.spawn(self._serve(event), name=f"acp-ref-{self.id}-{event.method}-{event.id}")
            self._inflight[event.id] = task
        elif isinstance(event, Notification):
            self.agent.records.record(self, event.method, event.params)
            if event.method == "$/cancel_request":
                self._cancel_inflight(event.params)
            else:
                await self.agent.handle_notification(self, event.method, event.params)
        elif isinstance(event, Response):
            fut = self._outbound.pop(event.id, None)
            if fut is not None and not fut.done():
                fut.set_result(event.result)
        elif isinstance(event, ErrorResponse):
            if isinstance(event.id, int):
                fut = self._outbound.pop(event.id, None)
                if fut is not None and not fut.done():
                    fut.set_exception(PeerError(event.code, event.message, event.data))
        elif isinstance(event, Invalid):
            self.agent.records.record_invalid(self, event)
            if event.reply is not None:
                await self.send(event.reply)

    def _cancel_inflight(self, params: Any) -> None:
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if not isinstance(request_id, int | str) or isinstance(request_id, bool):
            return
        task = self._inflight.get(request_id)
        if task is not None and not task.done():
            self._peer_cancelled.add(request_id)
            task.cancel()

    async def _serve(self, request: Request) -> None:
        reply = Reply(self, request.id)
        try:
            try:
                result = await self.agent.dispatch(self, request.method, request.params, reply)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                # cancelled by the client's $/cancel_request (and by nothing else): answer -32800
                if request.id in self._peer_cancelled and task is not None and task.uncancel() == 0:
                    await reply.error(REQUEST_CANCELLED, "Request cancelled")
                    return
                raise
            except AgentError as exc:
                if reply.sent:
                    _log.warning("reference_agent_error_after_reply", method=request.method, code=exc.code)
                await reply.error(exc.code, exc.message, exc.data)
                return
            except Exception as exc:  # a bug or a failing hook: answer -32603, keep serving
                _log.exception("reference_agent_handler_failed", connection_id=self.id, method=request.method)
                await reply.error(INTERNAL_ERROR, "Internal error", {"reason": f"{type(exc).__name__}: {exc}"})
                return
            await reply.result(result)
        finally:
            if self._inflight.get(request.id) is asyncio.current_task():
                self.forget_inflight(request.id)

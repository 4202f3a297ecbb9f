"""Ordering across the streams of a Streamable HTTP link: which session an outgoing message belongs to,
where an agent request's answer goes back, and the barrier that holds a ``session/load``/``session/resume``
result (connection stream) until its replay (session stream) is in, so what the layers above see follows
the agent's order. A session stream is opened before the result of a new/load/resume is handed on.

The :class:`StreamRouter` owns the link's :class:`~._streams.StreamReader` (it is the reader's
:class:`~._streams.MessageSink`) and the routing tables; the transport asks it for the streams it needs."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any

from acp_client.exceptions import ConnectionLost
from acp_client.transports.base import Decoded
from acp_client.transports.http._base import (
    _ATTACH_METHODS,
    _CREATE_METHODS,
    _DETACH_METHODS,
    LinkView,
    _is_id,
    _log,
    _session_id,
)
from acp_client.transports.http._inbox import Inbound
from acp_client.transports.http._stream import StreamView
from acp_client.transports.http._streams import StreamReader

#: The method of the request that marks the end of a v1 replay on its session stream (see ``_replay_barrier``):
#: an extension method no agent serves, so every agent answers it ``-32601`` (JSON-RPC requires an answer).
REPLAY_BARRIER_METHOD = "_acp-client/replay_barrier"
#: The longest a load/resume result is held back waiting for its replay.
REPLAY_HOLD_MAX = 2.0

#: How the router sends a frame of its own: the POST pipeline's ``post(frame, session_header, message)``.
Post = Callable[[str, str | None, object], Awaitable[None]]


class StreamRouter:
    """Routes messages between the streams of a link and holds load/resume results behind their replay.
    Owns the stream reader and three tables: the attaching requests (load/resume/new/fork, by id), the
    agent requests whose answer goes back to a session, the close/delete requests in flight, and the
    session streams lent for the answer of one request (see :meth:`outgoing`)."""

    def __init__(self, link: LinkView, inbox: Inbound, post: Post) -> None:
        self._link = link
        self._inbox = inbox
        self._post = post
        self._barriers: dict[str, asyncio.Future[None]] = {}  # barrier request id -> its answer, until it comes
        self._barrier_ids = itertools.count(1)
        self._streams = StreamReader(link, inbox, sink=self)
        self._attaching: dict[int | str, tuple[str, str | None, int]] = {}  # id -> (method, session, updates)
        self._inbound_routes: dict[int | str, str] = {}  # agent request id -> its session
        self._detaching: dict[int | str, str] = {}  # close/delete request id -> session id
        self._lent: set[str] = set()  # sessions whose stream is open only for the answers awaited on it
        self._borrowers: dict[int | str, str] = {}  # request id -> the lent session stream its answer comes on

    @property
    def session_streams(self) -> list[str]:
        """Ids of the sessions whose SSE stream is open."""
        return self._streams.session_ids

    async def open_connection_stream(self) -> None:
        """Open the connection's SSE stream (the typed error when the server refuses it)."""
        await self._streams.open(None, required=True)

    def cancel(self) -> None:
        """The link failed: stop reading every stream."""
        self._streams.cancel()

    def tasks(self) -> list[asyncio.Task[None]]:
        """The stream tasks a release must stop."""
        return self._streams.tasks()

    def clear(self) -> None:
        """Forget every stream (after :meth:`tasks` ended)."""
        self._streams.clear()

    async def outgoing(self, message: object) -> str | None:
        """Prepare to send ``message`` and return its ``Acp-Session-Id`` (or ``None``).

        The binding's rule: a request whose params name a session carries that session's header, and its
        answer travels on that session's stream (a load/resume result excepted, on some servers). So the
        session's stream is opened *before* such a request is POSTed when it is not open here yet. For a
        request other than load/resume (a ``session/status`` probe, a close/delete of a session not
        attached here) the stream is lent: an error answer (the session is unknown) gives it back (it is
        closed); a successful one keeps it as the session's stream, which the load/resume that usually
        follows uses (closing it and opening it again at once would race the server's release of the
        first receiver: 409). A close/delete ends it as always. A server that refuses the stream (it does
        not know the session on this connection) gets the request without the header, and answers it on
        the connection stream."""
        if isinstance(message, dict) and isinstance(message.get("method"), str) and _is_id(message.get("id")):
            session_id = _session_id(message.get("params"))
            if session_id is not None:
                await self._stream_for_answer(message["method"], message["id"], session_id)
        return self._route_outgoing(message)

    async def _stream_for_answer(self, method: str, request_id: int | str, session_id: str) -> None:
        """Have the stream of ``session_id`` open (or refused) before a request naming it is POSTed."""
        stream = self._streams.get(session_id)
        if stream is None:
            if not await self._streams.open(session_id, required=False):
                return
            if method not in _ATTACH_METHODS:
                self._lent.add(session_id)
        elif not stream.is_open:
            await stream.wait_opened()  # another request is opening it right now
        if method in _ATTACH_METHODS:
            self._lent.discard(session_id)  # the session is attached here from now on: its stream stays
        elif session_id in self._lent:
            self._borrowers[request_id] = session_id

    def _give_back(self, session_id: str) -> None:
        """Close a lent stream after an error answer, unless another answer is awaited on it or a request
        that keeps it (a load/resume, a successful answer) came meanwhile."""
        if session_id in self._lent and session_id not in self._borrowers.values():
            self._lent.discard(session_id)
            self._streams.end(session_id, closed=True)

    def _route_outgoing(self, message: object) -> str | None:
        """Note what an outgoing message means for routing; return its ``Acp-Session-Id`` (or ``None``): a
        notification naming a session always carries it; a request, when that session's stream is open here
        (:meth:`outgoing` opened it, or the server refused it: then the answer comes on the connection
        stream)."""
        if not isinstance(message, dict):
            return None
        method = message.get("method")
        if isinstance(method, str):
            session_id = _session_id(message.get("params"))
            request_id = message.get("id")
            if _is_id(request_id) and (method in _ATTACH_METHODS or method in _CREATE_METHODS):
                attached = (
                    self._streams.get(session_id) if method in _ATTACH_METHODS and session_id is not None else None
                )
                self._attaching[request_id] = (
                    method,
                    session_id if method in _ATTACH_METHODS else None,
                    attached.state_updates if attached is not None else 0,
                )
            if (
                method in _DETACH_METHODS
                and session_id is not None
                and self._streams.detaching(session_id)
                and _is_id(request_id)
            ):
                self._detaching[request_id] = session_id
            if session_id is None:
                return None
            if not _is_id(request_id):
                # a notification (session/cancel ...): no answer to route, so it carries its session's header
                # whether or not the session is attached here (the binding's rule for every message naming one)
                return session_id
            stream = self._streams.get(session_id)
            if stream is not None and stream.is_open:
                return session_id
            return None
        request_id = message.get("id")
        if _is_id(request_id):  # our answer to an agent request: back to the session it came from
            return self._inbound_routes.pop(request_id, None)
        return None

    async def deliver(self, stream: StreamView, text: str, message: dict[str, Any] | list[Any]) -> None:
        """Route one message the reader read from ``stream`` and queue it for ``recv``."""
        ended: tuple[str, bool] | None = None  # a session stream to stop once this answer is queued
        lent: str | None = None
        if isinstance(message, dict):
            request_id = message.get("id")
            if isinstance(request_id, str) and "method" not in message and request_id in self._barriers:
                answered = self._barriers.pop(request_id)  # the end of a replay: ours, not for recv
                if not answered.done():
                    answered.set_result(None)
                return
            if "method" in message:
                if _is_id(request_id):  # an agent request: its answer goes back with the session header
                    session_id = stream.session_id or _session_id(message.get("params"))
                    if session_id is not None:
                        self._inbound_routes[request_id] = session_id
            elif _is_id(request_id):
                if request_id in self._attaching:
                    text = await self._settle_attach(request_id, message, text, stream)
                elif request_id in self._detaching:
                    ended = (self._detaching.pop(request_id), "error" not in message)
                lent = self._borrowers.pop(request_id, None)
        await self._inbox.put_waiting(text)  # waits while the inbox is full: the stream stops being read
        # stopped after the answer is queued (the stopped stream may be the one delivering it), from a
        # callback, so its reading task is cancelled even when it is the caller
        if ended is not None:
            asyncio.get_running_loop().call_soon(functools.partial(self._streams.end, ended[0], closed=ended[1]))
        if lent is not None:
            if isinstance(message, dict) and "error" in message:
                asyncio.get_running_loop().call_soon(self._give_back, lent)
            else:
                self._lent.discard(lent)  # the session exists: its stream stays

    async def deliver_plain(self, texts: list[str | Decoded]) -> None:
        """Queue notifications that need no routing (see :meth:`~._streams.MessageSink.deliver_plain`)."""
        await self._inbox.put_all_waiting(texts)

    async def _settle_attach(
        self, request_id: int | str, message: dict[str, Any], text: str, came_on: StreamView
    ) -> str:
        """A load/resume/new answer (read from ``came_on``): make sure the session's stream is open, and its
        replay in, before the result is seen."""
        method, session_id, state_updates = self._attaching.pop(request_id)
        result = message.get("result")
        if "error" in message:
            return text
        if session_id is None and isinstance(result, dict):
            session_id = _session_id(result)
        if session_id is None:
            return text
        stream = self._streams.get(session_id)
        if stream is not None:
            replays = method == "session/load" or self._link.protocol_version == 2  # v1 resume replays nothing
            # a result that came on the session stream itself came after its replay (one stream is in order)
            if method in _ATTACH_METHODS and replays and stream.is_open and came_on is not stream:
                await self._replay_barrier(stream, session_id, method, state_updates)
            return text
        if await self._streams.open(session_id, required=False):
            return text
        if method not in _ATTACH_METHODS:
            _log.warning("http_new_session_stream_refused", transport=self._link.description, session_id=session_id)
            return text
        # the agent accepted the load/resume but its HTTP server will not route the session here
        return _refused_attach(request_id, session_id, self._streams.refusal(session_id))

    async def _replay_barrier(self, stream: StreamView, session_id: str, method: str, state_updates: int) -> None:
        """Hold a load/resume result (connection stream) until its replay (session stream) is in.

        The two streams are separate HTTP requests, so the result can overtake the replay sent before it.
        A v2 ``session/resume`` ends its replay with a ``state_update`` snapshot: wait for it. A v1
        ``session/load`` has no such end, so one is made: a request of this transport's own
        (:data:`REPLAY_BARRIER_METHOD`, with the session's header) whose answer the server routes to the
        session stream. The agent answers it after the load result, so on that stream, which is in order,
        the answer comes after every replayed update: once it is read, the replay is in (no clock: a
        loaded event loop or a slow server delays it, never misorders it). The answer is not handed on.
        Either wait is capped by ``REPLAY_HOLD_MAX`` (a server that routes the answer elsewhere, or an
        agent that never answers, costs that much and no more).
        """
        snapshot = method == "session/resume" and self._link.protocol_version == 2
        if snapshot:
            try:
                async with asyncio.timeout(REPLAY_HOLD_MAX):
                    while stream.state_updates <= state_updates and not self._inbox.failed:
                        await stream.next_message()
            except TimeoutError:
                _log.debug("http_replay_snapshot_not_seen", transport=self._link.description, session=stream.label)
            return
        barrier_id = f"acp-client/replay-barrier/{next(self._barrier_ids)}"
        answered = asyncio.get_running_loop().create_future()
        self._barriers[barrier_id] = answered
        request = {
            "jsonrpc": "2.0",
            "id": barrier_id,
            "method": REPLAY_BARRIER_METHOD,
            "params": {"sessionId": session_id},
        }
        try:
            await self._post(json.dumps(request), session_id, request)
            async with asyncio.timeout(REPLAY_HOLD_MAX):
                await answered
        except TimeoutError:
            _log.warning("http_replay_barrier_not_answered", transport=self._link.description, session=stream.label)
        except ConnectionLost:
            pass  # the link is gone: the result goes on, and recv ends after it
        finally:
            if not answered.done():  # its answer, if it ever comes, is still ours: it is dropped then
                answered.cancel()


def _refused_attach(request_id: int | str, session_id: str, status: int | None) -> str:
    """The JSON-RPC error that replaces a load/resume result whose session stream the server refused."""
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {
                "code": -32002,
                "message": (
                    f"session {session_id} cannot be attached over this HTTP connection: the server "
                    f"refused its session stream (HTTP {status})"
                ),
                "data": {
                    "sessionId": session_id,
                    "transport": "streamable-http",
                    "reason": "session stream refused",
                    "httpStatus": status,
                },
            },
        }
    )

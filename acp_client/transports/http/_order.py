"""Ordering across the streams of a Streamable HTTP link: which session an outgoing message belongs to,
where an agent request's answer goes back, and the barrier that holds a ``session/load``/``session/resume``
result (connection stream) until its replay (session stream) is in, so what the layers above see follows
the agent's order. A session stream is opened before the result of a new/load/resume is handed on."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from acp_client.transports.http._base import (
    _ATTACH_METHODS,
    _CREATE_METHODS,
    _DETACH_METHODS,
    _is_id,
    _log,
    _session_id,
    _Stream,
)
from acp_client.transports.http._streams import _StreamReader

#: A load/resume result waits until its session stream was quiet this long (seconds; see ``_replay_barrier``).
REPLAY_QUIET = 0.05
#: The longest a load/resume result is held back waiting for its replay.
REPLAY_HOLD_MAX = 2.0


class _StreamRouter(_StreamReader):
    """Routes messages between the streams and holds load/resume results behind their replay."""

    def _route_outgoing(self, message: Any) -> str | None:
        """Note what an outgoing message means for routing; return its ``Acp-Session-Id`` (or ``None``)."""
        if not isinstance(message, dict):
            return None
        method = message.get("method")
        if isinstance(method, str):
            session_id = _session_id(message.get("params"))
            request_id = message.get("id")
            if _is_id(request_id) and (method in _ATTACH_METHODS or method in _CREATE_METHODS):
                attached = self._streams.get(session_id) if method in _ATTACH_METHODS else None
                self._attaching[request_id] = (
                    method,
                    session_id if method in _ATTACH_METHODS else None,
                    attached.state_updates if attached is not None else 0,
                )
            if method in _DETACH_METHODS and session_id is not None and session_id in self._streams:
                self._streams[session_id].detached = True
                if _is_id(request_id):
                    self._detaching[request_id] = session_id
            stream = self._streams.get(session_id) if session_id is not None else None
            if stream is not None and stream.opened.done() and not stream.opened.exception():
                return session_id
            return None
        request_id = message.get("id")
        if _is_id(request_id):  # our answer to an agent request: back to the session it came from
            return self._inbound_routes.pop(request_id, None)
        return None

    async def _deliver(self, stream: _Stream, text: str, message: Any) -> None:
        stream.events += 1
        if stream.session_id is not None and isinstance(message, dict) and message.get("method") == "session/update":
            params = message.get("params")
            update = params.get("update") if isinstance(params, dict) else None
            if isinstance(update, dict) and update.get("sessionUpdate") == "state_update":
                stream.state_updates += 1
        stream.changed.set()
        if isinstance(message, dict):
            request_id = message.get("id")
            if "method" in message:
                if _is_id(request_id):  # an agent request: its answer goes back with the session header
                    session_id = stream.session_id or _session_id(message.get("params"))
                    if session_id is not None:
                        self._inbound_routes[request_id] = session_id
            elif _is_id(request_id) and request_id in self._attaching:
                text = await self._settle_attach(request_id, message, text)
            elif _is_id(request_id) and request_id in self._detaching:
                self._end_session_stream(self._detaching.pop(request_id), closed="error" not in message)
        self._inbound.put_nowait(text)

    def _end_session_stream(self, session_id: str, *, closed: bool) -> None:
        """The session was closed or deleted: its stream is no longer needed (on failure it stays)."""
        stream = self._streams.get(session_id)
        if stream is None:
            return
        if not closed:
            stream.detached = False
            return
        del self._streams[session_id]
        if stream.task is not None and stream.task is not asyncio.current_task():
            stream.task.cancel()

    async def _settle_attach(self, request_id: int | str, message: dict[str, Any], text: str) -> str:
        """A load/resume/new answer: make sure the session's stream is open before the result is seen."""
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
            replays = method == "session/load" or self.protocol_version == 2  # v1 resume replays nothing
            if method in _ATTACH_METHODS and replays and stream.opened.done() and not stream.opened.exception():
                await self._replay_barrier(stream, method, state_updates)
            return text
        if await self._open_stream(session_id, required=False):
            return text
        if method not in _ATTACH_METHODS:
            _log.warning("http_new_session_stream_refused", transport=self._description, session_id=session_id)
            return text
        # the agent accepted the load/resume but its HTTP server will not route the session here
        status = self._refusals.get(session_id)
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

    async def _replay_barrier(self, stream: _Stream, method: str, state_updates: int) -> None:
        """Hold a load/resume result (connection stream) until its replay (session stream) is in.

        The two streams are separate HTTP requests, so the result can overtake the replay sent before it.
        A v2 ``session/resume`` ends its replay with a ``state_update`` snapshot: wait for it. Otherwise
        (v1, or an agent without the snapshot) wait until the session stream was quiet for
        ``REPLAY_QUIET`` seconds. Either wait is capped by ``REPLAY_HOLD_MAX``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REPLAY_HOLD_MAX
        snapshot = method == "session/resume" and self.protocol_version == 2
        while self._failure is None:
            if snapshot and stream.state_updates > state_updates:
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                if snapshot:
                    _log.debug("http_replay_snapshot_not_seen", transport=self._description, session=stream.label)
                return
            stream.changed.clear()
            try:
                async with asyncio.timeout(remaining if snapshot else min(remaining, REPLAY_QUIET)):
                    await stream.changed.wait()
            except TimeoutError:
                if not snapshot:
                    return  # quiet long enough

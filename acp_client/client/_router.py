"""The routing of what the agent sends to an :class:`~acp_client.client.ACPClient`: agent requests to the
handlers, updates to the session they name (:class:`InboundRouter`).
"""

from __future__ import annotations

import asyncio
import collections
from typing import TYPE_CHECKING, Any

from acp_client._logging import get_logger
from acp_client.exceptions import ConnectionLost, ProtocolError
from acp_client.handlers import ClientHandlers, dispatch_request
from acp_client.schema import parse_session_update
from acp_client.sessions import SessionLink, SessionRegistry

if TYPE_CHECKING:
    from acp_client.client.connection import Connection

__all__ = ["EARLY_UPDATES", "InboundRouter"]

log = get_logger("acp_client.client")

#: How many updates for a not-yet-registered session are kept while a session/new is outstanding.
EARLY_UPDATES = 256


class InboundRouter:
    """The agent-to-client side of :class:`~acp_client.client.ACPClient` (a mixin): requests go to the
    handlers (a permission request races its session's cancel), updates to the session they name."""

    # provided by ACPClient
    connection: Connection
    handlers: ClientHandlers
    protocol_version: int
    _registry: SessionRegistry
    _permission_waiters: dict[str, set[asyncio.Event]]
    _attaching: set[str]
    _early: collections.deque[tuple[str, dict[str, Any]]]
    _new_pending: int

    async def _on_request(self, method: str, params: Any) -> Any:
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if method != "session/request_permission" or not isinstance(session_id, str):
            return await dispatch_request(self.handlers, method, params)
        # a permission request races the session's cancel: session/cancel answers it "cancelled"
        cancelled = asyncio.Event()
        waiters = self._permission_waiters.setdefault(session_id, set())
        waiters.add(cancelled)
        handler = asyncio.ensure_future(dispatch_request(self.handlers, method, params))
        stop = asyncio.ensure_future(cancelled.wait())
        try:
            await asyncio.wait({handler, stop}, return_when=asyncio.FIRST_COMPLETED)
            if handler.done():
                return handler.result()
            return {"outcome": {"outcome": "cancelled"}}
        finally:
            for task in (handler, stop):
                task.cancel()
            await asyncio.wait({handler, stop})
            waiters.discard(cancelled)
            if not waiters:
                self._permission_waiters.pop(session_id, None)

    def _on_notification(self, method: str, params: Any) -> None:
        if method != "session/update":
            # unknown notifications SHOULD be ignored (custom `_` ones and `elicitation/complete` included)
            self.connection.stats["notifications_ignored"] += 1
            return
        if not isinstance(params, dict):
            self.connection.stats["updates_malformed"] += 1
            return
        session_id = params.get("sessionId")
        session = self._registry.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            # An agent may send updates (available commands, a title) right behind its session/new answer,
            # in the same read: they arrive before the caller registered the session. Keep a few, briefly.
            self.connection.stats["updates_unknown_session"] += 1
            if isinstance(session_id, str) and self._new_pending:
                self._early.append((session_id, params))
                if len(self._early) > EARLY_UPDATES:
                    self._early.popleft()
                    self.connection.stats["early_updates_dropped"] += 1
            return
        if not session._attached_to(self.connection.id) and session.id not in self._attaching:
            # late frames of a connection the session has left (or never joined) reach nothing
            self.connection.stats["updates_other_connection"] += 1
            return
        try:
            # lazy: a text chunk's typed model is built only if someone reads SessionUpdate.update
            event = parse_session_update(params, self.protocol_version, lazy=True)
        except ProtocolError as exc:
            self.connection.stats["updates_malformed"] += 1
            log.warning("update_discarded", session_id=session.id, error=str(exc))
            return
        session._handle_update(event)

    def _detach_all(self) -> None:
        self._on_connection_lost(self.connection.loss or ConnectionLost(reason="closed"))

    def _on_connection_lost(self, loss: ConnectionLost) -> None:
        for session in self._registry:
            if session.link is SessionLink.ATTACHED and session._connection_id in (None, self.connection.id):
                session._move_link(SessionLink.DETACHED, loss=loss)

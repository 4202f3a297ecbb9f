"""The routing of what the agent sends to an :class:`~acp_client.client.ACPClient`: agent requests to the
handlers, updates to the session they name (:class:`InboundRouter`, a part the client composes).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from acp_client._logging import get_logger
from acp_client.exceptions import ConnectionLost, ProtocolError, UsageError
from acp_client.handlers import ClientHandlers, dispatch_request
from acp_client.schema._parse import update_fields
from acp_client.sessions import Attachment, SessionControl, SessionOwner, SessionRegistry

if TYPE_CHECKING:
    from acp_client.client.connection import Connection

__all__ = ["EARLY_UPDATES", "InboundRouter", "UpdateAcceptance"]

log = get_logger("acp_client.client")

#: How many updates for a not-yet-registered session are kept while a session/new is outstanding.
EARLY_UPDATES = 256


class VersionSource(Protocol):
    """Where the router reads the negotiated protocol version (the client: ``0`` before ``initialize``)."""

    @property
    def protocol_version(self) -> int: ...


class UpdateAcceptance:
    """An open window in which an :class:`InboundRouter` routes the updates of one session to it whatever its
    link: while a resume/load is outstanding (its replay), and on after the answer until the session's owner
    moved the link (a recovery builds its outcome first: the updates the agent sends right behind its answer
    must not be dropped meanwhile). Made by :meth:`InboundRouter.accept` (:meth:`ACPClient.accept_updates`);
    the window closes with :meth:`close` (or at the end of a ``with`` block). Windows of one session nest.

    A resume/load made while a window is open reports its answer here (:attr:`attachment`) instead of to
    the session's owner: the one who opened the window applies it (the reconnect layer's recovery outcome
    ``Reattached`` carries it)."""

    __slots__ = ("_open", "_router", "attachment", "connection_id", "session_id")

    def __init__(self, router: InboundRouter, session_id: str, connection_id: int) -> None:
        self._router = router
        self._open = True
        self.session_id = session_id
        #: the connection whose updates the window accepts
        self.connection_id = connection_id
        #: what the agent's answer to a resume/load made in this window settled (``None`` until then)
        self.attachment: Attachment | None = None

    @property
    def open(self) -> bool:
        """``True`` until :meth:`close`."""
        return self._open

    def check(self, session_id: str, connection_id: int) -> None:
        """Raise :class:`UsageError` unless this window is open, for ``session_id`` on ``connection_id``."""
        if not (self._open and (self.session_id, self.connection_id) == (session_id, connection_id)):
            raise UsageError(f"acceptance must be an open accept_updates({session_id!r}) of this connection")

    def close(self) -> None:
        """Stop routing the session's updates here unless it is attached (idempotent)."""
        if self._open:
            self._open = False
            self._router._release(self.session_id)

    def __enter__(self) -> UpdateAcceptance:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InboundRouter:
    """The agent-to-client side of one :class:`~acp_client.client.ACPClient`: requests go to the handlers (a
    permission request races its session's cancel), updates to the session they name.

    It owns what only routing needs: the permission requests waiting per session, the sessions whose
    resume/load is outstanding or not applied yet (their updates are routed here before the link says so),
    and the updates kept for a session id not registered yet while a ``session/new`` is outstanding. The
    client tells it when those begin and end (:meth:`cancel_permissions`, :meth:`accept`,
    :meth:`new_session_pending`); it reads the
    negotiated version from ``versions`` (the client: it is known only after ``initialize``). The client
    makes it before its connection, whose handlers are the router's own methods (no extra call per
    update), and then binds it to that connection (:meth:`bind`).

    It moves no session link: a lost connection is reported to the sessions' ``owner``
    (:meth:`~acp_client.sessions.SessionOwner.detached`), which moves them.
    """

    def __init__(
        self,
        *,
        handlers: ClientHandlers,
        registry: SessionRegistry,
        versions: VersionSource,
        owner: SessionOwner,
    ) -> None:
        self.handlers = handlers
        self._owner = owner
        self._control = SessionControl()
        self._registry = registry
        self._lookup = registry.view.get  # the live view's lookup: no Python call per update
        self._versions = versions
        self._connection: Connection | None = None
        self._connection_id = 0
        self._permission_waiters: dict[str, set[asyncio.Event]] = {}
        # sessions whose updates are routed here whatever their link (a resume/load outstanding, or its
        # answer not applied yet), with how many windows (UpdateAcceptance) are open for each
        self._accepting: dict[str, int] = {}
        # updates for a session id not known yet, kept while a session/new is outstanding (see below)
        self._early: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        self._new_pending = 0

    def bind(self, connection: Connection) -> None:
        """Route what ``connection`` receives (called once, right after the connection was made with this
        router's ``on_request``/``on_notification``/``on_connection_lost`` as its handlers)."""
        if self._connection is not None:
            raise RuntimeError("this router already routes a connection")
        self._connection = connection
        self._connection_id = connection.id

    @property
    def connection(self) -> Connection:
        """The connection whose agent messages this router routes."""
        if self._connection is None:
            raise RuntimeError("the router is not bound to a connection yet")
        return self._connection

    @property
    def protocol_version(self) -> int:
        """The protocol version of the connection (``0`` before ``initialize``)."""
        return self._versions.protocol_version

    @property
    def waiting_permissions(self) -> int:
        """How many permission requests wait for the user (or for their session's cancel) right now."""
        return sum(len(waiters) for waiters in self._permission_waiters.values())

    @property
    def early_updates(self) -> int:
        """How many updates for a not-yet-registered session are kept right now."""
        return len(self._early)

    def cancel_permissions(self, session_id: str) -> None:
        """The session's turn is cancelled: every permission request of it still waiting is answered
        *cancelled* at once."""
        for waiter in list(self._permission_waiters.get(session_id, ())):
            waiter.set()

    def accept(self, session_id: str) -> UpdateAcceptance:
        """Open a window in which the updates of ``session_id`` are routed to it whatever its link (see
        :class:`UpdateAcceptance`); close it when the session's link says the same or the attempt ended."""
        self._accepting[session_id] = self._accepting.get(session_id, 0) + 1
        return UpdateAcceptance(self, session_id, self._connection_id)

    def _release(self, session_id: str) -> None:
        left = self._accepting.get(session_id, 0) - 1
        if left > 0:
            self._accepting[session_id] = left
        else:
            self._accepting.pop(session_id, None)

    @contextlib.contextmanager
    def new_session_pending(self) -> Iterator[None]:
        """While a ``session/new`` is outstanding, updates for an unknown session id are kept (a few): the
        agent may send them right behind its answer, before the caller registered the session."""
        self._new_pending += 1
        try:
            yield
        finally:
            self._new_pending -= 1
            if not self._new_pending:
                self._early.clear()

    def deliver_early(self, session_id: str) -> None:
        """``session_id`` was just registered: route the updates kept for it, in their order."""
        early = [update for sid, update in self._early if sid == session_id]
        if early:
            self._early = collections.deque(e for e in self._early if e[0] != session_id)
            self.connection.stats["updates_unknown_session"] -= len(early)
            for update in early:
                self.on_notification("session/update", update)

    async def on_request(self, method: str, params: Any) -> Any:
        """Serve one agent request (``session/request_permission`` races its session's cancel)."""
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

    def on_notification(self, method: str, params: Any) -> None:
        """Route one agent notification: a ``session/update`` to the session it names; others are ignored."""
        if method != "session/update":
            # unknown notifications SHOULD be ignored (custom `_` ones and `elicitation/complete` included)
            self.connection.stats["notifications_ignored"] += 1
            return
        if not isinstance(params, dict):
            self.connection.stats["updates_malformed"] += 1
            return
        session_id = params.get("sessionId")
        session = self._lookup(session_id) if isinstance(session_id, str) else None
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
        if not self._control.attached_to(session, self._connection_id) and session_id not in self._accepting:
            # late frames of a connection the session has left (or never joined) reach nothing
            self.connection.stats["updates_other_connection"] += 1
            return
        raw: Any = params.get("update")
        try:
            # the envelope and the session id are checked above: only the update object is left to check
            # (lazy: a text chunk's typed model is built only if someone reads SessionUpdate.update)
            kind, update, version = update_fields(raw, self._versions.protocol_version, lazy=True)
        except ProtocolError as exc:
            self.connection.stats["updates_malformed"] += 1
            log.warning("update_discarded", session_id=session_id, error=str(exc))
            return
        self._control.deliver(session, kind, update, raw, version)

    def detach_all(self) -> None:
        """The client closed the connection: its attached sessions become detached."""
        self.on_connection_lost(self.connection.loss or ConnectionLost(reason="closed"))

    def on_connection_lost(self, loss: ConnectionLost) -> None:
        """The link ended: every session attached to it is reported detached to its owner, carrying ``loss``."""
        connection_id = self.connection.id
        for session in self._registry:
            if self._control.attached_to(session, connection_id):
                self._owner.detached(session, loss)

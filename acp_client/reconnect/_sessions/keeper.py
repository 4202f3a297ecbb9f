"""The sessions a :class:`~acp_client.ReconnectingClient` keeps.

:class:`SessionKeeper` is the reconnect layer's one writer of the client's
:class:`~acp_client.sessions.SessionRegistry` (the per-connection :class:`~acp_client.ACPClient` the
client lends it to registers the sessions it creates or attaches), of the per-session strategies, and of
the store (through the :class:`~acp_client.reconnect._sessions.store_writer.StoreWriter`). It is the host the
:class:`~acp_client.reconnect._recovery.recoverer.SessionRecoverer` reports outcomes to.

The manual control of their recovery (``recover()``, ``forget()``) is
:class:`~acp_client.reconnect._calls.recovery_control.RecoveryControl`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping

from acp_client.client import ACPClient
from acp_client.handlers import ClientHandlers
from acp_client.reconnect._sessions.links import Forgotten, Outcome, Reattached, SessionLinks
from acp_client.reconnect._sessions.store_writer import StoreWriter
from acp_client.reconnect.strategy import RecoveryStrategy
from acp_client.sessions import (
    Session,
    SessionControl,
    SessionLink,
    SessionOwner,
    SessionRecord,
    SessionRegistry,
)

__all__ = ["SessionKeeper"]

_GONE = (SessionLink.LOST, SessionLink.CLOSED)
_SESSIONS = SessionControl()  # reads only: whether a session is attached, or usable


class SessionKeeper:
    """The registry, the strategies and the store writes of one client (see the module docstring)."""

    def __init__(
        self,
        registry: SessionRegistry,
        *,
        writer: StoreWriter,
        links: SessionLinks,
        strategy: RecoveryStrategy,
        owner: SessionOwner,
        handlers: ClientHandlers,
    ) -> None:
        self._registry = registry
        self._handlers = handlers
        self._writer = writer
        self._links = links
        self._strategy = strategy
        self._strategies: dict[str, RecoveryStrategy] = {}
        self._owner = owner

    def __len__(self) -> int:
        return len(self._registry)

    def __iter__(self) -> Iterator[Session]:
        return iter(self._registry)

    @property
    def view(self) -> Mapping[str, Session]:
        """The sessions by id (read-only live view)."""
        return self._registry.view

    def get(self, session_id: str) -> Session | None:
        """The handle of ``session_id``, or ``None``."""
        return self._registry.get(session_id)

    # ------------------------------------------------------------------ strategies

    def strategy_for(self, session_id: str) -> RecoveryStrategy:
        """The strategy that decides for ``session_id`` (its own, or the client's)."""
        return self._strategies.get(session_id, self._strategy)

    def set_strategy(self, session_id: str, strategy: RecoveryStrategy | None) -> None:
        """Use ``strategy`` for one session (``None`` returns it to the client's strategy)."""
        if strategy is None:
            self._strategies.pop(session_id, None)
        else:
            self._strategies[session_id] = strategy

    # ------------------------------------------------------------------ registry writes

    def load(self, records: Iterable[SessionRecord]) -> list[str]:
        """Make handles for the stored records this client does not know yet. A closed record (a tombstone
        left by a close that may not have finished) gets no handle: its id is forgotten here. Returns those
        ids, for the caller to remove from the store."""
        closed: list[str] = []
        for record in records:
            if record.closed:
                self._registry.forget(record.session_id)
                closed.append(record.session_id)
            elif record.session_id not in self._registry:
                self._registry.add(Session(self._owner, record))
        return closed

    def adopt(self, records: Iterable[SessionRecord]) -> list[Session]:
        """Handles for records adopted from another worker: a detached handle is re-used (it takes the last
        owner's view of the record), a final one replaced; ids forgotten here on purpose are skipped."""
        sessions: list[Session] = []
        for record in records:
            if record.closed:  # the last owner was closing it: never resumed again
                self._registry.forget(record.session_id)
                continue
            session = self._registry.get(record.session_id)
            if session is None or session.link in _GONE:
                session = Session(self._owner, record)
                if not self._registry.add(session):
                    continue  # forgotten here on purpose
            else:
                self._links.adopt(session, record)
            sessions.append(session)
        return sessions

    async def closing(self, session_id: str) -> None:
        """The application is closing or deleting the session: from now on nothing resumes, loads or probes
        it. A registry tombstone (a late answer cannot revive it), the handle turns closed, and the store keeps
        a closed record until :meth:`closed` (so a restart in between does not resume it either)."""
        session = self._registry.forget(session_id)
        self._strategies.pop(session_id, None)
        if session is not None:
            self._links.move(session, SessionLink.CLOSED)
            record = dataclasses.replace(session.record, closed=True)
            await self._writer.save(record)

    async def closed(self, session_id: str) -> None:
        """The agent confirmed the close: the store forgets the session."""
        await self._writer.delete(session_id)

    async def drop(self, session_id: str) -> None:
        """The application closed or deleted the session (its close confirmed): tombstone, handle closed,
        record deleted."""
        await self.closing(session_id)
        await self.closed(session_id)

    async def forget_handle(self, session: Session, reason: str, via: str | None, generation: int) -> None:
        """Forget ``session`` for good (registry tombstone, store, handle); exactly one event. The caller
        has stopped its recovery job (or is that job)."""
        if self._registry.get(session.id) is not session:
            return  # already forgotten, closed, or replaced
        self._registry.forget(session.id)
        self._strategies.pop(session.id, None)
        self._links.apply(session, Forgotten(reason, via, generation))
        await self._writer.delete(session.id)
        await self._handlers.session_ended(session.id)  # the handlers free what they hold for it (terminals)

    async def forget_id(self, session_id: str) -> None:
        """Forget an id this client holds no handle for (a tombstone, and out of the store)."""
        self._registry.forget(session_id)
        await self._writer.delete(session_id)

    def close_all(self) -> None:
        """The client closes: every handle not already final turns closed."""
        for session in self._registry:
            self._links.move(session, SessionLink.CLOSED)

    async def persist(self, session: Session) -> None:
        """Store the record of a session this client created, attached or changed (never raises)."""
        await self._writer.save(session.record)

    # ------------------------------------------------------------------ the recovery host

    def report(self, session: Session, outcome: Outcome) -> None:
        """A recovery outcome for ``session`` (its link, marker and event, see :class:`SessionLinks`)."""
        self._links.apply(session, outcome)

    def move(self, session: Session, link: SessionLink) -> None:
        """Move a session's link outside of an outcome (a recovery starts or loses its connection)."""
        self._links.move(session, link)

    async def save_record(self, session: Session) -> None:
        """Store a session's record if this client still keeps it (never raises: a store fault is
        reported and retried)."""
        if self._registry.get(session.id) is session:
            await self._writer.save(session.record)

    def stream_resumed(
        self, client: ACPClient | None, session_id: str | None, generation: int, how: str | None = None
    ) -> None:
        """A transport resumed its stream (Streamable HTTP with ``Last-Event-ID``, WebSocket with
        ``stream/resume``): nothing was re-initialized or missed. Reported for its session, or (a
        connection-scoped stream) for every session attached on ``client``'s connection, as
        ``SessionRecovered(path="stream_resumed", stream_resumption=how)`` plus a marker."""
        if client is None:
            return
        connection_id = client.connection.id
        if session_id is None:
            sessions = [s for s in self._registry if self._links.attached_to(s, connection_id)]
        else:
            one = self._registry.get(session_id)
            sessions = [one] if one is not None and self._links.attached_to(one, connection_id) else []
        for session in sessions:
            resumed = Reattached(
                "reattached",
                "resume",
                False,
                False,
                None,
                generation,
                "stream_resumed",
                how or "resumed with Last-Event-ID",
            )
            self._links.apply(session, resumed)

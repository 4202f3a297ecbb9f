"""The client side of session ownership: :class:`ClientHost` (a ReconnectingClient as the ownership
manager sees it) and :class:`OwnershipControl` (``owner_id``, ``release()``, ``adopt()``), plus reading an
agent's "attached elsewhere" answer. The manager itself is in
:mod:`acp_client.reconnect._ownership.leases`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from acp_client._logging import get_logger
from acp_client.client import ACPClient
from acp_client.exceptions import SessionLost, SessionNotFound, UsageError
from acp_client.reconnect._events import ClientState, Event
from acp_client.reconnect._ownership.leases import SessionOwnership
from acp_client.reconnect._roles import ConnectionView, Forgetting, Recovery, TaskSpawner
from acp_client.reconnect._sessions.links import SessionLinks, TakenOver
from acp_client.reconnect.dialects import DEFAULT_DIALECTS, SessionDialects
from acp_client.sessions import Session, SessionLink, SessionRecord

if TYPE_CHECKING:
    from acp_client.reconnect._sessions.keeper import SessionKeeper

__all__ = ["ClientHost", "OwnershipControl", "attached_elsewhere"]

_GONE = (SessionLink.LOST, SessionLink.CLOSED)

log = get_logger("acp_client.reconnect")


def attached_elsewhere(error: BaseException, dialects: SessionDialects = DEFAULT_DIALECTS) -> bool:
    """Whether an agent's error answer to a session call may mean the session is attached to another
    connection (the reference agent: ``-32602`` with ``data.reason`` "... not attached to this connection";
    qwen-code: ``-32023``, ``data.errorKind`` ``"session_writer_unavailable"``).

    ACP does not name this error, so agents word it differently; :class:`SessionDialects` says what is read
    (a bare "attached", as in "attached file too large", is not). A false positive costs one store lookup
    and, the lease being still ours, a re-attach; a false negative leaves the caller with the agent's error.
    """
    return dialects.read(error) == "elsewhere"


class ClientHost:
    """A :class:`~acp_client.ReconnectingClient` as the ownership manager sees it (:class:`OwnershipHost`),
    made of the client's parts: the session keeper, the recovery jobs and the connection loop's view."""

    def __init__(
        self,
        keeper: SessionKeeper,
        *,
        control: Forgetting,
        recovery: Recovery,
        connection: ConnectionView,
        links: SessionLinks,
        emit: Callable[[Event], None],
        tasks: TaskSpawner,
        probe_timeout: float = 10.0,
        probe_concurrency: int = 8,
    ) -> None:
        self._keeper = keeper
        self._control = control
        self._recovery = recovery
        self._connection = connection
        self._links = links
        self._emit = emit
        self._tasks = tasks
        self._probe_timeout = probe_timeout
        self._probe_concurrency = probe_concurrency

    def known_sessions(self) -> Mapping[str, Session]:
        """The client's session handles by id."""
        return self._keeper.view

    def emit(self, event: Event) -> None:
        """Report through the client's event bus."""
        self._emit(event)

    async def detach_taken_over(self, session_id: str, reason: str) -> None:
        """Cancel the session's recovery and turn its handle detached; a prompt waiting for its turn fails
        with ``ConnectionLost`` (its outcome is for the new owner to see)."""
        session = self._keeper.get(session_id)
        if session is None:
            return
        await self._recovery.cancel(session_id)
        self._links.apply(session, TakenOver(reason))

    async def recover_adopted(self, records: list[SessionRecord]) -> None:
        """Register adopted sessions (re-using a detached handle) and recover them now if connected."""
        await self._recover(self._keeper.adopt(records))

    async def _recover(self, sessions: list[Session]) -> None:
        connection = self._connection
        live = connection.live_client()
        if live is None or connection.state not in (ClientState.READY, ClientState.RECOVERING):
            for session in sessions:
                if session.link is not SessionLink.RECOVERING:
                    self._links.move(session, SessionLink.DETACHED)  # the next connection's round recovers it
            connection.notify_changed()
            return
        todo = [s for s in sessions if not self._links.attached_to(s, live.connection.id)]
        if todo:
            # in a task of the client's: the lease renewals must never wait for a recovery round
            self._tasks.spawn(self._round(live, todo), "acp-recover-adopted")

    async def _round(self, live: ACPClient, sessions: list[Session]) -> None:
        self._emit(await self._recovery.run_round(live, sessions, self._connection.generation))

    async def reconcile(self, session_ids: list[str]) -> None:
        """Probe the attached sessions with ``session/status`` (forget the ones the agent no longer knows)
        and recover the others."""
        live = self._connection.live_client()
        sessions = [s for sid in session_ids if (s := self._keeper.get(sid)) is not None and s.link not in _GONE]
        if live is None:
            return
        detached = [s for s in sessions if not self._links.attached_to(s, live.connection.id)]
        attached = [s for s in sessions if self._links.attached_to(s, live.connection.id)]
        if attached and live.supports("status"):
            limit = asyncio.Semaphore(self._probe_concurrency)

            async def probe(session: Session) -> None:
                async with limit:
                    try:
                        await live.session_status(session.id, timeout=self._probe_timeout)
                    except SessionNotFound:
                        await self._control.stop_and_forget(session, "unknown", "session/status")
                    except Exception as exc:  # the link, a timeout: the next reconnect probes it anyway
                        log.info("acp.reconcile_probe_failed", session_id=session.id, error=str(exc))

            await asyncio.gather(*(probe(s) for s in attached))
        await self._recover(detached)


class OwnershipControl:
    """The several-workers part of :class:`~acp_client.ReconnectingClient`: ``owner_id``, ``release()``
    and ``adopt()``."""

    def __init__(
        self, ownership: SessionOwnership | None, *, keeper: SessionKeeper, recover: Callable[[str], Awaitable[Session]]
    ) -> None:
        self._ownership = ownership
        self._keeper = keeper
        self._recover = recover

    @property
    def owner_id(self) -> str | None:
        """This worker's id in a shared store (``None`` with a store of one process)."""
        return self._ownership.owner_id if self._ownership is not None else None

    async def release(self, session_id: str) -> bool:
        """Hand a session over on purpose; see :meth:`~acp_client.ReconnectingClient.release`."""
        return await self._require_ownership().release(session_id)

    async def adopt(self, session_id: str) -> Session:
        """Take a session over on purpose; see :meth:`~acp_client.ReconnectingClient.adopt`."""
        ownership = self._require_ownership()
        await ownership.adopt(session_id)
        if self._keeper.get(session_id) is None:
            raise SessionLost(session_id, "forgotten by this client")
        return await self._recover(session_id)  # joins the recovery the adoption started

    def _require_ownership(self) -> SessionOwnership:
        if self._ownership is None:
            raise UsageError("release/adopt need a store shared by several workers (RedisSessionStore)")
        return self._ownership  # its methods raise UsageError until start() has started it

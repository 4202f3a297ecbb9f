"""The client side of session ownership: :class:`ClientHost` (a ReconnectingClient as the ownership
manager sees it) and :class:`OwnershipAPI` (``owner_id``, ``release()``, ``adopt()`` and the hooks its
session calls use), plus reading an agent's "attached elsewhere" answer. The manager itself is in
:mod:`acp_client.reconnect._ownership`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from acp_client._logging import get_logger
from acp_client.exceptions import ConnectionLost, LeaseLost, RPCError, SessionLost, SessionNotFound, UsageError
from acp_client.reconnect._ownership import _GONE, SessionOwnership
from acp_client.sessions import RecoveryMarker, Session, SessionLink, SessionRecord

__all__ = ["ClientHost", "OwnershipAPI", "attached_elsewhere"]

log = get_logger("acp_client.reconnect")


#: Error codes an agent may use to refuse a call for a session attached to another connection (ACP names
#: none: invalid params, internal error, invalid request).
_ELSEWHERE_CODES = frozenset({-32602, -32603, -32600})
#: Words that say so, in the message or in ``data.reason`` / ``data.message``.
_ELSEWHERE_WORDS = re.compile(
    r"\b(?:not|already) attached\b|\battached (?:to|on|by) (?:another|a different|some other)\b"
    r"|\b(?:another|a different|some other) (?:connection|client)\b",
    re.IGNORECASE,
)


def attached_elsewhere(error: BaseException) -> bool:
    """Whether an agent's error answer to a session call may mean the session is attached to another
    connection (the reference agent: ``-32602`` with ``data.reason`` "... not attached to this connection").

    ACP does not name this error, so agents word it differently: a ``-32602``, ``-32603`` or ``-32600``
    whose message or ``data.reason``/``data.message`` says "not attached", "already attached", "attached to
    another ..." or "another/a different connection (client)" is read this way (a bare "attached", as in
    "attached file too large", is not). A false positive costs one store lookup and, the lease being still
    ours, a re-attach; a false negative leaves the caller with the agent's error.
    """
    if not isinstance(error, RPCError) or error.code not in _ELSEWHERE_CODES:
        return False
    texts: list[object] = [error.message]
    if isinstance(error.data, dict):
        texts += [error.data.get("reason"), error.data.get("message")]
    elif isinstance(error.data, str):
        texts.append(error.data)
    return any(isinstance(text, str) and _ELSEWHERE_WORDS.search(text) is not None for text in texts)


class ClientHost:
    """Adapts a :class:`~acp_client.ReconnectingClient` to :class:`OwnershipHost` (it reaches into the
    client's registry and recoverer, the way its own modules do)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def known_sessions(self) -> Mapping[str, Session]:
        """The client's session handles by id."""
        view: Mapping[str, Session] = self._client._registry.view
        return view

    def emit(self, event: Any) -> None:
        """Report through the client's event bus."""
        self._client._emit(event)

    async def detach_taken_over(self, session_id: str, reason: str) -> None:
        """Cancel the session's recovery and turn its handle detached; a prompt waiting for its turn fails
        with ``ConnectionLost`` (its outcome is for the new owner to see)."""
        client = self._client
        session = client._registry.get(session_id)
        if session is None:
            return
        await client._recoverer.cancel(session_id)
        text = f"session {session_id} is served by another worker now ({reason})"
        session._detach(ConnectionLost(text, request_sent=True, reason=reason))
        session._mark(RecoveryMarker(session_id, "taken_over", reason=reason))
        client._notify_changed()

    async def recover_adopted(self, records: list[SessionRecord]) -> None:
        """Register adopted sessions (re-using a detached handle) and recover them now if connected."""
        client = self._client
        sessions: list[Session] = []
        for record in records:
            session = client._registry.get(record.session_id)
            if session is None or session.link in _GONE:
                session = Session(client, record)
                if not client._registry.add(session):
                    continue  # forgotten here on purpose
            else:
                session.record = record  # the last owner's view of it
            sessions.append(session)
        await self._recover(sessions)

    async def _recover(self, sessions: list[Session]) -> None:
        client = self._client
        live = client._live_client()
        if live is None or client.state.value not in ("ready", "recovering"):
            for session in sessions:
                if session.link is not SessionLink.RECOVERING:
                    session._set_link(SessionLink.DETACHED)  # the next connection's round recovers it
            client._notify_changed()
            return
        todo = [s for s in sessions if not s._attached_to(live.connection.id)]
        if todo:
            # in a task of the client's: the lease renewals must never wait for a recovery round
            client._spawn(self._round(live, todo), "acp-recover-adopted")

    async def _round(self, live: Any, sessions: list[Session]) -> None:
        client = self._client
        client._emit(await client._recoverer.run_round(live, sessions, client.generation))

    async def reconcile(self, session_ids: list[str]) -> None:
        """Probe the attached sessions with ``session/status`` (forget the ones the agent no longer knows)
        and recover the others."""
        client = self._client
        live = client._live_client()
        sessions = [s for sid in session_ids if (s := client._registry.get(sid)) is not None and s.link not in _GONE]
        if live is None:
            return
        detached = [s for s in sessions if not s._attached_to(live.connection.id)]
        attached = [s for s in sessions if s._attached_to(live.connection.id)]
        if attached and live.supports("status"):
            limit = asyncio.Semaphore(client._limits.probe_concurrency)

            async def probe(session: Session) -> None:
                async with limit:
                    try:
                        await live.session_status(session.id, timeout=client._timeouts.probe)
                    except SessionNotFound:
                        await client._forget_session(session, "unknown", "session/status")
                    except Exception as exc:  # the link, a timeout: the next reconnect probes it anyway
                        log.info("acp.reconcile_probe_failed", session_id=session.id, error=str(exc))

            await asyncio.gather(*(probe(s) for s in attached))
        await self._recover(detached)


class OwnershipAPI:
    """The several-workers part of :class:`~acp_client.ReconnectingClient` (a mixin): ``owner_id``,
    ``release()``, ``adopt()``, and the hooks its session calls use."""

    # provided by ReconnectingClient
    _ownership: SessionOwnership | None
    _registry: Any

    if TYPE_CHECKING:  # provided by ReconnectingClient and its other mixins

        def _notify_changed(self) -> None: ...

        def _spawn(self, coro: Any, name: str) -> None: ...

        async def recover(self, session_id: str) -> Session: ...

    @property
    def owner_id(self) -> str | None:
        """This worker's id in a shared store (``None`` with a store of one process)."""
        return self._ownership.owner_id if self._ownership is not None else None

    async def release(self, session_id: str) -> bool:
        """Hand a session over on purpose: give up its lease (other workers may adopt it at once) and stop
        serving it here: the handle turns detached, ``SessionTakenOver(reason="released")`` is reported,
        and calls on it raise ``LeaseLost``. The agent is not told. ``False`` if this worker did not hold
        the lease. Needs a shared store (:class:`~acp_client.sessions.RedisSessionStore`)."""
        return await self._require_ownership().release(session_id)

    async def adopt(self, session_id: str) -> Session:
        """Take a session over on purpose: claim its lease (``LeaseLost`` while another worker holds it)
        and recover it on this worker's connection; returns its handle. Needs a shared store."""
        ownership = self._require_ownership()
        await ownership.adopt(session_id)
        if self._registry.get(session_id) is None:
            raise SessionLost(session_id, "forgotten by this client")
        return await self.recover(session_id)  # joins the recovery the adoption started

    def _require_ownership(self) -> SessionOwnership:
        if self._ownership is None:
            raise UsageError("release/adopt need a store shared by several workers (RedisSessionStore)")
        return self._ownership  # its methods raise UsageError until start() has started it

    def _check_serving(self, session: Session) -> None:
        """Raise ``LeaseLost`` for a session another worker serves now (no round trip)."""
        if self._ownership is not None:
            self._ownership.check_serving(session.id)

    async def _on_session_error(self, session: Session, error: RPCError) -> None:
        """A session call failed. If the agent says the session is attached to another connection, ask the
        store who owns it: another worker → the handle turns detached and ``LeaseLost`` is raised; this one
        → the session is re-attached in the background and the caller gets the agent's error."""
        ownership = self._ownership
        if ownership is None or not attached_elsewhere(error):
            return
        if await ownership.attached_elsewhere(session.id):
            raise LeaseLost(session.id, "attached_elsewhere") from error
        session._set_link(SessionLink.DETACHED)
        self._notify_changed()
        self._spawn(self._recover_quietly(session.id), f"acp-reattach-{session.id}")

    async def _recover_quietly(self, session_id: str) -> None:
        try:
            await self.recover(session_id)
        except Exception as exc:  # reported as a recovery event already, or the client is closing
            log.info("acp.reattach_after_error_failed", session_id=session_id, error=str(exc))

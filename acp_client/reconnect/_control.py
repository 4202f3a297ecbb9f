"""Manual control of sessions and the recovery host of a :class:`~acp_client.ReconnectingClient`.

A mixin: strategies per session, ``recover()`` (which joins the running recovery job rather than starting
a second one), ``forget()`` (final: the job is cancelled, a tombstone keeps the session from coming back),
and the hooks the :class:`~acp_client.reconnect._recoverer.SessionRecoverer` reports through.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from acp_client.exceptions import RecoveryFailed, SessionLost
from acp_client.reconnect._events import SessionForgotten, SessionRecovered
from acp_client.reconnect.strategy import RecoveryStrategy
from acp_client.sessions import RecoveryMarker, Session, SessionLink

if TYPE_CHECKING:
    from acp_client.client import ACPClient
    from acp_client.reconnect._events import EventBus
    from acp_client.reconnect._recoverer import SessionRecoverer
    from acp_client.reconnect._store_writer import StoreWriter
    from acp_client.reconnect.options import Timeouts
    from acp_client.sessions import SessionRegistry

__all__ = ["RecoveryControl"]


class RecoveryControl:
    """Per-session control and the recovery host (see the module docstring)."""

    # provided by ReconnectingClient
    _registry: SessionRegistry
    _recoverer: SessionRecoverer
    _writer: StoreWriter
    _bus: EventBus
    _strategy: RecoveryStrategy
    _strategies: dict[str, RecoveryStrategy]
    _generation: int
    _timeouts: Timeouts
    _client: ACPClient | None

    def _notify_changed(self) -> None:
        raise NotImplementedError

    async def wait_ready(self, timeout: float | None = None, *, first: bool = False) -> None:
        raise NotImplementedError

    async def _require_client(self) -> ACPClient:
        raise NotImplementedError

    if TYPE_CHECKING:  # provided by OwnershipAPI (a stub here would shadow it in the MRO)

        def _check_serving(self, session: Session) -> None: ...

    def _emit(self, event: Any) -> None:
        """Deliver an event (the recoverer and the store writer report through here)."""
        self._bus.emit(event)


    def strategy_for(self, session_id: str) -> RecoveryStrategy:
        """The strategy that decides for ``session_id`` (its own, or the client's)."""
        return self._strategies.get(session_id, self._strategy)

    def set_strategy(self, session_id: str, strategy: RecoveryStrategy | None) -> None:
        """Use ``strategy`` for one session (``None`` returns it to the client's strategy)."""
        if strategy is None:
            self._strategies.pop(session_id, None)
        else:
            self._strategies[session_id] = strategy

    async def _save_session_record(self, session: Session) -> None:
        """Store a recovered session's record (never raises: a store fault is reported and retried)."""
        if self._registry.get(session.id) is session:
            await self._writer.save(session.record)

    async def _forget_session(self, session: Session, reason: str, via: str | None) -> None:
        """Forget ``session`` for good (registry tombstone, store, handle); exactly one event."""
        await self._recoverer.cancel(session.id)
        if self._registry.get(session.id) is not session:
            return  # already forgotten, closed, or replaced
        self._registry.forget(session.id)
        self._strategies.pop(session.id, None)
        session._mark(RecoveryMarker(session.id, "lost", reason=reason))
        session._terminate(SessionLink.LOST, SessionLost(session.id, reason))
        self._bus.emit(SessionForgotten(session.id, reason, via, self._generation))
        self._notify_changed()
        await self._writer.delete(session.id)

    async def recover(self, session_id: str) -> Session:
        """Probe and recover one session now on the current connection; returns its handle.

        Joins a recovery already running for it (cutting its backoff short) rather than starting a second
        one. Raises ``SessionLost`` if it was forgotten, ``RecoveryFailed`` if it could not be attached.
        """
        session = self._registry.get(session_id)
        if session is None:
            raise SessionLost(session_id, "not known to this client")
        self._check_serving(session)  # another worker serves it: LeaseLost, never re-attached from here
        await self.wait_ready(timeout=self._timeouts.session_wait)
        client = await self._require_client()
        if not session._attached_to(client.connection.id):
            async with asyncio.timeout(self._timeouts.session_wait):
                await self._recoverer.recover_now(client, session, self._generation)
        session._check_usable()
        if not session._attached_to(client.connection.id):
            raise RecoveryFailed(session_id)
        return session

    async def forget(self, session_id: str) -> None:
        """Forget a session locally (client and store) for good; the agent is not told (use close/delete).

        Whatever its recovery is doing, nothing more is sent for it and a late answer is discarded.
        """
        session = self._registry.get(session_id)
        if session is not None:
            await self._forget_session(session, "application", None)
        else:
            await self._recoverer.cancel(session_id)
            self._registry.forget(session_id)
            await self._writer.delete(session_id)

    def _stream_resumed(self, session_id: str | None) -> None:
        """A Streamable HTTP event stream was resumed with ``Last-Event-ID``: nothing was re-initialized or
        missed. Reported for its session, or (the connection-scoped stream) for every session attached on
        the current connection, as ``SessionRecovered(path="stream_resumed")`` plus a marker in the stream."""
        client = self._client
        if client is None:
            return
        connection_id = client.connection.id
        if session_id is None:
            sessions = [s for s in self._registry if s._attached_to(connection_id)]
        else:
            one = self._registry.get(session_id)
            sessions = [one] if one is not None and one._attached_to(connection_id) else []
        for session in sessions:
            self._bus.emit(
                SessionRecovered(
                    session.id, "reattached", "resume", False, False, None, session.state, self._generation,
                    path="stream_resumed",
                )
            )
            session._mark(RecoveryMarker(session.id, "reattached", "resume", path="stream_resumed"))

"""The manual control of a :class:`~acp_client.ReconnectingClient`'s session recovery.

:class:`RecoveryControl` is ``recover()`` (which joins the running recovery job rather than starting a
second one) and ``forget()`` (final: the job is cancelled, a tombstone keeps the session from coming back).
"""

from __future__ import annotations

import asyncio

from acp_client.exceptions import RecoveryFailed, SessionLost
from acp_client.reconnect._calls.gate import ClientGate
from acp_client.reconnect._roles import ConnectionView, Recovery
from acp_client.reconnect._sessions.keeper import SessionKeeper
from acp_client.sessions import Session, SessionControl

__all__ = ["RecoveryControl"]

_SESSIONS = SessionControl()  # reads only: whether a session is attached, or usable


class RecoveryControl:
    """``recover()`` and ``forget()`` of one client (see the module docstring)."""

    def __init__(
        self,
        keeper: SessionKeeper,
        *,
        recovery: Recovery,
        connection: ConnectionView,
        gate: ClientGate,
        session_wait_timeout: float,
    ) -> None:
        self._keeper = keeper
        self._recovery = recovery
        self._connection = connection
        self._gate = gate
        self._session_wait_timeout = session_wait_timeout

    async def recover(self, session_id: str) -> Session:
        """Probe and recover one session now; see :meth:`~acp_client.ReconnectingClient.recover`."""
        session = self._keeper.get(session_id)
        if session is None:
            raise SessionLost(session_id, "not known to this client")
        self._gate.check_serving(session)  # another worker serves it: LeaseLost, never re-attached from here
        await self._connection.wait_ready(timeout=self._session_wait_timeout)
        client = await self._gate.require()
        if not _SESSIONS.attached_to(session, client.connection.id):
            async with asyncio.timeout(self._session_wait_timeout):
                await self._recovery.recover_now(client, session, self._connection.generation)
        _SESSIONS.check_usable(session)
        if not _SESSIONS.attached_to(session, client.connection.id):
            raise RecoveryFailed(session_id)
        return session

    async def forget(self, session_id: str) -> None:
        """Forget a session for good; see :meth:`~acp_client.ReconnectingClient.forget`."""
        await self._recovery.cancel(session_id)
        session = self._keeper.get(session_id)
        if session is not None:
            await self._keeper.forget_handle(session, "application", None, self._connection.generation)
        else:
            await self._keeper.forget_id(session_id)

    async def stop_and_forget(self, session: Session, reason: str, via: str | None) -> None:
        """Stop ``session``'s recovery job and forget it (the ownership host's reconcile uses this)."""
        await self._recovery.cancel(session.id)
        await self._keeper.forget_handle(session, reason, via, self._connection.generation)

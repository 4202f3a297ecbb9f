"""When a call of a :class:`~acp_client.ReconnectingClient` may go out, and on which connection.

Calls never go out on a dead link: they wait for the next connection (``wait_for_ready=True``) or raise
:class:`~acp_client.exceptions.NotConnected` at once, and a session call also waits until its session is
re-attached. :class:`ClientGate` holds that rule; it reads the loop's state and writes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from acp_client._logging import get_logger
from acp_client.client import ACPClient
from acp_client.exceptions import ClientClosed, ConnectionLost, NotConnected, RecoveryFailed
from acp_client.reconnect._events import ClientState
from acp_client.reconnect._ownership.leases import SessionOwnership
from acp_client.reconnect._roles import ConnectionView, Recovery
from acp_client.sessions import Session, SessionControl, SessionLink

__all__ = ["ClientGate"]

log = get_logger("acp_client.reconnect")

_T = TypeVar("_T")

_S = ClientState
_SESSIONS = SessionControl()  # reads only: whether a session is attached, or usable
# states in which a call waits for the next connection (with wait_for_ready) or fails at once
_WAITING = (_S.IDLE, _S.CONNECTING, _S.INITIALIZING, _S.BACKOFF, _S.SUSPENDED)


class ClientGate:
    """Hands out the per-connection client a call may use (see the module docstring)."""

    def __init__(
        self,
        connection: ConnectionView,
        *,
        recovery: Recovery,
        ownership: SessionOwnership | None,
        wait_for_ready: bool,
        session_wait_timeout: float,
    ) -> None:
        self._connection = connection
        self._recovery = recovery
        self._ownership = ownership
        self._wait_for_ready = wait_for_ready
        self._session_wait_timeout = session_wait_timeout

    def usable(self) -> ACPClient | None:
        """The client a call may use now; ``None`` to wait; raises when waiting cannot help."""
        connection = self._connection
        state = connection.state
        if state is ClientState.CLOSED:
            raise ClientClosed("the client was closed")
        failure = connection.failure
        if state is ClientState.FAILED and failure is not None:
            raise failure
        live = connection.live_client()
        if live is not None and state in (ClientState.READY, ClientState.RECOVERING):
            return live
        if not self._wait_for_ready and connection.running and state in _WAITING:
            raise NotConnected(f"no connection to the agent right now ({state.value}); nothing was sent")
        return None

    async def require(self) -> ACPClient:
        """The client a call may use, waiting up to ``session_wait_timeout`` for one."""
        try:
            async with asyncio.timeout(self._session_wait_timeout):
                while True:
                    changed = self._connection.changed()
                    live = self.usable()
                    if live is not None:
                        return live
                    await changed.wait()
        except TimeoutError:
            raise NotConnected(
                f"no connection to the agent within {self._session_wait_timeout:g} s ({self._connection.state.value})"
            ) from None

    async def read_only(self, call: Callable[[ACPClient], Awaitable[_T]]) -> _T:
        """Run a side-effect-free call; if the link drops under it, run it once more on the next connection."""
        try:
            return await call(await self.require())
        except ConnectionLost:
            log.info("acp.idempotent_call_retried", generation=self._connection.generation)
            await self._connection.wait_ready(timeout=self._session_wait_timeout)  # the next connection, not this one
            return await call(await self.require())

    async def attached(self, session: Session, method: str) -> ACPClient:
        """The client ``session`` is attached on, waiting up to ``session_wait_timeout`` for its
        re-attachment (``RecoveryFailed`` if its recovery gave up, ``LeaseLost`` if another worker serves
        it now)."""
        try:
            async with asyncio.timeout(self._session_wait_timeout):
                while True:
                    changed = self._connection.changed()
                    _SESSIONS.check_usable(session)
                    self.check_serving(session)
                    client = self.usable()
                    if client is not None and _SESSIONS.attached_to(session, client.connection.id):
                        return client
                    idle = client is not None and not self._recovery.busy(session.id)
                    if idle and session.link in (SessionLink.FAILED, SessionLink.DETACHED):
                        raise RecoveryFailed(session.id)
                    await changed.wait()
        except TimeoutError:
            raise NotConnected(
                f"session {session.id} was not re-attached within {self._session_wait_timeout:g} s: "
                f"{method} was never sent"
            ) from None

    def check_serving(self, session: Session) -> None:
        """Raise ``LeaseLost`` for a session another worker serves now (no round trip)."""
        if self._ownership is not None:
            self._ownership.check_serving(session.id)

"""The calls a :class:`~acp_client.ReconnectingClient`'s sessions send: each goes out on the current connection.

:class:`SessionCalls` is the :class:`~acp_client.sessions.SessionOwner` side of the client (its sessions reach it
through a small owner object the client hands them): it sends their calls, and passes what its per-connection
clients report (attached, connection lost, closed) to :class:`~acp_client.reconnect._sessions.links.SessionLinks`,
the one writer of their links. The :class:`~acp_client.reconnect._calls.gate.ClientGate` says when a call may go out
(once the session is re-attached on a live connection); an agent's "attached elsewhere" answer is looked into here. The
client's own ACP calls (``new_session()``, ``session_status()`` ...) are defined on the client itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from acp_client._logging import get_logger
from acp_client.exceptions import ConnectionLost, LeaseLost, RPCError
from acp_client.reconnect._calls.gate import ClientGate
from acp_client.reconnect._ownership.control import attached_elsewhere
from acp_client.reconnect._ownership.leases import SessionOwnership
from acp_client.reconnect._roles import TaskSpawner
from acp_client.reconnect._sessions.links import SessionLinks
from acp_client.reconnect.dialects import DEFAULT_DIALECTS, SessionDialects
from acp_client.sessions import Attachment, Session, SessionLink

__all__ = ["SessionCalls"]

log = get_logger("acp_client.reconnect")


class SessionCalls:
    """The sessions' calls of one reconnecting client (see the module docstring)."""

    def __init__(
        self,
        gate: ClientGate,
        *,
        links: SessionLinks,
        ownership: SessionOwnership | None,
        recover: Callable[[str], Awaitable[Session]],
        tasks: TaskSpawner,
        dialects: SessionDialects = DEFAULT_DIALECTS,
    ) -> None:
        self._gate = gate
        self._dialects = dialects
        self._links = links
        self._ownership = ownership
        self._recover = recover
        self._tasks = tasks

    async def session_request(
        self, session: Session, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> Any:
        """Send a session's request once it is attached; an "attached elsewhere" answer is looked into."""
        client = await self._gate.attached(session, method)
        try:
            return await client.connection.request(method, params, timeout=timeout)
        except RPCError as exc:
            await self._on_session_error(session, exc)  # "attached elsewhere": LeaseLost or a re-attach
            raise

    async def session_notify(self, session: Session, method: str, params: dict[str, Any]) -> None:
        """Send a session's notification (``session/cancel``) once it is attached."""
        client = await self._gate.attached(session, method)
        if method == "session/cancel":
            await client.cancel(session.id)  # also answers the session's waiting permission requests
        else:
            await client.notify(method, params)

    async def wait_attached(self, session: Session, method: str, timeout: float) -> float:
        """Wait at most ``timeout`` seconds (``TimeoutError``; ``session_wait_timeout`` bounds it too) until
        ``session`` is attached on a live connection; returns what is left of ``timeout``."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with asyncio.timeout(timeout):
            await self._gate.attached(session, method)
        return max(0.0, timeout - (loop.time() - started))

    def attached(self, session: Session, attachment: Attachment) -> None:
        """A per-connection client created or attached ``session`` (see :meth:`SessionLinks.attached`)."""
        self._links.attached(session, attachment)

    def detached(self, session: Session, loss: ConnectionLost) -> None:
        """A per-connection client lost the connection ``session`` was attached on."""
        self._links.detached(session, loss)

    def closed(self, session: Session) -> None:
        """A per-connection client saw ``session`` closed or deleted by the agent."""
        self._links.closed(session)

    async def _on_session_error(self, session: Session, error: RPCError) -> None:
        """A session call failed. If the agent says the session is attached to another connection, ask the
        store who owns it: another worker → ``LeaseLost`` is raised; this one → the session is re-attached
        in the background and the caller gets the agent's error."""
        ownership = self._ownership
        if ownership is None or not attached_elsewhere(error, self._dialects):
            return
        if await ownership.attached_elsewhere(session.id):
            raise LeaseLost(session.id, "attached_elsewhere") from error
        self._links.move(session, SessionLink.DETACHED)
        self._tasks.spawn(self._recover_quietly(session.id), f"acp-reattach-{session.id}")

    async def _recover_quietly(self, session_id: str) -> None:
        try:
            await self._recover(session_id)
        except Exception as exc:  # reported as a recovery event already, or the client is closing
            log.info("acp.reattach_after_error_failed", session_id=session_id, error=str(exc))

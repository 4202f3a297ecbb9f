"""The ACP calls of a :class:`~acp_client.ReconnectingClient`: each goes out on the current connection.

:class:`SessionCalls` sends the client's calls and its sessions' calls (the client is their
:class:`~acp_client.sessions.SessionOwner` and hands them on). The :class:`~acp_client.reconnect._gate.ClientGate`
says when a call may go out; only side-effect-free calls (``session/status``) are retried once after a drop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from acp_client._logging import get_logger
from acp_client.client import ACPClient, SessionInfo
from acp_client.exceptions import ConnectionLost, LeaseLost, RPCError, SessionLost
from acp_client.reconnect._auth import Reauthentication
from acp_client.reconnect._control import SessionKeeper
from acp_client.reconnect._gate import ClientGate
from acp_client.reconnect._links import SessionLinks
from acp_client.reconnect._ownership import SessionOwnership
from acp_client.reconnect._ownership_client import attached_elsewhere
from acp_client.reconnect._roles import ConnectionView, Recovery, TaskSpawner
from acp_client.reconnect.dialects import DEFAULT_DIALECTS, SessionDialects
from acp_client.schema import SessionStatusResponse
from acp_client.sessions import Session, SessionLink

__all__ = ["SessionCalls"]

log = get_logger("acp_client.reconnect")

_T = TypeVar("_T")


class SessionCalls:
    """The client's ACP calls and its sessions' calls (see the module docstring)."""

    def __init__(
        self,
        gate: ClientGate,
        *,
        connection: ConnectionView,
        keeper: SessionKeeper,
        recovery: Recovery,
        links: SessionLinks,
        ownership: SessionOwnership | None,
        recover: Callable[[str], Awaitable[Session]],
        tasks: TaskSpawner,
        session_wait_timeout: float,
        dialects: SessionDialects = DEFAULT_DIALECTS,
        auth: Reauthentication | None = None,
    ) -> None:
        self._gate = gate
        self._auth = auth
        self._dialects = dialects
        self._connection = connection
        self._keeper = keeper
        self._recovery = recovery
        self._links = links
        self._ownership = ownership
        self._recover = recover
        self._tasks = tasks
        self._session_wait_timeout = session_wait_timeout

    # ------------------------------------------------------------------ a session's calls

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
        await client._session_notify(session, method, params)

    async def wait_attached(self, session: Session, method: str, timeout: float) -> float:
        """Wait at most ``timeout`` seconds (``TimeoutError``; ``session_wait_timeout`` bounds it too) until
        ``session`` is attached on a live connection; returns what is left of ``timeout``."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with asyncio.timeout(timeout):
            await self._gate.attached(session, method)
        return max(0.0, timeout - (loop.time() - started))

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

    # ------------------------------------------------------------------ the ACP API

    async def new_session(
        self,
        cwd: str | os.PathLike[str],
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str | os.PathLike[str]] | None = None,
        timeout: float | None = 30.0,
        meta: Mapping[str, Any] | None = None,
    ) -> Session:
        """Create a session on the current connection; it is stored and recovered after every drop.

        ``meta`` is stored with the session record (JSON-serialisable application data, e.g. a title or the
        user it belongs to); strategies can read it as ``record.meta``.
        """
        client = await self._gate.require()
        session = await client.new_session(
            cwd, mcp_servers=mcp_servers, additional_directories=additional_directories, timeout=timeout
        )
        if meta:
            session.record.meta.update(meta)
        await self._keeper.persist(session)
        return session

    async def resume_session(
        self,
        session_id: str,
        cwd: str | os.PathLike[str],
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str | os.PathLike[str]] | None = None,
        replay: bool = False,
        timeout: float | None = 60.0,
    ) -> Session:
        """Attach an existing session (``session/resume``) and keep it recovered from now on."""
        client = await self._gate.require()
        session = await client.resume_session(
            session_id,
            cwd,
            mcp_servers=mcp_servers,
            additional_directories=additional_directories,
            replay=replay,
            timeout=timeout,
        )
        await self._keeper.persist(session)
        return session

    async def load_session(
        self,
        session_id: str,
        cwd: str | os.PathLike[str],
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str | os.PathLike[str]] | None = None,
        timeout: float | None = 60.0,
    ) -> Session:
        """v1 ``session/load`` an existing session and keep it recovered from now on."""
        client = await self._gate.require()
        session = await client.load_session(
            session_id, cwd, mcp_servers=mcp_servers, additional_directories=additional_directories, timeout=timeout
        )
        await self._keeper.persist(session)
        return session

    async def _idempotent(self, call: Callable[[ACPClient], Awaitable[_T]]) -> _T:
        """Run a read-only call; if the link drops under it, run it once more on the next connection."""
        try:
            return await call(await self._gate.require())
        except ConnectionLost:
            log.info("acp.idempotent_call_retried", generation=self._connection.generation)
            await self._connection.wait_ready(timeout=self._session_wait_timeout)  # the next connection, not this one
            return await call(await self._gate.require())

    async def session_status(
        self, session_id: str, *, timeout: float | None = 10.0
    ) -> SessionStatusResponse:
        """``session/status`` on the current connection (side-effect free, so retried once after a drop)."""
        return await self._idempotent(lambda c: c.session_status(session_id, timeout=timeout))

    def list_sessions(
        self, cwd: str | None = None, *, timeout: float | None = 30.0
    ) -> AsyncIterator[SessionInfo]:
        """``session/list`` over every page, on the current connection."""

        async def pages() -> AsyncIterator[SessionInfo]:
            client = await self._gate.require()
            async for info in client.list_sessions(cwd, timeout=timeout):
                yield info

        return pages()

    async def close_session(self, session_id: str, *, timeout: float | None = 30.0) -> None:
        """``session/close`` and forget the session locally (it leaves the store)."""
        await self._recovery.cancel(session_id)
        await (await self._gate.require()).close_session(session_id, timeout=timeout)
        await self._keeper.drop(session_id)

    async def delete_session(self, session_id: str, *, timeout: float | None = 30.0) -> None:
        """``session/delete`` and forget the session locally (it leaves the store)."""
        await self._recovery.cancel(session_id)
        await (await self._gate.require()).delete_session(session_id, timeout=timeout)
        await self._keeper.drop(session_id)

    async def save_session(self, session: Session) -> None:
        """Persist the session's record now (after changing ``session.record.meta``, for example)."""
        if self._keeper.get(session.id) is not session:
            raise SessionLost(session.id, "not known to this client any more")
        await self._keeper.persist(session)

    async def authenticate(self, method_id: str, *, timeout: float | None = 30.0) -> None:
        """Authenticate on the current connection (``authenticate`` / ``auth/login``)."""
        await (await self._gate.require()).authenticate(method_id, timeout=timeout)
        if self._auth is not None:
            self._auth.chose(method_id)  # and on every new connection from now on

    async def request(
        self, method: str, params: Any = None, *, timeout: float | None = 30.0
    ) -> Any:
        """Send any request on the current connection (escape hatch); never re-sent after a drop."""
        return await (await self._gate.require()).request(method, params, timeout=timeout)

"""The ACP calls of a :class:`~acp_client.ReconnectingClient`: each goes out on the current connection.

A mixin, so the connection loop (``_client.py``) stays about the loop. Calls never go out on a dead link:
they wait for the next connection (``wait_for_ready=True``) or raise :class:`NotConnected` at once. Only
side-effect-free calls (``session/status``) are retried once after a drop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from acp_client._logging import get_logger
from acp_client.client import ACPClient, SessionInfo
from acp_client.exceptions import (
    ClientClosed,
    ConnectionLost,
    NotConnected,
    ReconnectFailed,
    RecoveryFailed,
    RPCError,
    SessionLost,
)
from acp_client.reconnect._events import ClientState
from acp_client.schema import SessionStatusResponse
from acp_client.sessions import Session, SessionLink

if TYPE_CHECKING:
    from acp_client.reconnect._recoverer import SessionRecoverer
    from acp_client.reconnect._store_writer import StoreWriter
    from acp_client.reconnect.options import Timeouts
    from acp_client.reconnect.strategy import RecoveryStrategy
    from acp_client.sessions import SessionRegistry

__all__ = ["SessionAPI"]

log = get_logger("acp_client.reconnect")

_S = ClientState
# states in which a call waits for the next connection (with wait_for_ready) or fails at once
_WAITING = (_S.IDLE, _S.CONNECTING, _S.INITIALIZING, _S.BACKOFF, _S.SUSPENDED)


class SessionAPI:
    """Session calls and the :class:`~acp_client.sessions.SessionOwner` hooks of the reconnecting client."""

    # provided by ReconnectingClient
    _client: ACPClient | None
    _state: ClientState
    _failure: ReconnectFailed | None
    _wait_for_ready: bool
    _task: asyncio.Task[None] | None
    _timeouts: Timeouts
    _recoverer: SessionRecoverer
    _registry: SessionRegistry
    _writer: StoreWriter
    _strategies: dict[str, RecoveryStrategy]
    _generation: int

    @property
    def state(self) -> ClientState:
        """The current lifecycle state."""
        return self._state

    def _changed_event(self) -> asyncio.Event:
        raise NotImplementedError

    def _live_client(self) -> ACPClient | None:
        """The current per-connection client, unless its connection already died (the loop has not
        noticed yet: a call must wait for the next one rather than go out on a dead link)."""
        client = self._client
        return client if client is not None and not client.connection.closed else None

    def _usable_client(self) -> ACPClient | None:
        """The client a call may use now; ``None`` to wait; raises when waiting cannot help."""
        if self._state is ClientState.CLOSED:
            raise ClientClosed("the client was closed")
        if self._state is ClientState.FAILED and self._failure is not None:
            raise self._failure
        live = self._live_client()
        if live is not None and self._state in (ClientState.READY, ClientState.RECOVERING):
            return live
        if not self._wait_for_ready and self._task is not None and self._state in _WAITING:
            raise NotConnected(f"no connection to the agent right now ({self._state.value}); nothing was sent")
        return None

    async def wait_ready(self, timeout: float | None = None, *, first: bool = False) -> None:
        raise NotImplementedError

    if TYPE_CHECKING:  # provided by OwnershipAPI (a stub here would shadow it in the MRO)

        def _check_serving(self, session: Session) -> None: ...

        async def _on_session_error(self, session: Session, error: RPCError) -> None: ...

    # ------------------------------------------------------------------ SessionOwner

    async def _require_client(self) -> ACPClient:
        try:
            async with asyncio.timeout(self._timeouts.session_wait):
                while True:
                    changed = self._changed_event()
                    live = self._usable_client()
                    if live is not None:
                        return live
                    await changed.wait()
        except TimeoutError:
            raise NotConnected(
                f"no connection to the agent within {self._timeouts.session_wait:g} s ({self.state.value})"
            ) from None

    async def _attached_client(self, session: Session, method: str) -> ACPClient:
        try:
            async with asyncio.timeout(self._timeouts.session_wait):
                while True:
                    changed = self._changed_event()
                    session._check_usable()
                    self._check_serving(session)  # another worker serves it now: LeaseLost
                    client = self._usable_client()
                    if client is not None and session._attached_to(client.connection.id):
                        return client
                    idle = client is not None and not self._recoverer.busy(session.id)
                    if idle and session.link in (SessionLink.FAILED, SessionLink.DETACHED):
                        raise RecoveryFailed(session.id)
                    await changed.wait()
        except TimeoutError:
            raise NotConnected(
                f"session {session.id} was not re-attached within {self._timeouts.session_wait:g} s: "
                f"{method} was never sent"
            ) from None

    async def _session_request(
        self, session: Session, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> Any:
        client = await self._attached_client(session, method)
        try:
            return await client.connection.request(method, params, timeout=timeout)
        except RPCError as exc:
            await self._on_session_error(session, exc)  # "attached elsewhere": LeaseLost or a re-attach
            raise

    async def _session_notify(self, session: Session, method: str, params: dict[str, Any]) -> None:
        client = await self._attached_client(session, method)
        await client._session_notify(session, method, params)

    # ------------------------------------------------------------------ the ACP API

    async def new_session(
        self,
        cwd: str,
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str] | None = None,
        timeout: float | None = 30.0,
        meta: Mapping[str, Any] | None = None,
    ) -> Session:
        """Create a session on the current connection; it is stored and recovered after every drop.

        ``meta`` is stored with the session record (JSON-serialisable application data, e.g. a title or the
        user it belongs to); strategies can read it as ``record.meta``.
        """
        client = await self._require_client()
        session = await client.new_session(
            cwd, mcp_servers=mcp_servers, additional_directories=additional_directories, timeout=timeout
        )
        if meta:
            session.record.meta.update(meta)
        await self._writer.save(session.record)
        return session

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str] | None = None,
        replay: bool = False,
        timeout: float | None = 60.0,
    ) -> Session:
        """Attach an existing session (``session/resume``) and keep it recovered from now on."""
        client = await self._require_client()
        session = await client.resume_session(
            session_id,
            cwd,
            mcp_servers=mcp_servers,
            additional_directories=additional_directories,
            replay=replay,
            timeout=timeout,
        )
        await self._writer.save(session.record)
        return session

    async def load_session(
        self,
        session_id: str,
        cwd: str,
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str] | None = None,
        timeout: float | None = 60.0,
    ) -> Session:
        """v1 ``session/load`` an existing session and keep it recovered from now on."""
        client = await self._require_client()
        session = await client.load_session(
            session_id, cwd, mcp_servers=mcp_servers, additional_directories=additional_directories, timeout=timeout
        )
        await self._writer.save(session.record)
        return session

    async def _idempotent(self, call: Callable[[ACPClient], Awaitable[Any]]) -> Any:
        """Run a read-only call; if the link drops under it, run it once more on the next connection."""
        try:
            return await call(await self._require_client())
        except ConnectionLost:
            log.info("acp.idempotent_call_retried", generation=self._generation)
            await self.wait_ready(timeout=self._timeouts.session_wait)  # the next connection, not this one
            return await call(await self._require_client())

    async def session_status(
        self, session_id: str, *, timeout: float | None = 10.0
    ) -> SessionStatusResponse:
        """``session/status`` on the current connection (side-effect free, so retried once after a drop)."""
        result: SessionStatusResponse = await self._idempotent(lambda c: c.session_status(session_id, timeout=timeout))
        return result

    def list_sessions(
        self, cwd: str | None = None, *, timeout: float | None = 30.0
    ) -> AsyncIterator[SessionInfo]:
        """``session/list`` over every page, on the current connection."""

        async def pages() -> AsyncIterator[SessionInfo]:
            client = await self._require_client()
            async for info in client.list_sessions(cwd, timeout=timeout):
                yield info

        return pages()

    async def close_session(self, session_id: str, *, timeout: float | None = 30.0) -> None:
        """``session/close`` and forget the session locally (it leaves the store)."""
        await self._recoverer.cancel(session_id)
        await (await self._require_client()).close_session(session_id, timeout=timeout)
        await self._drop_local(session_id)

    async def delete_session(self, session_id: str, *, timeout: float | None = 30.0) -> None:
        """``session/delete`` and forget the session locally (it leaves the store)."""
        await self._recoverer.cancel(session_id)
        await (await self._require_client()).delete_session(session_id, timeout=timeout)
        await self._drop_local(session_id)

    async def _drop_local(self, session_id: str) -> None:
        session = self._registry.remove(session_id)
        if session is not None and session.link not in (SessionLink.LOST, SessionLink.CLOSED):
            session._terminate(SessionLink.CLOSED, None)
        self._strategies.pop(session_id, None)
        await self._writer.delete(session_id)

    async def save_session(self, session: Session) -> None:
        """Persist the session's record now (after changing ``session.record.meta``, for example)."""
        if self._registry.get(session.id) is not session:
            raise SessionLost(session.id, "not known to this client any more")
        await self._writer.save(session.record)

    async def authenticate(self, method_id: str, *, timeout: float | None = 30.0) -> None:
        """Authenticate on the current connection (``authenticate`` / ``auth/login``)."""
        await (await self._require_client()).authenticate(method_id, timeout=timeout)

    async def request(
        self, method: str, params: Any = None, *, timeout: float | None = 30.0
    ) -> Any:
        """Send any request on the current connection (escape hatch); never re-sent after a drop."""
        return await (await self._require_client()).request(method, params, timeout=timeout)

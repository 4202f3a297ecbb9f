"""The bridge's remote side: the :class:`ReconnectingClient` behind it, and waiting out its outages.

:class:`RemoteSide` holds what the bridge's request routes and lifecycle share about the remote: getting the
client (nudging it to reconnect now when the editor is waiting), bounding a wait by ``outage_timeout``, the
transport factory with the raw tap on it, re-authentication on each new connection, and the store hook
(:class:`_HookedStore`) through which a session is adopted the moment the client saves it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from acp_client._logging import get_logger
from acp_client.bridge._forward import SessionPipes
from acp_client.bridge._options import BridgeOptions
from acp_client.bridge._tap import RawTap
from acp_client.client import ACPClient
from acp_client.exceptions import InvalidRequest
from acp_client.reconnect import ClientState, ReconnectingClient, SessionForgotten, StateChanged
from acp_client.sessions import SessionRecord, SessionStore
from acp_client.transports import Transport

log = get_logger("acp_client.bridge")

T = TypeVar("T")


class _HookedStore:
    """A session store that reports every save first (synchronously), then delegates.

    ``ReconnectingClient`` saves a session right after creating or attaching it, before it hands back the
    handle; subscribing at that moment means no update published afterwards can be missed.
    """

    def __init__(self, inner: SessionStore, on_save: Callable[[SessionRecord], None]) -> None:
        self._inner = inner
        self._on_save = on_save

    def __repr__(self) -> str:
        return f"<bridge store {self._inner!r}>"

    async def load_all(self) -> list[SessionRecord]:
        return await self._inner.load_all()

    async def save(self, record: SessionRecord) -> None:
        self._on_save(record)
        await self._inner.save(record)

    async def delete(self, session_id: str) -> None:
        await self._inner.delete(session_id)

    async def close(self) -> None:
        await self._inner.close()


class RemoteSide:
    """The remote side of a :class:`~acp_client.bridge.Bridge` (a base class: the bridge sets the state)."""

    options: BridgeOptions
    _rc: ReconnectingClient | None
    _tap: RawTap
    _pipes: SessionPipes
    _auth_method: str | None

    def _protocol_version(self) -> int:
        return self._rc.protocol_version if self._rc is not None else 1

    def _remote(self) -> ReconnectingClient:
        rc = self._rc
        if rc is None:
            raise InvalidRequest(-32600, "Invalid request", {"reason": "send initialize first"})
        if rc.state.value in ("failed", "suspended"):
            rc.reconnect_now()  # the editor wants the remote again: try once more now (still bounded)
        elif rc.state is ClientState.BACKOFF:
            rc.notify_network_changed()  # someone is waiting: try now instead of at the end of the backoff
        return rc

    def _transport_factory(self) -> Callable[[], Awaitable[Transport]]:
        """What the client opens on every (re)connect: the transport its own options describe (headers, ping,
        cookies, ...), with the tap on it."""
        from acp_client.client._connect import open_transport

        async def open_remote() -> Transport:
            assert self._rc is not None
            return self._tap.wrap(await open_transport(self.options.url, self._rc.transport_options))

        return open_remote

    async def _reauthenticate(self, client: ACPClient) -> None:
        if self._auth_method is not None:
            await client.authenticate(self._auth_method, timeout=self.options.outage_timeout)

    def _on_saved(self, record: SessionRecord) -> None:
        rc = self._rc
        session = rc.sessions.get(record.session_id) if rc is not None else None
        pipe = self._pipes.get(record.session_id)
        if session is not None and (pipe is None or pipe.session is not session):
            # a session the editor just created or attached: subscribe before anything more arrives
            self._pipes.adopt(session, opened=True, preload=self._tap.release(record.session_id))
            log.debug("bridge_session_adopted", session_id=record.session_id, via="store_save")

    async def _watch(self, rc: ReconnectingClient) -> None:
        async for event in rc.events():
            if isinstance(event, StateChanged):
                log.info("bridge_remote_state", old=event.old.value, new=event.new.value, reason=event.reason)
                if event.new is ClientState.FAILED:
                    log.error("bridge_remote_failed", reason=event.reason)
            elif isinstance(event, SessionForgotten):
                log.warning("bridge_session_forgotten", session_id=event.session_id, reason=event.reason)

    async def _bounded(self, call: Awaitable[T]) -> T:
        """Wait for the link (and the session) at most ``outage_timeout`` seconds."""
        async with asyncio.timeout(self.options.outage_timeout):
            return await call

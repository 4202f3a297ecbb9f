"""The bridge's remote side: the :class:`ReconnectingClient` behind it, and waiting out its outages.

:class:`RemoteSide` owns the client and what the bridge's routes and lifecycle need of it: making and
starting it, getting it (nudging it to reconnect now when the editor is waiting), bounding a wait by
``outage_timeout``, the transport factory with the raw tap on it, re-authentication on each new connection,
and the store hook (:class:`_HookedStore`) through which the routes adopt a session the moment the client
saves it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Literal, Protocol, TypeVar

from acp_client._logging import get_logger
from acp_client.bridge._handlers import EditorHandlers
from acp_client.bridge._options import BridgeOptions, BridgeStrategy
from acp_client.bridge._tap import RawTap
from acp_client.client import ACPClient
from acp_client.exceptions import InvalidRequest
from acp_client.reconnect import Backoff, ClientState, ReconnectingClient, SessionForgotten, StateChanged, Timeouts
from acp_client.sessions import Session, SessionRecord, SessionStore
from acp_client.transports import Transport, TransportOptions

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


class SessionAdopter(Protocol):
    """Whom the remote side tells that the client saved a session (the bridge's routes)."""

    def adopt_saved(self, record: SessionRecord) -> None: ...


class RemoteSide:
    """The remote side of a :class:`~acp_client.bridge.Bridge`: it owns the :class:`ReconnectingClient` (made
    by :meth:`make` when the editor initializes) and the authentication method replayed on every new
    connection. The routes reach it through :class:`~acp_client.bridge._routes.Remote`."""

    def __init__(self, options: BridgeOptions, tap: RawTap) -> None:
        self._options = options
        self._tap = tap
        self._rc: ReconnectingClient | None = None
        self._auth_method: str | None = None

    def __repr__(self) -> str:
        return f"<bridge remote {self._rc!r}>"

    @property
    def started(self) -> bool:
        """``True`` once the editor's ``initialize`` made the client."""
        return self._rc is not None

    def protocol_version(self) -> int:
        """The protocol version spoken with the remote (1 before it was negotiated)."""
        return self._rc.protocol_version if self._rc is not None else 1

    def client(self) -> ReconnectingClient:
        """The client, nudged to reconnect now if it is waiting (the editor is)."""
        rc = self._rc
        if rc is None:
            raise InvalidRequest(-32600, "Invalid request", {"reason": "send initialize first"})
        if rc.state.value in ("failed", "suspended"):
            rc.reconnect_now()  # the editor wants the remote again: try once more now (still bounded)
        elif rc.state is ClientState.BACKOFF:
            rc.notify_network_changed()  # someone is waiting: try now instead of at the end of the backoff
        return rc

    def known_session(self, session_id: str) -> Session | None:
        """The client's handle of ``session_id`` (no nudge)."""
        return self._rc.sessions.get(session_id) if self._rc is not None else None

    def remember_auth(self, method_id: str | None) -> None:
        """The editor logged in with ``method_id`` (``None``: logged out): replay it on every new connection."""
        self._auth_method = method_id

    def make(
        self,
        *,
        handlers: EditorHandlers,
        store: SessionStore,
        adopter: SessionAdopter,
        protocol: Literal[1, "auto"],
        client_info: dict[str, str] | None,
    ) -> ReconnectingClient:
        """Make the client (``store`` hooked so every save reaches ``adopter`` first); the caller starts it."""
        options = self._options
        rc = ReconnectingClient(
            self._transport_factory(),
            handlers=handlers,
            store=_HookedStore(store, adopter.adopt_saved),
            strategy=BridgeStrategy(),
            backoff=Backoff(base=0.25, cap=options.max_backoff),
            protocol_version=protocol,
            timeouts=Timeouts(request=None, initialize=options.connect_timeout, session_wait=options.outage_timeout),
            transport_options=TransportOptions(
                headers=list(options.headers) or None,
                open_timeout=min(10.0, options.connect_timeout),
                close_timeout=2.0,
                ping_interval=options.ping_interval,
                ping_timeout=options.ping_timeout,
                max_frame_bytes=options.max_frame_bytes,
            ),
            wait_for_ready=True,
            wire_log=options.wire_log,
            on_auth_required=self._reauthenticate,
            client_info=client_info,
        )
        self._rc = rc
        return rc

    async def aclose(self) -> None:
        """Close the client (the sessions stay in the store)."""
        if self._rc is not None:
            await self._rc.aclose()

    def _transport_factory(self) -> Callable[[], Awaitable[Transport]]:
        """What the client opens on every (re)connect: the transport its own options describe (headers, ping,
        cookies, ...), with the tap on it."""
        from acp_client.client._connect import open_transport

        async def open_remote() -> Transport:
            assert self._rc is not None
            return self._tap.wrap(await open_transport(self._options.url, self._rc.transport_options))

        return open_remote

    async def _reauthenticate(self, client: ACPClient) -> None:
        if self._auth_method is not None:
            await client.authenticate(self._auth_method, timeout=self._options.outage_timeout)

    async def watch(self, rc: ReconnectingClient) -> None:
        """Log the client's state changes and forgotten sessions (until it is closed)."""
        async for event in rc.events():
            if isinstance(event, StateChanged):
                log.info("bridge_remote_state", old=event.old.value, new=event.new.value, reason=event.reason)
                if event.new is ClientState.FAILED:
                    log.error("bridge_remote_failed", reason=event.reason)
            elif isinstance(event, SessionForgotten):
                log.warning("bridge_session_forgotten", session_id=event.session_id, reason=event.reason)

    async def bounded(self, call: Awaitable[T]) -> T:
        """Wait for the link (and the session) at most ``outage_timeout`` seconds."""
        async with asyncio.timeout(self._options.outage_timeout):
            return await call

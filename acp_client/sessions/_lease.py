"""Ownership of sessions shared by several worker processes: leases, fencing tokens, and the store protocol."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from acp_client.sessions._store import SessionRecord, SessionStore

__all__ = ["Lease", "Renewal", "SharedSessionStore", "StoredSession"]


@dataclass(frozen=True, slots=True)
class Lease:
    """The right of one worker (``owner``) to serve one session until the lease expires.

    ``token`` is the fencing token: it grows every time the session changes hands, and the store rejects a
    write that carries an older token than the one it last accepted. ``expires_at`` is a conservative local
    deadline on :func:`time.monotonic` (measured from *before* the claim or renewal was sent), so a worker
    that cannot reach the store knows when it must stop assuming it still owns the session.
    """

    session_id: str
    owner: str
    token: int
    expires_at: float

    def expired(self, now: float | None = None) -> bool:
        """Whether the local deadline has passed (``now`` defaults to ``time.monotonic()``)."""
        return (time.monotonic() if now is None else now) >= self.expires_at


@dataclass(frozen=True, slots=True)
class Renewal:
    """What one :meth:`SharedSessionStore.renew_all` found.

    ``renewed`` are the sessions whose leases were extended; ``lost`` the ones this worker no longer holds
    (expired, taken by another worker, or gone with the store's data); ``store_reset`` is ``True`` when the
    store lost its data since the last call (a server restarted without persistence): every lease is then
    lost and the records must be written again (:meth:`SharedSessionStore.reclaim`).
    """

    renewed: frozenset[str]
    lost: frozenset[str]
    store_reset: bool = False


@dataclass(frozen=True, slots=True)
class StoredSession:
    """One session as a shared store holds it, for an operator's view
    (:meth:`~acp_client.sessions.RedisSessionStore.describe`).

    ``owner`` is the worker holding its lease (``None``: free, any worker may adopt it), ``token`` that
    lease's fencing token, ``expires_in`` the seconds the lease has left on the server's clock (with the
    Redis store: its holder's heartbeat in the session's key group; ``None`` without a live lease);
    ``fence`` is the session's fencing counter (the last token handed out); ``record`` the stored record
    (``None`` if it is missing or could not be read).
    """

    session_id: str
    owner: str | None
    token: int | None
    expires_in: float | None
    fence: int
    record: SessionRecord | None


@runtime_checkable
class SharedSessionStore(SessionStore, Protocol):
    """A :class:`SessionStore` several worker processes share, with one lease per session.

    A worker may write (``save``/``delete``) only the sessions it holds a lease on; the store rejects other
    writes with :class:`~acp_client.exceptions.LeaseLost`. ``save`` of a session that nobody holds claims
    it first (a new session belongs to its creator). Store errors are retried inside the store for a
    bounded time and then raised as :class:`~acp_client.exceptions.StoreUnavailable`.
    """

    @property
    def owner_id(self) -> str:
        """This worker's identity in the store (unique among live workers)."""
        ...

    @property
    def lease_ttl(self) -> float:
        """Seconds a lease lasts without renewal."""
        ...

    def lease(self, session_id: str) -> Lease | None:
        """The lease this worker believes it holds on ``session_id`` (no round trip), else ``None``."""
        ...

    async def claim(self, session_id: str) -> Lease | None:
        """Take the session's lease if nobody else holds it (idempotent for the holder); ``None`` if held."""
        ...

    async def claimable(self) -> list[str]:
        """Sessions in the store that no worker holds a lease on (a store may return them a page at a time:
        the next call finds the rest)."""
        ...

    async def load_owned(
        self,
        *,
        want: Callable[[str], bool] | None = None,
        ids: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[SessionRecord]:
        """Claim the unheld sessions ``want`` accepts (all when ``None``; at most ``limit`` of them) and
        return the records this worker holds afterwards; with ``ids``, only those sessions (claimed if
        free), without a scan."""
        ...

    async def renew_all(self) -> Renewal:
        """Extend every lease this worker holds; report the ones it lost."""
        ...

    async def release(self, session_id: str) -> bool:
        """Give the session's lease up (the record stays, another worker may claim it at once)."""
        ...

    async def reclaim(self, records: Iterable[SessionRecord]) -> list[str]:
        """Claim and write again records this worker serves (after the store lost its data); returns the
        ids another worker holds by now."""
        ...

"""Session ownership among several worker processes that share a :class:`SharedSessionStore`.

One :class:`SessionOwnership` per :class:`~acp_client.ReconnectingClient` whose store supports leases. It

- decides which stored sessions this worker loads at start (the ones it holds or can claim, filtered by the
  ``should_own(session_id)`` hook for sticky routing; free ones at most ``adopt_rate``, the rest is adopted
  by the paced rounds);
- renews the leases every ``renew_every`` seconds while the worker lives, on a task of its own that talks
  only to the store, within a deadline (a recovery, a probe or a hand-over never delays a renewal);
- adopts the sessions whose leases expired (a dead worker's) or were released, and hands them to the
  client to recover with ``session/status`` → resume, at most ``adopt_rate`` a second, each round after a
  random delay (bounded hand-over storms; the pacing is :mod:`.pacing`);
- notices a lost lease (renewal refused, a fenced write rejected, the local deadline passed while the store
  was unreachable, or the agent saying the session is attached elsewhere) and tells the client to turn the
  handle detached with a :class:`SessionTakenOver` event;
- notices that the store lost its data (:class:`SessionStoreReset`) and writes back the sessions this worker
  still serves, instead of dropping them.

It decides nothing about connections: the client (its :class:`OwnershipHost`) detaches and recovers handles.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from acp_client._logging import get_logger
from acp_client.exceptions import (
    LeaseLost,
    StoreError,
    StoreUnavailable,
    UsageError,
)
from acp_client.reconnect._events import Event, SessionsAdopted, SessionStoreReset, SessionTakenOver
from acp_client.reconnect._ownership.pacing import ClaimPacer
from acp_client.sessions import Session, SessionLink, SessionRecord, SharedSessionStore

__all__ = ["FencedWrites", "OwnershipCounts", "OwnershipHost", "SessionOwnership"]

log = get_logger("acp_client.reconnect")

#: links of handles that are gone for good (nothing to own or recover)
_GONE = (SessionLink.LOST, SessionLink.CLOSED)


class OwnershipHost(Protocol):
    """What the ownership manager needs from the client (:class:`ClientHost` adapts a ReconnectingClient)."""

    def known_sessions(self) -> Mapping[str, Session]:
        """The client's session handles by id."""
        ...

    def emit(self, event: Event) -> None:
        """Report an event."""
        ...

    async def detach_taken_over(self, session_id: str, reason: str) -> None:
        """Stop serving the session: cancel its recovery, turn the handle detached."""
        ...

    async def recover_adopted(self, records: list[SessionRecord]) -> None:
        """Make handles for adopted records (or re-use detached ones) and recover them on the current
        connection (or on the next one)."""
        ...

    async def reconcile(self, session_ids: list[str]) -> None:
        """After the store lost its data: check the sessions with the agent instead of dropping them."""
        ...


_Want = Callable[[str], bool]


@dataclass(slots=True)
class OwnershipCounts:
    """What one worker's ownership manager did so far (read by the metrics; written only by it)."""

    #: lease renewals that succeeded (one per session and round)
    renewed: int = 0
    #: leases found lost by a renewal (taken, expired, or gone with the store's data)
    lost: int = 0
    #: sessions claimed from the free pool (a dead or releasing worker's) and handed to the client
    adopted: int = 0
    #: renewal rounds that failed or ran past their deadline (the store unreachable or slow)
    renew_failures: int = 0
    #: renewal rounds ended, whatever their outcome
    rounds: int = 0


class SessionOwnership:
    """Leases, adoption and hand-over for one worker (see the module docstring).

    ``renew_every`` defaults to a third of the lease TTL, ``adopt_every`` to half of it. ``should_own``
    (default: every session) is asked before this worker claims a session it does not hold.

    Renewal runs on a task of its own: it only talks to the store, within ``renew_deadline`` (default: the
    lease TTL less ``renew_every``, so a renewal that fails still leaves time for the next one), and never
    waits for what it finds to be handled (a lost lease, a store that lost its data): a second task does
    that, and the adoption rounds. ``adopt_rate`` caps the sessions claimed per second (``None``: no cap);
    each adoption round starts after a random delay up to ``adopt_jitter`` seconds and claims in a random
    order (``rng``).
    """

    def __init__(
        self,
        store: SharedSessionStore,
        *,
        should_own: _Want | None = None,
        renew_every: float | None = None,
        adopt_every: float | None = None,
        renew_deadline: float | None = None,
        adopt_rate: float | None = None,
        adopt_jitter: float = 0.0,
        rng: random.Random | None = None,
        generation: Callable[[], int] = lambda: 0,
    ) -> None:
        ttl = store.lease_ttl
        self.store = store
        self._should_own = should_own
        self._renew_every = renew_every if renew_every is not None else ttl / 3
        self._adopt_every = adopt_every if adopt_every is not None else ttl / 2
        if self._renew_every >= ttl:
            raise UsageError("leases must be renewed more often than they expire (renew_every < lease_ttl)")
        self._renew_deadline = renew_deadline if renew_deadline is not None else ttl - self._renew_every
        self._pacer = ClaimPacer(adopt_rate) if adopt_rate is not None else None
        self._jitter = adopt_jitter
        self._rng = rng or random.Random()
        self._generation = generation
        self._host: OwnershipHost | None = None
        self._tasks: list[asyncio.Task[None]] = []
        #: what the renewal found and the other task handles: lost ids, a reset, an unreachable store
        self._found: list[tuple[str, object]] = []
        self._wake = asyncio.Event()
        #: sessions detached because another worker took them (adoption may bring them back if freed)
        self._taken: set[str] = set()
        self._reasons: dict[str, str] = {}
        self._last_adopt = 0.0
        #: ids handed over on purpose by ``release``: never adopted back automatically
        self._released: set[str] = set()
        self.ticks = 0
        self.counts = OwnershipCounts()
        self._round_waiters: list[asyncio.Future[None]] = []

    def __repr__(self) -> str:
        return f"<SessionOwnership owner={self.store.owner_id!r} held={len(self._held())}>"

    @property
    def owner_id(self) -> str:
        """This worker's id in the store."""
        return self.store.owner_id

    def _held(self) -> list[str]:
        host = self._host
        if host is None:
            return []
        return [sid for sid in host.known_sessions() if self.store.lease(sid) is not None]

    def owned_count(self) -> int:
        """How many sessions this worker holds an unexpired lease on (local view, no round trip)."""
        host = self._host
        if host is None:
            return 0
        now = time.monotonic()
        return sum(1 for sid in host.known_sessions() if (lease := self.store.lease(sid)) and not lease.expired(now))

    def should_own(self, session_id: str) -> bool:
        """Whether this worker wants ``session_id`` when it is free (the ``should_own`` hook)."""
        if session_id in self._released:
            return False
        if session_id in self._taken and self._reasons.get(session_id) == "released":
            return False
        return self._should_own is None or bool(self._should_own(session_id))

    def owns(self, session_id: str) -> bool:
        """Whether this worker holds an unexpired lease on the session (local view, no round trip)."""
        lease = self.store.lease(session_id)
        return lease is not None and not lease.expired()

    # ------------------------------------------------------------------ lifecycle

    async def load(self) -> list[SessionRecord]:
        """The records to load at start: the sessions this worker holds or can claim (``should_own``).

        A store that cannot be reached at start (past its own ``retry_for``) fails the start: a wrong URL,
        password or port would otherwise run a client whose every save waits ``retry_for`` and is lost.
        The error (a :class:`StoreUnavailable`, naming the store's URL without its password) says what to
        check. Once started, an outage of the store is ridden out: renewals and adoption retry.

        The start is paced like a hand-over: with ``adopt_rate`` at most one second's worth of free
        sessions is claimed here (besides those the store says this worker holds already); the adoption
        rounds, which start at once, take the rest at the same pace, so a worker that starts (or restarts)
        alone beside a large store neither claims nor recovers every stored session at once, and workers
        started together share them.
        """
        limit = await self._pacer.grant(max(1, int(self._pacer.rate))) if self._pacer is not None else None
        try:
            return await self.store.load_owned(want=self.should_own, limit=limit)
        except StoreUnavailable as exc:
            log.error("acp.ownership_load_failed", owner=self.owner_id, error=str(exc))
            # the error was made for this call alone: its text is told again with what to do
            exc.args = (
                f"{exc}; the client did not start: check the store's URL, password and that its server runs "
                "(for a server that starts after the client, raise the store's retry_for)",
            )
            raise

    def start(self, host: OwnershipHost) -> None:
        """Start renewing, and handling and adopting on a second task (called from the client's
        ``start()``)."""
        self._host = host
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._renewing(), name=f"acp-leases-{self.owner_id}"),
                asyncio.create_task(self._handling(), name=f"acp-adopt-{self.owner_id}"),
            ]

    async def stop(self) -> None:
        """Stop both tasks (the store's ``close()`` releases the leases)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def _renewing(self) -> None:
        while True:
            await asyncio.sleep(self._renew_every)
            try:
                await self.renew()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not end the leases' renewal silently
                log.exception("acp.ownership_tick_crashed", owner=self.owner_id)

    async def _handling(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._adopt_every):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.handle_found()
                if time.monotonic() - self._last_adopt >= self._adopt_every:
                    await self._adopt_round()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not end the adoption rounds silently
                log.exception("acp.ownership_tick_crashed", owner=self.owner_id)

    # ------------------------------------------------------------------ one round

    async def tick(self, *, adopt: bool | None = None) -> None:
        """One renewal, what it found handled, then (every ``adopt_every`` seconds, or when ``adopt`` is
        true) one adoption round, in sequence. Public for tests and benchmarks; the two tasks of
        :meth:`start` do the same concurrently."""
        self._require_host()
        self.ticks += 1
        await self.renew()
        await self.handle_found()
        if adopt or (adopt is None and time.monotonic() - self._last_adopt >= self._adopt_every):
            await self._adopt_round()

    async def renew(self) -> None:
        """Renew every held lease within the renewal deadline and note what was found for
        :meth:`handle_found` (never waits for a recovery, a probe or a hand-over)."""
        try:
            async with asyncio.timeout(self._renew_deadline):
                renewal = await self.store.renew_all()
        except (StoreError, TimeoutError) as exc:
            self.counts.renew_failures += 1
            log.warning("acp.lease_renewal_failed", owner=self.owner_id, error=str(exc) or "deadline passed")
            self._note("unreachable", exc)
            return
        finally:
            self.counts.rounds += 1
            waiters, self._round_waiters = self._round_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        self.counts.renewed += len(renewal.renewed)
        self.counts.lost += len(renewal.lost)
        if renewal.store_reset:
            self._note("reset", None)
        else:
            for sid in sorted(renewal.lost):
                self._note("lost", sid)

    async def next_renewal(self) -> None:
        """Return once the next renewal round has ended, whatever its outcome (for tests and benchmarks;
        bound the wait with a timeout)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._round_waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._round_waiters:
                self._round_waiters.remove(waiter)

    def _note(self, kind: str, detail: object) -> None:
        self._found.append((kind, detail))
        self._wake.set()

    async def handle_found(self) -> None:
        """Act on what the renewals found: detach the sessions whose leases were lost, reconcile after a
        data loss, stop serving what expired while the store was unreachable."""
        host = self._require_host()
        found, self._found = self._found, []
        if any(kind == "reset" for kind, _ in found):
            await self._reconcile_after_reset(host)
        elif any(kind == "unreachable" for kind, _ in found):
            await self._expire_unreachable(host)
        for kind, detail in found:
            if kind == "lost":
                await self._taken_over(host, str(detail), "lease_lost", None)
        self._prune(host)

    async def _expire_unreachable(self, host: OwnershipHost) -> None:
        """The store is unreachable: stop serving every session whose lease ran out by the local clock."""
        for sid, session in list(host.known_sessions().items()):
            lease = self.store.lease(sid)
            if lease is not None and lease.expired() and session.link not in _GONE:
                await self._taken_over(host, sid, "lease_expired", None)

    async def _reconcile_after_reset(self, host: OwnershipHost) -> None:
        serving = [
            s.record for sid, s in host.known_sessions().items() if s.link not in _GONE and sid not in self._taken
        ]
        try:
            taken = await self.store.reclaim(serving)
        except StoreError as exc:
            log.warning("acp.store_reset_reclaim_failed", owner=self.owner_id, error=str(exc))
            return  # the next round sees the reset again (every lease is still lost) and retries
        host.emit(SessionStoreReset(len(serving) - len(taken), len(taken), self._generation()))
        for sid in taken:
            await self._taken_over(host, sid, "lease_lost", None)
        await host.reconcile([r.session_id for r in serving if r.session_id not in taken])

    async def _adopt_round(self) -> None:
        self._last_adopt = time.monotonic()
        if self._jitter > 0:
            await asyncio.sleep(self._rng.uniform(0, self._jitter))  # workers racing for one pool: out of step
        await self.adopt_free()
        self._last_adopt = time.monotonic()

    async def adopt_free(self) -> list[str]:
        """Claim the free sessions this worker wants (in a random order, at most ``adopt_rate`` a second)
        and hand them to the client to recover, chunk by chunk; returns their ids. Two workers racing for
        one session: the store's claim lets exactly one win."""
        host = self._require_host()
        known = host.known_sessions()
        try:
            free = await self.store.claimable()
        except StoreError as exc:
            log.warning("acp.adoption_failed", owner=self.owner_id, error=str(exc))
            return []
        wanted = [
            sid
            for sid in free
            if self.should_own(sid) and (sid not in known or sid in self._taken or known[sid].link in _GONE)
        ]
        self._rng.shuffle(wanted)
        adopted: list[str] = []
        while wanted:
            count = await self._pacer.grant(len(wanted)) if self._pacer is not None else len(wanted)
            chunk, wanted = wanted[:count], wanted[count:]
            try:
                records = await self.store.load_owned(ids=chunk)
            except StoreError as exc:
                log.warning("acp.adoption_failed", owner=self.owner_id, error=str(exc))
                break
            taken = [r for r in records if r.session_id in set(chunk)]
            if taken:
                adopted += await self._hand_to_client(host, taken)
        return adopted

    async def _hand_to_client(self, host: OwnershipHost, records: list[SessionRecord]) -> list[str]:
        ids = [r.session_id for r in records]
        for sid in ids:
            self._taken.discard(sid)
            self._reasons.pop(sid, None)
        self.counts.adopted += len(ids)
        log.info("acp.sessions_adopted", owner=self.owner_id, sessions=len(ids))
        host.emit(SessionsAdopted(tuple(ids), self._generation()))
        await host.recover_adopted(records)
        return ids

    # ------------------------------------------------------------------ hand-over on purpose

    async def release(self, session_id: str) -> bool:
        """Give the lease up and stop serving the session (it stays in the store for another worker)."""
        host = self._require_host()
        self._released.add(session_id)
        released = await self.store.release(session_id)
        await self._taken_over(host, session_id, "released", None)
        return released

    async def adopt(self, session_id: str) -> SessionRecord:
        """Claim one session now (it must be free or already ours) and recover it; raises ``LeaseLost``
        when another worker holds it, ``KeyError`` when the store does not have it."""
        host = self._require_host()
        self._released.discard(session_id)
        lease = await self.store.claim(session_id)
        if lease is None:
            raise LeaseLost(session_id, "taken")
        records = await self.store.load_owned(ids=[session_id])
        record = next((r for r in records if r.session_id == session_id), None)
        if record is None:
            await self.store.release(session_id)
            raise KeyError(session_id)
        self._taken.discard(session_id)
        self._reasons.pop(session_id, None)
        await host.recover_adopted([record])
        return record

    # ------------------------------------------------------------------ signals from the client

    async def write_rejected(self, exc: LeaseLost) -> None:
        """A fenced write of the client was refused: the session belongs to another worker now."""
        host = self._require_host()
        if exc.reason == "reset":
            return  # the next renewal round reconciles the whole store and writes this session back
        await self._taken_over(host, exc.session_id, "write_rejected", exc.holder)

    async def attached_elsewhere(self, session_id: str) -> bool:
        """The agent says the session is attached to another connection. ``True`` when another worker holds
        it (the handle is then detached); ``False`` when this worker still does (recover it)."""
        host = self._require_host()
        try:
            lease = await self.store.claim(session_id)
        except StoreError as exc:
            log.warning("acp.ownership_check_failed", session_id=session_id, error=str(exc))
            if self.serving(session_id):
                return False  # the lease is still valid by the local clock: nobody else can hold it
            await self._taken_over(host, session_id, "lease_expired", None)
            return True
        if lease is not None:
            return False
        await self._taken_over(host, session_id, "attached_elsewhere", None)
        return True

    def serving(self, session_id: str) -> bool:
        """Whether this worker still serves the session: not taken over or released, and its lease not past
        its local deadline (no round trip).

        A session this worker created while the store was unreachable has no lease yet but is served: its
        owed write claims it once the store is back.
        """
        if session_id in self._taken:
            return False
        lease = self.store.lease(session_id)
        return lease is None or not lease.expired()

    def taken(self, session_id: str) -> bool:
        """Whether the session was taken over or released (another worker may serve it now)."""
        return session_id in self._taken

    def check_serving(self, session_id: str) -> None:
        """Raise :class:`LeaseLost` if this worker no longer serves the session."""
        if session_id in self._taken:
            raise LeaseLost(session_id, self._reasons.get(session_id, "taken"))
        if not self.serving(session_id):
            raise LeaseLost(session_id, "expired")

    # ------------------------------------------------------------------ internals

    async def _taken_over(self, host: OwnershipHost, session_id: str, reason: str, holder: str | None) -> None:
        session = host.known_sessions().get(session_id)
        if session is None or (session_id in self._taken and reason != "released"):
            return
        self._taken.add(session_id)
        self._reasons[session_id] = reason
        host.emit(SessionTakenOver(session_id, reason, holder, self._generation()))
        await host.detach_taken_over(session_id, reason)
        if reason == "lease_expired" and self.store.lease(session_id) is not None:
            await self._give_back(session_id)

    async def _give_back(self, session_id: str) -> None:
        """A session this worker stopped serving because its lease ran out by the local clock (a renewal
        that missed its deadline may still have reached the store): give the lease up, so that the session
        is free for adoption rather than held, unserved, by a heartbeat this worker goes on renewing. A
        store that cannot be reached lets the heartbeat lapse anyway."""
        try:
            await self.store.release(session_id)
        except StoreError as exc:
            log.warning("acp.lease_give_back_failed", session_id=session_id, error=str(exc))

    def _prune(self, host: OwnershipHost) -> None:
        """Drop what is remembered of taken-over sessions whose handles the application forgot or closed
        (a long-lived worker sees sessions move away all day). Released ids stay: they only grow by explicit
        ``release`` calls, and they keep a session this worker gave away from being adopted back."""
        if not self._taken:
            return
        known = host.known_sessions()
        for sid in [sid for sid in self._taken if sid not in known]:
            self._taken.discard(sid)
            self._reasons.pop(sid, None)

    def _require_host(self) -> OwnershipHost:
        if self._host is None:
            raise UsageError("session ownership is not started (ReconnectingClient.start() starts it)")
        return self._host


class FencedWrites:
    """The shared store as the client's store writer sees it.

    A write the store rejects with :class:`LeaseLost` is not retried (it can never succeed): the session
    is served by another worker now, and the ownership manager turns its handle detached. Writes for a
    session taken over or released are dropped, so a late save can never claim it back.
    """

    def __init__(self, store: SharedSessionStore, ownership: SessionOwnership) -> None:
        self.store = store
        self._ownership = ownership

    def __repr__(self) -> str:
        return f"<FencedWrites {self.store!r}>"

    async def load_all(self) -> list[SessionRecord]:
        """Every stored record (as the wrapped store)."""
        return await self.store.load_all()

    async def save(self, record: SessionRecord) -> None:
        """Write the record unless the session was taken over (a lease that merely looks expired locally is
        left to the store's fencing to judge)."""
        if self._ownership.taken(record.session_id):
            return
        try:
            await self.store.save(record)
        except LeaseLost as exc:
            await self._ownership.write_rejected(exc)

    async def delete(self, session_id: str) -> None:
        """Delete the record unless the session was taken over."""
        if self._ownership.taken(session_id):
            return
        try:
            await self.store.delete(session_id)
        except LeaseLost as exc:
            await self._ownership.write_rejected(exc)

    async def close(self) -> None:
        """Close the wrapped store (which releases the leases it holds)."""
        await self.store.close()

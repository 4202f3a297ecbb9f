"""The lease book of :class:`~acp_client.sessions.RedisSessionStore`: the sessions this worker holds.

A :class:`LeaseBook` keeps this worker's table of held sessions (token and incarnation each, key layout 3:
see ``_keys.py``) and its heartbeat per key group, and it alone changes them: single and bulk claims, the
renewal (one heartbeat per group, whatever the number of sessions), releases, a lost lease reported by a
fenced write (:meth:`LeaseBook.drop`), and a data loss on the server (:meth:`LeaseBook.adopt_new_epoch`).
Every step is a Lua script sent through the store's :class:`~acp_client.sessions.redis._link.RedisLink`.
Stored records are the store's business, not the book's.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from acp_client._logging import get_logger
from acp_client.exceptions import StoreUnavailable
from acp_client.sessions._lease import Lease, Renewal
from acp_client.sessions.redis._keys import BUCKETS, bucket_of, by_bucket
from acp_client.sessions.redis._link import RedisLink, ScriptCall, json_list
from acp_client.sessions.redis._scripts import _GROUP

__all__ = ["LeaseBook", "holder_of", "token_of"]

log = get_logger("acp_client.sessions.redis")


def holder_of(value: Any) -> str | None:
    """The owner named by a stored lease value (``"token|owner|inc"``, or ``"token|owner"`` of layout 2;
    ``None`` when there is no lease)."""
    if not value:
        return None
    parts = str(value).split("|")
    return parts[1] if len(parts) > 1 else parts[0]


def token_of(value: Any) -> int | None:
    """The fencing token of a stored lease value (``None`` when there is none or it does not parse)."""
    head = str(value).split("|", 1)[0] if value else ""
    return int(head) if head.isdigit() else None


class LeaseBook:
    """The leases one worker (``owner``) holds in one store, each lasting ``ttl`` seconds unless renewed.

    Held sessions are kept as token and incarnation; a lease's local deadline is its group heartbeat's:
    the send time of the last claim or renewal that extended it, plus ``ttl`` (never later than the
    server's expiry)."""

    def __init__(self, link: RedisLink, *, owner: str, ttl: float) -> None:
        self._link = link
        self._owner = owner
        self._ttl = ttl
        #: session id -> (token, incarnation)
        self._held: dict[str, tuple[int, str]] = {}
        #: key group -> this worker's current incarnation there (as the last claim or renewal found it)
        self._incs: dict[int, str] = {}
        #: incarnation -> local deadline of its heartbeat
        self._until: dict[str, float] = {}
        self._claims: list[tuple[str, asyncio.Future[tuple[Lease | None, str | None]]]] = []
        self._claimer: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ the table

    @property
    def owner(self) -> str:
        """This worker's identity in the store."""
        return self._owner

    @property
    def ttl(self) -> float:
        """Seconds a lease lasts without renewal."""
        return self._ttl

    def __len__(self) -> int:
        return len(self._held)

    def get(self, session_id: str) -> Lease | None:
        """The lease held on ``session_id``, else ``None``."""
        held = self._held.get(session_id)
        if held is None:
            return None
        return Lease(session_id, self._owner, held[0], self._until.get(held[1], 0.0))

    def value(self, session_id: str) -> str:
        """How the lease held on ``session_id`` is stored at its key (the scripts compare it to prove who
        holds the session); ``KeyError`` if none is held."""
        token, inc = self._held[session_id]
        return f"{token}|{self._owner}|{inc}"

    def copy(self) -> dict[str, Lease]:
        """Every held lease, by session id (a copy)."""
        return {sid: lease for sid in self._held if (lease := self.get(sid)) is not None}

    def drop(self, session_id: str) -> Lease | None:
        """Forget the lease on ``session_id`` (lost, released or deleted); returns it if there was one."""
        lease = self.get(session_id)
        self._held.pop(session_id, None)
        return lease

    def clear(self) -> None:
        """Forget every lease (the store closes)."""
        self._held.clear()
        self._incs.clear()
        self._until.clear()

    def adopt_new_epoch(self) -> None:
        """The server lost its data (of one key group at least): every lease is forgotten (the caller claims
        again what it serves), and the next command learns the new epochs."""
        log.warning("acp.store_reset", namespace=self._link.namespace, owner=self._owner)
        self.clear()
        self._link.forget_epoch()

    def _ttl_ms(self) -> int:
        return max(1, int(self._ttl * 1000))

    def _extended(self, bucket: int, inc: str, sent_at: float) -> None:
        """The heartbeat ``inc`` of group ``bucket`` was extended (or made) by a command sent at ``sent_at``."""
        self._incs[bucket] = inc
        self._until[inc] = max(self._until.get(inc, 0.0), sent_at + self._ttl)

    # ------------------------------------------------------------------ claims

    async def claim(self, session_id: str) -> tuple[Lease | None, str | None]:
        """Claim one session: the lease, or ``None`` and the id of the worker that holds it.

        Claims made in the same turn of the event loop (a worker creating many sessions at once) go out
        together: one bulk script call per key group, in one pipeline (per node on a cluster)."""
        future: asyncio.Future[tuple[Lease | None, str | None]] = asyncio.get_running_loop().create_future()
        self._claims.append((session_id, future))
        if self._claimer is None or self._claimer.done():
            self._claimer = asyncio.create_task(self._flush_claims(), name="acp-redis-claims")
        return await future

    async def _flush_claims(self) -> None:
        await asyncio.sleep(0)  # let the claims of this turn of the loop join the batch
        link = self._link
        while self._claims:
            batch, self._claims = [(sid, f) for sid, f in self._claims if not f.done()], []
            ids = list(dict.fromkeys(sid for sid, _ in batch))
            sent_at = time.monotonic()
            try:
                answers = await link.retrying("claim", lambda c: self.claim_many(c, ids))  # noqa: B023
            except BaseException as exc:
                error = exc if isinstance(exc, Exception) else StoreUnavailable("claim", exc)
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                if not isinstance(exc, Exception):
                    raise
                continue
            outcomes: dict[str, tuple[Lease | None, str | None]] = {}
            for sid, answer in zip(ids, answers, strict=True):
                lease, other = self.take(sid, answer, sent_at)
                outcomes[sid] = (lease, None) if lease is not None else (None, other)
                if lease is not None:
                    log.debug("acp.lease_claimed", session_id=sid, token=lease.token)
            for sid, future in batch:
                if not future.done():
                    future.set_result(outcomes[sid])

    async def wait_claims(self) -> None:
        """Wait until the claims already made were sent (the store closes)."""
        claimer = self._claimer
        if claimer is not None and not claimer.done():
            await asyncio.wait({claimer})

    async def claim_many(self, client: Any, ids: list[str]) -> list[Any]:
        """Claim ``ids`` with one bulk script call per key group and ``_GROUP`` sessions (a call never spans
        two groups: on a cluster each runs on the node of its slot); the answers, in the order of ``ids``,
        are ``[1, token, record text or None, incarnation]`` or ``[0, holder's lease value]``, to be applied
        with :meth:`take`."""
        link = self._link
        chunks: list[list[str]] = []
        calls: list[ScriptCall] = []
        fresh = uuid.uuid4().hex[:12]  # the incarnation a group gets if this worker has no heartbeat there
        for bucket, members in by_bucket(ids).items():
            for start in range(0, len(members), _GROUP):
                chunk = members[start : start + _GROUP]
                chunks.append(chunk)
                calls.append(
                    ("claim_many", (link.keys.epoch_key(bucket),),
                     (json.dumps(chunk), self._owner, self._ttl_ms(), link.keys.prefix(bucket), fresh))
                )  # fmt: skip
        by_id: dict[str, Any] = {}
        for chunk, encoded in zip(chunks, await link.scripts(client, calls), strict=True):
            flat = json_list(encoded)
            inc = str(flat[0])
            for sid, i in zip(chunk, range(1, len(flat), 2), strict=True):
                token = int(flat[i])
                by_id[sid] = [1, token, flat[i + 1] or None, inc] if token > 0 else [0, flat[i + 1]]
        return [by_id[sid] for sid in ids]

    def take(self, session_id: str, answer: Any, sent_at: float) -> tuple[Lease | None, Any]:
        """Apply one claim answer (the claim left at ``sent_at``): on success note the lease and return it
        with the stored record's text; otherwise forget any lease on the session and return ``None`` with
        the holder's id."""
        if int(answer[0]) == 1:
            inc = str(answer[3])
            self._extended(bucket_of(session_id), inc, sent_at)
            self._held[session_id] = (int(answer[1]), inc)
            return self.get(session_id), answer[2]
        self._held.pop(session_id, None)
        return None, holder_of(answer[1])

    async def stored_mine(self, client: Any) -> list[str]:
        """The sessions the store says this worker holds under its live heartbeats (one scripted call per
        key group, in one pipeline): a worker restarted with the same owner id takes them back."""
        names = self._link.keys
        calls: list[ScriptCall] = [
            ("mine", (names.epoch_key(b),), (names.prefix(b), self._owner)) for b in range(BUCKETS)
        ]
        ids: list[str] = []
        for page in await self._link.scripts(client, calls):
            ids.extend(json_list(page))
        return ids

    # ------------------------------------------------------------------ renewal and release

    async def renew_all(self) -> Renewal:
        """Extend this worker's heartbeat in every key group where it holds leases (one call per group, so
        at most 64 whatever the number of sessions); forget and report the leases lost."""
        link = self._link
        if not self._held:
            # nothing to extend, but a data loss must still be noticed: the caller re-checks its sessions
            reset = await link.epoch_changed("renew")
            if reset:
                self.adopt_new_epoch()
            return Renewal(frozenset(), frozenset(), reset)
        groups: dict[int, list[str]] = {}
        for sid in self._held:
            groups.setdefault(bucket_of(sid), []).append(sid)
        order = [(bucket, self._incs[bucket]) for bucket in groups]

        async def run(client: Any) -> list[Any]:
            calls: list[ScriptCall] = [
                ("renew_many", (link.keys.epoch_key(bucket),),
                 (inc, self._ttl_ms(), link.bucket_epoch(bucket), link.keys.prefix(bucket), self._owner))
                for bucket, inc in order
            ]  # fmt: skip
            answers: list[Any] = await link.scripts(client, calls)
            return answers

        sent_at = time.monotonic()
        answers = await link.retrying("renew", run)
        renewed: set[str] = set()
        lost: dict[str, str] = {}
        reset = False
        for (bucket, inc), answer in zip(order, answers, strict=True):
            code = int(answer)
            reset = reset or code == -2
            if code == 1:
                self._extended(bucket, inc, sent_at)
            for sid in groups[bucket]:
                held = self._held.get(sid)
                if held is None:
                    continue  # released or dropped meanwhile
                if code == 1 and held[1] == inc:
                    renewed.add(sid)
                elif code != -2 and held[1] != inc and held[1] == self._incs.get(bucket):
                    continue  # claimed meanwhile under a newer heartbeat of the group: not this round's to judge
                else:
                    del self._held[sid]
                    lost[sid] = "reset" if code == -2 else "expired"
        for sid, reason in lost.items():
            log.info("acp.lease_lost", session_id=sid, reason=reason, holder=None)
        live = {inc for _, inc in self._held.values()}
        self._until = {inc: until for inc, until in self._until.items() if inc in live or inc in self._incs.values()}
        if reset:
            self.adopt_new_epoch()
        return Renewal(frozenset(renewed), frozenset(lost), reset)

    def release_calls(self, session_ids: list[str]) -> list[ScriptCall]:
        """The scripted calls that give the leases on ``session_ids`` up (each only if still held by this
        worker; call before :meth:`drop`)."""
        names = self._link.keys
        return [
            ("release", (names.key("lease", sid),), (self.value(sid), names.prefix(bucket_of(sid)), sid))
            for sid in session_ids
            if sid in self._held
        ]

    def release_all_calls(self) -> list[ScriptCall]:
        """The scripted calls that give every held lease up at once: this worker's heartbeat deleted in each
        key group (one call per group), so the adoption scans of other workers find its sessions at once."""
        names = self._link.keys
        return [
            ("release_all", (names.epoch_key(bucket),), (self._owner, inc, names.prefix(bucket)))
            for bucket, inc in self._incs.items()
        ]

    async def release(self, session_id: str) -> bool:
        """Give one lease up; ``False`` if this worker did not hold it (any more)."""
        calls = self.release_calls([session_id])
        if not calls:
            return False
        self._held.pop(session_id, None)
        answers = await self._link.retrying("release", lambda c: self._link.scripts(c, calls))
        return bool(answers[0])

"""The lease book of :class:`~acp_client.sessions.RedisSessionStore`: the sessions this worker holds.

A :class:`LeaseBook` keeps this worker's table of :class:`~acp_client.sessions.Lease` objects, and it alone
changes that table: single and bulk claims, the bulk renewal, releases, a lost lease reported by a fenced
write (:meth:`LeaseBook.drop`), and a data loss on the server (:meth:`LeaseBook.adopt_new_epoch`). Every
step is a Lua script sent through the store's :class:`~acp_client.sessions.redis._link.RedisLink`. Stored
records are the store's business, not the book's.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from acp_client._logging import get_logger
from acp_client.exceptions import StoreUnavailable
from acp_client.sessions._lease import Lease, Renewal
from acp_client.sessions.redis._keys import bucket_of, by_bucket
from acp_client.sessions.redis._link import RedisLink, ScriptCall, json_list
from acp_client.sessions.redis._scripts import _GROUP

__all__ = ["LeaseBook", "holder_of", "lease_value"]

log = get_logger("acp_client.sessions.redis")


def holder_of(value: Any) -> str | None:
    """The owner named by a stored lease value ``"token|owner"`` (``None`` when there is no lease)."""
    if not value:
        return None
    text = str(value)
    return text.split("|", 1)[1] if "|" in text else text


def lease_value(lease: Lease) -> str:
    """How ``lease`` is stored at its key: the scripts compare it to prove who holds the session."""
    return f"{lease.token}|{lease.owner}"


class LeaseBook:
    """The leases one worker (``owner``) holds in one store, each lasting ``ttl`` seconds unless renewed."""

    def __init__(self, link: RedisLink, *, owner: str, ttl: float) -> None:
        self._link = link
        self._owner = owner
        self._ttl = ttl
        self._leases: dict[str, Lease] = {}
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
        return len(self._leases)

    def get(self, session_id: str) -> Lease | None:
        """The lease held on ``session_id``, else ``None``."""
        return self._leases.get(session_id)

    def copy(self) -> dict[str, Lease]:
        """Every held lease, by session id (a copy)."""
        return dict(self._leases)

    def drop(self, session_id: str) -> Lease | None:
        """Forget the lease on ``session_id`` (lost, released or deleted); returns it if there was one."""
        return self._leases.pop(session_id, None)

    def clear(self) -> None:
        """Forget every lease (the store closes)."""
        self._leases.clear()

    def adopt_new_epoch(self) -> None:
        """The server lost its data (of one key group at least): every lease is forgotten (the caller claims
        again what it serves), and the next command learns the new epochs."""
        log.warning("acp.store_reset", namespace=self._link.namespace, owner=self._owner)
        self._leases.clear()
        self._link.forget_epoch()

    def _ttl_ms(self) -> int:
        return max(1, int(self._ttl * 1000))

    def _deadline(self, sent_at: float) -> float:
        return sent_at + self._ttl

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
        have the shape of a single claim's, to be applied with :meth:`take`."""
        link = self._link
        chunks: list[list[str]] = []
        calls: list[ScriptCall] = []
        for bucket, members in by_bucket(ids).items():
            for start in range(0, len(members), _GROUP):
                chunk = members[start : start + _GROUP]
                chunks.append(chunk)
                calls.append(
                    ("claim_many", (link.keys.epoch_key(bucket),),
                     (json.dumps(chunk), self._owner, self._ttl_ms(), link.keys.prefix(bucket)))
                )  # fmt: skip
        by_id: dict[str, Any] = {}
        for chunk, encoded in zip(chunks, await link.scripts(client, calls), strict=True):
            flat = json_list(encoded)
            for sid, i in zip(chunk, range(0, len(flat), 2), strict=True):
                token = int(flat[i])
                by_id[sid] = [1, token, flat[i + 1] or None] if token > 0 else [0, flat[i + 1]]
        return [by_id[sid] for sid in ids]

    def take(self, session_id: str, answer: Any, sent_at: float) -> tuple[Lease | None, Any]:
        """Apply one claim answer (the claim left at ``sent_at``): on success note the lease and return it
        with the stored record's text; otherwise forget any lease on the session and return ``None`` with
        the holder's id."""
        if int(answer[0]) == 1:
            lease = Lease(session_id, self._owner, int(answer[1]), self._deadline(sent_at))
            self._leases[session_id] = lease
            return lease, answer[2] if len(answer) > 2 else None
        self._leases.pop(session_id, None)
        return None, holder_of(answer[1])

    # ------------------------------------------------------------------ renewal and release

    async def renew_all(self) -> Renewal:
        """Extend every held lease (one bulk call per key group and ``_GROUP``); forget and report the ones
        lost."""
        link = self._link
        held = list(self._leases.values())
        if not held:
            # nothing to extend, but a data loss must still be noticed: the caller re-checks its sessions
            reset = await link.epoch_changed("renew")
            if reset:
                self.adopt_new_epoch()
            return Renewal(frozenset(), frozenset(), reset)

        # one bulk call per key group and _GROUP sessions, each checking its group's epoch
        groups: list[tuple[int, list[Lease]]] = []
        by_bucket: dict[int, list[Lease]] = {}
        for one in held:
            by_bucket.setdefault(bucket_of(one.session_id), []).append(one)
        for bucket, members in by_bucket.items():
            groups += [(bucket, members[start : start + _GROUP]) for start in range(0, len(members), _GROUP)]
        held = [one for _, group in groups for one in group]

        async def run(client: Any) -> list[Any]:
            calls: list[ScriptCall] = [
                (
                    "renew_many",
                    (link.keys.epoch_key(bucket),),
                    (json.dumps([[one.session_id, lease_value(one)] for one in group]), self._ttl_ms(),
                     link.bucket_epoch(bucket), link.keys.prefix(bucket)),
                )
                for bucket, group in groups
            ]  # fmt: skip
            answers: list[Any] = []
            for (_, group), encoded in zip(groups, await link.scripts(client, calls), strict=True):
                flat = json_list(encoded)
                if flat == [-2]:
                    answers += [[-2, ""]] * len(group)  # the group's data was lost: none of its leases survived
                else:
                    answers += [[1, ""] if a == 1 else [0, a] for a in flat]
            return answers

        sent_at = time.monotonic()
        answers = await link.retrying("renew", run)
        renewed: set[str] = set()
        lost: set[str] = set()
        reset = False
        for lease, answer in zip(held, answers, strict=True):
            code = int(answer[0])
            if code == 1:
                if self._leases.get(lease.session_id) == lease:
                    self._leases[lease.session_id] = Lease(
                        lease.session_id, lease.owner, lease.token, self._deadline(sent_at)
                    )
                renewed.add(lease.session_id)
            else:
                reset = reset or code == -2
                if self._leases.get(lease.session_id) == lease:
                    del self._leases[lease.session_id]
                lost.add(lease.session_id)
                log.info(
                    "acp.lease_lost",
                    session_id=lease.session_id,
                    reason="reset" if code == -2 else ("taken" if answer[1] else "expired"),
                    holder=holder_of(answer[1]),
                )
        if reset:
            self.adopt_new_epoch()
        return Renewal(frozenset(renewed), frozenset(lost), reset)

    def release_calls(self, leases: list[Lease]) -> list[ScriptCall]:
        """The scripted calls that give ``leases`` up (each only if still held by this worker)."""
        return [("release", (self._link.keys.key("lease", one.session_id),), (lease_value(one),)) for one in leases]

    async def release(self, session_id: str) -> bool:
        """Give one lease up; ``False`` if this worker did not hold it (any more)."""
        lease = self._leases.pop(session_id, None)
        if lease is None:
            return False
        calls = self.release_calls([lease])
        answers = await self._link.retrying("release", lambda c: self._link.scripts(c, calls))
        return bool(answers[0])

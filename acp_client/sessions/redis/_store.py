"""A session store on a Redis-protocol server (Redis 6.2+, Valkey 8) or a Redis Cluster, shared by several
worker processes.

Keys (layout 3, described in ``_keys.py``): every key of a session, and the sets, heartbeats and epoch of
its group, carry the hash tag of one of 64 key groups, so each Lua script touches one cluster slot::

    ns:{ns:b}:epoch ns:{ns:b}:index ns:{ns:b}:rec:sid ns:{ns:b}:lease:sid ns:{ns:b}:fence:sid
    ns:{ns:b}:hb:owner ns:{ns:b}:owned:owner|inc ns:{ns:b}:owners ns:{ns:b}:free

Every ownership step is one Lua script (atomic on the server), and every batch of them goes out as one
pipeline (on a cluster, one per node, sent together). What a worker costs the server while its sessions are
idle does not grow with them: ``renew_all`` extends one heartbeat per key group, and ``claimable`` (the
adoption scan) reads each group's heartbeats and its sets of released and orphaned sessions, never every
lease. Only ``redis``
(redis-py) is needed, and only when a store is used.

The store is made of three parts, each the only owner of its state: this module's
:class:`RedisSessionStore` (the public API, the records: reading them back, the batched fenced saves,
deletes, the migration from layout 1, closing), its :class:`~acp_client.sessions.redis._leases.LeaseBook`
(the held leases: claims, renewal, release) and its :class:`~acp_client.sessions.redis._link.RedisLink`
(the connection, retries, the epochs, the key names, scripted pipelines). The scripts themselves are in
``_scripts.py``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from acp_client._checks import check_bool, check_count, check_instance, check_seconds
from acp_client._logging import get_logger
from acp_client.exceptions import LeaseLost, StoreUnavailable, UsageError
from acp_client.sessions._lease import Lease, Renewal, StoredSession
from acp_client.sessions._store import SessionRecord
from acp_client.sessions.redis._keys import bucket_of
from acp_client.sessions.redis._leases import LeaseBook, holder_of, token_of
from acp_client.sessions.redis._link import RedisLink, ScriptCall

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

__all__ = ["RedisSessionStore"]

log = get_logger("acp_client.sessions.redis")


def _default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class RedisSessionStore:
    """Session records on a Redis or Valkey server, shared by several worker processes with leases.

    ``url`` is a redis-py URL (``redis://host:6379/0``, ``rediss://`` for TLS, ``unix://``; ``valkey://`` and
    ``valkeys://`` are the same), a Redis Cluster URL (``redis+cluster://host:7000``, ``rediss+cluster://``
    for TLS, ``valkey+cluster://``: any node serves as the seed; another scheme is a ``UsageError``), or a
    ``redis.asyncio.Redis`` / ``redis.asyncio.cluster.RedisCluster`` client made with
    ``decode_responses=True`` (the store uses it as it is and does not close it). Each worker
    process uses its own store object; ``owner_id`` names it in the store (default: host, pid and a random
    suffix; pass a stable one so a restarted worker takes its own sessions back at once, but never give two
    live workers the same id). A lease lasts ``lease_ttl`` seconds unless renewed (:meth:`renew_all`, which
    the :class:`~acp_client.ReconnectingClient` calls every ``lease_ttl / 3``).

    Connection errors are retried with capped, jittered backoff for up to ``retry_for`` seconds, then
    raised as :class:`~acp_client.exceptions.StoreUnavailable` (naming the URL, password redacted; a
    :class:`~acp_client.ReconnectingClient` whose store is unavailable when it starts does not start);
    each command waits at most
    ``socket_timeout`` seconds, and at most ``max_connections`` connections are open. Writes by a worker
    that does not hold the lease raise :class:`~acp_client.exceptions.LeaseLost`. ``release_on_close``
    gives every held lease up in :meth:`close`, so other workers adopt the sessions at once rather than
    after ``lease_ttl``.

    Uses only commands both Redis 6.2+ and Valkey 8 have (GET, SET NX PX, INCR, PEXPIRE, PTTL, HSET, HGET,
    SADD, SREM, SMEMBERS, SRANDMEMBER, SSCAN, EXISTS, DEL, EVALSHA, SCRIPT LOAD, and Lua's ``cjson``), on a
    single primary (Sentinel is fine) or a Redis Cluster: the keys of a session share a hash tag with its
    group's sets and epoch, so every script runs on one slot. A lease is valid while its holder's heartbeat
    in the session's key group lives (renewed every ``lease_ttl / 3``), so the idle traffic grows with the
    workers, not the sessions. Records of key layout 2 are read as they are (the first worker of this
    release to reach a key group indexes their free sessions once); records written before key layout 2
    are moved over by :meth:`migrate_layout_1`. Needs the ``redis`` package (``pip install 'acp-reconnect[redis]'``).
    """

    def __init__(
        self,
        url: str | Redis | RedisCluster,
        *,
        namespace: str = "acp",
        lease_ttl: float = 15.0,
        owner_id: str | None = None,
        retry_for: float = 5.0,
        socket_timeout: float = 2.0,
        batch_size: int = 500,
        max_connections: int = 8,
        release_on_close: bool = True,
    ) -> None:
        owner = "RedisSessionStore"
        check_instance(owner, "namespace", namespace, str, optional=False)
        check_seconds(owner, "lease_ttl", lease_ttl)
        check_seconds(owner, "retry_for", retry_for, zero=True)
        check_seconds(owner, "socket_timeout", socket_timeout)
        check_count(owner, "batch_size", batch_size)
        check_count(owner, "max_connections", max_connections)
        check_bool(owner, "release_on_close", release_on_close)
        if owner_id is not None and (not isinstance(owner_id, str) or not owner_id or "|" in owner_id):
            raise UsageError(f"{owner}.owner_id must be a non-empty string without '|' or None, not {owner_id!r}")
        self._link = RedisLink(
            url,
            namespace=namespace,
            retry_for=retry_for,
            socket_timeout=socket_timeout,
            batch_size=batch_size,
            max_connections=max_connections,
        )
        self._book = LeaseBook(self._link, owner=owner_id or _default_owner(), ttl=float(lease_ttl))
        self._release_on_close = release_on_close
        self._queued: list[tuple[SessionRecord, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        #: records that could not be read back (bad JSON), skipped and logged
        self.discarded = 0

    def __repr__(self) -> str:
        # the URL stays out: it may hold a password
        return f"<RedisSessionStore namespace={self.namespace!r} owner={self.owner_id!r} leases={len(self._book)}>"

    # ------------------------------------------------------------------ identity

    @property
    def owner_id(self) -> str:
        """This worker's identity in the store."""
        return self._book.owner

    @property
    def lease_ttl(self) -> float:
        """Seconds a lease lasts without renewal."""
        return self._book.ttl

    @property
    def namespace(self) -> str:
        """The key prefix of this store."""
        return self._link.namespace

    @property
    def round_trips(self) -> int:
        """Round trips to the server so far (a pipeline counts once, on a cluster too), for benchmarks and
        tests."""
        return self._link.round_trips

    @property
    def cluster(self) -> bool:
        """Whether this store talks to a Redis Cluster (a ``redis+cluster://`` URL or a ``RedisCluster``)."""
        return self._link.cluster

    def lease(self, session_id: str) -> Lease | None:
        """The lease this worker believes it holds on ``session_id`` (no round trip), else ``None``."""
        return self._book.get(session_id)

    def leases(self) -> dict[str, Lease]:
        """Every lease this worker believes it holds, by session id (a copy)."""
        return self._book.copy()

    # ------------------------------------------------------------------ ownership

    async def claim(self, session_id: str) -> Lease | None:
        """Take the session's lease unless another worker holds it; ``None`` if it does.

        Claiming a session this worker already holds extends the lease and keeps its token.
        """
        lease, _ = await self._book.claim(session_id)
        return lease

    async def claimable(self, limit: int = 5000) -> list[str]:
        """Sessions in the store that no worker holds a lease on: those of workers whose heartbeat lapsed
        (dead, or cut off for longer than ``lease_ttl``) and those released, up to ``limit`` of each per key
        group and call, in a random order (one scripted call per key group, one round trip). Its cost does
        not grow with the sessions live workers hold."""
        check_count("RedisSessionStore.claimable", "limit", limit)

        async def run(client: Any) -> list[str]:
            return await self._link.free_ids(client, limit, self.owner_id)

        result: list[str] = await self._link.retrying("claimable", run)
        return result

    async def load_owned(
        self,
        *,
        want: Callable[[str], bool] | None = None,
        ids: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[SessionRecord]:
        """Claim the free sessions ``want`` accepts (all when ``None``) and those the store says this worker
        holds already (a worker restarted with the same ``owner_id``; the ones ``want`` refuses are
        released), and return the records this worker holds afterwards. At most ``limit`` free sessions are
        claimed (``None``: every one found, see :meth:`claimable`); a few round trips, whatever the number
        of sessions stored.

        With ``ids`` only those sessions are claimed and returned (no scan: what an adoption round that
        found them free sends)."""
        if limit is not None:
            check_count("RedisSessionStore.load_owned", "limit", limit, minimum=0)
        book = self._book
        chosen = list(dict.fromkeys(ids)) if ids is not None else None

        async def run(client: Any) -> list[SessionRecord]:
            unwanted.clear()
            if chosen is not None:
                todo = [sid for sid in chosen if want is None or want(sid)]
            else:
                mine = await book.stored_mine(client)
                wanted = [sid for sid in mine if book.get(sid) is not None or want is None or want(sid)]
                keep = set(wanted)
                unwanted.extend(sid for sid in mine if sid not in keep)
                seen = set(mine)
                free = [sid for sid in await self._link.free_ids(client, 5000, self.owner_id) if sid not in seen]
                free = [sid for sid in free if want is None or want(sid)]
                todo = wanted + (free if limit is None else free[:limit])
            todo += unwanted  # claimed (they are ours already) so that they can be released below
            sent_at = time.monotonic()
            answers = await book.claim_many(client, todo)
            records: list[SessionRecord] = []
            for sid, answer in zip(todo, answers, strict=True):
                lease, text = book.take(sid, answer, sent_at)
                if lease is None or sid in unwanted:
                    continue
                if chosen is not None and not text:
                    empty.append(sid)  # deleted since it was seen free: nothing to serve
                    continue
                record = self._record(sid, text)
                if record is not None:
                    records.append(record)
            return records

        empty: list[str] = []
        unwanted: list[str] = []
        records: list[SessionRecord] = await self._link.retrying("load_owned", run)
        for sid in empty + unwanted:
            await self.release(sid)
        log.debug("acp.store_loaded_owned", sessions=len(records), owner=self.owner_id)
        return records

    async def renew_all(self) -> Renewal:
        """Extend every held lease in one pipeline per ``batch_size``; report the ones this worker lost."""
        return await self._book.renew_all()

    async def release(self, session_id: str) -> bool:
        """Give the session's lease up; the record stays for another worker to claim. ``False`` if this
        worker did not hold it (any more)."""
        return await self._book.release(session_id)

    async def reclaim(self, records: Iterable[SessionRecord]) -> list[str]:
        """Claim and write again the records this worker serves; returns the ids another worker holds.

        Meant for after a data loss (:attr:`Renewal.store_reset`): the index and the records are gone, and
        only the workers that still hold sessions in memory know them.
        """
        book = self._book
        todo = list(records)
        sent_at = time.monotonic()
        answers = await self._link.retrying("claim", lambda c: book.claim_many(c, [r.session_id for r in todo]))
        taken: list[str] = []
        mine: list[SessionRecord] = []
        for record, answer in zip(todo, answers, strict=True):
            lease, _ = book.take(record.session_id, answer, sent_at)
            if lease is None:
                taken.append(record.session_id)
            else:
                mine.append(record)
        if mine:
            await self._write([self._save_call(r) for r in mine], "save")
        return taken

    # ------------------------------------------------------------------ SessionStore

    async def load_all(self) -> list[SessionRecord]:
        """Every stored record, whoever holds it (claims nothing)."""
        link = self._link

        async def run(client: Any) -> list[SessionRecord]:
            ids = await link.ids(client)
            texts = await link.hget_many(client, [link.keys.key("rec", sid) for sid in ids], "record")
            records: list[SessionRecord] = []
            for sid, text in zip(ids, texts, strict=True):
                record = self._record(sid, text)
                if record is not None:
                    records.append(record)
            records.sort(key=lambda r: r.created_at)
            return records

        result: list[SessionRecord] = await link.retrying("load_all", run)
        return result

    async def describe(self) -> list[StoredSession]:
        """Every stored session with its lease: owner, token, time left, fencing counter and record, sorted
        by owner (free ones last), then id. A lease whose holder's heartbeat lapsed is shown free. Read-only:
        it claims, renews and writes nothing (not even the epochs), so an operator may run it against a
        store in use (``acp-client sessions --redis URL``). One scan, then one pipeline per ``batch_size / 4``
        sessions and one for the heartbeats."""
        link = self._link
        names = link.keys

        async def run(client: Any) -> list[StoredSession]:
            ids = await link.ids(client)
            commands: list[tuple[str, Sequence[Any]]] = []
            for sid in ids:
                lease = names.key("lease", sid)
                commands += [("GET", (lease,)), ("PTTL", (lease,)), ("HGET", (names.key("rec", sid), "record"))]
                commands.append(("GET", (names.key("fence", sid),)))
            values = await link.commands(client, commands)
            beats = sorted(
                {(bucket_of(sid), str(v).split("|")[1]) for sid, v in zip(ids, values[::4], strict=True)
                 if v and str(v).count("|") == 2}
            )  # fmt: skip
            beat_keys = [names.group_key(b, f"hb:{owner}") for b, owner in beats]
            found = await link.commands(client, [(c, (k,)) for k in beat_keys for c in ("GET", "PTTL")])
            heartbeat = {key: (found[2 * i], found[2 * i + 1]) for i, key in enumerate(beat_keys)}
            sessions: list[StoredSession] = []
            for i, sid in enumerate(ids):
                value, left, text, fence = values[4 * i : 4 * i + 4]
                parts = str(value).split("|") if value else []
                if len(parts) == 3:  # layout 3: alive while the holder's heartbeat holds its incarnation
                    inc, beat_left = heartbeat.get(names.group_key(bucket_of(sid), f"hb:{parts[1]}"), (None, -2))
                    value = value if inc == parts[2] else None
                    left = beat_left
                sessions.append(
                    StoredSession(
                        sid, holder_of(value), token_of(value), int(left) / 1000 if value and int(left) >= 0 else None,
                        int(fence or 0), self._record(sid, text),
                    )
                )  # fmt: skip
            return sessions

        found: list[StoredSession] = await link.retrying("describe", run, epochs=False)
        found.sort(key=lambda s: (s.owner is None, s.owner or "", s.session_id))
        return found

    def _record(self, session_id: str, text: Any) -> SessionRecord | None:
        """The record stored as ``text`` under ``session_id``; ``None`` if there is none, or (counted in
        :attr:`discarded` and logged) if it does not parse or names another session."""
        if text is None or text is False:
            return None
        try:
            record = SessionRecord.from_json(str(text))
        except (ValueError, TypeError) as exc:
            self.discarded += 1
            log.warning("acp.store_record_discarded", session_id=session_id, error=str(exc))
            return None
        if record.session_id != session_id:
            self.discarded += 1
            log.warning("acp.store_record_discarded", session_id=session_id, error="id does not match its key")
            return None
        return record

    def _save_call(self, record: SessionRecord) -> ScriptCall:
        sid = record.session_id
        lease = self._book.get(sid)
        if lease is None:
            raise KeyError(sid)  # callers check the lease first
        bucket = bucket_of(sid)
        names = self._link.keys
        keys = (names.key("lease", sid), names.key("rec", sid), names.index_key(bucket), names.epoch_key(bucket))
        args = (self._book.value(sid), lease.token, self.owner_id, record.to_json(), sid, names.prefix(bucket), None)
        return ("save", keys, args)

    async def _hold(self, session_id: str) -> Lease:
        lease = self._book.get(session_id)
        if lease is not None:
            return lease
        lease, holder = await self._book.claim(session_id)
        if lease is None:
            raise LeaseLost(session_id, "taken", holder=holder)
        return lease

    async def _write(self, calls: list[ScriptCall], operation: str) -> None:
        for error in await self._write_results(calls, operation):
            if error is not None:
                raise error

    async def _write_results(self, calls: list[ScriptCall], operation: str) -> list[LeaseLost | None]:
        """Run fenced writes in one pipeline; ``None`` for each accepted one, the ``LeaseLost`` otherwise."""
        link = self._link

        def session_of(name: str, args: Sequence[Any]) -> str:
            return str(args[4] if name == "save" else args[1])

        def build(client: Any) -> Any:
            # the epoch goes in when the calls are sent: a reconnect may have read it again meanwhile
            fresh = [(name, keys, (*args[:-1], link.epoch_of(session_of(name, args)))) for name, keys, args in calls]
            return link.scripts(client, fresh)

        answers = await link.retrying(operation, build) if calls else []
        results: list[LeaseLost | None] = []
        reset = False
        for (name, _, args), answer in zip(calls, answers, strict=True):
            code = int(answer[0])
            if code == 1:
                results.append(None)
                continue
            sid = session_of(name, args)
            lease = self._book.drop(sid)
            token = lease.token if lease is not None else None
            if code == -2:
                reset = True
                results.append(LeaseLost(sid, "reset", token=token))
            elif code == -1:
                results.append(LeaseLost(sid, "stale", token=token))
            else:
                holder = holder_of(answer[1])
                reason = "taken" if holder and holder != self.owner_id else "expired"
                results.append(LeaseLost(sid, reason, holder=holder, token=token))
        if reset:
            self._book.adopt_new_epoch()
        return results

    async def save(self, record: SessionRecord) -> None:
        """Write the record, fenced by this worker's lease (a session nobody holds is claimed first).

        Raises :class:`~acp_client.exceptions.LeaseLost` when another worker holds the session or this
        worker's lease expired, :class:`~acp_client.exceptions.StoreUnavailable` when the server stays
        unreachable.
        """
        await self._hold(record.session_id)
        # saves made together (a recovery round saves every session it recovered) share one pipeline
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queued.append((record, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_saves(), name="acp-redis-saves")
        await future

    async def _flush_saves(self) -> None:
        await asyncio.sleep(0)  # let the saves of this turn of the loop join the batch
        while self._queued:
            batch, self._queued = self._queued, []
            calls: list[ScriptCall] = []
            waiting: list[asyncio.Future[None]] = []
            for record, future in batch:
                if future.done():
                    continue  # its caller was cancelled
                if self._book.get(record.session_id) is None:  # lost after save() looked
                    future.set_exception(LeaseLost(record.session_id, "expired"))
                    continue
                calls.append(self._save_call(record))
                waiting.append(future)
            try:
                results = await self._write_results(calls, "save")
            except BaseException as exc:
                error = exc if isinstance(exc, Exception) else StoreUnavailable("save", exc)
                for future in waiting:
                    if not future.done():
                        future.set_exception(error)
                if not isinstance(exc, Exception):
                    raise
                continue
            for future, result in zip(waiting, results, strict=True):
                if future.done():
                    continue
                if result is None:
                    future.set_result(None)
                else:
                    future.set_exception(result)

    async def delete(self, session_id: str) -> None:
        """Remove the record, fenced like :meth:`save`; removing a missing one is not an error."""
        names = self._link.keys
        await self._hold(session_id)
        sid = session_id
        bucket = bucket_of(sid)
        keys = (
            names.key("lease", sid), names.key("rec", sid), names.index_key(bucket), names.key("fence", sid),
            names.epoch_key(bucket),
        )  # fmt: skip
        await self._write([("delete", keys, (self._book.value(sid), sid, names.prefix(bucket), None))], "delete")
        self._book.drop(session_id)

    async def migrate_layout_1(self) -> int:
        """Move the records an older release wrote (key layout 1: ``ns:index``, ``ns:rec:<id>``...) into
        this release's layout, free for any worker to claim, and delete the old keys; returns how many
        records were moved. Run it once per namespace, with every worker of the older release stopped
        (they do not see records in the new layout, nor the new one theirs). A session that already has a
        record in the new layout keeps it. Safe to run again: with nothing left to move it returns 0.
        """
        link = self._link
        book = self._book

        async def read(client: Any) -> tuple[list[str], list[Any]]:
            ids: list[str] = []
            cursor: Any = 0
            while True:
                scan = ("SSCAN", (link.keys.legacy_key("index"), cursor, "COUNT", 5000))
                [(cursor, page)] = await link.commands(client, [scan])
                ids.extend(str(sid) for sid in page)
                if int(cursor) == 0:
                    break
            ids = list(dict.fromkeys(ids))
            texts = await link.hget_many(client, [link.keys.legacy_key(f"rec:{sid}") for sid in ids], "record")
            return ids, texts

        ids, texts = await link.retrying("migrate", read)
        records = [r for sid, text in zip(ids, texts, strict=True) if (r := self._record(sid, text)) is not None]
        moved = 0
        if records:
            before = book.copy()  # leases this store held already: kept
            sent_at = time.monotonic()
            todo = [r.session_id for r in records]
            answers = await link.retrying("migrate", lambda c: book.claim_many(c, todo))
            mine: list[SessionRecord] = []
            for record, answer in zip(records, answers, strict=True):
                lease, text = book.take(record.session_id, answer, sent_at)
                if lease is not None and not text:
                    mine.append(record)  # claimed, and no record in the new layout yet
            results = await self._write_results([self._save_call(r) for r in mine], "migrate")
            moved = sum(1 for result in results if result is None)
            held = [r.session_id for r in records if book.get(r.session_id) is not None and r.session_id not in before]
            release = book.release_calls(held)
            for sid in held:
                book.drop(sid)
            if release:
                await link.retrying("migrate", lambda c: link.scripts(c, release))
        old = [link.keys.legacy_key(kind + sid) for sid in ids for kind in ("rec:", "lease:", "fence:")]
        old += [link.keys.legacy_key("index"), link.keys.legacy_key("epoch")]
        await link.retrying("migrate", lambda c: link.commands(c, [("DEL", (key,)) for key in old]))
        log.info("acp.store_migrated", namespace=self.namespace, records=moved, found=len(ids))
        return moved

    async def close(self) -> None:
        """Release held leases (``release_on_close``) and close the connections; never raises for an
        unreachable server (the leases then simply expire)."""
        if self._link.closed:
            return
        await self._book.wait_claims()
        flusher = self._flusher
        if flusher is not None and not flusher.done():
            await asyncio.wait({flusher})  # saves already made are sent first
        try:
            if self._release_on_close and len(self._book) and self._link.connected:
                held = len(self._book)
                try:
                    await self._link.send_once(self._book.release_all_calls())
                except self._link.errors() as exc:
                    log.warning("acp.store_release_on_close_failed", leases=held, error=str(exc))
            self._book.clear()
        finally:
            await self._link.aclose()

"""A session store on a Redis-protocol server (Redis 6.2+, Valkey 8) shared by several worker processes.

Keys, for a namespace ``ns`` and a session ``sid``::

    ns:epoch          a random id written once; a different or missing value means the server lost its data
    ns:index          a set of every stored session id (scanned with SSCAN)
    ns:rec:sid        a hash: record (JSON), token (fencing token of the last accepted write), owner
    ns:lease:sid      "token|owner", set with SET NX PX; its expiry is the lease's
    ns:fence:sid      the session's fencing counter (INCR on every change of hands)

Every ownership step is one Lua script (atomic on the server), and every batch of them goes out as one
pipeline, so the round trips of ``load_owned`` and ``renew_all`` do not grow with the number of sessions
(beyond one per ``batch_size``). Only ``redis`` (redis-py) is needed, and only when a store is used.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from acp_client._logging import get_logger
from acp_client.exceptions import LeaseLost, StoreError, StoreUnavailable, UsageError
from acp_client.sessions._lease import Lease, Renewal
from acp_client.sessions._redis_scripts import _GROUP, _SCRIPTS, _SHAS
from acp_client.sessions._store import SessionRecord

__all__ = ["RedisSessionStore"]

log = get_logger("acp_client.sessions.redis")

#: server replies that mean "try again shortly" (loading, failover in progress, a long script)
_RETRYABLE_REPLIES = ("LOADING", "READONLY", "BUSY", "MASTERDOWN", "TRYAGAIN")

#: one scripted call: (script name, keys, args)
_Call = tuple[str, Sequence[str], Sequence[Any]]


def _default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _json_list(encoded: Any) -> list[Any]:
    """A JSON array written by a script's ``cjson.encode`` (which writes an empty table as ``{}``)."""
    value = json.loads(encoded)
    return value if isinstance(value, list) else []


def _holder(value: Any) -> str | None:
    if not value:
        return None
    text = str(value)
    return text.split("|", 1)[1] if "|" in text else text


class RedisSessionStore:
    """Session records on a Redis or Valkey server, shared by several worker processes with leases.

    ``url`` is a redis-py URL (``redis://host:6379/0``, ``rediss://`` for TLS, ``unix://``). Each worker
    process uses its own store object; ``owner_id`` names it in the store (default: host, pid and a random
    suffix; pass a stable one so a restarted worker takes its own sessions back at once, but never give two
    live workers the same id). A lease lasts ``lease_ttl`` seconds unless renewed (:meth:`renew_all`, which
    the :class:`~acp_client.ReconnectingClient` calls every ``lease_ttl / 3``).

    Connection errors are retried with capped, jittered backoff for up to ``retry_for`` seconds, then
    raised as :class:`~acp_client.exceptions.StoreUnavailable`; each command waits at most
    ``socket_timeout`` seconds, and at most ``max_connections`` connections are open. Writes by a worker
    that does not hold the lease raise :class:`~acp_client.exceptions.LeaseLost`. ``release_on_close``
    gives every held lease up in :meth:`close`, so other workers adopt the sessions at once rather than
    after ``lease_ttl``.

    Uses only commands both Redis 6.2+ and Valkey 8 have (GET, SET NX PX, INCR, PEXPIRE, HSET, HGET, SADD,
    SREM, SSCAN, EXISTS, DEL, EVALSHA, SCRIPT LOAD, and Lua's ``cjson``); a single primary (Sentinel is fine),
    not Redis Cluster. Needs the ``redis`` package (``pip install 'acp-reconnect[redis]'``).
    """

    def __init__(
        self,
        url: str,
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
        if lease_ttl <= 0:
            raise UsageError("lease_ttl must be positive")
        if batch_size < 1:
            raise UsageError("batch_size must be at least 1")
        if owner_id is not None and (not owner_id or "|" in owner_id):
            raise UsageError("owner_id must be a non-empty string without '|'")
        self._url = url
        self._ns = namespace
        self._ttl = float(lease_ttl)
        self._owner = owner_id or _default_owner()
        self._retry_for = retry_for
        self._socket_timeout = socket_timeout
        self._batch = batch_size
        self._max_connections = max_connections
        self._release_on_close = release_on_close
        self._redis: Any = None
        self._epoch: str | None = None
        self._epoch_lock: asyncio.Lock | None = None
        self._leases: dict[str, Lease] = {}
        self._queued: list[tuple[SessionRecord, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False
        #: records that could not be read back (bad JSON), skipped and logged
        self.discarded = 0
        #: round trips to the server (pipelines count once), for benchmarks and tests
        self.round_trips = 0

    def __repr__(self) -> str:
        # never the URL: it may carry a password
        return f"<RedisSessionStore namespace={self._ns!r} owner={self._owner!r} leases={len(self._leases)}>"

    # ------------------------------------------------------------------ identity

    @property
    def owner_id(self) -> str:
        """This worker's identity in the store."""
        return self._owner

    @property
    def lease_ttl(self) -> float:
        """Seconds a lease lasts without renewal."""
        return self._ttl

    @property
    def namespace(self) -> str:
        """The key prefix of this store."""
        return self._ns

    def lease(self, session_id: str) -> Lease | None:
        """The lease this worker believes it holds on ``session_id`` (no round trip), else ``None``."""
        return self._leases.get(session_id)

    def leases(self) -> dict[str, Lease]:
        """Every lease this worker believes it holds, by session id (a copy)."""
        return dict(self._leases)

    # ------------------------------------------------------------------ keys

    def _k(self, kind: str, session_id: str) -> str:
        return f"{self._ns}:{kind}:{session_id}"

    @property
    def _index(self) -> str:
        return f"{self._ns}:index"

    @property
    def _epoch_key(self) -> str:
        return f"{self._ns}:epoch"

    def _ttl_ms(self) -> int:
        return max(1, int(self._ttl * 1000))

    def _deadline(self, sent_at: float) -> float:
        return sent_at + self._ttl

    # ------------------------------------------------------------------ plumbing

    def _client(self) -> Any:
        if self._closed:
            raise UsageError("this RedisSessionStore was closed")
        if self._redis is None:
            try:
                import redis.asyncio as aioredis
                from redis.asyncio.retry import Retry
                from redis.backoff import NoBackoff
            except ImportError as exc:  # pragma: no cover - depends on the environment
                hint = "pip install 'acp-reconnect[redis]'"
                raise UsageError(f"RedisSessionStore needs the redis package: {hint}") from exc
            pool = aioredis.BlockingConnectionPool.from_url(
                self._url,
                max_connections=self._max_connections,
                timeout=self._socket_timeout,  # waiting for a free connection is bounded too
                decode_responses=True,
                # no socket_timeout in redis-py: it bounds writes with asyncio.wait_for, which on Python 3.11
                # can swallow a cancellation of the caller; every round trip is bounded by _rt() instead
                socket_timeout=None,
                socket_connect_timeout=self._socket_timeout,
                retry=Retry(NoBackoff(), 0),  # the store retries, with its own bounded backoff
            )
            self._redis = aioredis.Redis.from_pool(pool)  # the client owns the pool and closes it
        return self._redis

    async def _rt(self, awaitable: Awaitable[Any]) -> Any:
        """One round trip, bounded by ``socket_timeout`` (``TimeoutError``: retried like a lost link)."""
        async with asyncio.timeout(self._socket_timeout):
            return await awaitable

    @staticmethod
    def _transient() -> tuple[type[BaseException], ...]:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import ReadOnlyError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        return (RedisConnectionError, RedisTimeoutError, ReadOnlyError, ConnectionError, TimeoutError, OSError)

    @staticmethod
    def _errors() -> tuple[type[BaseException], ...]:
        from redis.exceptions import RedisError

        return (RedisError, ConnectionError, TimeoutError, OSError)

    async def _retrying(self, operation: str, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(client)``; retry connection errors (and a server that is loading, read-only after a
        failover, or busy) with capped jittered backoff for ``retry_for`` s, then raise StoreUnavailable."""
        transient = self._transient()
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        deadline = loop.time() + self._retry_for
        delay = 0.05
        attempt = 0
        while True:
            attempt += 1
            try:
                client = self._client()
                await self._ensure_epoch(client)
                result = await fn(client)
                if task is not None and task.cancelling() > cancels:
                    # a cancellation of ours was lost on the way (a library swallowed it): deliver it now
                    raise asyncio.CancelledError
                return result
            except self._errors() as exc:
                if not isinstance(exc, transient) and not str(exc).startswith(_RETRYABLE_REPLIES):
                    # e.g. a script error or a wrong type at a key: retrying would not help
                    raise StoreError(f"the session store refused {operation}: {exc}") from exc
                wait = random.uniform(delay / 2, delay)
                if loop.time() + wait >= deadline:
                    log.warning("acp.store_unavailable", operation=operation, attempts=attempt, error=str(exc))
                    raise StoreUnavailable(operation, exc) from exc
                log.debug("acp.store_retry", operation=operation, attempt=attempt, error=str(exc))
                await asyncio.sleep(wait)
                delay = min(delay * 2, 1.0)

    def _epoch_known(self) -> bool:
        return self._epoch is not None

    async def _ensure_epoch(self, client: Any) -> None:
        if self._epoch is not None:
            return
        if self._epoch_lock is None:
            self._epoch_lock = asyncio.Lock()
        async with self._epoch_lock:  # concurrent first calls read it once
            if self._epoch_known():  # another task read it meanwhile
                return
            self.round_trips += 1
            async with client.pipeline(transaction=False) as pipe:
                pipe.set(self._epoch_key, uuid.uuid4().hex, nx=True)
                pipe.get(self._epoch_key)
                _, epoch = await self._rt(pipe.execute())
            self._epoch = str(epoch)

    async def _scripts(self, client: Any, calls: Sequence[_Call]) -> list[Any]:
        """Run scripted calls as pipelines of ``batch_size``; load the scripts once if the server lacks them."""
        from redis.exceptions import NoScriptError, ResponseError

        results: list[Any] = []
        for start in range(0, len(calls), self._batch):
            chunk = calls[start : start + self._batch]
            for tries in range(2):
                self.round_trips += 1
                async with client.pipeline(transaction=False) as pipe:
                    for name, keys, args in chunk:
                        pipe.evalsha(_SHAS[name], len(keys), *keys, *args)
                    answers = await self._rt(pipe.execute(raise_on_error=False))
                if tries == 0 and any(
                    isinstance(a, NoScriptError) or (isinstance(a, ResponseError) and "NOSCRIPT" in str(a))
                    for a in answers
                ):
                    # a new or restarted server: nothing in the chunk ran; load the scripts and run it again
                    self.round_trips += 1
                    async with client.pipeline(transaction=False) as pipe:
                        for text in _SCRIPTS.values():
                            pipe.script_load(text)
                        await self._rt(pipe.execute())
                    continue
                break
            for answer in answers:
                if isinstance(answer, BaseException):
                    raise answer
            results.extend(answers)
        return results

    async def _ids(self, client: Any, *, free_only: bool = False) -> list[str]:
        """Every session id in the index (``free_only``: those without a lease), by pages of 5,000."""
        ids: list[str] = []
        cursor: Any = 0
        prefix = self._k("lease", "") if free_only else ""
        while True:
            [(cursor, page)] = await self._scripts(client, [("scan", (self._index,), (cursor, 5000, prefix))])
            ids.extend(_json_list(page))
            if int(cursor) == 0:
                break
        return list(dict.fromkeys(ids))

    def _record(self, session_id: str, text: Any) -> SessionRecord | None:
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

    async def _claim_many(self, client: Any, ids: list[str]) -> list[Any]:
        """Claim ``ids`` with one bulk script call per ``_GROUP`` sessions; answers shaped like ``claim``'s."""
        calls: list[_Call] = [
            ("claim_many", (), (json.dumps(ids[start : start + _GROUP]), self._owner, self._ttl_ms(), f"{self._ns}:"))
            for start in range(0, len(ids), _GROUP)
        ]
        answers: list[Any] = []
        for encoded in await self._scripts(client, calls):
            flat = _json_list(encoded)
            for i in range(0, len(flat), 2):
                token = int(flat[i])
                answers.append([1, token, flat[i + 1] or None] if token > 0 else [0, flat[i + 1]])
        return answers

    def _claim_call(self, session_id: str) -> _Call:
        keys = (self._k("lease", session_id), self._k("fence", session_id), self._k("rec", session_id))
        return ("claim", keys, (self._owner, self._ttl_ms()))

    def _take(self, session_id: str, answer: Any, sent_at: float) -> tuple[Lease | None, Any]:
        """Apply one claim answer: remember the lease; returns it and the stored record text, or ``None``
        and the holder's id."""
        if int(answer[0]) == 1:
            lease = Lease(session_id, self._owner, int(answer[1]), self._deadline(sent_at))
            self._leases[session_id] = lease
            return lease, answer[2] if len(answer) > 2 else None
        self._leases.pop(session_id, None)
        return None, _holder(answer[1])

    def _value(self, lease: Lease) -> str:
        return f"{lease.token}|{lease.owner}"

    # ------------------------------------------------------------------ ownership

    async def claim(self, session_id: str) -> Lease | None:
        """Take the session's lease unless another worker holds it; ``None`` if it does.

        Claiming a session this worker already holds extends the lease and keeps its token.
        """
        lease, _ = await self._claim(session_id)
        return lease

    async def _claim(self, session_id: str) -> tuple[Lease | None, str | None]:
        sent_at = time.monotonic()
        answers = await self._retrying("claim", lambda c: self._scripts(c, [self._claim_call(session_id)]))
        lease, holder = self._take(session_id, answers[0], sent_at)
        if lease is not None:
            log.debug("acp.lease_claimed", session_id=session_id, token=lease.token)
            return lease, None
        return None, holder

    async def claimable(self) -> list[str]:
        """Sessions in the store that no worker holds a lease on (a scripted scan: one round trip per 5,000)."""

        async def run(client: Any) -> list[str]:
            return await self._ids(client, free_only=True)

        result: list[str] = await self._retrying("claimable", run)
        return result

    async def load_owned(self, *, want: Callable[[str], bool] | None = None) -> list[SessionRecord]:
        """Claim the stored sessions ``want`` accepts (all when ``None``; those already held always) and
        return the records this worker holds afterwards, in one scan plus one pipeline per ``batch_size``."""

        async def run(client: Any) -> list[SessionRecord]:
            ids = await self._ids(client)
            todo = [sid for sid in ids if sid in self._leases or want is None or want(sid)]
            sent_at = time.monotonic()
            answers = await self._claim_many(client, todo)
            records: list[SessionRecord] = []
            for sid, answer in zip(todo, answers, strict=True):
                lease, text = self._take(sid, answer, sent_at)
                if lease is None:
                    continue
                record = self._record(sid, text)
                if record is not None:
                    records.append(record)
            return records

        records: list[SessionRecord] = await self._retrying("load_owned", run)
        log.debug("acp.store_loaded_owned", sessions=len(records), owner=self._owner)
        return records

    async def renew_all(self) -> Renewal:
        """Extend every held lease in one pipeline per ``batch_size``; report the ones this worker lost."""
        held = list(self._leases.values())
        if not held:
            # still notice a data loss (the caller reconciles its sessions with the agent)
            return Renewal(frozenset(), frozenset(), await self._check_epoch())

        async def run(client: Any) -> list[Any]:
            groups = [held[start : start + _GROUP] for start in range(0, len(held), _GROUP)]
            calls: list[_Call] = [
                (
                    "renew_many",
                    (self._epoch_key,),
                    (json.dumps([[one.session_id, self._value(one)] for one in group]), self._ttl_ms(), self._epoch,
                     f"{self._ns}:"),
                )
                for group in groups
            ]  # fmt: skip
            answers: list[Any] = []
            for group, encoded in zip(groups, await self._scripts(client, calls), strict=True):
                flat = _json_list(encoded)
                if flat == [-2]:
                    answers += [[-2, ""]] * len(group)  # the store lost its data: every lease is gone
                else:
                    answers += [[1, ""] if a == 1 else [0, a] for a in flat]
            return answers

        sent_at = time.monotonic()
        answers = await self._retrying("renew", run)
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
                    holder=_holder(answer[1]),
                )
        if reset:
            await self._adopt_new_epoch()
        return Renewal(frozenset(renewed), frozenset(lost), reset)

    async def _check_epoch(self) -> bool:
        async def run(client: Any) -> Any:
            self.round_trips += 1
            return await self._rt(client.get(self._epoch_key))

        current = await self._retrying("renew", run)
        if current == self._epoch:
            return False
        await self._adopt_new_epoch()
        return True

    async def _adopt_new_epoch(self) -> None:
        log.warning("acp.store_reset", namespace=self._ns, owner=self._owner)
        self._leases.clear()
        self._epoch = None  # the next call writes (or reads) the new epoch

    async def release(self, session_id: str) -> bool:
        """Give the session's lease up; the record stays for another worker to claim. ``False`` if this
        worker did not hold it (any more)."""
        lease = self._leases.pop(session_id, None)
        if lease is None:
            return False
        call: _Call = ("release", (self._k("lease", session_id),), (self._value(lease),))
        answers = await self._retrying("release", lambda c: self._scripts(c, [call]))
        return bool(answers[0])

    async def reclaim(self, records: Iterable[SessionRecord]) -> list[str]:
        """Claim and write again the records this worker serves; returns the ids another worker holds.

        Meant for after a data loss (:attr:`Renewal.store_reset`): the index and the records are gone, and
        only the workers that still hold sessions in memory know them.
        """
        todo = list(records)
        sent_at = time.monotonic()
        answers = await self._retrying("claim", lambda c: self._claim_many(c, [r.session_id for r in todo]))
        taken: list[str] = []
        mine: list[SessionRecord] = []
        for record, answer in zip(todo, answers, strict=True):
            lease, _ = self._take(record.session_id, answer, sent_at)
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

        async def run(client: Any) -> list[SessionRecord]:
            ids = await self._ids(client)
            records: list[SessionRecord] = []
            for start in range(0, len(ids), self._batch):
                chunk = ids[start : start + self._batch]
                self.round_trips += 1
                async with client.pipeline(transaction=False) as pipe:
                    for sid in chunk:
                        pipe.hget(self._k("rec", sid), "record")
                    texts = await self._rt(pipe.execute())
                for sid, text in zip(chunk, texts, strict=True):
                    record = self._record(sid, text)
                    if record is not None:
                        records.append(record)
            records.sort(key=lambda r: r.created_at)
            return records

        result: list[SessionRecord] = await self._retrying("load_all", run)
        return result

    def _save_call(self, record: SessionRecord) -> _Call:
        lease = self._leases[record.session_id]
        sid = record.session_id
        keys = (self._k("lease", sid), self._k("rec", sid), self._index, self._epoch_key)
        return ("save", keys, (self._value(lease), lease.token, self._owner, record.to_json(), sid, self._epoch))

    async def _hold(self, session_id: str) -> Lease:
        lease = self._leases.get(session_id)
        if lease is not None:
            return lease
        lease, holder = await self._claim(session_id)
        if lease is None:
            raise LeaseLost(session_id, "taken", holder=holder)
        return lease

    async def _write(self, calls: list[_Call], operation: str) -> None:
        for error in await self._write_results(calls, operation):
            if error is not None:
                raise error

    async def _write_results(self, calls: list[_Call], operation: str) -> list[LeaseLost | None]:
        """Run fenced writes in one pipeline; ``None`` for each accepted one, the ``LeaseLost`` otherwise."""

        def build(client: Any) -> Any:
            # the epoch is read when the call is built: a reconnect may just have re-read it
            fresh = [(name, keys, (*args[:-1], self._epoch)) for name, keys, args in calls]
            return self._scripts(client, fresh)

        answers = await self._retrying(operation, build) if calls else []
        results: list[LeaseLost | None] = []
        reset = False
        for (_, _, args), answer in zip(calls, answers, strict=True):
            code = int(answer[0])
            if code == 1:
                results.append(None)
                continue
            sid = str(args[4] if operation == "save" else args[1])
            lease = self._leases.pop(sid, None)
            token = lease.token if lease is not None else None
            if code == -2:
                reset = True
                results.append(LeaseLost(sid, "reset", token=token))
            elif code == -1:
                results.append(LeaseLost(sid, "stale", token=token))
            else:
                holder = _holder(answer[1])
                reason = "taken" if holder and holder != self._owner else "expired"
                results.append(LeaseLost(sid, reason, holder=holder, token=token))
        if reset:
            await self._adopt_new_epoch()
        return results

    async def save(self, record: SessionRecord) -> None:
        """Write the record, fenced by this worker's lease (a session nobody holds is claimed first).

        Raises :class:`~acp_client.exceptions.LeaseLost` when another worker holds the session or this
        worker's lease expired, :class:`~acp_client.exceptions.StoreUnavailable` when the server stays
        unreachable.
        """
        await self._hold(record.session_id)
        # concurrent saves (a recovery round writes every recovered session) go out as one pipeline
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queued.append((record, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_saves(), name="acp-redis-saves")
        await future

    async def _flush_saves(self) -> None:
        await asyncio.sleep(0)  # the saves made in this turn of the loop join the batch
        while self._queued:
            batch, self._queued = self._queued, []
            calls: list[_Call] = []
            waiting: list[asyncio.Future[None]] = []
            for record, future in batch:
                if future.done():
                    continue  # its caller was cancelled
                if record.session_id not in self._leases:  # lost since save() checked
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
        lease = await self._hold(session_id)
        sid = session_id
        keys = (self._k("lease", sid), self._k("rec", sid), self._index, self._k("fence", sid), self._epoch_key)
        await self._write([("delete", keys, (self._value(lease), sid, self._epoch))], "delete")
        self._leases.pop(session_id, None)

    async def close(self) -> None:
        """Release held leases (``release_on_close``) and close the connections; never raises for an
        unreachable server (the leases then simply expire)."""
        if self._closed:
            return
        flusher = self._flusher
        if flusher is not None and not flusher.done():
            await asyncio.wait({flusher})  # the saves already made go out first
        try:
            if self._release_on_close and self._leases and self._redis is not None:
                held = list(self._leases.values())
                calls: list[_Call] = [
                    ("release", (self._k("lease", one.session_id),), (self._value(one),)) for one in held
                ]
                try:
                    async with asyncio.timeout(self._socket_timeout * 2):
                        await self._scripts(self._redis, calls)
                except self._errors() as exc:
                    log.warning("acp.store_release_on_close_failed", leases=len(held), error=str(exc))
            self._leases.clear()
        finally:
            self._closed = True
            client, self._redis = self._redis, None
            if client is not None:
                await client.aclose()

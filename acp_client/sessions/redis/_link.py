"""The connection side of :class:`~acp_client.sessions.RedisSessionStore`: one server link per store.

A :class:`RedisLink` owns the redis-py client and its connections (made on first use, closed once; a client
the application passed in is used, never closed), the key names of one namespace (:attr:`RedisLink.keys`),
the store's epochs (read or written before the first command, forgotten after a data loss), and the count
of round trips. It bounds
every round trip by ``socket_timeout``, retries lost links and "try again" replies through tenacity
(full-jitter waits under a cap, :mod:`._retry`), and sends scripted calls as pipelines of ``batch_size``
(loading the scripts on the nodes that lack them). It knows nothing of leases or records: the store and
its lease book (``_leases.py``) decide what to send and read the answers.

The key names are :class:`~acp_client.sessions.redis._keys.KeyLayout`'s (layout 2, the one a Redis Cluster
can serve).

A URL ``redis+cluster://`` (``rediss+cluster://`` for TLS) or a ``RedisCluster`` client selects redis-py's
cluster client; its pipelines split by node, and a bulk call never spans two groups.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from acp_client._backoff import Backoff
from acp_client._logging import get_logger
from acp_client._redact import redact_url
from acp_client.exceptions import StoreError, StoreUnavailable, UsageError
from acp_client.sessions.redis._keys import BUCKETS, KeyLayout, bucket_of
from acp_client.sessions.redis._retry import Deadline, FullJitter
from acp_client.sessions.redis._scripts import _SCRIPTS, _SHAS

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster
    from tenacity import RetryCallState

__all__ = ["CLUSTER_SCHEMES", "RedisLink", "ScriptCall", "json_list"]

log = get_logger("acp_client.sessions.redis")

#: server replies that mean "try again shortly" (loading, failover in progress, a long script, a cluster
#: that is electing a new primary or moving a slot), and what redis-py's cluster client says when no node
#: it knows answers or the nodes it reached do not cover every slot yet
_RETRYABLE_REPLIES = (
    "LOADING", "READONLY", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "MOVED", "ASK",
    "Redis Cluster cannot be connected", "All slots are not covered",
)  # fmt: skip

#: the link's retry waits (the package's one Backoff): the first up to 50 ms (``2 * base``), each further one up
#: to twice as long, at most _RETRY_CAP seconds
_RETRY_BASE = 0.025
_RETRY_CAP = 1.0

#: URL schemes that select the cluster client, and the plain scheme redis-py is given instead
CLUSTER_SCHEMES = {
    "redis+cluster": "redis",
    "rediss+cluster": "rediss",
    "valkey+cluster": "redis",
    "valkeys+cluster": "rediss",
}
#: the single-server schemes: redis-py's own, and Valkey's names for the same protocol
PLAIN_SCHEMES = {"redis": "redis", "rediss": "rediss", "unix": "unix", "valkey": "redis", "valkeys": "rediss"}

#: one scripted call: (script name, keys, args)
ScriptCall = tuple[str, Sequence[str], Sequence[Any]]


def json_list(encoded: Any) -> list[Any]:
    """A JSON array written by a script's ``cjson.encode`` (which writes an empty table as ``{}``)."""
    value = json.loads(encoded)
    return value if isinstance(value, list) else []


def _last_error(state: RetryCallState) -> str:
    """The text of the error the attempt of ``state`` ended with."""
    error = state.outcome.exception() if state.outcome is not None else None
    return str(error)


def _transient() -> tuple[type[BaseException], ...]:
    """Errors that say the link (not the command) failed: always worth another try."""
    from redis.exceptions import AskError, ClusterDownError, ReadOnlyError, SlotNotCoveredError, TryAgainError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    # AskError and its subclass MovedError: a slot moved more often than redis-py follows in one command
    return (
        RedisConnectionError, RedisTimeoutError, ReadOnlyError, ClusterDownError, TryAgainError,
        SlotNotCoveredError, AskError, ConnectionError, TimeoutError, OSError,
    )  # fmt: skip


def _plain_url(url: str) -> tuple[str, bool]:
    """``url`` with its scheme replaced by the one redis-py knows (``valkey://`` is ``redis://``, a cluster
    scheme its server's), and whether it named a cluster. Any other scheme is a :class:`UsageError` naming
    the URL with its password redacted (redis-py would raise a bare ``ValueError`` at the first command)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        raise UsageError("RedisSessionStore url is not a URL") from None
    scheme = parts.scheme.lower()
    plain = CLUSTER_SCHEMES.get(scheme)
    if plain is not None:
        return urlunsplit((plain, *parts[1:])), True
    plain = PLAIN_SCHEMES.get(scheme)
    if plain is None:
        known = ", ".join(f"{name}://" for name in (*PLAIN_SCHEMES, *CLUSTER_SCHEMES))
        raise UsageError(f"RedisSessionStore url must use one of {known}; got {redact_url(url)!r}")
    return (url if plain == scheme else urlunsplit((plain, *parts[1:]))), False


class RedisLink:
    """The server connection of one store: client, retries, epochs, scripted pipelines, round-trip count.

    ``target`` is a URL or a redis-py asyncio client (``Redis`` or ``RedisCluster``, made with
    ``decode_responses=True``); the other settings are those of :class:`~acp_client.sessions.RedisSessionStore`
    of the same name.
    """

    def __init__(
        self,
        target: str | Redis | RedisCluster,
        *,
        namespace: str,
        retry_for: float,
        socket_timeout: float,
        batch_size: int,
        max_connections: int,
    ) -> None:
        if not namespace or "{" in namespace or "}" in namespace:
            raise UsageError(
                "RedisSessionStore.namespace must be a non-empty string without '{' or '}' (they mark hash tags)"
            )
        self._url: str | None = None
        self._redis: Any = None
        self._owns_client = True
        #: the store as errors name it: its URL with the password redacted, or the client's type
        self.where = type(target).__name__
        if isinstance(target, str):
            self._url, self._cluster = _plain_url(target)
            self.where = redact_url(target)
        else:
            self._redis, self._cluster = target, self._is_cluster_client(target)
            self._owns_client = False
        self._ns = namespace
        self.keys = KeyLayout(namespace)
        """The key names of this namespace."""
        self._retry_for = retry_for
        self._backoff = Backoff(base=_RETRY_BASE, cap=_RETRY_CAP)
        self._socket_timeout = socket_timeout
        self._batch = batch_size
        self._max_connections = max_connections
        self._epochs: list[str] | None = None
        self._epoch_lock: asyncio.Lock | None = None
        self._closed = False
        self._round_trips = 0
        self._topology_resets = 0
        self._turns: asyncio.Semaphore | None = asyncio.Semaphore(max_connections) if self._cluster else None
        self._legacy_seen = False

    @staticmethod
    def _is_cluster_client(client: object) -> bool:
        from redis.asyncio import Redis
        from redis.asyncio.cluster import RedisCluster

        if isinstance(client, RedisCluster):
            cluster = True
        elif isinstance(client, Redis):
            cluster = False
        else:
            kind = type(client).__name__
            raise UsageError(f"RedisSessionStore.url must be a URL or a redis.asyncio client, not {kind}")
        if not client.get_encoder().decode_responses:
            raise UsageError("a client given to RedisSessionStore must be made with decode_responses=True")
        return cluster

    # ------------------------------------------------------------------ state

    @property
    def namespace(self) -> str:
        """The key prefix of the store."""
        return self._ns

    @property
    def cluster(self) -> bool:
        """Whether the link talks to a Redis Cluster."""
        return self._cluster

    @property
    def round_trips(self) -> int:
        """Round trips to the server so far (a pipeline counts once, whatever the number of nodes)."""
        return self._round_trips

    def epoch_of(self, session_id: str) -> str | None:
        """The epoch of ``session_id``'s group as last read; ``None`` before the first command or after
        :meth:`forget_epoch`."""
        return self._epochs[bucket_of(session_id)] if self._epochs is not None else None

    def bucket_epoch(self, bucket: int) -> str | None:
        """The epoch of group ``bucket`` as last read (``None``: not read yet)."""
        return self._epochs[bucket] if self._epochs is not None else None

    @property
    def connected(self) -> bool:
        """Whether a client was made (and not closed yet)."""
        return self._redis is not None

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` ran."""
        return self._closed

    def forget_epoch(self) -> None:
        """Drop the known epochs: the next command writes (or reads) the server's current ones."""
        self._epochs = None

    # ------------------------------------------------------------------ connection and retries

    @staticmethod
    def errors() -> tuple[type[BaseException], ...]:
        """Every error a command may raise (transient or not)."""
        from redis.exceptions import RedisClusterException, RedisError

        return (RedisError, RedisClusterException, ConnectionError, TimeoutError, OSError)

    def _client(self) -> Any:
        if self._closed:
            raise UsageError("this RedisSessionStore was closed")
        if self._redis is None:
            try:
                import redis.asyncio as aioredis
                from redis.asyncio.cluster import RedisCluster
                from redis.asyncio.retry import Retry
                from redis.backoff import NoBackoff
            except ImportError as exc:  # pragma: no cover - depends on the environment
                hint = "pip install 'acp-reconnect[redis]'"
                raise UsageError(f"RedisSessionStore needs the redis package: {hint}") from exc
            assert self._url is not None  # a link made from a client has one from the start
            if self._cluster:
                # one connection pool per node, each bounded by max_connections; redirections (MOVED, ASK)
                # are followed by redis-py, everything else is retried by retrying()
                self._redis = RedisCluster.from_url(
                    self._url,
                    max_connections=self._max_connections,
                    decode_responses=True,
                    socket_timeout=None,  # _rt() bounds each round trip (see below)
                    socket_connect_timeout=self._socket_timeout,
                    retry=Retry(NoBackoff(), 0),
                )
            else:
                pool = aioredis.BlockingConnectionPool.from_url(
                    self._url,
                    max_connections=self._max_connections,
                    timeout=self._socket_timeout,  # the wait for a free connection has a bound as well
                    decode_responses=True,
                    # redis-py's socket_timeout stays off: it wraps writes in asyncio.wait_for, which on
                    # Python 3.11 may eat the caller's cancellation; _rt() bounds each round trip instead
                    socket_timeout=None,
                    socket_connect_timeout=self._socket_timeout,
                    retry=Retry(NoBackoff(), 0),  # retries are ours (retrying()), with a bounded backoff
                )
                self._redis = aioredis.Redis.from_pool(pool)  # closing the client closes the pool
        return self._redis

    async def _rt(self, awaitable: Awaitable[Any]) -> Any:
        """One round trip, bounded by ``socket_timeout`` (``TimeoutError``: retried like a lost link).

        On a cluster at most ``max_connections`` round trips are under way at once (each takes one connection
        per node it reaches): redis-py's cluster client has no blocking pool and refuses a command beyond its
        limit, so the wait for a turn happens here, bounded by ``socket_timeout`` like the single server's
        wait for a free connection."""
        turns = self._turns
        if turns is None:
            async with asyncio.timeout(self._socket_timeout):
                return await awaitable
        try:
            async with asyncio.timeout(self._socket_timeout):
                await turns.acquire()
        except BaseException:
            if inspect.iscoroutine(awaitable):
                awaitable.close()  # never started: no "never awaited" warning
            raise
        try:
            async with asyncio.timeout(self._socket_timeout):
                return await awaitable
        finally:
            turns.release()

    @staticmethod
    def _topology_may_have_changed(error: BaseException) -> bool:
        """Whether ``error`` may mean a node went away or a replica took over (not merely a slow answer)."""
        from redis.exceptions import AskError, ClusterDownError, MaxConnectionsError, SlotNotCoveredError
        from redis.exceptions import ConnectionError as RedisConnectionError

        if isinstance(error, MaxConnectionsError):
            return False  # busy, not gone
        if isinstance(error, (RedisConnectionError, ClusterDownError, SlotNotCoveredError, AskError, ConnectionError)):
            return True
        return str(error).startswith(("Redis Cluster cannot be connected", "All slots are not covered", "MOVED"))

    async def _forget_topology(self, seen: int) -> None:
        """After a lost link to a cluster node: drop redis-py's map of the cluster, so the next attempt asks
        a live node who serves which slot now (a replica may have taken over). ``seen`` is the count of such
        resets when the failed attempt began: if another task reset the map since, this one does not (the
        reset itself fails the other commands in flight, which must not reset it again and again)."""
        client = self._redis
        if not self._cluster or client is None or seen != self._topology_resets:
            return
        self._topology_resets += 1
        log.debug("acp.store_cluster_remapped", namespace=self._ns)
        try:
            await client.aclose()  # the cluster client maps the nodes again on its next command
        except self.errors() as exc:
            log.debug("acp.store_topology_reset_failed", error=str(exc))

    async def retrying(self, operation: str, fn: Callable[[Any], Any], *, epochs: bool = True) -> Any:
        """Await ``fn(client)``; on a lost link or a server that is loading, read-only after a failover,
        busy or electing a new primary, try again (tenacity: full-jitter waits from 50 ms up to 1 s) for
        ``retry_for`` s, then raise StoreUnavailable. Any other server error is a StoreError at once.
        ``epochs=False``: do not read (or write) the epochs first (a read-only look at the store)."""
        from tenacity import AsyncRetrying, retry_if_exception_type

        transient = _transient()
        errors = self.errors()
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0

        async def attempt() -> Any:
            seen = self._topology_resets
            try:
                client = self._client()
                if epochs:
                    await self._ensure_epoch(client)
                result = await fn(client)
            except errors as exc:
                if not isinstance(exc, transient) and not str(exc).startswith(_RETRYABLE_REPLIES):
                    # a script error, a key of the wrong type...: the same command would fail again
                    raise StoreError(f"the session store refused {operation}: {exc}") from exc
                if self._topology_may_have_changed(exc):
                    await self._forget_topology(seen)
                raise  # worth another try
            if task is not None and task.cancelling() > cancels:
                # something below swallowed a cancellation meant for us: raise it here instead
                raise asyncio.CancelledError
            return result

        def retry_logged(state: RetryCallState) -> None:
            log.debug("acp.store_retry", operation=operation, attempt=state.attempt_number, error=_last_error(state))

        def give_up(state: RetryCallState) -> Any:
            error = state.outcome.exception() if state.outcome is not None else None
            log.warning("acp.store_unavailable", operation=operation, attempts=state.attempt_number, error=str(error))
            raise StoreUnavailable(operation, error, where=self.where) from error

        # a retrying object per call: tenacity keeps the state of an iteration on it
        schedule = AsyncRetrying(
            wait=FullJitter(self._backoff, deadline=self._retry_for),
            stop=Deadline(self._retry_for),
            retry=retry_if_exception_type(errors),
            before_sleep=retry_logged,
            retry_error_callback=give_up,
        )
        return await schedule(attempt)

    def _has_epochs(self) -> bool:
        return self._epochs is not None

    async def _ensure_epoch(self, client: Any) -> None:
        if self._epochs is not None:
            return
        if self._epoch_lock is None:
            self._epoch_lock = asyncio.Lock()
        async with self._epoch_lock:  # the first calls, made together, read them only once
            if self._has_epochs():  # a task ahead of us in the lock read them (a call: mypy narrowed the field)
                return
            self._round_trips += 1
            fresh = uuid.uuid4().hex
            async with client.pipeline(transaction=False) as pipe:
                for bucket in range(BUCKETS):
                    pipe.set(self.keys.epoch_key(bucket), fresh, nx=True)
                    pipe.get(self.keys.epoch_key(bucket))
                    pipe.get(self.keys.group_key(bucket, "layout"))
                for name in ("epoch", "index"):  # one key each: on a cluster they live in different slots
                    pipe.exists(self.keys.legacy_key(name))
                answers = await self._rt(pipe.execute())
            epochs = [str(epoch) for epoch in answers[1 : 3 * BUCKETS : 3]]
            unmarked = [bucket for bucket, mark in enumerate(answers[2 : 3 * BUCKETS : 3]) if mark is None]
            if unmarked:
                await self._index_layout_2(client, unmarked)
            self._epochs = epochs
            if any(answers[3 * BUCKETS :]) and not self._legacy_seen:
                self._legacy_seen = True
                log.warning(
                    "acp.store_layout_1_found",
                    namespace=self._ns,
                    hint="records of an older release are in this namespace: stop its workers, then run "
                    "RedisSessionStore.migrate_layout_1() once",
                )

    async def _index_layout_2(self, client: Any, buckets: list[int]) -> None:
        """The one-time step from key layout 2, for the groups without their ``layout`` marker: every
        indexed session without a lease of layout 3 goes to the group's free set (paged, the groups'
        pages pipelined together), then the group is marked. Workers doing it at once do no harm (the
        same ids are added). A new group costs one empty page."""
        cursors: dict[int, Any] = dict.fromkeys(buckets, 0)
        while cursors:
            order, names = list(cursors), self.keys
            calls: list[ScriptCall] = [
                ("convert", (names.index_key(b),), (cursors[b], 1000, names.prefix(b))) for b in order
            ]
            cursors = {b: c for b, c in zip(order, await self.scripts(client, calls), strict=True) if int(c) != 0}

    async def epoch_changed(self, operation: str) -> bool:
        """Read the server's epochs (retried like ``operation``): whether any differs from the known one."""

        async def run(client: Any) -> list[Any]:
            self._round_trips += 1
            async with client.pipeline(transaction=False) as pipe:
                for bucket in range(BUCKETS):
                    pipe.get(self.keys.epoch_key(bucket))
                answers: list[Any] = await self._rt(pipe.execute())
            return answers

        current = await self.retrying(operation, run)
        return bool(current != self._epochs)

    # ------------------------------------------------------------------ commands

    async def _load_scripts(self, client: Any) -> None:
        self._round_trips += 1
        if self._cluster:
            # SCRIPT LOAD goes to every primary (redis-py's cluster routing): a node that was promoted or
            # added lacks them
            async def load_each() -> None:
                for text in _SCRIPTS.values():  # one at a time: each takes a connection to every primary
                    await client.script_load(text)

            await self._rt(load_each())
            return
        async with client.pipeline(transaction=False) as pipe:
            for text in _SCRIPTS.values():
                pipe.script_load(text)
            await self._rt(pipe.execute())

    async def scripts(self, client: Any, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run scripted calls as pipelines of ``batch_size``; load the scripts once if a server lacks them
        (then only the calls it refused are sent again: on a cluster the other nodes ran theirs)."""
        from redis.exceptions import NoScriptError, ResponseError

        def noscript(answer: Any) -> bool:
            return isinstance(answer, NoScriptError) or (
                isinstance(answer, ResponseError) and "NOSCRIPT" in str(answer)
            )

        results: list[Any] = []
        for start in range(0, len(calls), self._batch):
            chunk = calls[start : start + self._batch]
            answers: list[Any] = [None] * len(chunk)
            todo = list(range(len(chunk)))
            for tries in range(2):
                self._round_trips += 1
                async with client.pipeline(transaction=False) as pipe:
                    for i in todo:
                        name, keys, args = chunk[i]
                        # the command itself: redis-py's cluster pipeline blocks its evalsha() helper, although
                        # it routes EVALSHA by its keys (all of one slot here) like any other command
                        pipe.execute_command("EVALSHA", _SHAS[name], len(keys), *keys, *args)
                    got = await self._rt(pipe.execute(raise_on_error=False))
                for i, answer in zip(todo, got, strict=True):
                    answers[i] = answer
                todo = [i for i in todo if noscript(answers[i])]
                if tries == 0 and todo:
                    await self._load_scripts(client)  # a fresh, restarted or promoted server
                    continue
                break
            for answer in answers:
                if isinstance(answer, BaseException):
                    raise answer
            results.extend(answers)
        return results

    async def ids(self, client: Any) -> list[str]:
        """Every session id in the index: one scripted SSCAN page of up to 5,000 ids per group and call, the
        groups' pages pipelined together (O(all sessions): for reads of everything, never for idle
        rounds)."""
        ids: list[str] = []
        cursors: dict[int, Any] = dict.fromkeys(range(BUCKETS), 0)
        while cursors:
            buckets, names = list(cursors), self.keys
            calls: list[ScriptCall] = [("scan", (names.index_key(b),), (cursors[b], 5000)) for b in buckets]
            cursors = {}
            for bucket, (cursor, page) in zip(buckets, await self.scripts(client, calls), strict=True):
                ids.extend(json_list(page))
                if int(cursor) != 0:
                    cursors[bucket] = cursor
        return list(dict.fromkeys(ids))

    async def free_ids(self, client: Any, limit: int, owner: str) -> list[str]:
        """Free sessions: those of dead workers (their heartbeat gone) and the released ones, up to ``limit``
        of each set per group, in a random order (and ``owner``'s own leases of key layout 2); one scripted
        call per group, in one pipeline. Its cost
        grows with the groups, the workers and the sessions found, not with the sessions live workers
        hold."""
        names = self.keys
        calls: list[ScriptCall] = [
            ("free", (names.epoch_key(b),), (names.prefix(b), limit, owner)) for b in range(BUCKETS)
        ]
        ids: list[str] = []
        for page in await self.scripts(client, calls):
            ids.extend(json_list(page))
        return list(dict.fromkeys(ids))

    async def hget_many(self, client: Any, keys: Sequence[str], field: str) -> list[Any]:
        """``field`` of each hash in ``keys`` (``None`` where missing), in pipelines of ``batch_size``."""
        values: list[Any] = []
        for start in range(0, len(keys), self._batch):
            self._round_trips += 1
            async with client.pipeline(transaction=False) as pipe:
                for key in keys[start : start + self._batch]:
                    pipe.hget(key, field)
                values.extend(await self._rt(pipe.execute()))
        return values

    async def commands(self, client: Any, commands: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
        """Plain commands (name, args) in pipelines of ``batch_size``; their answers in order."""
        values: list[Any] = []
        for start in range(0, len(commands), self._batch):
            self._round_trips += 1
            async with client.pipeline(transaction=False) as pipe:
                for name, args in commands[start : start + self._batch]:
                    pipe.execute_command(name, *args)
                values.extend(await self._rt(pipe.execute()))
        return values

    async def send_once(self, calls: Sequence[ScriptCall]) -> None:
        """Send scripted calls on the open client once, without retries, within two ``socket_timeout``s;
        raises one of :meth:`errors` (or ``TimeoutError``) if they do not go through."""
        async with asyncio.timeout(self._socket_timeout * 2):
            await self.scripts(self._redis, calls)

    async def aclose(self) -> None:
        """Close the connections (of a client this link made; a client given to it stays open); the link
        refuses further commands (``UsageError``)."""
        self._closed = True
        client, self._redis = self._redis, None
        if client is not None and self._owns_client:
            await client.aclose()

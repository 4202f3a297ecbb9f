"""The connection side of :class:`~acp_client.sessions.RedisSessionStore`: one server link per store.

A :class:`RedisLink` owns the redis-py client and its connection pool (made on first use, closed once), the
key names of one namespace, the store's epoch (read or written before the first command, forgotten after a
data loss), and the count of round trips. It bounds every round trip by ``socket_timeout``, retries lost
links and "try again" replies through tenacity (full-jitter waits under a cap, :mod:`._retry`), and sends
scripted calls as pipelines of ``batch_size`` (loading the scripts when a server lacks them). It knows
nothing of leases or records: the store and its lease book (``_leases.py``) decide what to send and read
the answers.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from acp_client._logging import get_logger
from acp_client.exceptions import StoreError, StoreUnavailable, UsageError
from acp_client.sessions.redis._retry import Deadline, FullJitter
from acp_client.sessions.redis._scripts import _SCRIPTS, _SHAS

if TYPE_CHECKING:
    from tenacity import RetryCallState

__all__ = ["RedisLink", "ScriptCall", "json_list"]

log = get_logger("acp_client.sessions.redis")

#: server replies that mean "try again shortly" (loading, failover in progress, a long script)
_RETRYABLE_REPLIES = ("LOADING", "READONLY", "BUSY", "MASTERDOWN", "TRYAGAIN")

#: the first retry waits up to this long (seconds); each further one up to twice as long, at most _RETRY_CAP
_RETRY_BASE = 0.05
_RETRY_CAP = 1.0

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
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import ReadOnlyError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return (RedisConnectionError, RedisTimeoutError, ReadOnlyError, ConnectionError, TimeoutError, OSError)


class RedisLink:
    """The server connection of one store: client, retries, epoch, scripted pipelines, round-trip count.

    Settings are those of :class:`~acp_client.sessions.RedisSessionStore` of the same name.
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str,
        retry_for: float,
        socket_timeout: float,
        batch_size: int,
        max_connections: int,
    ) -> None:
        self._url = url
        self._ns = namespace
        self._retry_for = retry_for
        self._socket_timeout = socket_timeout
        self._batch = batch_size
        self._max_connections = max_connections
        self._redis: Any = None
        self._epoch: str | None = None
        self._epoch_lock: asyncio.Lock | None = None
        self._closed = False
        self._round_trips = 0

    # ------------------------------------------------------------------ state

    @property
    def namespace(self) -> str:
        """The key prefix of the store."""
        return self._ns

    @property
    def round_trips(self) -> int:
        """Round trips to the server so far (a pipeline counts once)."""
        return self._round_trips

    @property
    def epoch(self) -> str | None:
        """The store's epoch as last read, ``None`` before the first command or after :meth:`forget_epoch`."""
        return self._epoch

    @property
    def connected(self) -> bool:
        """Whether a client was made (and not closed yet)."""
        return self._redis is not None

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` ran."""
        return self._closed

    def forget_epoch(self) -> None:
        """Drop the known epoch: the next command writes (or reads) the server's current one."""
        self._epoch = None

    # ------------------------------------------------------------------ keys

    def key(self, kind: str, session_id: str) -> str:
        """The key of one session's ``kind`` (``rec``, ``lease`` or ``fence``)."""
        return f"{self._ns}:{kind}:{session_id}"

    @property
    def prefix(self) -> str:
        """What every key of the namespace starts with (the bulk scripts build keys from it)."""
        return f"{self._ns}:"

    @property
    def index_key(self) -> str:
        """The set of every stored session id."""
        return f"{self._ns}:index"

    @property
    def epoch_key(self) -> str:
        """The key holding the epoch."""
        return f"{self._ns}:epoch"

    # ------------------------------------------------------------------ connection and retries

    @staticmethod
    def errors() -> tuple[type[BaseException], ...]:
        """Every error a command may raise (transient or not)."""
        from redis.exceptions import RedisError

        return (RedisError, ConnectionError, TimeoutError, OSError)

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
                timeout=self._socket_timeout,  # the wait for a free connection has a bound as well
                decode_responses=True,
                # redis-py's socket_timeout stays off: it wraps writes in asyncio.wait_for, which on Python
                # 3.11 may eat the caller's cancellation; _rt() puts the bound on each round trip instead
                socket_timeout=None,
                socket_connect_timeout=self._socket_timeout,
                retry=Retry(NoBackoff(), 0),  # retries are ours (retrying()), with a bounded backoff
            )
            self._redis = aioredis.Redis.from_pool(pool)  # closing the client closes the pool
        return self._redis

    async def _rt(self, awaitable: Awaitable[Any]) -> Any:
        """One round trip, bounded by ``socket_timeout`` (``TimeoutError``: retried like a lost link)."""
        async with asyncio.timeout(self._socket_timeout):
            return await awaitable

    async def retrying(self, operation: str, fn: Callable[[Any], Any]) -> Any:
        """Await ``fn(client)``; on a lost link or a server that is loading, read-only after a failover or
        busy, try again (tenacity: full-jitter waits from 50 ms up to 1 s) for ``retry_for`` s, then raise
        StoreUnavailable. Any other server error is a StoreError at once."""
        from tenacity import AsyncRetrying, retry_if_exception_type

        transient = _transient()
        errors = self.errors()
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0

        async def attempt() -> Any:
            try:
                client = self._client()
                await self._ensure_epoch(client)
                result = await fn(client)
            except errors as exc:
                if not isinstance(exc, transient) and not str(exc).startswith(_RETRYABLE_REPLIES):
                    # a script error, a key of the wrong type...: the same command would fail again
                    raise StoreError(f"the session store refused {operation}: {exc}") from exc
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
            raise StoreUnavailable(operation, error) from error

        # a retrying object per call: tenacity keeps the state of an iteration on it
        schedule = AsyncRetrying(
            wait=FullJitter(base=_RETRY_BASE, cap=_RETRY_CAP, deadline=self._retry_for),
            stop=Deadline(self._retry_for),
            retry=retry_if_exception_type(errors),
            before_sleep=retry_logged,
            retry_error_callback=give_up,
        )
        return await schedule(attempt)

    def _has_epoch(self) -> bool:
        return self._epoch is not None

    async def _ensure_epoch(self, client: Any) -> None:
        if self._epoch is not None:
            return
        if self._epoch_lock is None:
            self._epoch_lock = asyncio.Lock()
        async with self._epoch_lock:  # the first calls, made together, read it only once
            if self._has_epoch():  # a task ahead of us in the lock read it (a call: mypy narrowed the field)
                return
            self._round_trips += 1
            async with client.pipeline(transaction=False) as pipe:
                pipe.set(self.epoch_key, uuid.uuid4().hex, nx=True)
                pipe.get(self.epoch_key)
                _, epoch = await self._rt(pipe.execute())
            self._epoch = str(epoch)

    async def epoch_changed(self, operation: str) -> bool:
        """Read the server's epoch (retried like ``operation``): whether it differs from the known one."""

        async def run(client: Any) -> Any:
            self._round_trips += 1
            return await self._rt(client.get(self.epoch_key))

        current = await self.retrying(operation, run)
        return bool(current != self._epoch)

    # ------------------------------------------------------------------ commands

    async def scripts(self, client: Any, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run scripted calls as pipelines of ``batch_size``; load the scripts once if the server lacks them."""
        from redis.exceptions import NoScriptError, ResponseError

        results: list[Any] = []
        for start in range(0, len(calls), self._batch):
            chunk = calls[start : start + self._batch]
            for tries in range(2):
                self._round_trips += 1
                async with client.pipeline(transaction=False) as pipe:
                    for name, keys, args in chunk:
                        pipe.evalsha(_SHAS[name], len(keys), *keys, *args)
                    answers = await self._rt(pipe.execute(raise_on_error=False))
                if tries == 0 and any(
                    isinstance(a, NoScriptError) or (isinstance(a, ResponseError) and "NOSCRIPT" in str(a))
                    for a in answers
                ):
                    # a fresh or restarted server: no call of the chunk ran; load the scripts, send it again
                    self._round_trips += 1
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

    async def ids(self, client: Any, *, free_only: bool = False) -> list[str]:
        """Every session id in the index (``free_only``: those without a lease), by pages of 5,000."""
        ids: list[str] = []
        cursor: Any = 0
        prefix = self.key("lease", "") if free_only else ""
        while True:
            [(cursor, page)] = await self.scripts(client, [("scan", (self.index_key,), (cursor, 5000, prefix))])
            ids.extend(json_list(page))
            if int(cursor) == 0:
                break
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

    async def send_once(self, calls: Sequence[ScriptCall]) -> None:
        """Send scripted calls on the open client once, without retries, within two ``socket_timeout``s;
        raises one of :meth:`errors` (or ``TimeoutError``) if they do not go through."""
        async with asyncio.timeout(self._socket_timeout * 2):
            await self.scripts(self._redis, calls)

    async def aclose(self) -> None:
        """Close the connections; the link refuses further commands (``UsageError``)."""
        self._closed = True
        client, self._redis = self._redis, None
        if client is not None:
            await client.aclose()

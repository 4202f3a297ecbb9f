"""P14: scale-out — N worker processes on a Valkey cluster, every agent restarted, a worker SIGKILLed, a primary killed.

A Redis Cluster of 3 Valkey primaries and 3 replicas (from the wheel, as the tests start it), ``--agents``
reference agents (separate processes) and ``--workers`` worker processes (``_scale_worker.py``: one
``ReconnectingClient`` per agent, each on a ``RedisSessionStore`` namespace of that agent). ``--sessions`` are
spread over the workers and agents. Three runs, in order:

1. **agents restarted** (``restart(keep_sessions=True)`` on each): time until every session reported
   ``SessionRecovered`` again, store round trips and client CPU (all workers) per session, peak RSS per worker;
2. **one worker SIGKILLed**: time from the kill until each of its sessions was recovered by another worker
   (p50/p99/max; target: lease TTL + 2 s at p99);
3. **one cluster primary killed** during a recovery round (the agents restarted at the same moment): time until
   every session is recovered again, against run 1 of the same process (ratio), and the check that no session
   is lost, forgotten or owned twice: every session attached on exactly one worker, the store's lease naming
   that worker, and the lease's fencing token equal to the session's fencing counter.

Steady-state store traffic (commands and bytes per second, all nodes, ``INFO stats`` and ``commandstats``)
is sampled over two lease TTLs with every session idle.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

import _common

from acp_client.sessions import RedisSessionStore
from acp_client.testing.redis_cluster import RedisClusterServer

WORKER = _common.HERE / "_scale_worker.py"
STEP = 600.0


class Worker:
    def __init__(self, owner: str, changed: asyncio.Event) -> None:
        self.owner = owner
        self.proc: asyncio.subprocess.Process | None = None
        self.events: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []
        self.ready: dict[str, Any] | None = None
        self.changed = changed
        self.reader: asyncio.Task[None] | None = None

    async def start(self, agents: list[str], redis: str, sessions: int, ttl: float) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, str(WORKER), "--agents", ",".join(agents), "--redis", redis, "--owner", self.owner,
            "--sessions", str(sessions), "--lease-ttl", str(ttl),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=1 << 24,
        )  # fmt: skip
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            obj = json.loads(line)
            if "e" in obj:
                self.events.append(obj)
            elif obj.get("ready"):
                self.ready = obj
            else:
                self.answers.append(obj)
            self.changed.set()
        self.changed.set()

    async def stats(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        seen = len(self.answers)
        self.proc.stdin.write(b"stats\n")
        await self.proc.stdin.drain()
        await until(self.changed, lambda: len(self.answers) > seen, 60)
        return dict(self.answers[seen]["stats"])

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(b"quit\n")
            await self.proc.stdin.drain()
            await asyncio.wait_for(self.proc.wait(), 60)
        except (TimeoutError, ConnectionError):
            self.proc.kill()
            await self.proc.wait()


async def until(changed: asyncio.Event, predicate: Any, timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            changed.clear()
            await changed.wait()


def recovered_since(workers: list[Worker], t0: float) -> dict[str, float]:
    """The first recovery after ``t0`` of each session, over the workers."""
    first: dict[str, float] = {}
    for w in workers:
        for e in w.events:
            if e["e"] == "r" and e["t"] >= t0 and e["s"] not in first:
                first[e["s"]] = e["t"]
    return first


def node_stats(cluster: RedisClusterServer) -> tuple[int, int, dict[str, int]]:
    """Commands processed, bytes received and calls by command, summed over the live nodes (replicas
    included: they apply what their primary replicates)."""
    commands = received = 0
    calls: dict[str, int] = {}
    for node in cluster.nodes:
        if node.running:
            with cluster._client(node) as client:
                info = client.info("stats")
                for name, value in client.info("commandstats").items():
                    calls[name.removeprefix("cmdstat_")] = calls.get(name.removeprefix("cmdstat_"), 0) + int(
                        value["calls"]
                    )
            commands += int(info["total_commands_processed"])
            received += int(info["total_net_input_bytes"])
    return commands, received, calls


async def check_ownership(url: str, workers: list[Worker], agents: int, created: set[str]) -> str:
    """Every session attached on exactly one live worker, the lease naming it, token == fencing counter."""
    attached: dict[str, list[str]] = {}
    for w in workers:
        if w.proc is not None and w.proc.returncode is None:
            for i, ids in (await w.stats())["attached"].items():
                for sid in ids:
                    attached.setdefault(sid, []).append(f"{w.owner}-a{i}")
    twice = [sid for sid, owners in attached.items() if len(owners) > 1]
    missing = created - set(attached)
    wrong = fenced = 0
    for i in range(agents):
        store = RedisSessionStore(url, namespace=f"p14a{i}", owner_id="observer")
        try:
            for s in await store.describe():
                if s.session_id in attached and [s.owner] != attached[s.session_id]:
                    wrong += 1
                if s.token != s.fence:
                    fenced += 1
        finally:
            await store.close()
    return f"owned twice {len(twice)}, not attached {len(missing)}, lease elsewhere {wrong}, token != fence {fenced}"


async def run(args: Any) -> tuple[list[list[str]], list[str], str]:
    n, ttl = args.sessions, args.lease_ttl
    changed = asyncio.Event()
    cluster = RedisClusterServer(primaries=3, replicas=1, node_timeout=1000, start_timeout=120)
    await asyncio.to_thread(cluster.start)
    agents = [await _common.AgentProcess(2).__aenter__() for _ in range(args.agents)]
    workers = [Worker(f"w{i}", changed) for i in range(args.workers)]
    rows: list[list[str]] = []
    lines: list[str] = []
    try:
        url = cluster.url
        share = [n // args.workers + (1 if i < n % args.workers else 0) for i in range(args.workers)]
        t_start = time.monotonic()
        for w, k in zip(workers, share, strict=True):
            await w.start([a.url for a in agents], url, k, ttl)
        await until(changed, lambda: all(w.ready for w in workers), STEP)
        created_by = {w.owner: {s for ids in w.ready["created"].values() for s in ids} for w in workers}  # type: ignore[index]
        created = set().union(*created_by.values())
        made = time.monotonic() - t_start
        before = [await w.stats() for w in workers]

        # steady state: one lease TTL of idle traffic
        c0, b0, k0 = await asyncio.to_thread(node_stats, cluster)
        t0 = time.monotonic()
        await asyncio.sleep(2 * ttl)  # the measured interval itself
        c1, b1, k1 = await asyncio.to_thread(node_stats, cluster)
        idle = time.monotonic() - t0
        cmd_rate, byte_rate = (c1 - c0) / idle, (b1 - b0) / idle
        busiest = sorted(((k1[c] - k0.get(c, 0)) / idle, c) for c in k1 if c != "info")[-5:][::-1]
        by_command = ", ".join(f"{name} {rate:.0f}/s" for rate, name in busiest)

        # 1. every agent restarted
        t0 = time.monotonic()
        await asyncio.gather(*(a.command("restart") for a in agents))
        await until(changed, lambda: len(recovered_since(workers, t0)) >= n, STEP)
        restart_time = max(recovered_since(workers, t0).values()) - t0
        after = [await w.stats() for w in workers]
        trips = sum(a["round_trips"] - b["round_trips"] for a, b in zip(after, before, strict=True)) / n
        cpu = sum(a["cpu"] - b["cpu"] for a, b in zip(after, before, strict=True)) / n
        rss = [a["rss_peak"] for a in after]
        rss_idle = [w.ready["rss_idle"] for w in workers]  # type: ignore[index]
        per_session = sum(r - i for r, i in zip(rss, rss_idle, strict=True)) / n
        rows.append(["agents restarted", f"{restart_time:.2f} s", f"{trips:.2f}", _common.us(cpu),
                     f"{max(rss) / 1024:.0f} MiB (idle {max(rss_idle) / 1024:.0f})"])  # fmt: skip

        # 2. one worker SIGKILLed
        victim, survivors = workers[0], workers[1:]
        doomed = created_by[victim.owner]
        victim.kill()
        t_kill = time.monotonic()
        await until(changed, lambda: doomed <= set(recovered_since(survivors, t_kill)), STEP)
        delays = sorted(t - t_kill for sid, t in recovered_since(survivors, t_kill).items() if sid in doomed)
        p99 = _common.percentile(delays, 99)
        spread = f"p50 {_common.median(delays):.2f} s, p99 {p99:.2f} s, max {delays[-1]:.2f} s"
        rows.append([f"worker SIGKILLed ({len(doomed)} sessions)", spread, "", "", ""])
        lines.append(_common.ratio_line(f"p14 hand-over p99 / (lease TTL + 2 s = {ttl + 2:.0f} s)",
                                        p99 / (ttl + 2), "<= 1.0x", p99 <= ttl + 2))  # fmt: skip
        owned_after_kill = await check_ownership(url, survivors, args.agents, created)

        # 3. a cluster primary killed during a recovery round
        primary = cluster.nodes[0]
        t0 = time.monotonic()
        await asyncio.gather(*(a.command("restart") for a in agents))
        await asyncio.to_thread(primary.kill)
        await until(changed, lambda: len(recovered_since(survivors, t0)) >= n, STEP)
        failover_time = max(recovered_since(survivors, t0).values()) - t0
        forgotten = sum(1 for w in survivors for e in w.events if e["e"] == "f")
        taken = sum(1 for w in survivors for e in w.events if e["e"] == "t" and e["t"] >= t0)
        await asyncio.to_thread(cluster.wait_until_healthy)
        owned_after_failover = await check_ownership(cluster.url, survivors, args.agents, created)
        rows.append(["primary killed + agents restarted", f"{failover_time:.2f} s", "", "", ""])
        lines.append(_common.ratio_line("p14 recovery with a primary killed / without (run 1)",
                                        failover_time / restart_time, "reported", True))  # fmt: skip
        summary = (
            f"{n} sessions, {args.workers} workers, {args.agents} agents, lease TTL {ttl:g} s; made in {made:.1f} s. "
            f"Idle store traffic: {cmd_rate:.0f} commands/s, {byte_rate / 1024:.1f} KiB/s in (all 6 nodes; by "
            f"command: {by_command}). "
            f"Memory per session (peak RSS growth over the workers): {per_session:.1f} KiB. "
            f"After the worker kill: {owned_after_kill}. After the primary kill: {owned_after_failover}; "
            f"forgotten {forgotten}, taken over {taken} (a lease that ran out during the failover)."
        )
        return rows, lines, summary
    finally:
        await asyncio.gather(*(w.stop() for w in workers))
        for a in agents:
            await a.__aexit__(None, None, None)
        await asyncio.to_thread(cluster.stop)


async def main() -> int:
    parser = _common.parser(__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--lease-ttl", type=float, default=5.0)
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.workers = min(args.sessions, 100), min(args.workers, 3)
    _common.quiet_logging()
    rows, lines, summary = await run(args)
    header = ["run", "until every session recovered", "store round trips / session", "client CPU / session",
              "peak RSS per worker (max)"]  # fmt: skip
    print(_common.table(header, rows))
    print(summary)
    for line in lines:
        print(line)
    body = "\n\n".join([summary, _common.table(header, rows), "\n".join(f"- `{line}`" for line in lines)])
    _common.write_section(_common.docs_target(args), "p14", "P14 — scale-out on a Valkey cluster", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

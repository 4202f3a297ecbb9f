"""P1: recovering 1,000 sessions after an agent restart — ReconnectingClient vs sequential vs a raw pipeline.

The reference agent (v2) runs in a separate process and holds N sessions. Each measurement starts the clock,
tells the agent to restart (``restart(keep_sessions=True)``: every connection drops with close 1012 and every
session becomes *inactive*), and stops it once every session is attached again on a new connection with
``session/status`` then ``session/resume`` (``replayFrom: start``, what the default strategy sends for an
inactive v2 session; the sessions have no history, so the agent answers each resume with one
``state_update`` snapshot and ``{}``). The agent's restart and its work are inside every measurement.

- **ours**: a ``ReconnectingClient`` (``recovery_start_jitter=0``, ``Backoff(base=0.001)`` so the reconnect
  delay is ≤ 2 ms), clock stopped at the ``StateChanged(new=READY)`` event, every session checked attached.
  With the default ``recovery_concurrency="adaptive"``, and with fixed limits of 8 and 64.
- **sequential**: a plain ``ACPClient`` (``connect``), ``session_status`` then ``resume_session(replay=True)``
  for one session at a time. Through the delay proxy it runs on the first 100 sessions and is scaled to N
  (it is linear: one round trip after another).

Every method runs twice: on loopback, and through a ``FaultProxy`` that delays every chunk 10 ms each way
(round trip about 22 ms), where a fixed limit cannot be more than that many times faster than sequential.
The proxy runs in a process of its own (``_proxy_proc.py``): on the client's event loop it would make the
link slower the busier the client is, which a network does not.
- **raw floor**: one ``websockets`` connection; ``initialize``; all N status frames sent back to back, all
  answers awaited; then all N resume frames, all answers awaited. Same frames as ours, no bookkeeping.

Every client of a run speaks the wire format a real deployment of that link would: on loopback no
compression (what ``compression="auto"``, our default, offers a loopback host); through the delay proxy,
which stands for a remote agent, permessage-deflate (what ``"auto"`` offers a remote host, and the
``websockets`` default the raw floor uses). The proxy listens on 127.0.0.1, so ours is told ``"deflate"``
there explicitly.

Methods alternate within each repetition, each starting from a clean heap (``gc.collect()`` before it, and
for ours again just before the restart). Targets: ours ≤ 2x the raw floor, and through the delay proxy ≥ 10x
faster than sequential.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Literal

import _common
import websockets

from acp_client import (
    MemorySessionStore,
    SessionRecord,
    connect,
)
from acp_client.transports import TransportOptions

FLOOR_TARGET = 2.0
SEQUENTIAL_TARGET = 10.0
CWD = "/tmp"
STEP_TIMEOUT = 300.0

Compression = Literal["deflate"] | None
#: what a loopback agent is offered (``compression="auto"``) and what a remote one is
LOOPBACK: Compression = None
REMOTE: Compression = "deflate"


async def make_sessions(url: str, n: int) -> list[SessionRecord]:
    """Create ``n`` sessions on the agent (pipelined, 64 at a time) and return their records."""
    async with connect(url, protocol_version=2) as client:
        records: list[SessionRecord] = []
        for start in range(0, n, 64):
            batch = await asyncio.gather(*(client.new_session(CWD) for _ in range(min(64, n - start))))
            records += [s.record for s in batch]
    return records


async def ours(
    agent: _common.AgentProcess,
    url: str,
    records: list[SessionRecord],
    concurrency: int | str,
    compression: Compression,
    path_change: Callable[[], Awaitable[None]] | None = None,
) -> float:
    """Wall time of one recovery round; ``path_change`` runs after the first connection learned the path."""
    store = MemorySessionStore()
    for record in records:
        await store.save(record)
    return await _common.measured_recovery(
        agent, url, store, len(records), concurrency, time.perf_counter, before_restart=path_change,
        compression=compression,
    )  # fmt: skip


async def sequential(
    agent: _common.AgentProcess, url: str, records: list[SessionRecord], limit: int, compression: Compression
) -> float:
    t0 = time.perf_counter()
    await agent.command("restart")
    async with connect(url, protocol_version=2, transport_options=TransportOptions(compression=compression)) as client:
        for record in records[:limit]:
            status = await client.session_status(record.session_id)
            if status.status != "inactive":
                raise RuntimeError(f"unexpected status {status.status!r}")
            await client.resume_session(record.session_id, record.cwd, replay=True)
        return (time.perf_counter() - t0) * len(records) / min(limit, len(records))


async def raw(agent: _common.AgentProcess, url: str, records: list[SessionRecord], compression: Compression) -> float:
    t0 = time.perf_counter()
    await agent.command("restart")
    async with websockets.connect(url, max_size=16 * 1024 * 1024, compression=compression) as ws:
        init = {"protocolVersion": 2, "capabilities": {}, "info": {"name": "raw-bench", "version": "0"}}
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}))
        json.loads(await ws.recv())
        next_id = 1
        for method in ("session/status", "session/resume"):
            first = next_id
            for record in records:
                params: dict[str, object] = {"sessionId": record.session_id}
                if method == "session/resume":
                    params.update(cwd=record.cwd, mcpServers=[], replayFrom={"type": "start"})
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}))
                next_id += 1
            pending = next_id - first
            while pending:
                msg = json.loads(await ws.recv())
                if "id" in msg and "method" not in msg:
                    if "result" not in msg:
                        raise RuntimeError(f"{method} failed: {msg}")
                    pending -= 1
        return time.perf_counter() - t0


async def scenario(
    agent: _common.AgentProcess,
    url: str,
    records: list[SessionRecord],
    reps: int,
    label: str,
    seq_limit: int,
    compression: Compression,
) -> dict[str, list[float]]:
    """Every method ``reps`` times, alternating, against ``url``, every client with ``compression``."""
    methods: dict[str, Callable[[], Awaitable[float]]] = {
        "raw": lambda: raw(agent, url, records, compression),
        "sequential": lambda: sequential(agent, url, records, seq_limit, compression),
        "adaptive": lambda: ours(agent, url, records, "adaptive", compression),
        "fixed8": lambda: ours(agent, url, records, 8, compression),
        "fixed64": lambda: ours(agent, url, records, 64, compression),
    }
    await methods["raw"]()  # warm-up (imports, first restart)
    results: dict[str, list[float]] = {}
    for rep in range(reps):
        for name, run in methods.items():
            gc.collect()  # no method pays for the garbage the one before it left (ours: again before the restart)
            elapsed = await run()
            results.setdefault(name, []).append(elapsed)
            print(f"{label} rep {rep + 1}/{reps} {name:>10}: {_common.ms(elapsed)}", flush=True)
    return results


async def path_changed(
    agent: _common.AgentProcess,
    proxy: _common.DelayProxyProcess,
    records: list[SessionRecord],
    reps: int,
    before: float,
    after: float,
) -> dict[str, list[float]]:
    """The client's first connection (and its first recovery of every session) runs over a path delaying
    ``before`` seconds each way; the delay becomes ``after`` just before the restart, as when a laptop moves
    from the office network to a tether. The floor and sequential run on the ``after`` path throughout."""

    async def on(delay: float) -> None:
        await proxy.set_delay(delay)

    async def changed(concurrency: int | str) -> float:
        await on(before)
        return await ours(agent, proxy.url, records, concurrency, REMOTE, path_change=lambda: on(after))

    async def steady(run: Callable[[], Awaitable[float]]) -> float:
        await on(after)
        return await run()

    methods: dict[str, Callable[[], Awaitable[float]]] = {
        "raw": lambda: steady(lambda: raw(agent, proxy.url, records, REMOTE)),
        "sequential": lambda: steady(
            lambda: sequential(agent, proxy.url, records, 100 if after else len(records), REMOTE)
        ),
        "adaptive": lambda: changed("adaptive"),
        "fixed64": lambda: changed(64),
    }
    label = f"path {before * 1000:g}->{after * 1000:g} ms"
    results: dict[str, list[float]] = {}
    for rep in range(reps):
        for name, run in methods.items():
            gc.collect()  # no method pays for the garbage the one before it left (ours: again before the restart)
            elapsed = await run()
            results.setdefault(name, []).append(elapsed)
            print(f"{label} rep {rep + 1}/{reps} {name:>10}: {_common.ms(elapsed)}", flush=True)
    return results


LABELS = {
    "raw": "raw websockets pipeline (floor)",
    "sequential": "sequential `ACPClient` status→resume",
    "adaptive": '`ReconnectingClient`, `recovery_concurrency="adaptive"` (default)',
    "fixed8": "`ReconnectingClient`, fixed limit 8",
    "fixed64": "`ReconnectingClient`, fixed limit 64",
}


async def main() -> int:
    cli = _common.parser(__doc__.splitlines()[0])
    cli.add_argument(
        "--only-path-changed",
        action="store_true",
        help="only the path-changed runs (the steady 10 ms run is kept as their reference)",
    )
    args = cli.parse_args()
    _common.quiet_logging()
    n, reps, delayed_reps = (100, 1, 1) if args.quick else (1000, 5, 3)
    sections: list[str] = []
    lines: list[str] = []
    async with _common.AgentProcess(2) as agent:
        records = await make_sessions(agent.url, n)
        port = int(agent.url.rsplit(":", 1)[1].split("/", 1)[0])
        runs: list[tuple[str, dict[str, list[float]]]] = []
        if not args.only_path_changed:
            runs.append(("loopback", await scenario(agent, agent.url, records, reps, "loopback", n, LOOPBACK)))
        async with _common.DelayProxyProcess(port, 0.010) as proxy:  # its own process: see _proxy_proc.py
            runs.append(
                ("10 ms each way", await scenario(agent, proxy.url, records, delayed_reps, "delay", 100, REMOTE))
            )
            for before, after, where in (
                (0.0, 0.010, "path changed, loopback → 10 ms"),
                (0.010, 0.0, "path changed, 10 ms → loopback"),
            ):
                runs.append((where, await path_changed(agent, proxy, records, delayed_reps, before, after)))
        if int(await agent.command("sessions")) != n:
            raise RuntimeError("the agent lost sessions")

    header = ["method", "median", "min", "÷ raw floor", "speed-up vs sequential"]
    for where, results in runs:
        med = {k: _common.median(v) for k, v in results.items()}
        rows = [
            [
                label,
                _common.ms(med[key]),
                _common.ms(min(results[key])),
                f"{med[key] / med['raw']:.2f}x",
                f"{med['sequential'] / med[key]:.1f}x",
            ]
            for key, label in LABELS.items()
            if key in results
        ]
        print(f"-- {where}")
        print(_common.table(header, rows))
        sections.append(f"**{where}** ({len(results['raw'])} repetitions)\n\n" + _common.table(header, rows))
        for key in ("adaptive", "fixed8", "fixed64"):
            if key not in results:
                continue
            floor = med[key] / med["raw"]
            worst = max(results[key]) / med["raw"]
            speedup = med["sequential"] / med[key]
            tag = where.replace(",", "").replace(" → ", "_to_").replace(" ", "_")
            lines.append(
                _common.ratio_line(f"p1 {tag} {key} / raw floor", floor, f"<= {FLOOR_TARGET}x", floor <= FLOOR_TARGET)
            )
            if key == "adaptive" and where != "loopback":
                lines.append(f"p1 {tag} adaptive slowest run / raw floor: {worst:.2f}x")
            if not where.endswith(
                "loopback"
            ):  # on loopback a round trip costs next to nothing: no speed-up target there
                lines.append(
                    _common.ratio_line(
                        f"p1 {tag} sequential / {key}",
                        speedup,
                        f">= {SEQUENTIAL_TARGET}x",
                        speedup >= SEQUENTIAL_TARGET,
                    )
                )
    for line in lines:
        print(line)
    body = "\n\n".join(
        [
            f"Recovery of **{n} sessions** after `restart(keep_sessions=True)` of the reference agent (v2, separate "
            f"process): from the restart command until every session is attached again (status + resume per "
            f"session). Methods alternating; the agent's restart and its work on the 2N requests are inside every "
            "number. Once on loopback, once through a `FaultProxy` delaying every chunk 10 ms each way, run in a "
            "process of its own so that it takes none of the client's CPU, as a network would not "
            "(sequential measured on 100 sessions there and scaled to N). **Path changed**: through the same "
            "proxy process, the client's first connection (and its first recovery of every session) sees one "
            "delay, and the delay is switched just before the restart (0 → 10 ms each way, and back); the floor "
            "and sequential run on the path after the change. `AdaptiveLimit` forgets its baseline round trip "
            "at each new connection (`docs/topics/reconnect.md`).",
            *sections,
            "Targets: ≤ 2x the raw floor on both links; ≥ 10x faster than sequential through the proxy (on "
            "loopback a round trip costs next to nothing, so sequential is close to the floor there).\n\n"
            + "\n".join(f"- `{line}`" for line in lines),
        ]
    )
    _common.write_section(_common.docs_target(args), "p1", "P1 — recovery of sessions after an agent restart", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

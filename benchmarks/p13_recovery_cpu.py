"""P13: client CPU per recovered session — status plus resume for 1,000 sessions after an agent restart.

The reference agent (v2) runs in a separate process and holds N sessions; a ``ReconnectingClient`` (fixed
limit 64, so that the measured work is the client's and not the limit's schedule; ``recovery_start_jitter=0``)
recovers them all after ``restart(keep_sessions=True)``. Measured with ``time.process_time`` (CPU of this
process only: the agent's work is not in it) from the restart command until the client is ``READY``, divided
by N. Baseline in the same run: the raw floor, one ``websockets`` connection sending all status frames then
all resume frames and parsing every answer with ``json.loads``, on the same agent. Methods alternate.

``--profile FILE`` runs one more measured round of ours under cProfile and writes its stats to ``FILE``
(``--profile-method sqlite``: the round with the SQLite store).
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import _common
import p1_recovery

from acp_client import (
    MemorySessionStore,
    SessionRecord,
    SessionStore,
    SQLiteSessionStore,
)

TARGET_US = 200.0
LABELS = {
    "raw": "raw websockets pipeline (floor)",
    "fixed64": "`ReconnectingClient`, fixed limit 64, memory store",
    "adaptive": "`ReconnectingClient`, adaptive limit (default), memory store",
    "sqlite": "`ReconnectingClient`, adaptive limit, `SQLiteSessionStore`",
}
STEP_TIMEOUT = 300.0


async def ours(
    agent: _common.AgentProcess,
    records: list[SessionRecord],
    concurrency: int | str = 64,
    sqlite: bool = False,
    profile: cProfile.Profile | None = None,
) -> float:
    """CPU seconds of this process for one recovery round of every session."""
    with tempfile.TemporaryDirectory() as tmp:
        store: SessionStore = SQLiteSessionStore(Path(tmp) / "s.db") if sqlite else MemorySessionStore()
        for record in records:
            await store.save(record)
        return await _round(agent, records, store, concurrency, profile)


async def _round(
    agent: _common.AgentProcess,
    records: list[SessionRecord],
    store: SessionStore,
    concurrency: int | str,
    profile: cProfile.Profile | None,
) -> float:
    async def settle() -> None:
        if profile is not None:  # (measured_recovery collects the set-up's garbage just before this)
            profile.enable()

    try:
        return await _common.measured_recovery(
            agent, agent.url, store, len(records), concurrency, time.process_time, before_restart=settle
        )
    finally:
        if profile is not None:
            profile.disable()


async def raw(agent: _common.AgentProcess, records: list[SessionRecord]) -> float:
    gc.collect()
    t0 = time.process_time()
    await p1_recovery.raw(agent, agent.url, records, p1_recovery.LOOPBACK)
    return time.process_time() - t0


async def main() -> int:
    cli = _common.parser(__doc__.splitlines()[0])
    cli.add_argument("--profile", type=Path, default=None, help="cProfile one more round of ours into this file")
    cli.add_argument("--reps", type=int, default=None)
    cli.add_argument(
        "--profile-method", choices=("adaptive", "sqlite"), default="adaptive", help="which round --profile runs"
    )
    args = cli.parse_args()
    _common.quiet_logging()
    n, reps = (200, 1) if args.quick else (1000, 5)
    reps = args.reps or reps
    methods: dict[str, Callable[[], Awaitable[float]]] = {
        "raw": lambda: raw(agent, records),
        "fixed64": lambda: ours(agent, records, 64),
        "adaptive": lambda: ours(agent, records, "adaptive"),
        "sqlite": lambda: ours(agent, records, "adaptive", sqlite=True),
    }
    results: dict[str, list[float]] = {}
    async with _common.AgentProcess(2) as agent:
        records = await p1_recovery.make_sessions(agent.url, n)
        await raw(agent, records)  # warm-up
        await ours(agent, records)
        for rep in range(reps):
            for name, run in methods.items():
                cpu = await run()
                results.setdefault(name, []).append(cpu)
                print(f"rep {rep + 1}/{reps} {name:>5}: {cpu * 1e6 / n:.0f} µs CPU per session", flush=True)
        if args.profile is not None:
            profile = cProfile.Profile()
            await ours(agent, records, "adaptive", sqlite=args.profile_method == "sqlite", profile=profile)
            profile.dump_stats(str(args.profile))
            print(f"profile written to {args.profile}")
    per = {k: _common.median(v) / n for k, v in results.items()}
    rows = [
        [label, _common.us(per[key]), _common.us(min(results[key]) / n), f"{per[key] / per['raw']:.2f}x"]
        for key, label in LABELS.items()
    ]
    table = _common.table(["method", "CPU per session (median)", "min", "÷ raw"], rows)
    lines = [
        _common.ratio_line(
            f"p13 {key} CPU per session / 200 µs", per[key] * 1e6 / TARGET_US, "<= 1.0x", per[key] * 1e6 <= TARGET_US
        )
        for key in ("fixed64", "adaptive", "sqlite")
    ]
    print(table)
    print("\n".join(lines))
    body = (
        f"Client CPU (`time.process_time` of the benchmark process; the agent runs in its own) from the restart "
        f"command until `READY`, for a recovery round of **{n} sessions** on loopback (status + resume each), "
        f"divided by {n}; median of {reps} repetitions, methods alternating.\n\n{table}\n\n"
        + "\n".join(f"- `{line}`" for line in lines)
    )
    _common.write_section(_common.docs_target(args), "p13", "P13 — client CPU per recovered session", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

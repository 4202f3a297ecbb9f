"""Instructions of one recovery round in the client, counted by callgrind: a measure the machine's load does
not move (wall and CPU time move 20-50 % between runs on a shared 2-core machine; instruction counts agree
within about 1 %).

Run it under valgrind with collection off at start; the script switches it on around the measured part only
(``callgrind_control``), so the agent's set-up and the client's start are not counted::

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/ours.out \\
        python benchmarks/callgrind_round.py --sessions 300 --concurrency 64
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/raw.out \\
        python benchmarks/callgrind_round.py --sessions 300 --raw

valgrind prints ``I refs``: the instructions of the measured part. **ours**: from the agent's restart command
until ``READY`` (status + resume of every session, as P1 and P13 measure); **raw**: P1's raw pipeline (connect,
``initialize``, every status frame, then every resume frame). The agent runs in its own process and is not
counted. Without valgrind the script runs the same steps and counts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time

import _common
import p1_recovery

from acp_client import MemorySessionStore

#: set when callgrind answered a switch: the script runs under it
_COUNTED: list[bool] = []


def collect(on: bool) -> None:
    """Switch callgrind's collection on or off for this process (nothing happens outside valgrind)."""
    with contextlib.suppress(OSError):  # no valgrind installed: nothing to switch
        done = subprocess.run(
            ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], capture_output=True, text=True
        )
        if not done.stdout.startswith("Error") and "not detected" not in done.stdout + done.stderr:
            _COUNTED.append(True)


async def ours(agent: _common.AgentProcess, n: int, concurrency: int | str) -> None:
    records = await p1_recovery.make_sessions(agent.url, n)
    store = MemorySessionStore()
    for record in records:
        await store.save(record)

    async def start_counting() -> None:
        collect(True)

    await _common.measured_recovery(
        agent, agent.url, store, n, concurrency, time.perf_counter, before_restart=start_counting,
        when_ready=lambda: collect(False),
    )  # fmt: skip


async def raw(agent: _common.AgentProcess, n: int) -> None:
    records = await p1_recovery.make_sessions(agent.url, n)
    await p1_recovery.raw(agent, agent.url, records, p1_recovery.LOOPBACK)  # warm-up: imports, first restart
    collect(True)
    await p1_recovery.raw(agent, agent.url, records, p1_recovery.LOOPBACK)
    collect(False)


async def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--sessions", type=int, default=300)
    cli.add_argument("--concurrency", default="64", help='"adaptive" or a fixed limit (default 64)')
    cli.add_argument("--raw", action="store_true", help="count the raw pipeline instead of ours")
    args = cli.parse_args()
    _common.quiet_logging()
    concurrency: int | str = args.concurrency if args.concurrency == "adaptive" else int(args.concurrency)
    async with _common.AgentProcess(2) as agent:
        if args.raw:
            await raw(agent, args.sessions)
        else:
            await ours(agent, args.sessions, concurrency)
    if not _COUNTED:
        print(
            "callgrind_round.py: not running under callgrind, so nothing was counted; run it as\n"
            "  valgrind --tool=callgrind --instr-atstart=no python benchmarks/callgrind_round.py"
            + (" --raw" if args.raw else ""),
            file=sys.stderr,
        )


if __name__ == "__main__":
    asyncio.run(main())

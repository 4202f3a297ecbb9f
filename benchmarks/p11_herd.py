"""P11: the herd after an agent restart — how spread out the clients' reconnects are on the wire.

``N`` ``ReconnectingClient`` objects (each with its own seeded ``rng``, ``recovery_start_jitter=0``, the default
``Backoff``) are READY on one reference agent (v2, separate process). The agent restarts (every connection drops
with close 1012); each client draws its first backoff delay and reconnects. Measured: when each client actually
finished its WebSocket handshake with the restarted agent (its ``StateChanged`` to ``initializing``), relative to
the moment the agent confirmed the restart.

The baseline, in the same run, is the schedule the clients drew (the ``delay`` of their ``BACKOFF`` event): the
wire can only be as spread as the schedule. Ratios: the busiest 100 ms window on the wire ÷ the busiest window
of the schedule (1.0 = the event loop delivered the schedule; a loaded loop bunches reconnects and raises it),
and the spread (population standard deviation) on the wire ÷ the spread of the schedule. The test suite checks
the schedule itself (``tests/reconnect/test_failure_modes.py::test_fm01_herd_spreads_reconnects_after_a_restart``); this
measures what reaches the agent, which depends on the machine's load and is no test's business.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import time
from collections.abc import Sequence

import _common

from acp_client import ClientState, ReconnectingClient, RecoveryPolicy, StateChanged

WINDOW = 0.1
STEP_TIMEOUT = 60.0


def busiest(times: Sequence[float], window: float = WINDOW) -> int:
    """The most values in any half-open window ``[t, t + window)`` starting at one of them."""
    return max(sum(start <= t < start + window for t in times) for start in times)


class Watch:
    """One client's events: its first backoff delay after the drop and when its next handshake was done."""

    def __init__(self, client: ReconnectingClient) -> None:
        self.client = client
        self.delay: float | None = None
        self.left_at: float | None = None
        self.ready = asyncio.Event()
        self.back = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for event in self.client.events():
            if not isinstance(event, StateChanged):
                continue
            if event.new is ClientState.READY:
                self.ready.set()
                if self.left_at is not None:
                    self.back.set()
            elif event.new is ClientState.BACKOFF and self.delay is None:
                self.delay = event.delay
            elif event.new is ClientState.INITIALIZING and self.delay is not None and self.left_at is None:
                self.left_at = time.perf_counter()


async def run(n: int) -> tuple[list[float], list[float]]:
    async with _common.AgentProcess(2) as agent:
        clients = [
            ReconnectingClient(
                agent.url, policy=RecoveryPolicy(start_jitter=0.0), rng=random.Random(seed), breaker=None
            )
            for seed in range(n)
        ]
        watches = [Watch(c) for c in clients]
        await asyncio.sleep(0)  # let every watcher subscribe before anything happens
        try:
            async with asyncio.timeout(STEP_TIMEOUT):
                await asyncio.gather(*(c.start() for c in clients))
                await asyncio.gather(*(w.ready.wait() for w in watches))
                await agent.command("restart")
                restarted = time.perf_counter()
                await asyncio.gather(*(w.back.wait() for w in watches))
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))
            for w in watches:
                w.task.cancel()
            await asyncio.wait([w.task for w in watches])
    schedule = sorted(w.delay or 0.0 for w in watches)
    wire = sorted((w.left_at or restarted) - restarted for w in watches)
    return schedule, wire


async def main() -> int:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    _common.quiet_logging()
    n = 20 if args.quick else 100
    schedule, wire = await run(n)
    rows = []
    for label, times in (("schedule (drawn delays)", schedule), ("wire (handshake done)", wire)):
        rows.append(
            [
                label,
                f"{busiest(times)} of {n}",
                f"{sum(t < 0.010 for t in times)}",
                f"{statistics.pstdev(times):.3f} s",
                f"{_common.median(times):.3f} s",
                f"{max(times):.3f} s",
            ]
        )
    window_ratio = busiest(wire) / busiest(schedule)
    spread_ratio = statistics.pstdev(wire) / statistics.pstdev(schedule)
    lines = [
        _common.ratio_line("p11 busiest 100 ms window, wire / schedule", window_ratio, "<= 1.5x", window_ratio <= 1.5),
        _common.ratio_line("p11 spread (pstdev), wire / schedule", spread_ratio, ">= 0.8x", spread_ratio >= 0.8),
    ]
    header = ["reconnect times", "busiest 100 ms window", "under 10 ms", "pstdev", "median", "max"]
    print(_common.table(header, rows))
    for line in lines:
        print(line)
    body = "\n\n".join(
        [
            f"{n} clients on one agent; the agent restarts (close 1012). Baseline: the first backoff delays the "
            "clients drew (same run); measured: when each one's next handshake was done, from the agent's "
            "confirmed restart.",
            _common.table(header, rows),
            "\n".join(f"- `{line}`" for line in lines),
        ]
    )
    _common.write_section(_common.docs_target(args), "p11", "P11 — reconnect herd after a restart", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

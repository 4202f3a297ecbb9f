"""P4: half-open link detection — time from an agent stall to the client's ``ConnectionDropped`` event.

A ``ReconnectingClient`` with ``ping_interval=0.5`` and ``ping_timeout=0.5`` is READY on the reference agent
(v2, separate process). The agent is told to ``stall()``: its sockets stay open but nothing is read, so no
Pong ever comes — a half-open link as seen from the client. Measured from the moment the agent confirmed
the stall to the client's ``ConnectionDropped`` event. The configured bound is ``ping_interval +
ping_timeout`` (the last Ping may have gone out just before the stall, so detection takes at most one
interval plus one timeout); the target is that bound + 0.1 s. After each measurement the agent is
unstalled and the client reconnects before the next repetition.

The baseline is the configured bound itself (ratio = measured / bound). The transport's ``close_timeout``
(how long a close frame to the stalled peer is waited for before the TCP link is aborted) is part of what
is measured: it runs with the library default (10 s) and with 0.1 s.
"""

from __future__ import annotations

import asyncio
import sys
import time

import _common

from acp_client import (
    Backoff,
    ClientState,
    ConnectionDropped,
    CrashLoopBreaker,
    ReconnectingClient,
    StateChanged,
    TransportOptions,
)

PING_INTERVAL = 0.5
PING_TIMEOUT = 0.5
SLACK = 0.1
STEP_TIMEOUT = 60.0


async def measure(agent: _common.AgentProcess, reps: int, close_timeout: float) -> list[float]:
    client = ReconnectingClient(
        agent.url,
        protocol_version=2,
        transport_options=TransportOptions(
            ping_interval=PING_INTERVAL, ping_timeout=PING_TIMEOUT, close_timeout=close_timeout
        ),
        backoff=Backoff(base=0.001),
        # the drops are deliberate: keep the crash-loop breaker (5 short-lived connections → FAILED) out of it
        breaker=CrashLoopBreaker(threshold=1_000_000),
    )
    samples: list[float] = []
    try:
        async with asyncio.timeout(STEP_TIMEOUT):
            await client.start()
            await client.wait_ready()
        for _ in range(reps):
            events = client.events()
            dropped = asyncio.Event()

            async def watch(events=events, dropped=dropped) -> None:  # type: ignore[no-untyped-def]
                async for event in events:
                    if isinstance(event, ConnectionDropped):
                        dropped.set()
                    if dropped.is_set() and isinstance(event, StateChanged):
                        if event.new is ClientState.FAILED:
                            raise RuntimeError(f"the client failed: {client.failure!r}")
                        if event.new is ClientState.BACKOFF:
                            return

            watcher = asyncio.create_task(watch())
            await asyncio.sleep(0.05 + 0.4 * (len(samples) % 3) / 3)  # vary where in the ping cycle we stall
            await agent.command("stall")
            t0 = time.perf_counter()
            async with asyncio.timeout(STEP_TIMEOUT):
                await dropped.wait()
            samples.append(time.perf_counter() - t0)
            print(f"close_timeout={close_timeout:g}: detected after {samples[-1]:.3f} s", flush=True)
            await agent.command("unstall")
            async with asyncio.timeout(STEP_TIMEOUT):
                await watcher
                await client.wait_ready()
        return samples
    finally:
        async with asyncio.timeout(STEP_TIMEOUT):
            await client.aclose()


async def main() -> int:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    _common.quiet_logging()
    reps = 2 if args.quick else 5
    bound = PING_INTERVAL + PING_TIMEOUT
    target = bound + SLACK
    timeouts = (0.1,) if args.quick else (10.0, 0.1)
    results: dict[float, list[float]] = {}
    async with _common.AgentProcess(2) as agent:
        for close_timeout in timeouts:
            results[close_timeout] = await measure(agent, reps, close_timeout)
    rows = []
    lines = []
    for close_timeout, samples in results.items():
        worst = max(samples)
        rows.append(
            [
                f"{close_timeout:g} s",
                ", ".join(f"{s:.3f}" for s in samples),
                f"{_common.median(samples):.3f} s",
                f"{min(samples):.3f} s",
                f"{worst:.3f} s",
                f"{worst / bound:.2f}x",
            ]
        )
        lines.append(
            _common.ratio_line(
                f"p4 worst detection / bound (close_timeout={close_timeout:g})",
                worst / bound,
                f"<= {target / bound:.2f}x (bound + {SLACK} s)",
                worst <= target,
            )
        )
    header = ["close_timeout", "each run (s)", "median", "min", "max", "max ÷ bound"]
    print(_common.table(header, rows))
    for line in lines:
        print(line)
    body = "\n\n".join(
        [
            f"`ping_interval={PING_INTERVAL}`, `ping_timeout={PING_TIMEOUT}` → bound {bound:g} s; target: every run "
            f"≤ {target:g} s. From the agent's confirmed `stall()` to the `ConnectionDropped` event, {reps} runs per "
            "`close_timeout`, the stall placed at varying points of the ping cycle.",
            _common.table(header, rows),
            "\n".join(f"- `{line}`" for line in lines),
        ]
    )
    _common.write_section(_common.docs_target(args), "p4", "P4 — half-open link detection", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

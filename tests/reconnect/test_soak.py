"""Soak: random faults from the proxy table x 50 sessions x concurrent prompts, bounded in cycles and time.

Afterwards every session is attached or was forgotten with an event, no await hung, tasks and open file
descriptors are back to their baseline, and traced memory grew by less than 1 MiB.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import time
import tracemalloc
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from acp_client import (
    ACPError,
    Backoff,
    ClientState,
    ConnectionDropped,
    CrashLoopBreaker,
    ReconnectingClient,
    RecoveryPolicy,
    SessionForgotten,
    SessionLink,
    Timeouts,
    TransportOptions,
)
from acp_client.testing import FaultProxy, ProxyMode, ReferenceAgent
from tests.conftest import bound, recorder

SESSIONS = 50
MAX_CYCLES = 14
#: wall-clock budget of one soak run (scaled for slow machines); fewer cycles than MIN_CYCLES in it is a failure.
#: A cycle takes 1 to 5 s on a loaded 2-core machine (18 s stopped the run after 3 to 5 cycles there).
MAX_SECONDS = 60.0
#: the fault-variety check needs this many cycles to have run (not merely been asked for)
MIN_CYCLES = 10


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def client_tasks(baseline: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """Live tasks that are not the test's own, the proxy's or the agent's server side."""

    def ours(t: asyncio.Task[Any]) -> bool:
        coro = getattr(t.get_coro(), "__qualname__", "")
        server_side = "protocol_handler" in coro or coro.startswith("BaseSelectorEventLoop._accept")
        return not (t.get_name().startswith("fault-proxy") or server_side)

    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if not t.done() and ours(t) and t is not current} - baseline


async def soak(agent: ReferenceAgent, proxy: FaultProxy, rng: random.Random, sessions_n: int, cycles: int) -> None:
    """Run the chaos loop with one client and check the per-session outcome; the client is closed after."""
    client = ReconnectingClient(
        proxy.url(),
        transport_options=TransportOptions(
            ping_interval=0.2,
            # a latency bound, and the agent answers on this same event loop: while 50 sessions recover under
            # tracemalloc a loaded 2-core machine answers pongs seconds late, and 0.3 s (x2) cut every attempt
            # in the middle of its recovery round until wait_ready gave up. 2 s still finds a blackhole within
            # the 5 s the blackhole fault waits for the drop (both scaled).
            ping_timeout=bound(2.0),
            close_timeout=bound(0.2),
        ),
        backoff=Backoff(base=0.02, cap=0.2, rng=random.Random(1)),
        breaker=CrashLoopBreaker(threshold=10_000),  # every fault here is deliberate
        policy=RecoveryPolicy(start_jitter=0.0, stable_after=0.0),
        timeouts=Timeouts(  # latency bounds too: scaled, or a starved loop turns them into spurious failures
            probe=bound(3.0),
            strategy=bound(3.0),
            replay_silence=bound(3.0),
            list_check=bound(12.0),
            session_wait=bound(15.0),
        ),
        wait_for_ready=True,
        rng=random.Random(2),
    )
    rec = recorder(client)
    outcomes: Counter[str] = Counter()
    prompts: list[asyncio.Task[None]] = []
    forgotten_on_agent: set[str] = set()
    try:
        await client.start()
        await client.wait_ready(timeout=bound(10))
        sessions = [await client.new_session(f"/w/{i}") for i in range(sessions_n)]

        async def prompt(session: Any) -> None:
            try:
                await asyncio.wait_for(session.prompt("stream 3"), bound(20))
                outcomes["ok"] += 1
            except ACPError as exc:  # a drop, a forgotten session, a refused overlapping turn
                outcomes[type(exc).__name__] += 1
            except TimeoutError:
                outcomes["hung"] += 1

        async def blackhole() -> None:
            generation = client.generation
            proxy.blackhole_all(rng.choice(["both", "c2s", "s2c"]))  # type: ignore[arg-type]
            await rec.wait(lambda e: isinstance(e, ConnectionDropped) and e.generation == generation, 5)

        async def forget() -> None:
            victim = rng.choice([s for s in sessions if s.id not in forgotten_on_agent])
            forgotten_on_agent.add(victim.id)
            agent.forget_session(victim.id)
            await agent.drop_all_connections()

        def now(action: Callable[[], Any]) -> Callable[[], Awaitable[None]]:
            async def run() -> None:
                action()

            return run

        faults: dict[str, Callable[[], Awaitable[Any]]] = {
            "cut": proxy.cut_all,
            "reset": proxy.reset_all,
            "blackhole": blackhole,
            "restart": lambda: agent.restart(keep_sessions=True),
            "drop": agent.drop_all_connections,
            "forget": forget,
            "limit_bytes": now(lambda: proxy.set_mode(ProxyMode.limit_bytes(rng.randint(200, 4000)))),
            "slice": now(lambda: proxy.set_mode(ProxyMode.slice(rng.randint(1, 64)))),
            "delay": now(lambda: proxy.set_mode(ProxyMode.delay(0.01, jitter=0.01))),
            "refuse": now(lambda: proxy.set_listener("refuse")),
        }
        seen_faults: Counter[str] = Counter()
        started = time.monotonic()
        ran = 0
        for _cycle in range(cycles):
            if time.monotonic() - started > bound(MAX_SECONDS):
                break
            ran += 1
            live = [s for s in sessions if s.id not in forgotten_on_agent]
            batch = [asyncio.create_task(prompt(s)) for s in rng.sample(live, min(10, len(live)))]
            prompts += batch
            name = rng.choice(sorted(faults))
            seen_faults[name] += 1
            await faults[name]()
            if name in ("refuse", "limit_bytes"):
                await proxy.cut_all()  # make the fault bite now
            proxy.restore()
            await asyncio.wait(batch, timeout=bound(30))
            await client.wait_ready(timeout=bound(15))

        # let every recovery settle: nothing may stay RECOVERING
        async with asyncio.timeout(bound(20)):
            while any(s.link is SessionLink.RECOVERING for s in sessions):
                await client._supervisor.changed().wait()

        assert all(t.done() for t in prompts), "an await hung"
        assert outcomes["hung"] == 0
        forgotten_events = {e.session_id for e in rec.of(SessionForgotten)}
        for session in sessions:
            if session.id in client.sessions:
                assert session.link is SessionLink.ATTACHED, (session.id, session.link)
            else:
                assert session.link is SessionLink.LOST and session.id in forgotten_events
        assert forgotten_events == forgotten_on_agent  # forgotten exactly when the agent forgot
        assert client.state is ClientState.READY
        # judged by the cycles that ran: a run cut short by the time budget must not pass as a full one
        assert ran >= min(cycles, MIN_CYCLES), f"{ran} of {cycles} cycles ran in {bound(MAX_SECONDS)} s"
        assert sum(seen_faults.values()) == ran
        if ran >= MIN_CYCLES:
            assert outcomes["ok"] > 0 and len(seen_faults) >= 5, (outcomes, seen_faults)
    finally:
        await rec.close()
        await client.aclose()


def client_memory() -> int:
    """Traced bytes allocated under the client's own code (the agent and the proxy excluded)."""
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [
            tracemalloc.Filter(True, "*/acp_client/*", all_frames=True),
            tracemalloc.Filter(False, "*/acp_client/testing/*", all_frames=True),
            tracemalloc.Filter(False, "*/tests/*", all_frames=True),
        ]
    )
    return sum(stat.size for stat in snapshot.statistics("filename"))


@pytest.mark.soak
@pytest.mark.xdist_group("cpu_heavy")  # one at a time: tracemalloc or thousands of examples, CPU-bound
@pytest.mark.timeout(240)
@pytest.mark.parametrize("version", [2, 1], ids=["v2", "v1"])
async def test_soak_random_faults_many_sessions(version: int) -> None:
    rng = random.Random(20261129 + version)
    # the agent bounds its closing handshakes tightly: a send to a dying link must not hold a session for 1 s
    async with (
        ReferenceAgent(version, close_timeout=0.1) as agent,
        FaultProxy("127.0.0.1", agent.port, seed=7) as proxy,
    ):
        await soak(agent, proxy, rng, sessions_n=3, cycles=3)  # warm-up: caches, lazy imports, pools
        await agent.wait_for_connections(0, timeout=bound(5))
        baseline_tasks = {t for t in asyncio.all_tasks() if not t.done()}
        baseline_fds = open_fds()
        tracemalloc.start(25)
        try:
            gc.collect()
            before = client_memory()
            await soak(agent, proxy, rng, sessions_n=SESSIONS, cycles=MAX_CYCLES)
            await agent.wait_for_connections(0, timeout=bound(5))
            await proxy.wait_for_live(0, timeout=bound(5))
            gc.collect()
            grown = client_memory() - before
        finally:
            tracemalloc.stop()
        leftover = client_tasks(baseline_tasks)
        assert not leftover, leftover
        assert open_fds() <= baseline_fds, (open_fds(), baseline_fds)
        assert grown < 1024 * 1024, f"the client's traced memory grew by {grown} bytes"

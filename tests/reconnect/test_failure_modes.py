"""The twelve failure modes of docs/reconnect-bar.md §3, against the reference agent behind the fault proxy.

Each test is named after its failure mode. Modes already covered elsewhere say where.
"""

from __future__ import annotations

import asyncio
import gc
import random
import statistics
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acp_client import (
    Backoff,
    ClientState,
    ConnectionDropped,
    ConnectionLost,
    CrashLoopBreaker,
    NotConnected,
    Reattach,
    ReconnectFailed,
    ReconnectingClient,
    RecoveryMarker,
    RecoveryPolicy,
    SessionRecovered,
    SessionRecoveryFailed,
    SessionUpdate,
    StateChanged,
    TransportOptions,
)
from acp_client.testing import FAST_RETRY, FaultProxy, ProxyMode, ReferenceAgent
from tests.conftest import WEBSOCKET, Link, bound, over_links, recorder, running_client

#: tests that take ``link`` (or ``agent``) run over WebSocket, and Streamable HTTP over HTTP/1.1 and h2c
link = over_links("ws", "http1", "h2c")

PING: dict[str, Any] = {"transport_options": TransportOptions(ping_interval=0.2, ping_timeout=0.2, close_timeout=0.2)}


@asynccontextmanager
async def behind_proxy(
    link: Link = WEBSOCKET, version: int = 2, **agent_options: Any
) -> AsyncIterator[tuple[ReferenceAgent, FaultProxy]]:
    """An agent served for ``link`` and a fault proxy in front of it; reach it at ``link.via(proxy)``."""
    async with link.agent(version, **agent_options) as agent, FaultProxy("127.0.0.1", agent.port) as proxy:
        yield agent, proxy


client_for = running_client  # a started, ready client with FAST_RETRY settings and its recorder


# ---------------------------------------------------------------- 1. thundering herd after a restart


async def test_fm01_herd_spreads_reconnects_after_a_restart(link: Link) -> None:
    # Judged on the delays the clients drew (exact, whatever the machine's load), not on handshake times: on a
    # loaded machine a stalled event loop bunches the handshakes of well-spread clients (this wall-clock
    # version failed about once in 19 runs there). The spread on the wire is a measurement, not a test.
    n = 40
    async with link.agent(2) as agent:
        clients = [
            ReconnectingClient(
                link.url(agent),
                **link.options,
                policy=RecoveryPolicy(start_jitter=0.0),  # the default backoff: its spread is what is judged
                rng=random.Random(seed),
                breaker=None,
            )
            for seed in range(n)
        ]
        recorders = [recorder(c) for c in clients]
        try:
            await asyncio.gather(*(c.start() for c in clients))
            await asyncio.gather(*(c.wait_ready(timeout=bound(10)) for c in clients))
            first = len(agent.handshakes)
            await agent.restart(code=1012)

            def first_backoff(e: Any) -> bool:
                return isinstance(e, StateChanged) and e.new is ClientState.BACKOFF

            waits = [await rec.wait(first_backoff, timeout=10) for rec in recorders]
            delays = sorted(found[0].delay for found in waits)
            # the first delay is drawn from U(0, 1 s), not 0: few clients come back at once
            assert sum(d < 0.010 for d in delays) <= 0.1 * n, delays
            # no 100 ms window holds more than a third of the herd
            busiest = max(sum(w <= d < w + 0.1 for d in delays) for w in delays)
            assert busiest <= n // 3, (busiest, delays)
            assert statistics.pstdev(delays) >= 0.15
            # and every client did come back
            await agent.wait_for(lambda: len(agent.handshakes) >= first + n, timeout=bound(10))
            await asyncio.gather(*(c.wait_ready(timeout=bound(15)) for c in clients))  # 40 clients recover
        finally:
            await asyncio.gather(*(r.close() for r in recorders))
            await asyncio.gather(*(c.aclose() for c in clients))


# ---------------------------------------------------------------- 2. no storm on fatal errors
# HTTP 401/403/404, initialize -32000, a token provider and Retry-After: tests/reconnect/test_reconnect_policy.py


@pytest.mark.parametrize("code", [1008, 4001])
async def test_fm02_fatal_close_codes_stop_reconnecting(code: int) -> None:
    # WebSocket only (close codes); the fatal HTTP statuses: tests/transports/test_transport_http.py
    async with ReferenceAgent(2) as agent, client_for(agent.url) as (client, rec):
        agent.close_after_initialize(0.0, code=code)
        await agent.drop_all_connections(code=code)
        failed = await rec.wait(lambda e: isinstance(e, StateChanged) and e.new is ClientState.FAILED)
        assert failed[0].reason == f"close_{code}"
        handshakes = len(agent.handshakes)
        assert handshakes == 1  # the close ended it: no second attempt
        assert isinstance(client.failure, ReconnectFailed)


# ---------------------------------------------------------------- 3. half-open links


@pytest.mark.parametrize("direction", ["both", "s2c", "c2s"])
async def test_fm03_half_open_link_is_detected(link: Link, direction: str) -> None:
    async with (
        behind_proxy(link) as (agent, proxy),
        client_for(link.via(proxy), **{**link.options, **PING}) as (client, rec),
    ):
        session = await client.new_session("/w")
        turn = asyncio.create_task(session.prompt("sleep 30"))
        await agent.wait_for_method("session/prompt", timeout=bound(5))
        loop = asyncio.get_running_loop()
        proxy.set_mode(ProxyMode.blackhole(), direction)  # type: ignore[arg-type]
        cut_at = loop.time()
        await rec.wait(lambda e: isinstance(e, ConnectionDropped), timeout=5)
        assert loop.time() - cut_at <= bound(0.2 + 0.2 + 0.2 + 0.5)
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(turn, bound(2))
        proxy.restore()
        await rec.ready_count(2)
        await session.cancel()  # the agent's turn went on: stop it before prompting again


async def test_fm03_liveness_check_on_wake_up(link: Link) -> None:
    # "laptop sleep": nothing scheduled will ping for a long time, the hint checks at once
    slow_ping = link.transport(ping_interval=60.0, ping_timeout=0.2)
    async with (
        behind_proxy(link) as (_agent, proxy),
        client_for(link.via(proxy), transport_options=slow_ping) as (client, rec),
    ):
        proxy.blackhole_all()
        client.notify_resumed_from_sleep()
        await rec.wait(lambda e: isinstance(e, ConnectionDropped), timeout=2)
        proxy.restore()
        await rec.ready_count(2)


# ---------------------------------------------------------------- 4. in-flight requests fail fast


async def test_fm04_in_flight_requests_fail_fast_and_nothing_stays_pending(link: Link) -> None:
    backoff = Backoff(base=0.02, cap=0.2)  # this client's own: slowed down below
    async with (
        behind_proxy(link) as (agent, proxy),
        client_for(link.via(proxy), **link.options, backoff=backoff) as (client, rec),
    ):
        sessions = [await client.new_session("/w") for _ in range(2)]
        proxy.set_mode(ProxyMode.hold(), "s2c")  # answers never come back
        calls = [
            asyncio.create_task(sessions[0].prompt("echo: a")),
            asyncio.create_task(client.session_status(sessions[1].id, timeout=None)),
            asyncio.create_task(client.request("_custom/method", {}, timeout=None)),
        ]
        await agent.wait_for(
            lambda: agent.count("session/prompt") == 1 and agent.count("session/status") == 1, timeout=bound(5)
        )
        connection = client.current.connection  # type: ignore[union-attr]
        loop = asyncio.get_running_loop()
        await proxy.reset_all()
        reset_at = loop.time()
        prompt_error = await asyncio.wait_for(asyncio.gather(calls[0], return_exceptions=True), bound(1))
        custom_error = await asyncio.wait_for(asyncio.gather(calls[2], return_exceptions=True), bound(1))
        assert loop.time() - reset_at <= bound(0.05) * 4
        for (error,) in (prompt_error, custom_error):
            assert isinstance(error, ConnectionLost) and error.request_sent
        assert connection.waiting == 0 and connection._core.pending == {}
        proxy.restore()
        # session/status is read-only: it was retried once on the next connection and answered
        status = await asyncio.wait_for(calls[1], bound(5))
        assert status.status == "active"
        # during backoff a call fails at once instead of queueing
        backoff.base = backoff.cap = 30.0
        await proxy.reset_all()
        await rec.wait(lambda e: isinstance(e, StateChanged) and e.new is ClientState.BACKOFF and e.generation == 2)
        with pytest.raises(NotConnected):
            await sessions[0].prompt("echo: b")


# ---------------------------------------------------------------- 5. a prompt is never executed twice
# tests/reconnect/test_reconnect.py::test_prompt_in_flight_raises_connection_lost_and_runs_once; the control below


async def test_fm05_prompt_lost_is_not_resent_status_lost_is_retried_once(link: Link) -> None:
    async with behind_proxy(link) as (agent, proxy), client_for(link.via(proxy), **link.options) as (client, rec):
        session = await client.new_session("/w")
        proxy.set_mode(ProxyMode.hold(), "s2c")
        prompt = asyncio.create_task(session.prompt("echo: once"))
        status = asyncio.create_task(client.session_status(session.id))
        await agent.wait_for(lambda: agent.count("session/status") == 1, timeout=bound(5))
        await proxy.cut_all()
        proxy.restore()
        with pytest.raises(ConnectionLost) as info:
            await asyncio.wait_for(prompt, bound(5))
        assert info.value.request_sent
        assert (await asyncio.wait_for(status, bound(5))).status == "active"
        await rec.ready_count(2)
        assert agent.count("session/prompt", session.id) == 1
        assert agent.count("session/status", session.id) >= 2  # the lost one, its retry (+ recovery probe)


# ---------------------------------------------------------------- 6. the gap signal


async def test_fm06_gap_is_signalled_before_post_resume_updates(link: Link) -> None:
    async with behind_proxy(link, 1) as (agent, proxy), client_for(link.via(proxy), **link.options) as (client, rec):
        session = await client.new_session("/w")
        stream = session.updates()
        turn = asyncio.create_task(session.prompt("stream 12 every 0.05"))
        seen = 0
        async with asyncio.timeout(bound(5)):
            async for item in stream:
                if isinstance(item, SessionUpdate) and item.kind == "agent_message_chunk":
                    seen += 1
                    if seen == 3:
                        break
        proxy.set_listener("refuse")  # stay away while the agent goes on producing
        await proxy.cut_all()
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(turn, bound(5))
        await agent.wait_for(lambda: agent.dropped_updates >= 2, timeout=bound(5))
        proxy.restore()
        await rec.ready_count(2)
        (event,) = rec.of(SessionRecovered)
        assert (event.mode, event.replayed, event.may_have_missed_updates) == ("resume", False, True)
        after: list[Any] = []
        async with asyncio.timeout(bound(5)):
            async for item in stream:
                after.append(item)
                if isinstance(item, RecoveryMarker):
                    break
        # nothing live after the gap reached the app before the marker
        assert all(
            isinstance(i, SessionUpdate) and i.raw["content"]["text"] == f"chunk {n} "
            for n, i in enumerate(after[:-1], start=seen + 1)
        )


async def test_fm06_load_strategy_replays_history(link: Link) -> None:
    def always_load(record: Any, probe: Any, caps: Any) -> Reattach:
        return Reattach("load", replay=True, outcome="reattached")

    from acp_client.reconnect.strategy import strategy_from_callable

    async with (
        behind_proxy(link, 1) as (_agent, proxy),
        client_for(link.via(proxy), **link.options, strategy=strategy_from_callable(always_load)) as (client, rec),
    ):
        session = await client.new_session("/w")
        await session.prompt("echo: history")
        stream = session.updates()
        await proxy.cut_all()
        await rec.ready_count(2)
        (event,) = rec.of(SessionRecovered)
        assert (event.mode, event.replayed, event.may_have_missed_updates) == ("load", True, False)
        replayed = []
        async with asyncio.timeout(bound(5)):
            async for item in stream:
                if isinstance(item, RecoveryMarker):
                    break
                replayed.append(item)
        assert replayed and all(u.replay for u in replayed)
        assert [m.text for m in session.transcript.messages if m.role == "agent"] == ["history"]


# ---------------------------------------------------------------- 7. duplicates on replay / overlapping recovery
# Test A (replay over an existing transcript):
# tests/reconnect/test_reconnect.py::test_replay_over_existing_transcript...


async def test_fm07_recovery_cut_mid_replay_leaves_no_duplicates(link: Link) -> None:
    breaker = CrashLoopBreaker(threshold=1000)  # the cut links here are deliberate
    async with (
        behind_proxy(link, 1) as (agent, proxy),
        client_for(link.via(proxy), **link.options, breaker=breaker) as (client, rec),
    ):
        session = await client.new_session("/w")
        rng = random.Random(5)
        history = [f"{i} " + "".join(rng.choice("0123456789abcdef") for _ in range(300)) for i in range(10)]
        for text in history:  # incompressible, so the replay is far longer than the byte limit below
            await session.prompt(f"echo: {text}")
        live: list[str] = []

        async def watch() -> None:
            async for item in session.updates():
                if isinstance(item, SessionUpdate) and not item.replay and item.kind == "agent_message_chunk":
                    live.append(item.raw["content"]["text"])

        watcher = asyncio.create_task(watch())
        # every link from now on dies after its initialize answer and part of the replay
        proxy.set_mode(ProxyMode.limit_bytes(1500), "s2c")
        await agent.restart(keep_sessions=True)  # inactive: the recovery will load (replay)
        await rec.wait(lambda e: isinstance(e, ConnectionDropped) and e.generation >= 2, timeout=5)
        assert not rec.of(SessionRecovered)  # that recovery was cut short
        proxy.restore()
        await rec.wait(lambda e: isinstance(e, SessionRecovered), timeout=5)
        texts = [m.text for m in session.transcript.messages if m.role == "agent"]
        assert texts == history  # the superseded partial replay left nothing behind
        await session.prompt("echo: after")
        watcher.cancel()
        await asyncio.wait({watcher})
        assert live.count("after") == 1 and all(t == "after" for t in live)


# ---------------------------------------------------------------- 8. stale events from a superseded connection


async def test_fm08_blackholed_connection_is_replaced_and_its_late_frames_ignored() -> None:
    # WebSocket only: it needs the one TCP link of a WebSocket; the HTTP variant is in test_transport_http.py
    async with behind_proxy() as (agent, proxy), client_for(proxy.url(), **PING) as (client, rec):
        session = await client.new_session("/w")
        (old_link,) = proxy.links
        old_link.set_mode(ProxyMode.hold(), "s2c")  # frames of A are held back, delivered late
        old_link.set_mode(ProxyMode.blackhole(), "c2s")
        # the agent still has the session on A: this update goes out on A and is held by the proxy
        assert await agent.send_update(
            session.id,
            {"sessionUpdate": "agent_message_chunk", "messageId": "late", "content": {"type": "text", "text": "late"}},
        )
        await rec.wait(lambda e: isinstance(e, ConnectionDropped), timeout=5)
        await rec.ready_count(2)
        (event,) = rec.of(SessionRecovered)
        assert event.status == "active"  # the agent still had it (bound to A): re-attached with resume on B
        result = await asyncio.wait_for(session.prompt("echo: on B"), bound(5))
        assert result.stop_reason == "end_turn"
        old_link.set_mode(ProxyMode.passthrough(), "both")  # A's late frames are released
        await old_link.wait_closed(timeout=bound(5))
        assert len(rec.of(ConnectionDropped)) == 1 and client.state is ClientState.READY
        agent_texts = [m.text for m in session.transcript.messages if m.role == "agent"]
        assert agent_texts == ["on B"]  # the late frames of A reached nothing


# ---------------------------------------------------------------- 9. racing calls and -32002 read correctly
# A: tests/reconnect/test_reconnect.py::test_call_on_recovering_session_waits_for_reattach and
#    ::test_session_not_found_from_prompt_never_forgets; B: ::test_restart_restores_forgets_unknown_...


async def test_fm09_status_timeout_is_a_failed_recovery_not_a_forget(link: Link) -> None:
    async with (
        link.agent(2) as agent,
        client_for(link.url(agent), **link.options, recovery_timeout=bound(0.3), recovery_tries=1) as (client, rec),
    ):
        slow, fine = await client.new_session("/w"), await client.new_session("/w")
        agent.hang_status.add(slow.id)
        await agent.drop_all_connections()
        await rec.ready_count(2)
        failed = await rec.wait(lambda e: isinstance(e, SessionRecoveryFailed))
        assert failed[0].session_id == slow.id and "Timeout" in failed[0].error
        assert [e.session_id for e in rec.of(SessionRecovered)] == [fine.id]
        assert slow.id in client.sessions
        agent.hang_status.clear()
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == slow.id, timeout=5)
        assert recovered


# ---------------------------------------------------------------- 10. cancellation leaves nothing behind


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)  # link: immutable
@given(cancel_after=st.floats(min_value=0.0, max_value=0.25), refuse=st.booleans())
def test_fm10_cancellation_at_any_point_leaves_no_tasks(link: Link, cancel_after: float, refuse: bool) -> None:
    async def scenario() -> None:
        async with behind_proxy(link) as (agent, proxy):
            for i in range(3):
                async with ReconnectingClient(link.via(proxy), **link.options, **FAST_RETRY) as seed:
                    await seed.new_session(f"/w/{i}")
            baseline = {t for t in asyncio.all_tasks() if not t.done()}
            if refuse:
                proxy.set_listener("refuse")
            client = ReconnectingClient(link.via(proxy), **link.options, **FAST_RETRY)

            async def owner() -> None:
                async with client:
                    await client.new_session("/w")
                    await asyncio.Event().wait()

            task = asyncio.create_task(owner())
            await asyncio.sleep(cancel_after)  # the point to cancel at, drawn by hypothesis
            task.cancel()
            await asyncio.wait({task}, timeout=bound(2))
            assert task.done()
            assert client.state is ClientState.CLOSED
            await agent.wait_for_connections(0, timeout=bound(5))

            def ours(t: asyncio.Task[Any]) -> bool:
                # the proxy's and the agent's server-side tasks end with them; count only the client's
                coro = getattr(t.get_coro(), "__qualname__", "")
                server_side = "protocol_handler" in coro or coro.startswith("BaseSelectorEventLoop._accept")
                return not (t.get_name().startswith("fault-proxy") or server_side)

            leftover = {t for t in asyncio.all_tasks() if not t.done() and ours(t)} - baseline
            leftover.discard(asyncio.current_task())  # type: ignore[arg-type]
            # An async generator dropped while suspended (an HTTP library's byte iterator inside a cancelled
            # read) is closed by the event loop's finalizer in a task of its own: let those run, bounded.
            finalizers = {t for t in leftover if "async_generator_athrow" in repr(t.get_coro())}
            if finalizers:
                await asyncio.wait(finalizers, timeout=bound(2))
                assert all(t.done() for t in finalizers), finalizers
            leftover -= finalizers
            assert not leftover, leftover
            proxy.restore()

    asyncio.run(scenario())


async def test_fm10_caller_timeout_is_a_timeout_not_a_reconnect(link: Link) -> None:
    async with link.agent(2) as agent, client_for(link.url(agent), **link.options) as (client, rec):
        session = await client.new_session("/w")
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await session.prompt("sleep 5")
        assert client.state is ClientState.READY and not rec.of(ConnectionDropped)
        await session.cancel()


# ---------------------------------------------------------------- 11. bounded buffers while offline


async def test_fm11_nothing_queues_while_offline(link: Link) -> None:
    async with (
        behind_proxy(link) as (agent, proxy),
        client_for(
            link.via(proxy),
            **link.options,
            backoff=Backoff(base=0.05, cap=0.1),
            wait_for_ready=True,
            session_wait_timeout=60.0,
        ) as (client, rec),
    ):
        session = await client.new_session("/w")
        proxy.set_listener("refuse")
        await proxy.cut_all()
        await rec.wait(lambda e: isinstance(e, StateChanged) and e.new is ClientState.BACKOFF)
        tracemalloc.start()
        try:
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]

            async def deadline_call() -> str:
                try:
                    async with asyncio.timeout(1.0):
                        await client.session_status(session.id)
                    return "answered"
                except TimeoutError:
                    return "timeout"

            outcomes = await asyncio.gather(*(deadline_call() for _ in range(1000)))
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert outcomes.count("timeout") == 1000  # each failed at its own deadline, none sent later
        assert grown < 1024 * 1024, grown
        proxy.restore()
        await rec.ready_count(2)
        assert agent.count("session/status", session.id) == 1  # only the recovery probe, nothing replayed


# ---------------------------------------------------------------- 12. flapping and fan-out
# flapping → breaker and reconnect_now: tests/reconnect/test_reconnect_policy.py::test_flapping_trips_the_breaker...
# fan-out bound: ::test_recovery_concurrency_is_bounded; a slow session: test_fm09 above


async def test_fm12_breaker_counts_only_short_lived_connections(link: Link) -> None:
    async with (
        link.agent(2) as agent,
        client_for(
            link.url(agent),
            **link.options,
            breaker=CrashLoopBreaker(threshold=2, short_lived=60.0, window=60.0),
            stable_after=60.0,
        ) as (client, rec),
    ):
        agent.close_after_initialize(0.05)
        await agent.drop_all_connections()
        # the breaker suspends (slow retries) a client that was ready once; FAILED is for fatal verdicts
        await rec.wait(lambda e: isinstance(e, StateChanged) and e.new is ClientState.SUSPENDED, timeout=5)
        assert client.failure is not None and client.failure.reason == "flapping"
        assert len(rec.of(ConnectionDropped)) == 2

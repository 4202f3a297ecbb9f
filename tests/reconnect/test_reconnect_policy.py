"""Backoff, classification, breaker, auth, server hints and recovery policy of the reconnect manager."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import random
import statistics

import pytest

from acp_client import (
    AuthRequired,
    Backoff,
    ClientState,
    ConnectionLost,
    CrashLoopBreaker,
    DefaultStrategy,
    HandshakeRejected,
    Keep,
    NotConnected,
    ReconnectFailed,
    ReconnectingClient,
    RecoveryPolicy,
    SessionDetached,
    SessionForgotten,
    SessionRecord,
    SessionRecovered,
    SessionRecoveryFailed,
    StateChanged,
    StatusProbe,
    TLSError,
    UnsupportedProtocolVersion,
)
from acp_client.reconnect import Clock, classify_error
from acp_client.reconnect.strategy import Capabilities, Forget, Reattach
from acp_client.testing import FAST_RETRY, AgentError
from tests.conftest import Link, bound, client_options, over_links, recorder, started

#: tests that take ``link`` (or ``agent``) run over WebSocket, and Streamable HTTP over HTTP/1.1 and h2c
link = over_links("ws", "http1", "h2c")


class VirtualClock(Clock):
    """Virtual time: ``sleep`` advances the clock at once and records how long it was asked to wait."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


# ---------------------------------------------------------------------- pure pieces


def test_backoff_is_full_jitter_under_a_capped_exponential_bound() -> None:
    backoff = Backoff(base=0.5, cap=30.0, rng=random.Random(7))
    assert [backoff.bound(n) for n in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    for attempt in (1, 3, 9):
        draws = [backoff.delay(attempt) for _ in range(2000)]
        high = backoff.bound(attempt)
        assert all(0.0 <= d <= high for d in draws)
        # uniform on [0, high]: mean high/2, std high/sqrt(12); spread stays wide even at the cap
        assert statistics.fmean(draws) == pytest.approx(high / 2, rel=0.08)
        assert statistics.pstdev(draws) >= 0.25 * high
    # the very first retry is drawn too: rarely immediate
    first = [Backoff(rng=random.Random(seed)).delay(1) for seed in range(1000)]
    assert sum(d < 0.01 for d in first) < 20


def test_the_redis_links_retry_waits_are_drawn_by_the_same_backoff() -> None:
    # one backoff in the package: the Redis link's tenacity wait draws from a Backoff (it had its own
    # formula with another exponent); its schedule stays 50 ms, 100 ms ... up to 1 s
    from tenacity import RetryCallState

    from acp_client.sessions.redis._retry import FullJitter

    backoff = Backoff(base=0.025, cap=1.0, rng=random.Random(5))
    wait = FullJitter(backoff, deadline=60.0)
    assert [wait.ceiling(n) for n in range(1, 8)] == [backoff.bound(n) for n in range(1, 8)]
    assert [wait.ceiling(n) for n in range(1, 7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]
    twin = Backoff(base=0.025, cap=1.0, rng=random.Random(5))
    state = RetryCallState(None, None, (), {})
    for attempt in (1, 2, 3, 9):
        state.attempt_number = attempt
        assert wait(state) == twin.delay(attempt)  # the same draws from the same seed: one formula
    state.attempt_number, state.outcome_timestamp = 9, state.start_time + 59.99
    assert wait(state) <= 0.011  # the last wait shortened so one more attempt lands at the deadline


def test_backoff_honours_server_hints_with_spread() -> None:
    backoff = Backoff(rng=random.Random(1))
    delays = [backoff.delay(1, hint=2.0) for _ in range(200)]
    assert min(delays) >= 2.0 and max(delays) <= 2.0 * 1.2
    assert statistics.pstdev(delays) > 0.05


def test_breaker_trips_on_short_lived_connections_within_the_window() -> None:
    now = [0.0]
    breaker = CrashLoopBreaker(threshold=3, short_lived=10.0, window=60.0, clock=lambda: now[0])
    assert not breaker.record(2.0)
    assert not breaker.record(50.0)  # a stable connection does not count
    now[0] = 100.0  # the first death leaves the window
    assert not breaker.record(1.0)
    assert not breaker.record(1.0)
    assert breaker.record(1.0)
    breaker.reset()
    assert not breaker.record(1.0)


def test_breaker_signature_shows_only_public_fields() -> None:
    params = inspect.signature(CrashLoopBreaker).parameters
    assert list(params) == ["threshold", "short_lived", "window", "clock"]
    assert "_deaths" not in repr(CrashLoopBreaker())


@pytest.mark.parametrize(
    ("error", "retry", "auth"),
    [
        (HandshakeRejected(401), False, True),
        (HandshakeRejected(403), False, True),
        (HandshakeRejected(404), False, False),
        (HandshakeRejected(429, retry_after=3.0), True, False),
        (HandshakeRejected(503, retry_after=2.0), True, False),
        (HandshakeRejected(502), True, False),
        (TLSError("bad certificate"), False, False),
        (UnsupportedProtocolVersion(2, 7), False, False),
        (AuthRequired(-32000, "Authentication required"), False, True),
        (ConnectionLost(close_code=1008), False, True),
        (ConnectionLost(close_code=4001), False, True),
        (ConnectionLost(close_code=1011), True, False),
        (ConnectionLost(close_code=1012), True, False),
        (ConnectionLost(), True, False),
        (OSError("refused"), True, False),
    ],
)
def test_classifier_table(error: BaseException, retry: bool, auth: bool) -> None:
    verdict = classify_error(error)
    assert (verdict.retry, verdict.auth) == (retry, auth)
    if isinstance(error, HandshakeRejected) and error.retry_after is not None:
        assert verdict.retry_after == error.retry_after


def test_default_strategy_mapping() -> None:
    strategy = DefaultStrategy()
    record = SessionRecord("s", "/w")
    v1 = Capabilities(protocol_version=1, load=True, resume=True, status=True)
    v2 = Capabilities(protocol_version=2, load=False, resume=True, status=True)
    assert strategy.decide(record, StatusProbe(None, not_found=True), v1) == Forget("unknown")
    assert strategy.decide(record, StatusProbe("active"), v1) == Reattach("resume", False, "reattached")
    assert strategy.decide(record, StatusProbe("open"), v1) == Reattach("resume", False, "reattached")
    assert strategy.decide(record, StatusProbe("inactive"), v1) == Reattach("load", True, "restored")
    assert strategy.decide(record, StatusProbe("saved"), v1) == Reattach("load", True, "restored")
    assert strategy.decide(record, StatusProbe("hibernating"), v1) == Reattach("load", True, "restored")
    no_load = Capabilities(protocol_version=1, load=False, resume=True, status=False)
    assert strategy.decide(record, StatusProbe(None, skipped_reason="not_advertised"), no_load) == Reattach(
        "resume", False, "restored"
    )
    only_load = Capabilities(protocol_version=1, load=True, resume=False, status=True)
    assert strategy.decide(record, StatusProbe("active"), only_load) == Reattach("load", True, "reattached")
    neither = Capabilities(protocol_version=1, load=False, resume=False, status=True)
    assert isinstance(strategy.decide(record, StatusProbe("active"), neither), Keep)
    assert strategy.decide(record, StatusProbe("active"), v2) == Reattach("resume", True, "reattached")
    assert DefaultStrategy(replay=False).decide(record, StatusProbe("inactive"), v2) == Reattach(
        "resume", False, "restored"
    )
    assert isinstance(DefaultStrategy(forget_unknown=False).decide(record, StatusProbe(None, not_found=True), v2), Keep)


def test_illegal_transitions_raise() -> None:
    client = ReconnectingClient("ws://127.0.0.1:9/acp")
    with pytest.raises(RuntimeError, match="illegal state transition"):
        client._supervisor._set_state(ClientState.READY)


# ---------------------------------------------------------------------- against the reference agent


@pytest.mark.parametrize("status", [401, 403, 400, 404])
async def test_fatal_handshake_status_makes_exactly_one_attempt(link: Link, status: int) -> None:
    # 404/406 are start-up refusals, retried in a bounded run (tests/reconnect/test_startup_refusals.py):
    # with no run allowed they are fatal at once, as before
    settings = {**FAST_RETRY, "policy": dataclasses.replace(FAST_RETRY["policy"], startup_refusals=0)}
    async with link.agent(2) as agent:
        agent.reject_handshake(status)
        client = ReconnectingClient(link.url(agent), **link.options, **settings)
        with pytest.raises(ReconnectFailed) as info:
            async with client:
                pass
        # a 400 to the WebSocket upgrade says for certain that no ACP endpoint is there (NotAnACPEndpoint)
        definite = status == 400 and not link.http
        assert info.value.reason == ("not_acp" if definite else f"http_{status}")
        assert isinstance(info.value.cause, HandshakeRejected)
        assert agent.rejected_handshakes == 1
        assert client.state is ClientState.CLOSED


async def test_401_with_a_token_provider_refreshes_once_then_stops(link: Link) -> None:
    calls: list[int] = []

    def token() -> dict[str, str]:
        calls.append(1)
        return {"Authorization": f"Bearer token-{len(calls)}"}

    async with link.agent(2) as agent:
        agent.reject_handshake(401)
        client = ReconnectingClient(link.url(agent), **client_options(**link.options, headers=token))
        with pytest.raises(ReconnectFailed):
            async with client:
                pass
        assert agent.rejected_handshakes == 2 and len(calls) == 2


async def test_token_rotation_provider_called_before_every_attempt(link: Link) -> None:
    calls: list[str] = []

    def token() -> dict[str, str]:
        calls.append(f"token-{len(calls) + 1}")
        return {"Authorization": f"Bearer {calls[-1]}"}

    async with link.agent(2) as agent:
        client, rec = await started(link.url(agent), **link.options, headers=token)
        try:
            agent.reject_handshake(401, times=1)  # the old token is refused once
            await agent.drop_all_connections()
            await rec.ready_count(2)
            seen = [{k.lower(): v for k, v in h.headers.items()}.get("authorization") for h in agent.handshakes]
            assert seen == ["Bearer token-1", "Bearer token-2", "Bearer token-3"]
            assert client.state is ClientState.READY
        finally:
            await rec.close()
            await client.aclose()


async def test_503_retry_after_is_honoured(link: Link) -> None:
    async with link.agent(2) as agent:
        client, rec = await started(link.url(agent), **link.options)
        try:
            agent.reject_handshake(503, retry_after=1, times=1)  # Retry-After is whole seconds
            await agent.drop_all_connections()
            await rec.ready_count(2)
            backoffs = [e for e in rec.of(StateChanged) if e.new is ClientState.BACKOFF]
            assert backoffs[-1].reason == "http_503" and backoffs[-1].delay is not None
            assert backoffs[-1].delay >= 1.0
            # the next handshake really came no earlier than the hint
            times = [h.at for h in agent.handshakes]
            assert times[-1] - times[-2] >= 1.0 - 0.01
        finally:
            await rec.close()
            await client.aclose()


async def test_initialize_auth_required_is_fatal_without_a_provider(link: Link) -> None:
    async with link.agent(2) as agent:
        agent.initialize_error = AgentError(-32000, "Authentication required")
        client = ReconnectingClient(link.url(agent), **link.options, **FAST_RETRY)
        with pytest.raises(ReconnectFailed) as info:
            async with client:
                pass
        assert info.value.reason == "auth_required"
        assert agent.count("initialize") == 1


async def test_flapping_trips_the_breaker_and_reconnect_now_rearms(link: Link) -> None:
    async with link.agent(2) as agent:
        client, rec = await started(
            link.url(agent),
            **link.options,
            breaker=CrashLoopBreaker(threshold=3, short_lived=10.0, window=60.0),
            stable_after=10.0,
        )
        try:
            agent.close_after_initialize(0.0)
            await agent.drop_all_connections()
            await rec.wait(lambda e: isinstance(e, StateChanged) and e.new is ClientState.SUSPENDED, timeout=10)
            assert client.failure is not None and client.failure.reason == "flapping"  # suspended, not failed
            assert not [e for e in rec.of(StateChanged) if e.new is ClientState.FAILED]
            delays = [e.delay for e in rec.of(StateChanged) if e.new is ClientState.BACKOFF]
            attempts = [e.attempt for e in rec.of(StateChanged) if e.new is ClientState.BACKOFF]
            assert attempts == list(range(1, len(attempts) + 1))  # never reset by short-lived links
            assert all(d is not None for d in delays)
            agent.close_after_initialize(None)
            client.reconnect_now()
            await client.wait_ready(timeout=bound(5))
        finally:
            await rec.close()
            await client.aclose()


async def test_failed_recovery_is_retried_never_forgotten(link: Link, version: int) -> None:
    async with link.agent(version) as agent:
        client, rec = await started(
            link.url(agent), **link.options, recovery_tries=2, backoff=Backoff(base=0.01, cap=0.05)
        )
        try:
            session = await client.new_session("/w")
            method = "session/resume" if version == 2 else "session/load"
            agent.status_override[session.id] = "inactive"
            agent.method_errors[method] = AgentError(-32603, "storage offline")
            await agent.drop_all_connections()
            failures = await rec.wait(lambda e: isinstance(e, SessionRecoveryFailed), timeout=5)
            assert failures[0].session_id == session.id and "InternalError" in failures[0].error
            assert not any(isinstance(e, SessionForgotten) for e in rec.events)
            await rec.ready_count(2)  # the recovery phase does not wait forever for one session
            assert session.id in client.sessions
            del agent.method_errors[method]  # storage is back: the background retry recovers it
            recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered), timeout=5)
            assert recovered[0].session_id == session.id
            await asyncio.wait_for(session.prompt("echo: back"), bound(5))
        finally:
            await rec.close()
            await client.aclose()


async def test_recovery_concurrency_is_bounded(link: Link) -> None:
    async with link.agent(2) as agent:
        client, rec = await started(link.url(agent), **link.options, recovery_concurrency=4)
        try:
            sessions = [await client.new_session("/w") for _ in range(24)]
            agent.set_capacity(1000, 0.005)  # every request takes a moment: the agent counts what it holds
            await agent.drop_all_connections()
            await rec.ready_count(2, timeout=10)
            assert len(rec.of(SessionRecovered)) == len(sessions)
            if link.http:  # each resume first opens its session's stream: the agent may hold fewer at once
                assert 1 <= agent.max_outstanding <= 4
            else:
                assert agent.max_outstanding == 4  # a fixed limit: never more recovery requests in flight
        finally:
            await rec.close()
            await client.aclose()


async def test_per_session_strategy_and_keep_instead_of_forget(link: Link) -> None:
    async with link.agent(2) as agent:
        client, rec = await started(link.url(agent), **link.options)
        try:
            plain, careful = await client.new_session("/w"), await client.new_session("/w")
            client.set_strategy(plain.id, DefaultStrategy(replay=False))
            client.set_strategy(careful.id, DefaultStrategy(forget_unknown=False))
            agent.forget_session(careful.id)
            await agent.drop_all_connections()
            await rec.ready_count(2)
            resumes = {r.params["sessionId"]: r.params for r in agent.received if r.method == "session/resume"}
            assert "replayFrom" not in resumes[plain.id]
            assert careful.id in client.sessions  # kept for the application to decide
            assert careful.link.value == "detached"
            (detached,) = await rec.wait(lambda e: isinstance(e, SessionDetached))
            assert detached.session_id == careful.id and detached.not_found
            await client.forget(careful.id)
            assert careful.id not in client.sessions
        finally:
            await rec.close()
            await client.aclose()


async def test_manual_recover_and_not_connected_during_backoff(link: Link) -> None:
    async with link.agent(2) as agent:
        client, rec = await started(
            link.url(agent), **link.options, backoff=Backoff(base=5.0, cap=5.0, rng=random.Random(3))
        )
        try:
            session = await client.new_session("/w")
            await agent.drop_all_connections()
            await rec.wait(lambda e: isinstance(e, StateChanged) and e.new is ClientState.BACKOFF)
            with pytest.raises(NotConnected):
                await session.prompt("echo: x")
            client.reconnect_now()  # cut the 0..10 s backoff short
            await rec.ready_count(2)
            assert await client.recover(session.id) is session
            await asyncio.wait_for(session.prompt("echo: y"), bound(5))
        finally:
            await rec.close()
            await client.aclose()


async def test_virtual_clock_drives_backoff_without_waiting() -> None:
    clock = VirtualClock()
    client = ReconnectingClient(
        "ws://127.0.0.1:9/acp",  # nothing listens on the discard port: every attempt is refused
        clock=clock,
        rng=random.Random(11),
        backoff=Backoff(base=0.5, cap=30.0, rng=random.Random(11)),
        policy=RecoveryPolicy(start_jitter=0.0),
    )
    rec = recorder(client)
    await client.start()
    try:
        await rec.wait(lambda e: isinstance(e, StateChanged) and e.new is ClientState.BACKOFF and e.attempt >= 8)
        backoffs = [e for e in rec.of(StateChanged) if e.new is ClientState.BACKOFF]
        bounds = [min(30.0, 0.5 * 2**e.attempt) for e in backoffs]
        assert all(0 <= (e.delay or 0) <= b for e, b in zip(backoffs, bounds, strict=True))
        assert clock.sleeps[: len(backoffs)] == [e.delay for e in backoffs]
    finally:
        await rec.close()
        await client.aclose()

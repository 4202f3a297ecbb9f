"""Refusals during start-up are not final (issue 24 item 4).

A server that accepts connections before its ``/acp`` route exists (``qwen serve`` answers the WebSocket
upgrade with 406 for about a second) answers 404/406/503 to the first attempts. The client retries them
with backoff; only a run longer than ``RecoveryPolicy.startup_refusals`` fails it, and the error names the
bound. Against the reference agent over real loopback links, WebSocket and Streamable HTTP, which refuses
the first handshakes it sees (``reject_handshake(status, times=N)``).
"""

from __future__ import annotations

import dataclasses

import pytest

from acp_client import (
    ClientState,
    HandshakeRejected,
    ReconnectFailed,
    ReconnectingClient,
    SessionLink,
    SessionRecovered,
    StateChanged,
)
from acp_client.reconnect import classify_error
from acp_client.testing import FAST_RETRY, ReferenceAgent
from tests.conftest import bound, started

TRANSPORTS = ["websocket", "http"]


def _url(agent: ReferenceAgent, transport: str) -> str:
    return agent.url if transport == "websocket" else agent.http_url


def _backoff_reasons(events: list[StateChanged]) -> list[str | None]:
    return [e.reason for e in events if e.new is ClientState.BACKOFF]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("status", [406, 404, 503])
async def test_a_server_that_opens_its_route_late_is_reached(status: int, transport: str) -> None:
    async with ReferenceAgent(2) as agent:
        agent.reject_handshake(status, times=3)  # the route is not there for the first three attempts
        client, rec = await started(_url(agent, transport))
        try:
            assert client.state is ClientState.READY
            assert agent.rejected_handshakes == 3
            assert _backoff_reasons(rec.of(StateChanged)) == [f"http_{status}"] * 3
            session = await client.new_session("/w")
            assert session.link is SessionLink.ATTACHED
        finally:
            await rec.close()
            await client.aclose()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_run_of_refusals_past_the_bound_is_fatal_and_names_the_bound(transport: str) -> None:
    policy = dataclasses.replace(FAST_RETRY["policy"], startup_refusals=2)
    async with ReferenceAgent(2) as agent:
        agent.reject_handshake(406)  # never opens its route
        client = ReconnectingClient(_url(agent, transport), **{**FAST_RETRY, "policy": policy})
        try:
            await client.start()
            with pytest.raises(ReconnectFailed) as caught:
                await client.wait_ready(timeout=bound(10))
            assert caught.value.reason == "http_406"
            assert isinstance(caught.value.cause, HandshakeRejected) and caught.value.cause.status_code == 406
            assert "refused 3 connection attempts in a row" in str(caught.value)
            assert "RecoveryPolicy.startup_refusals=2" in str(caught.value)
            assert agent.rejected_handshakes == 3  # two retried, the third is fatal
            assert client.state is ClientState.FAILED
        finally:
            await client.aclose()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_restarting_server_that_refuses_for_a_while_gets_its_sessions_back(transport: str) -> None:
    async with ReferenceAgent(2) as agent:
        client, rec = await started(_url(agent, transport))
        try:
            session = await client.new_session("/w")
            agent.reject_handshake(404, times=2)  # restarting: the route comes back after two attempts
            await agent.drop_all_connections()
            await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=10)
            assert agent.rejected_handshakes == 2
            assert "http_404" in _backoff_reasons(rec.of(StateChanged))
            assert client.state is not ClientState.FAILED
        finally:
            await rec.close()
            await client.aclose()


def test_only_start_up_statuses_are_refusals() -> None:
    assert classify_error(HandshakeRejected(406)).refusal
    assert classify_error(HandshakeRejected(404)).refusal
    assert not classify_error(HandshakeRejected(406)).retry  # alone it would be final: the loop bounds the run
    assert not classify_error(HandshakeRejected(400)).refusal
    assert not classify_error(HandshakeRejected(401)).refusal
    assert classify_error(HandshakeRejected(503)).retry  # retried without a bound, as before

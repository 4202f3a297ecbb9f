"""``Timeouts.request`` is the deadline of every request the SDK sends for the application, and a call's own
``timeout=`` wins over it (issue 33: ``Timeouts(request=0.3)`` used to leave ``session_status()`` waiting
10 s against a stalled agent, each public call having a number of its own).

The agent is the reference agent, stalled with its fault control: its sockets stay open and nothing is
answered, so only the client's deadline can end a call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from acp_client import ACPTimeoutError, ReconnectingClient, Timeouts, TransportOptions, connect, sync
from acp_client.client import USE_CLIENT_DEFAULT
from acp_client.testing import FAST_RETRY, AgentThread, ReferenceAgent
from tests.conftest import bound

#: fast enough that the old fixed defaults (10 s, 30 s, 60 s) could never pass for it
SHORT = 0.3
#: "well under a second": SHORT plus the time a loaded machine needs to notice
PROMPTLY = 0.9


async def _stalled_failure(call: Awaitable[Any]) -> tuple[ACPTimeoutError, float]:
    started = time.monotonic()
    with pytest.raises(ACPTimeoutError) as caught:
        await asyncio.wait_for(call, bound(15))  # the outer bound only catches a deadline that never fires
    return caught.value, time.monotonic() - started


#: every request a ReconnectingClient sends for the application, and how to send it for one session id
CALLS: dict[str, Callable[[ReconnectingClient, str], Awaitable[Any]]] = {
    "session_status": lambda c, sid: c.session_status(sid),
    "new_session": lambda c, sid: c.new_session("/w"),
    "resume_session": lambda c, sid: c.resume_session(sid, "/w"),
    "list_sessions": lambda c, sid: _first(c.list_sessions()),
    "close_session": lambda c, sid: c.close_session(sid),
    "request": lambda c, sid: c.request("session/status", {"sessionId": sid}),
}


async def _first(items: AsyncIterator[Any]) -> Any:
    async for item in items:
        return item
    return None


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_timeouts_request_bounds_every_call_of_the_reconnecting_client(call: str) -> None:
    async with ReferenceAgent(2) as agent:
        client = ReconnectingClient(agent.url, timeouts=Timeouts(request=SHORT), **FAST_RETRY)
        try:
            await client.start()
            await client.wait_ready(timeout=bound(5))
            session = await client.new_session("/w")
            agent.stall()
            error, took = await _stalled_failure(CALLS[call](client, session.id))
            assert took < bound(PROMPTLY), f"{call} gave up after {took:.2f} s, not {SHORT} s"
            assert f"within {SHORT:g} s" in str(error) and "Timeouts.request" in str(error)
        finally:
            agent.unstall()
            await client.aclose()


async def test_session_status_against_a_stalled_agent_fails_within_timeouts_request() -> None:
    # the case of the report: one connection (connect()), the call with no timeout of its own
    async with ReferenceAgent(2) as agent, connect(agent.url, timeouts=Timeouts(request=SHORT)) as client:
        session = await client.new_session("/w")
        agent.stall()
        try:
            error, took = await _stalled_failure(client.session_status(session.id))
        finally:
            agent.unstall()
        assert took < bound(PROMPTLY)
        assert str(error).startswith(f"session/status got no answer within {SHORT:g} s")


async def test_a_calls_own_timeout_wins_over_timeouts_request() -> None:
    async with ReferenceAgent(2) as agent:
        client = ReconnectingClient(agent.url, timeouts=Timeouts(request=30.0), **FAST_RETRY)
        try:
            await client.start()
            await client.wait_ready(timeout=bound(5))
            session = await client.new_session("/w")
            agent.stall()
            # shorter than the client's: the call's own deadline ends it
            error, took = await _stalled_failure(client.session_status(session.id, timeout=SHORT))
            assert took < bound(PROMPTLY) and "Timeouts.request" not in str(error)
            # longer than the client's: the call waits its own deadline, not the client's 0.3 s
            client_short = ReconnectingClient(agent.url, timeouts=Timeouts(request=SHORT), **FAST_RETRY)
            agent.unstall()
            try:
                await client_short.start()
                await client_short.wait_ready(timeout=bound(5))
                agent.stall()
                error, took = await _stalled_failure(client_short.session_status(session.id, timeout=1.0))
                assert took >= 0.95 and "within 1 s" in str(error)
                # USE_CLIENT_DEFAULT spelled out is the same as leaving it
                error, took = await _stalled_failure(
                    client_short.session_status(session.id, timeout=USE_CLIENT_DEFAULT)
                )
                assert took < bound(PROMPTLY)
            finally:
                agent.unstall()
                await client_short.aclose()
        finally:
            agent.unstall()
            await client.aclose()


def test_the_blocking_facade_runs_with_timeouts_request_too() -> None:
    with AgentThread(2, timeout=bound(15)) as host:
        options = {"timeouts": Timeouts(request=SHORT), "transport_options": TransportOptions(close_timeout=0.5)}
        with sync.ReconnectingClient(host.agent.url, ready_timeout=bound(5), **options, **FAST_RETRY) as client:
            session = client.new_session("/w")

            async def stall() -> None:
                host.agent.stall()

            async def unstall() -> None:
                host.agent.unstall()

            host.call(stall())
            try:
                started = time.monotonic()
                with pytest.raises(ACPTimeoutError):
                    client.session_status(session.id)
                assert time.monotonic() - started < bound(PROMPTLY)
            finally:
                host.call(unstall())

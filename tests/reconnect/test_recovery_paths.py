"""Recovery branches that no other test reached: each test here fails if its branch is changed.

- ``-32002`` from ``session/resume`` (v2) or ``session/load`` (v1), with no status probe first, forgets the session;
- a new connection is authenticated with ``on_auth_required`` before the recovery (tests/reconnect/test_reauth.py
  has the rest of it);
- a status probe that errors is skipped (resume/load decides); one that times out fails the attempt and is retried;
- an agent process that keeps crashing trips the crash-loop breaker (``SUSPENDED``, or ``FAILED`` before it
  existed); a bug in the reconnect loop ends in ``FAILED`` instead of a silently dead task.

All against the reference agent over real loopback WebSockets, or over stdio for the crashing process.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from acp_client import (
    ACPClient,
    ClientState,
    ConnectionDropped,
    CrashLoopBreaker,
    MemorySessionStore,
    ReconnectFailed,
    ReconnectingClient,
    SessionForgotten,
    SessionLink,
    SessionLost,
    SessionRecovered,
    SessionRecoveryFailed,
    StateChanged,
)
from acp_client.testing import FAST_RETRY, AgentError, ReferenceAgent
from tests.conftest import bound, recorder, started

#: The state the crash-loop breaker leaves the client in: ``SUSPENDED`` (issue 9 item 6) once it exists.
BREAKER_STATE: ClientState = getattr(ClientState, "SUSPENDED", ClientState.FAILED)


def recovered_event(session_id: str) -> Any:
    return lambda e: isinstance(e, SessionRecovered) and e.session_id == session_id


# ---------------------------------------------------------------- -32002 from the re-attach itself


@pytest.mark.parametrize(("version", "via"), [(2, "session/resume"), (1, "session/load")], ids=["v2", "v1"])
async def test_unknown_session_from_resume_or_load_is_forgotten(version: int, via: str) -> None:
    # no session/status advertised: the re-attach call is the first to learn that the agent lost the session
    store = MemorySessionStore()
    async with ReferenceAgent(version, capabilities={"status": False}) as agent:
        client, rec = await started(agent.url, store=store)
        try:
            gone, kept = await client.new_session("/w/gone"), await client.new_session("/w/kept")
            agent.forget_session(gone.id)
            await agent.drop_all_connections()
            await rec.wait(lambda e: isinstance(e, SessionForgotten), timeout=10)
            await rec.wait(recovered_event(kept.id), timeout=10)
            assert [(e.session_id, e.reason, e.via) for e in rec.of(SessionForgotten)] == [(gone.id, "unknown", via)]
            assert agent.count("session/status") == 0
            assert agent.count(via, gone.id) == 1  # answered -32002 once: never retried
            assert not rec.of(SessionRecoveryFailed)
            assert gone.link is SessionLink.LOST and gone.id not in client.sessions
            assert {r.session_id for r in await store.load_all()} == {kept.id}
            with pytest.raises(SessionLost):
                await asyncio.wait_for(gone.prompt("hello"), bound(5))
            assert kept.link is SessionLink.ATTACHED
        finally:
            await rec.close()
            await client.aclose()


# ---------------------------------------------------------------- authentication during recovery


@pytest.mark.parametrize("version", [2, 1], ids=["v2", "v1"])
async def test_auth_required_during_recovery_calls_on_auth_required_then_reattaches(version: int) -> None:
    logins: list[int] = []

    async def login(acp: ACPClient) -> None:
        logins.append(acp.connection.id)
        await acp.authenticate("agent-login")

    login_method = "auth/login" if version == 2 else "authenticate"
    async with ReferenceAgent(version, require_auth=True) as agent:
        client, rec = await started(agent.url, on_auth_required=login)
        try:
            await client.authenticate("agent-login")  # the application logs the first connection in itself
            session = await client.new_session("/w")
            await agent.drop_all_connections()  # the new connection is not authenticated: resume gets -32000
            await rec.wait(recovered_event(session.id), timeout=10)
            assert client.current is not None
            assert logins == [client.current.connection.id]  # called once, with the new connection
            assert agent.count(login_method) == 2
            # the hook ran right after initialize, before the recovery (the application had authenticated
            # the first connection): the probe says active, and the one resume is accepted
            assert agent.count("session/resume", session.id) == 1
            result = await asyncio.wait_for(session.prompt("echo: logged in again"), bound(5))
            assert result.stop_reason == "end_turn"
        finally:
            await rec.close()
            await client.aclose()


# ---------------------------------------------------------------- the status probe


@pytest.mark.parametrize("version", [2, 1], ids=["v2", "v1"])
async def test_a_failing_status_probe_is_skipped_and_the_reattach_decides(version: int) -> None:
    async with ReferenceAgent(version) as agent:
        client, rec = await started(agent.url)
        try:
            session = await client.new_session("/w")
            agent.status_override[session.id] = AgentError(-32603, "status storage hiccup")
            await agent.drop_all_connections()
            (event,) = await rec.wait(recovered_event(session.id), timeout=10)
            # probe answered with an error: no status known; v2 resumes, v1 restores with load
            assert event.status is None
            assert event.mode == ("resume" if version == 2 else "load")
            assert not rec.of(SessionRecoveryFailed) and not rec.of(SessionForgotten)
            assert agent.count("session/status", session.id) == 1  # not retried: the error is an answer
            assert session.link is SessionLink.ATTACHED
        finally:
            await rec.close()
            await client.aclose()


async def test_a_status_probe_timeout_fails_the_attempt_and_is_retried_never_forgotten() -> None:
    async with ReferenceAgent(2) as agent:
        client, rec = await started(agent.url, recovery_timeout=bound(0.5), recovery_tries=2)
        try:
            slow, fine = await client.new_session("/w/slow"), await client.new_session("/w/fine")
            agent.hang_status.add(slow.id)
            await agent.drop_all_connections()
            failed = await rec.wait(lambda e: isinstance(e, SessionRecoveryFailed), timeout=10)
            assert failed[0].session_id == slow.id and failed[0].will_retry
            assert "Timeout" in failed[0].error
            await rec.wait(recovered_event(fine.id), timeout=10)
            # the probe never answered: nothing was re-attached blindly, nothing forgotten
            assert agent.count("session/resume", slow.id) == 0
            assert slow.id in client.sessions and slow.link is not SessionLink.LOST
            assert not rec.of(SessionForgotten)
            agent.hang_status.clear()
            (event,) = await rec.wait(recovered_event(slow.id), timeout=15)
            assert event.status == "active" and event.mode == "resume"
            assert agent.count("session/resume", slow.id) == 1
        finally:
            await rec.close()
            await client.aclose()


# ---------------------------------------------------------------- crashes


CRASHING_AGENT = textwrap.dedent(
    """
    import json, os, sys
    # healthy once the flag file exists: become the reference agent
    if os.path.exists(sys.argv[1]):
        os.execv(sys.executable, [sys.executable, "-m", "acp_client.testing.reference_agent", "--stdio"])
    request = json.loads(sys.stdin.readline())
    answer = {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}, "authMethods": []}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": answer}) + "\\n")
    sys.stdout.flush()
    sys.exit(3)  # crash right after the handshake
    """
)


async def test_an_agent_process_that_keeps_crashing_trips_the_breaker_and_reconnect_now_rearms(
    tmp_path: Path,
) -> None:
    script, healthy = tmp_path / "crashing_agent.py", tmp_path / "healthy"
    script.write_text(CRASHING_AGENT)
    breaker = CrashLoopBreaker(threshold=3, short_lived=60.0, window=600.0)
    client = ReconnectingClient([sys.executable, str(script), str(healthy)], breaker=breaker, **FAST_RETRY)
    rec = recorder(client)
    await client.start()
    try:
        tripped = await rec.wait(lambda e: isinstance(e, StateChanged) and e.new is BREAKER_STATE, timeout=20)
        assert tripped[0].reason == "flapping"
        drops = rec.of(ConnectionDropped)
        assert len(drops) == 3 and all("exited with code 3" in (d.reason or "") for d in drops)
        assert [e.new for e in rec.of(StateChanged)].count(BREAKER_STATE) == 1  # one event, not one per retry
        if BREAKER_STATE is ClientState.FAILED:
            assert client.failure is not None and client.failure.reason == "flapping"
        healthy.touch()
        client.reconnect_now()
        await client.wait_ready(timeout=bound(15))
        session = await client.new_session("/w")
        result = await asyncio.wait_for(session.prompt("echo: stable now"), bound(5))
        assert result.stop_reason == "end_turn"
    finally:
        await rec.close()
        await client.aclose()


async def test_a_crash_inside_the_reconnect_loop_ends_in_failed_not_in_a_dead_task() -> None:
    calls: list[BaseException] = []

    def broken_classifier(error: BaseException) -> Any:
        calls.append(error)
        raise RuntimeError("a bug in the application's classifier")

    async with ReferenceAgent(2) as agent:
        client, rec = await started(agent.url, classifier=broken_classifier)
        try:
            session = await client.new_session("/w")
            await agent.drop_all_connections()  # the loop classifies the drop: the classifier raises
            failed = await rec.wait(lambda e: isinstance(e, StateChanged) and e.new is ClientState.FAILED, timeout=10)
            assert failed[0].reason == "internal_error" and calls
            assert client.state is ClientState.FAILED
            with pytest.raises(ReconnectFailed):  # waiters get the failure at once; nothing hangs
                await client.wait_ready(timeout=bound(5))
            with pytest.raises(ReconnectFailed):
                await asyncio.wait_for(session.prompt("echo: nobody home"), bound(5))
            client.reconnect_now()  # re-armed: the classifier is not needed for a successful connect
            await rec.wait(recovered_event(session.id), timeout=10)
            await client.wait_ready(timeout=bound(5))
        finally:
            await rec.close()
            await client.aclose()

"""The reconnect manager against the reference agent over real loopback WebSockets, v1 and v2."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from acp_client import (
    ClientState,
    ConnectionDropped,
    ConnectionLost,
    MemorySessionStore,
    ReconnectingClient,
    RecoveryMarker,
    SessionForgotten,
    SessionLost,
    SessionRecovered,
    SQLiteSessionStore,
)
from acp_client.testing import FAST_RETRY, ReferenceAgent
from tests.conftest import Link, bound, over_links, recorder, started

#: tests that take ``link`` (or ``agent``) run over WebSocket, and Streamable HTTP over HTTP/1.1 and h2c
link = over_links("ws", "http1", "h2c")


async def test_drop_with_active_sessions_reattaches_with_resume(
    link: Link, agent: ReferenceAgent, version: int
) -> None:
    client, rec = await started(link.url(agent), **link.options)
    try:
        sessions = [await client.new_session(f"/w/{i}") for i in range(3)]
        await agent.drop_all_connections()
        await rec.ready_count(2)
        recovered = rec.of(SessionRecovered)
        assert {e.session_id for e in recovered} == {s.id for s in sessions}
        assert all(e.outcome == "reattached" and e.mode == "resume" and e.status == "active" for e in recovered)
        for session in sessions:
            assert agent.count("session/resume", session.id) == 1
            assert agent.count("session/status", session.id) == 1
            result = await asyncio.wait_for(session.prompt("echo: still here"), bound(5))
            assert result.stop_reason == "end_turn"
            assert session.transcript.messages[-1].text == "still here"
        assert client.sessions.keys() == {s.id for s in sessions}
    finally:
        await rec.close()
        await client.aclose()


async def test_restart_restores_forgets_unknown_and_keeps_odd_statuses(
    link: Link, agent: ReferenceAgent, version: int
) -> None:
    store = MemorySessionStore()
    client, rec = await started(link.url(agent), **link.options, store=store)
    try:
        kept, gone, odd = [await client.new_session("/w") for _ in range(3)]
        markers = gone.updates()
        await agent.restart(keep_sessions=True)
        agent.forget_session(gone.id)
        agent.status_override[odd.id] = "hibernating"
        await rec.ready_count(2)
        forgotten = rec.of(SessionForgotten)
        assert [(e.session_id, e.reason, e.via) for e in forgotten] == [(gone.id, "unknown", "session/status")]
        assert gone.id not in client.sessions
        assert gone.id not in {r.session_id for r in await store.load_all()}
        with pytest.raises(SessionLost):
            await gone.prompt("hello")
        lost_marker = await asyncio.wait_for(anext(markers), bound(5))
        assert isinstance(lost_marker, RecoveryMarker) and lost_marker.outcome == "lost"
        expected_mode = "resume" if version == 2 else "load"
        recovered = {e.session_id: e for e in rec.of(SessionRecovered)}
        assert recovered[kept.id].outcome == "restored" and recovered[kept.id].mode == expected_mode
        assert recovered[odd.id].status == "hibernating" and recovered[odd.id].outcome == "restored"
        assert odd.id in client.sessions
        assert await asyncio.wait_for(odd.prompt("echo: odd"), bound(5))
    finally:
        await rec.close()
        await client.aclose()


@pytest.mark.parametrize("variant", ["not_advertised", "method_not_found"])
async def test_without_status_goes_straight_to_reattach(link: Link, version: int, variant: str) -> None:
    options: dict[str, Any] = {}
    if variant == "not_advertised":
        options["capabilities"] = {"sessionCapabilities.status" if version == 1 else "session.status": False}
    else:
        options["status_answers_method_not_found"] = True
    async with link.agent(version, **options) as agent:
        client, rec = await started(link.url(agent), **link.options)
        try:
            session = await client.new_session("/w")
            await agent.drop_all_connections()
            await rec.ready_count(2)
            (event,) = rec.of(SessionRecovered)
            # without a probe nothing says the session is live: v1 restores it with a replaying load
            method = "resume" if version == 2 else "load"
            assert event.status is None and event.mode == method
            assert agent.count("session/status") == (0 if variant == "not_advertised" else 1)
            assert agent.count(f"session/{method}", session.id) == 1
            await asyncio.wait_for(session.prompt("echo: ok"), bound(5))
        finally:
            await rec.close()
            await client.aclose()


async def test_v1_resume_method_not_found_falls_back_to_load(link: Link) -> None:
    async with link.agent(1, resume_answers_method_not_found=True) as agent:
        client, rec = await started(link.url(agent), **link.options)
        try:
            session = await client.new_session("/w")
            await session.prompt("echo: history")
            await agent.drop_all_connections()
            await rec.ready_count(2)
            (event,) = rec.of(SessionRecovered)
            assert event.mode == "load" and event.replayed and not event.may_have_missed_updates
            assert agent.count("session/resume") == 1 and agent.count("session/load") == 1
            assert [m.text for m in session.transcript.messages if m.role == "agent"] == ["history"]
        finally:
            await rec.close()
            await client.aclose()


async def test_replay_over_existing_transcript_has_no_duplicates(
    link: Link, agent: ReferenceAgent, version: int
) -> None:
    client, rec = await started(link.url(agent), **link.options)
    try:
        session = await client.new_session("/w")
        finished: list[str | None] = []
        session.on_turn_finished(lambda _s, stop: finished.append(stop))
        await session.prompt("echo: one")
        await session.prompt("stream 3")
        assert finished == ["end_turn", "end_turn"]

        def agent_texts() -> list[str]:
            return [m.text for m in session.transcript.messages if m.role == "agent"]

        before = agent_texts()
        assert before == ["one", "chunk 1 chunk 2 chunk 3 "]
        stream = session.updates()
        await agent.restart(keep_sessions=True)  # inactive -> v2 resume with replay, v1 load
        await rec.ready_count(2)
        (event,) = rec.of(SessionRecovered)
        assert event.replayed and not event.may_have_missed_updates
        assert agent_texts() == before  # rebuilt from the replay, not appended to
        assert finished == ["end_turn", "end_turn"]  # replayed history fires no turn-finished callback
        replayed: list[Any] = []
        async with asyncio.timeout(bound(5)):
            async for item in stream:
                if isinstance(item, RecoveryMarker):
                    marker = item
                    break
                replayed.append(item)
        assert replayed and all(u.replay for u in replayed)
        assert (marker.outcome, marker.replayed, marker.path) == ("restored", True, "ladder")
        if version == 2:
            assert session.state == "idle"  # the snapshot, applied as state
        await session.prompt("echo: three")
        assert finished == ["end_turn", "end_turn", "end_turn"]
    finally:
        await rec.close()
        await client.aclose()


async def test_v2_state_after_resume_without_snapshot_is_unknown(link: Link) -> None:
    async with link.agent(2, resume_snapshot=False) as agent:
        client, rec = await started(link.url(agent), **link.options)
        try:
            session = await client.new_session("/w")
            await agent.drop_all_connections()
            await rec.ready_count(2)
            assert session.state is None  # never idle without a snapshot
        finally:
            await rec.close()
            await client.aclose()


async def test_v2_state_snapshot_reports_running_turn(link: Link) -> None:
    async with link.agent(2) as agent:
        client, rec = await started(link.url(agent), **link.options)
        try:
            session = await client.new_session("/w")
            turn = asyncio.create_task(session.prompt("sleep 30"))
            await agent.wait_for_method("session/prompt", timeout=bound(5))
            await agent.drop_all_connections()
            with pytest.raises(ConnectionLost):
                await asyncio.wait_for(turn, bound(5))
            await rec.ready_count(2)
            (event,) = rec.of(SessionRecovered)
            assert event.state == "running" and session.state == "running"
            await session.cancel()
        finally:
            await rec.close()
            await client.aclose()


async def test_prompt_in_flight_raises_connection_lost_and_runs_once(
    link: Link, agent: ReferenceAgent, version: int
) -> None:
    client, rec = await started(link.url(agent), **link.options)
    try:
        session = await client.new_session("/w")
        ended = asyncio.Event()
        session.on_turn_finished(lambda _s, _stop: ended.set())
        turn = asyncio.create_task(session.prompt("sleep 0.5; echo: done"))
        await agent.wait_for_method("session/prompt", timeout=bound(5))
        await agent.drop_all_connections(abort=True)
        with pytest.raises(ConnectionLost) as info:
            await asyncio.wait_for(turn, bound(5))
        assert info.value.request_sent is True
        await rec.ready_count(2)
        assert agent.count("session/prompt", session.id) == 1  # never re-sent
        # the interrupted turn kept running on the agent; v2 learns its end from the live idle update
        # on the new connection, v1 cannot know (no foreground state): ask the agent before prompting
        if version == 2:
            await asyncio.wait_for(ended.wait(), bound(5))
        await agent.wait_for(lambda: agent.sessions[session.id].turn is None, timeout=bound(5))
        await asyncio.wait_for(session.prompt("echo: next"), bound(5))
        assert agent.count("session/prompt", session.id) == 2
    finally:
        await rec.close()
        await client.aclose()


@pytest.mark.parametrize("status", [True, False], ids=["status", "no-status"])
async def test_v2_turn_that_ended_while_the_link_was_down_is_reported_finished(link: Link, status: bool) -> None:
    # the agent's idle update goes to the dead connection: the first state learned after the cut (the status
    # probe, or the resume's snapshot without status) must end the interrupted turn for on_turn_finished
    async with link.agent(2, capabilities={"status": status}) as agent:
        client, rec = await started(link.url(agent), **link.options)
        try:
            session = await client.new_session("/w")
            ended: list[str | None] = []
            finished = asyncio.Event()

            def on_end(_s: object, stop: str | None) -> None:
                ended.append(stop)
                finished.set()

            session.on_turn_finished(on_end)
            turn = asyncio.create_task(session.prompt("sleep 0.2; echo: done"))
            await agent.wait_for_method("session/prompt", timeout=bound(5))
            agent.reject_handshake(503)  # no new connection until the turn has ended on the agent
            await agent.drop_all_connections(abort=True)
            with pytest.raises(ConnectionLost):
                await asyncio.wait_for(turn, bound(5))
            await agent.wait_for(lambda: agent.sessions[session.id].turn is None, timeout=bound(5))
            assert ended == []
            agent.accept_handshakes()
            await rec.ready_count(2)
            await asyncio.wait_for(finished.wait(), bound(5))
            assert ended == [None] and session.state == "idle"
            # the next turn ends as usual, once
            await asyncio.wait_for(session.prompt("echo: next"), bound(5))
            assert len(ended) == 2 and ended[1] == "end_turn"
        finally:
            await rec.close()
            await client.aclose()


async def test_call_on_recovering_session_waits_for_reattach(link: Link, agent: ReferenceAgent) -> None:
    client, rec = await started(link.url(agent), **link.options, wait_for_ready=True)
    try:
        session = await client.new_session("/w")
        await agent.drop_all_connections(abort=True)
        await rec.wait(lambda e: isinstance(e, ConnectionDropped))
        # issued while disconnected: waits through backoff, reconnect and recovery, then goes out attached
        result = await asyncio.wait_for(session.prompt("echo: after"), bound(10))
        assert result.stop_reason == "end_turn"
        resumes = [r for r in agent.received if r.method == "session/resume"]
        prompts = [r for r in agent.received if r.method == "session/prompt"]
        assert agent.received.index(resumes[-1]) < agent.received.index(prompts[-1])
    finally:
        await rec.close()
        await client.aclose()


async def test_half_open_link_is_detected_by_ping(link: Link, agent: ReferenceAgent) -> None:
    interval, timeout = 0.2, 0.2
    client, rec = await started(
        link.url(agent), **link.options, ping_interval=interval, ping_timeout=timeout, close_timeout=0.2
    )
    try:
        await client.new_session("/w")
        loop = asyncio.get_running_loop()
        agent.stall()
        stalled_at = loop.time()
        await rec.wait(lambda e: isinstance(e, ConnectionDropped), timeout=5)
        detected = loop.time() - stalled_at
        assert detected <= bound(interval + timeout + 0.5)
        agent.unstall()
        await rec.ready_count(2)
    finally:
        await rec.close()
        await client.aclose()


async def test_sqlite_store_recovers_in_a_new_process(link: Link, tmp_path: Path, version: int) -> None:
    db = tmp_path / "sessions.db"
    async with link.agent(version) as agent:
        async with ReconnectingClient(
            link.url(agent), **link.options, store=SQLiteSessionStore(db), **FAST_RETRY
        ) as client:
            ids = sorted([(await client.new_session(f"/w/{i}")).id for i in range(2)])
        await agent.restart(keep_sessions=True)
        script = textwrap.dedent(
            f"""
            import asyncio, json, structlog, logging, sys
            structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr),
                                wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
            from acp_client import ReconnectingClient, RecoveryPolicy, SQLiteSessionStore
            async def main():
                store = SQLiteSessionStore({str(db)!r})
                async with ReconnectingClient({link.url(agent)!r}, store=store, recovery_start_jitter=0) as client:
                    out = {{sid: s.link.value for sid, s in client.sessions.items()}}
                    session = client.sessions[sorted(out)[0]]
                    result = await session.prompt("echo: from the new process")
                    out["stop"] = result.stop_reason
                print(json.dumps(out))
            asyncio.run(main())
            """
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), bound(30))
        assert proc.returncode == 0, err.decode()
        result = json.loads(out.decode().strip().splitlines()[-1])
        assert result == {ids[0]: "attached", ids[1]: "attached", "stop": "end_turn"}
        method = "session/resume" if version == 2 else "session/load"
        assert all(agent.count(method, sid) == 1 for sid in ids)


async def test_forget_removes_from_client_and_store(link: Link, agent: ReferenceAgent) -> None:
    store = MemorySessionStore()
    client, rec = await started(link.url(agent), **link.options, store=store)
    try:
        session = await client.new_session("/w")
        await client.forget(session.id)
        assert session.id not in client.sessions and await store.load_all() == []
        (event,) = await rec.wait(lambda e: isinstance(e, SessionForgotten))
        assert event.reason == "application"
    finally:
        await rec.close()
        await client.aclose()
    assert client.state is ClientState.CLOSED


async def test_session_not_found_from_prompt_never_forgets(link: Link, agent: ReferenceAgent) -> None:
    client, rec = await started(link.url(agent), **link.options)
    try:
        session = await client.new_session("/w")
        agent.forget_session(session.id)
        with pytest.raises(Exception) as info:
            await session.prompt("echo: x")
        assert getattr(info.value, "code", None) == -32002
        assert session.id in client.sessions and not rec.of(SessionForgotten)
    finally:
        await rec.close()
        await client.aclose()


async def test_stdio_agent_exit_is_a_drop_and_a_new_process_is_spawned() -> None:
    command = [sys.executable, "-m", "acp_client.testing.reference_agent", "--stdio", "--protocol", "2"]
    client = ReconnectingClient(command, **FAST_RETRY)
    rec = recorder(client)
    await client.start()
    try:
        await client.wait_ready(timeout=bound(10))
        session = await client.new_session("/w")
        first_pid = client.current.connection.transport.pid  # type: ignore[union-attr]
        os.kill(first_pid, signal.SIGKILL)
        dropped = await rec.wait(lambda e: isinstance(e, ConnectionDropped), timeout=5)
        assert "exited" in (dropped[0].reason or "")
        # a new agent process knows nothing of the old one's in-memory sessions: -32002, forgotten, said why
        forgotten = await rec.wait(lambda e: isinstance(e, SessionForgotten), timeout=10)
        assert forgotten[0].session_id == session.id and forgotten[0].via == "session/status"
        await client.wait_ready(timeout=bound(10))
        assert client.current.connection.transport.pid != first_pid  # type: ignore[union-attr]
        fresh = await client.new_session("/w")
        assert (await asyncio.wait_for(fresh.prompt("echo: new process"), bound(5))).stop_reason == "end_turn"
    finally:
        await rec.close()
        await client.aclose()

"""Stream resume over WebSocket (issue 32 §1-2, the durable transport draft PR 2208): a ReconnectingClient and the
reference agent serving ``resumable``, a fault proxy cutting the TCP link between them.

A cut socket is replaced underneath the JSON-RPC connection: ``stream/resume`` is the first frame of the new
socket, the agent replays what the client missed, and the turn that was running goes on (its chunks arrive
once each, in order; the prompt's answer arrives). A refusal falls back to the ladder with the reason in the
event; without the capability nothing changes."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection

import acp_client
from acp_client import (
    ConnectionDropped,
    ConnectionLost,
    ReconnectingClient,
    SessionRecovered,
    SessionUpdate,
    TransportOptions,
)
from acp_client.schema.transport import STREAM_RESUME, ResumableTransport
from acp_client.testing import FaultProxy, ReferenceAgent, Resumable
from acp_client.testing.agent._stream_resume import ResumableStreams
from acp_client.transports.websocket import WebSocketTransport
from acp_client.transports.websocket._resume import (
    MAX_CURSOR_CHARS,
    CursorTracker,
    ResumeAnswer,
    StreamResumeStats,
    read_resume_answer,
)
from tests.conftest import bound, eventually, running_client, serve_raw, started

versions = pytest.mark.parametrize("version", [1, 2])

_CHUNK = re.compile(r"chunk (\d+) ")
#: the agent's default here: a generous retention (a loaded machine may take a while to reconnect)
KEEP = Resumable(retention_seconds=30.0)


@asynccontextmanager
async def resumable_agent(
    version: int, resumable: Resumable | None = KEEP, **options: Any
) -> AsyncIterator[tuple[ReferenceAgent, FaultProxy]]:
    async with (
        ReferenceAgent(version, resumable=resumable, **options) as agent,
        FaultProxy("127.0.0.1", agent.port) as proxy,
    ):
        yield agent, proxy


def transport_of(client: ReconnectingClient) -> WebSocketTransport:
    current = client.current
    assert current is not None
    transport = current.connection.transport
    assert isinstance(transport, WebSocketTransport)
    return transport


async def chunks_until(updates: AsyncIterator[Any], seen: list[int], *, upto: int) -> None:
    """Collect the numbers of ``chunk N`` message chunks from ``updates`` until ``upto`` was seen."""
    async for item in updates:
        if isinstance(item, SessionUpdate) and item.kind == "agent_message_chunk":
            text = item.raw.get("content", {}).get("text", "")
            match = _CHUNK.fullmatch(text)
            if match is not None:
                seen.append(int(match.group(1)))
                if seen[-1] >= upto:
                    return


async def cut_mid_stream(
    client: ReconnectingClient, proxy: FaultProxy, *, total: int = 200, cut_at: int = 40
) -> tuple[list[int], Any]:
    """Prompt ``stream total every ...`` on a new session, cut the link after chunk ``cut_at``, and return the
    chunk numbers seen and the prompt's result."""
    session = await client.new_session("/w")
    updates = session.updates(maxsize=10_000)
    seen: list[int] = []
    turn = asyncio.create_task(session.prompt(f"stream {total} every 0.002"))
    await asyncio.wait_for(chunks_until(updates, seen, upto=cut_at), bound(10))
    await proxy.cut_all()
    await asyncio.wait_for(chunks_until(updates, seen, upto=total), bound(20))
    result = await asyncio.wait_for(turn, bound(10))
    return seen, result


@versions
async def test_a_cut_mid_stream_delivers_every_chunk_once_in_order(version: int) -> None:
    async with resumable_agent(version) as (agent, proxy), running_client(proxy.url()) as (client, rec):
        seen, result = await cut_mid_stream(client, proxy)
        assert seen == list(range(1, 201))  # once each, in order: nothing lost, nothing twice
        assert result.stop_reason == "end_turn"
        streams: ResumableStreams = agent.streams
        # the new socket named the kept connection and its first frame was stream/resume
        assert streams.first_frames[0] == (None, "initialize")
        assert streams.first_frames[1:] == [(transport_of(client).connection_id, STREAM_RESUME)]
        assert [a.outcome for a in streams.attempts] == ["resumed"]
        assert agent.count("initialize") == 1 and agent.count("session/resume") + agent.count("session/load") == 0
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered), timeout=bound(5))
        assert recovered[0].path == "stream_resumed"
        assert recovered[0].stream_resumption is not None
        assert recovered[0].stream_resumption.startswith("resumed with stream/resume")
        assert client.generation == 1 and not rec.of(ConnectionDropped)
        stats = transport_of(client).resume_stats
        assert stats is not None and stats.resumes == 1 and stats.refusals == 0


@versions
async def test_v1_acknowledgment_carries_the_turn_state_and_v2_a_state_update(version: int) -> None:
    async with resumable_agent(version) as (_agent, proxy), running_client(proxy.url()) as (client, _rec):
        session = await client.new_session("/w")
        updates = session.updates(maxsize=10_000)
        turn = asyncio.create_task(session.prompt("stream 300 every 0.01"))  # still running at the resume
        seen: list[int] = []
        await asyncio.wait_for(chunks_until(updates, seen, upto=5), bound(10))
        await proxy.cut_all()
        states: list[str] = []
        async with asyncio.timeout(bound(20)):
            async for item in updates:
                if isinstance(item, SessionUpdate) and item.kind == "state_update":
                    states.append(item.raw["state"])
                    break
                if isinstance(item, SessionUpdate) and item.raw.get("content", {}).get("text") == "chunk 100 ":
                    break
        await asyncio.wait_for(turn, bound(10))
        transport = transport_of(client)
        if version == 1:
            state = transport.turn_state
            assert state is not None and state["state"] == "running"
            assert isinstance(state["promptRequestId"], int)
            assert states == []
        else:
            assert transport.turn_state is None
            assert states == ["running"]  # the snapshot after the replay, before the turn's end


async def test_no_capability_no_stream_resume() -> None:
    async with resumable_agent(2, resumable=None) as (agent, proxy), running_client(proxy.url()) as (client, rec):
        session = await client.new_session("/w")
        assert transport_of(client).resume_stats is None
        await proxy.cut_all()
        recovered = await rec.wait(
            lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=bound(10)
        )
        assert recovered[0].path == "ladder"
        assert agent.count(STREAM_RESUME) == 0
        assert all(h.headers.get("Acp-Connection-Id") is None for h in agent.handshakes)


async def test_refusal_falls_back_to_the_ladder_with_the_reason() -> None:
    resumable = Resumable(retention_seconds=30.0, refuse=True)
    async with (
        resumable_agent(2, resumable=resumable) as (agent, proxy),
        running_client(proxy.url()) as (client, rec),
    ):
        session = await client.new_session("/w")
        await proxy.cut_all()
        recovered = await rec.wait(
            lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=bound(10)
        )
        assert recovered[0].path == "ladder"
        assert recovered[0].stream_resumption == (
            "not resumed: the agent refused stream/resume: this agent keeps no replay buffer"
        )
        assert [a.outcome for a in agent.streams.attempts] == ["refused"]
        assert agent.count("initialize") == 2
        assert rec.of(ConnectionDropped)


async def test_a_cursor_outside_retention_falls_back_and_recovers() -> None:
    # a retention of 5 messages: a stream of 100 chunks during the cut evicts the client's cursor
    resumable = Resumable(retention_messages=5, retention_seconds=30.0)
    async with (
        resumable_agent(2, resumable=resumable) as (agent, proxy),
        running_client(proxy.url()) as (client, rec),
    ):
        session = await client.new_session("/w")
        updates = session.updates(maxsize=10_000)
        proxy.hold("s2c")  # the client sees nothing of the turn...
        turn = asyncio.create_task(session.prompt("stream 100"))
        await agent.wait_for_method("session/prompt", timeout=bound(5))
        kept = agent.sessions[session.id]
        await agent.wait_for(lambda: kept.state == "idle" and kept.stop_reason == "end_turn", timeout=bound(10))
        await proxy.cut_all()  # ...and the link is cut with all of it in the hold
        proxy.restore()
        recovered = await rec.wait(
            lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=bound(10)
        )
        assert recovered[0].path == "ladder"
        assert recovered[0].stream_resumption == (
            "not resumed: the agent refused stream/resume: the cursor is outside the retention window"
        )
        assert agent.count("session/resume") == 1
        turn.cancel()
        del updates


async def test_a_closed_session_is_never_resumed() -> None:
    async with resumable_agent(2) as (agent, proxy), running_client(proxy.url()) as (client, rec):
        closed, kept = await client.new_session("/w/closed"), await client.new_session("/w/kept")
        await client.close_session(closed.id)
        await proxy.cut_all()
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered), timeout=bound(10))
        assert [(e.session_id, e.path) for e in recovered] == [(kept.id, "stream_resumed")]
        assert [a.outcome for a in agent.streams.attempts] == ["resumed"]
        assert agent.count("session/resume", closed.id) + agent.count("session/load", closed.id) == 0
        assert agent.count("session/status") == 0
        assert closed.id not in [e.session_id for e in rec.of(SessionRecovered)]


async def test_a_normal_closure_by_the_agent_is_terminal_no_stream_resume() -> None:
    # close code 1000 is the agent's terminal signal: the client must not try to resume that stream
    async with resumable_agent(2) as (agent, proxy), running_client(proxy.url()) as (client, rec):
        session = await client.new_session("/w")
        await agent.drop_all_connections(code=1000)
        recovered = await rec.wait(
            lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=bound(10)
        )
        assert recovered[0].path == "ladder"
        assert agent.streams.attempts == []
        assert all(method != STREAM_RESUME for _, method in agent.streams.first_frames)


async def test_a_silent_link_is_ended_after_five_keepalive_intervals_and_resumed() -> None:
    # the client's own keepalive is off: only the draft's silence rule (5 intervals of 0.05 s) can end the link
    resumable = Resumable(retention_seconds=30.0, keepalive_seconds=0.05)
    quiet = TransportOptions(ping_interval=None)
    async with (
        resumable_agent(2, resumable=resumable) as (agent, proxy),
        running_client(proxy.url(), transport_options=quiet) as (client, rec),
    ):
        session = await client.new_session("/w")
        first = proxy.links[0]
        proxy.set_mode("blackhole", link=first)  # half-open: nothing flows, no FIN, no RST
        recovered = await rec.wait(
            lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=bound(10)
        )
        assert recovered[0].path == "stream_resumed"
        stats = transport_of(client).resume_stats
        assert stats is not None and stats.resumes == 1
        assert [a.outcome for a in agent.streams.attempts] == ["resumed"]


async def test_close_during_a_stream_resume_ends_it_cleanly() -> None:
    async with resumable_agent(2) as (_agent, proxy):
        client, rec = await started(proxy.url())
        try:
            await client.new_session("/w")
            proxy.set_listener("accept_and_hang")  # the resume's handshake never completes
            accepted = proxy.connections_accepted
            await proxy.cut_all()
            await proxy.wait_for_connections(accepted + 1, timeout=bound(5))
        finally:
            await asyncio.wait_for(client.aclose(), bound(5))
            await rec.close()
        assert not rec.of(SessionRecovered)


async def test_a_request_made_while_the_stream_resumes_goes_out_on_the_resumed_socket() -> None:
    async with resumable_agent(1) as (agent, proxy), running_client(proxy.url()) as (client, rec):
        session = await client.new_session("/w")
        accepted = proxy.connections_accepted
        await proxy.cut_all()
        proxy.hold("s2c")  # the resume's upgrade answer waits in the proxy: the resume is under way
        await proxy.wait_for_connections(accepted + 1, timeout=bound(5))
        turn = asyncio.create_task(session.prompt("echo: during the resume"))
        current = client.current
        assert current is not None

        async def prompt_waiting() -> bool:
            return current.connection.waiting == 1

        await eventually(prompt_waiting, bound(5), "the prompt waits for the resumed socket")
        assert not turn.done()  # waiting, not failed
        proxy.release("s2c")
        result = await asyncio.wait_for(turn, bound(10))
        assert result.stop_reason == "end_turn"
        assert agent.count("session/prompt") == 1 and [a.outcome for a in agent.streams.attempts] == ["resumed"]
        # the prompt went out after the resume was acknowledged: stream/resume stayed the first frame
        assert agent.streams.first_frames[1][1] == STREAM_RESUME
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered), timeout=bound(5))
        assert recovered[0].path == "stream_resumed" and client.generation == 1


# ---------------------------------------------------------------- hostile agents (raw, scripted frame by frame)


@dataclass
class HostileResumer:
    """A raw v1 agent that advertises resumable, sends one update stamped with ``cursor`` and drops the socket;
    every later socket's first frame is recorded and answered with ``answer`` (frames, in order)."""

    cursor: Any
    answer: list[Any]
    drop_after_answer: bool = False
    first_frames: list[dict[str, Any]] = field(default_factory=list)
    upgrades: list[str | None] = field(default_factory=list)

    async def serve(self, ws: ServerConnection) -> None:
        self.upgrades.append(ws.request.headers.get("Acp-Connection-Id") if ws.request is not None else None)
        if len(self.upgrades) > 1:
            first = json.loads(await ws.recv())
            self.first_frames.append(first)
            for frame in self.answer:
                if frame == "ACK":
                    frame = {"jsonrpc": "2.0", "id": first["id"], "result": {}}
                await ws.send(frame if isinstance(frame, str) else json.dumps(frame))
            if self.drop_after_answer:
                ws.transport.abort()
            await ws.wait_closed()
            return
        message = json.loads(await ws.recv())
        caps = {"transport": {"resumable": {"retentionMessages": 10, "retentionSeconds": 5}}}
        result = {"protocolVersion": 1, "agentCapabilities": caps, "authMethods": []}
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}))
        update: dict[str, Any] = {"sessionId": "s1", "update": {"sessionUpdate": "agent_message_chunk"}}
        if self.cursor != "OMIT":
            update["_meta"] = {"acp/cursor": self.cursor}
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": update}))
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "_x/flushed", "params": {}}))
        await ws.recv()  # the client's answer to _x/flushed never comes (a notification): wait for the test
        ws.transport.abort()


def name_the_connection(_ws: ServerConnection, _request: Any, response: Any) -> None:
    response.headers["Acp-Connection-Id"] = "raw-1"


async def lost_after_resume(agent: HostileResumer) -> ConnectionLost:
    """Connect to ``agent``, wait for its drop, and return the loss the connection reports."""
    async with serve_raw(agent.serve, process_response=name_the_connection) as url:
        client = await asyncio.wait_for(acp_client.connect(url, protocol_version=1), bound(10))
        try:
            await client.connection.notify("_x/go", {})  # lets the agent drop the socket
            return await asyncio.wait_for(client.connection.wait_closed(), bound(10))
        finally:
            await client.aclose()


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (
            [{"jsonrpc": "2.0", "method": "stream/resume_failed", "params": [1, {"reason": 2}]}],
            "not resumed: the agent refused stream/resume: no reason given",
        ),
        (
            [{"jsonrpc": "2.0", "method": "stream/resume_failed", "params": {"reason": "gone\x1b[31m" + "x" * 5000}}],
            "not resumed: the agent refused stream/resume: gone?[31m" + "x" * 191 + "…",
        ),
        (
            [{"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": {}}}],
            "not resumed: the agent sent other traffic before acknowledging stream/resume "
            "(it would go live with a gap)",
        ),
        (["{not json"], "not resumed: the agent answered stream/resume with a frame that is not JSON"),
        (
            [{"jsonrpc": "2.0", "id": "acp-client/stream-resume-1", "error": {"code": -1, "message": "no buffer"}}],
            "not resumed: the agent refused stream/resume: no buffer",
        ),
    ],
    ids=["failed-garbage", "failed-huge-reason", "live-without-ack", "not-json", "error-answer"],
)
async def test_a_hostile_answer_to_stream_resume_is_a_refusal(answer: list[Any], why: str) -> None:
    agent = HostileResumer("c-1", answer)
    loss = await lost_after_resume(agent)
    assert loss.stream_resumption == why
    # the one resume attempt named the connection and began with stream/resume from the last cursor
    assert len(agent.first_frames) == 1 and agent.upgrades == [None, "raw-1"]
    assert agent.first_frames[0]["method"] == STREAM_RESUME
    assert agent.first_frames[0]["params"] == {"cursor": "c-1"}


@pytest.mark.parametrize(
    "cursor", ["c" * (MAX_CURSOR_CHARS + 1), 17, None, {"n": 1}], ids=["huge", "number", "null", "object"]
)
async def test_a_malformed_cursor_turns_stream_resume_off(cursor: Any) -> None:
    agent = HostileResumer(cursor, [])
    loss = await lost_after_resume(agent)
    assert loss.stream_resumption == (
        f"not resumed: the agent sent a cursor that is not a string of at most {MAX_CURSOR_CHARS} characters"
    )
    assert agent.first_frames == [] and len(agent.upgrades) == 1  # no reconnect at all: the ladder's job


async def test_an_agent_that_stamps_no_cursor_is_not_resumed() -> None:
    # it advertises resumable streams but its messages carry no cursor: a replay could not be deduplicated
    agent = HostileResumer("OMIT", ["ACK"])
    loss = await lost_after_resume(agent)
    assert loss.stream_resumption == (
        "not resumed: the agent sent messages without a cursor: its replay could not be told from them"
    )
    assert agent.first_frames == [] and len(agent.upgrades) == 1


async def test_an_agent_that_acknowledges_and_drops_every_socket_is_given_up() -> None:
    agent = HostileResumer("c-1", ["ACK"], drop_after_answer=True)
    loss = await lost_after_resume(agent)
    assert loss.stream_resumption == "not resumed: the last 5 resumed sockets dropped before delivering anything"
    assert len(agent.first_frames) == 5
    assert all(frame["params"] == {"cursor": "c-1"} for frame in agent.first_frames)


# ---------------------------------------------------------------- the cursor tracker (no I/O)


def test_the_tracker_drops_a_replayed_duplicate_and_keeps_its_memory_bounded() -> None:
    stats = StreamResumeStats()
    tracker = CursorTracker(16, stats)
    frames = [f'{{"method":"m","params":{{"_meta":{{"acp/cursor" : "k\\u002d{n}"}}}}}}' for n in range(40)]
    assert all(tracker.take(frame) for frame in frames)
    assert tracker.last == "k-39"
    assert not tracker.take(frames[-1]) and not tracker.take(frames[30])
    assert tracker.take(frames[0])  # forgotten long ago: the bound is 16 cursors
    assert stats.duplicates_dropped == 2
    assert tracker.take('{"method":"m","params":{}}')  # no cursor: delivered, nothing changes
    assert tracker.broken is None


def test_read_resume_answer_takes_the_turn_state_and_replay_count() -> None:
    ack = {"jsonrpc": "2.0", "id": "r", "result": {"replayed": 3, "_meta": {"acp/turnState": {"state": "idle"}}}}
    answer = read_resume_answer(json.dumps(ack), "r")
    assert answer == ResumeAnswer("accepted", turn_state={"state": "idle"}, replayed=3)
    other = {"jsonrpc": "2.0", "id": "someone-else", "result": {}}
    assert read_resume_answer(json.dumps(other), "r").verdict == "violation"


async def test_an_agent_restart_refuses_the_resume_and_the_ladder_restores() -> None:
    async with resumable_agent(2) as (agent, proxy), running_client(proxy.url()) as (client, rec):
        session = await client.new_session("/w")
        await agent.restart()
        recovered = await rec.wait(
            lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=bound(10)
        )
        assert recovered[0].path == "ladder" and recovered[0].outcome == "restored"
        assert recovered[0].stream_resumption is not None
        assert recovered[0].stream_resumption.startswith("not resumed: the agent refused stream/resume: connection")
        assert [a.outcome for a in agent.streams.attempts] == ["refused"]


async def test_the_standalone_agent_serves_resumable_streams() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "acp_client.cli",
        "serve-reference",
        "--resumable",
        "--retention-seconds",
        "30",
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        url = (await asyncio.wait_for(proc.stdout.readline(), bound(20))).decode().strip()
        async with acp_client.connect(url) as client:
            capability = ResumableTransport.from_initialize(client.initialize_result)
            assert capability is not None and capability.retention_seconds == 30.0
            transport = client.connection.transport
            assert isinstance(transport, WebSocketTransport) and transport.resume_stats is not None
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), bound(10))

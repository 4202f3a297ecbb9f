"""Stream resume over WebSocket (issue 32 §1-2, the durable transport draft PR 2208): a ReconnectingClient and the
reference agent serving ``resumable``, a fault proxy cutting the TCP link between them.

A cut socket is replaced underneath the JSON-RPC connection: ``stream/resume`` is the first frame of the new
socket, the agent replays what the client missed, and the turn that was running goes on (its chunks arrive
once each, in order; the prompt's answer arrives). A refusal falls back to the ladder with the reason in the
event; without the capability nothing changes."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from acp_client import (
    ConnectionDropped,
    ReconnectingClient,
    SessionRecovered,
    SessionUpdate,
)
from acp_client.schema.transport import STREAM_RESUME
from acp_client.testing import FaultProxy, ReferenceAgent, Resumable
from acp_client.testing.agent._stream_resume import ResumableStreams
from acp_client.transports.websocket import WebSocketTransport
from tests.conftest import bound, running_client

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
        turn = asyncio.create_task(session.prompt("stream 100 every 0.01"))
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

"""Our client against an agent built with the official ACP Python SDK (0.12.1), over WebSocket and stdio."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from acp_client import (
    Backoff,
    ClientState,
    ConnectionLost,
    MethodNotFound,
    ReconnectingClient,
    RecoveryPolicy,
    SessionNotFound,
    SessionRecovered,
    connect,
)
from acp_client.sessions import SessionUpdate
from tests.conftest import bound, recorder
from tests.interop.conftest import OfficialAgentServer

FAST: dict[str, Any] = {"policy": RecoveryPolicy(start_jitter=0.0), "backoff": Backoff(base=0.02, cap=0.2)}


async def chunks_until(stream: Any, count: int) -> list[str]:
    texts: list[str] = []
    async with asyncio.timeout(bound(10)):
        async for item in stream:
            if isinstance(item, SessionUpdate) and item.kind == "agent_message_chunk":
                texts.append(item.raw["content"]["text"])
                if len(texts) >= count:
                    return texts
    return texts


async def test_ws_initialize_new_prompt_and_updates(official_ws_agent: str) -> None:
    async with connect(official_ws_agent) as client:
        assert client.protocol_version == 1  # offered 2, the v1 agent answered 1
        assert client.supports("load") and client.supports("resume")
        assert not client.supports("status")  # the SDK's models drop the capability
        session = await client.new_session("/tmp/project")
        stream = session.updates()
        result = await asyncio.wait_for(session.prompt("hello interop world"), bound(10))
        assert result.stop_reason == "end_turn"
        assert len(await chunks_until(stream, 3)) == 3
        assert "hello" in session.transcript.text() and "world" in session.transcript.text()


async def test_ws_load_with_replay_on_a_new_connection(official_ws_agent: str) -> None:
    async with connect(official_ws_agent) as first:
        created = await first.new_session("/tmp/project")
        await created.prompt("first words")
    async with connect(official_ws_agent) as second:
        session = await second.load_session(created.id, "/tmp/project")
        assert "first" in session.transcript.text()
        with pytest.raises(SessionNotFound) as info:
            await second.load_session("sess_unknown", "/tmp/project")
        assert info.value.session_id is None  # the SDK sends data.uri, not data.sessionId


async def test_ws_resume_quirk_is_method_not_found(official_ws_agent: str) -> None:
    async with connect(official_ws_agent) as client:
        session = await client.new_session("/tmp/project")
        with pytest.raises(MethodNotFound):
            await client.resume_session(session.id, "/tmp/project")


async def test_reconnecting_client_falls_back_to_load_after_a_restart(
    official_ws_agent_server: OfficialAgentServer,
) -> None:
    client = ReconnectingClient(official_ws_agent_server.url, **FAST)
    rec = recorder(client)
    await client.start()
    try:
        await client.wait_ready(timeout=bound(10))
        session = await client.new_session("/tmp/project")
        await session.prompt("before the restart")
        await official_ws_agent_server.restart()  # graceful: sockets closed with 1012, sessions persisted
        await rec.ready_count(2, timeout=20)
        (event,) = rec.of(SessionRecovered)
        # status is not advertised; v1 without a live probe restores with session/load (resume answers -32601)
        assert event.mode == "load" and event.replayed
        assert client.state is ClientState.READY
        result = await asyncio.wait_for(session.prompt("after the restart"), bound(10))
        assert result.stop_reason == "end_turn"
        assert "before" in session.transcript.text() and "after" in session.transcript.text()
    finally:
        await rec.close()
        await client.aclose()


async def test_reconnecting_client_resume_method_not_found_falls_back_to_load(
    official_ws_agent_server: OfficialAgentServer,
) -> None:
    from acp_client import DefaultStrategy

    # a chat frontend that never wants replays: resume first, the SDK refuses it, load takes over
    client = ReconnectingClient(official_ws_agent_server.url, strategy=DefaultStrategy(replay=False), **FAST)
    rec = recorder(client)
    await client.start()
    try:
        await client.wait_ready(timeout=bound(10))
        session = await client.new_session("/tmp/project")
        await official_ws_agent_server.restart()
        await rec.ready_count(2, timeout=20)
        (event,) = rec.of(SessionRecovered)
        assert event.mode == "load"
        await asyncio.wait_for(session.prompt("still works"), bound(10))
    finally:
        await rec.close()
        await client.aclose()


async def test_stdio_initialize_prompt_and_load(official_stdio_agent_command: list[str]) -> None:
    async with connect(official_stdio_agent_command) as client:
        assert client.protocol_version == 1
        session = await client.new_session("/tmp/project")
        result = await asyncio.wait_for(session.prompt("over stdio"), bound(10))
        assert result.stop_reason == "end_turn"
        assert "stdio" in session.transcript.text()
    async with connect(official_stdio_agent_command) as again:  # a new process, same store
        loaded = await again.load_session(session.id, "/tmp/project")
        assert "stdio" in loaded.transcript.text()


async def test_stdio_agent_killed_fails_the_prompt(official_stdio_agent_command: list[str]) -> None:
    async with connect(official_stdio_agent_command) as client:
        session = await client.new_session("/tmp/project")
        turn = asyncio.create_task(session.prompt("/wait until cancelled"))
        with pytest.raises(MethodNotFound):  # answered in order: the prompt before it is now pending
            await client.request("_interop/probe", {})
        assert client.connection.waiting == 1
        os.kill(client.connection.transport.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(turn, bound(5))


async def test_echoing_agent_that_claims_v2_is_read_as_v1(
    start_official_ws_agent: Callable[..., Awaitable[OfficialAgentServer]],
) -> None:
    # the SDK's own examples echo the offered version: a v1 agent answers 2 to a v2 offer
    server = await start_official_ws_agent("--echo-protocol-version")
    async with connect(server.url) as client:
        assert client.protocol_version == 1
        session = await client.new_session("/tmp/project")
        result = await asyncio.wait_for(session.prompt("no hang"), bound(10))
        assert result.stop_reason == "end_turn"

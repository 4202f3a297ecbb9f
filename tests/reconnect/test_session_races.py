"""Races between a session's own messages, against a raw scripted v2 agent on a real loopback WebSocket.

- Updates an agent sends right behind its ``session/new`` answer (in the same read) reach the new session.
- The ``idle`` that ends an earlier turn, arriving after the next prompt was sent, does not end that prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from acp_client import ACPTimeoutError, connect
from tests.conftest import bound

Script = Callable[[ServerConnection, dict[str, Any]], Awaitable[None]]


def _answer(message: dict[str, Any], result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def _update(session_id: str, update: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": update}}


def _state(session_id: str, state: str, stop: str | None = None) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": "state_update", "state": state}
    if stop is not None:
        update["stopReason"] = stop
    return _update(session_id, update)


def _chunk(session_id: str, text: str) -> dict[str, Any]:
    content = {"type": "text", "text": text}
    return _update(session_id, {"sessionUpdate": "agent_message_chunk", "messageId": f"m-{text}", "content": content})


@contextlib.asynccontextmanager
async def raw_agent(on: dict[str, Script]) -> AsyncIterator[str]:
    """A v2 agent whose answers are scripted per method (``initialize`` is answered for you)."""

    async def handler(ws: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for text in ws:
                message = json.loads(text)
                method = message.get("method")
                if method == "initialize":
                    caps = {"session": {"prompt": {}, "mcp": {"stdio": {}, "http": {}}}}
                    info = {"name": "raw", "version": "0"}
                    result = {"protocolVersion": 2, "capabilities": caps, "info": info}
                    await ws.send(json.dumps(_answer(message, result)))
                elif method in on:
                    await on[method](ws, message)

    async with serve(handler, "127.0.0.1", 0, ping_interval=None, close_timeout=1) as server:
        port = server.sockets[0].getsockname()[1]
        yield f"ws://127.0.0.1:{port}/acp"


async def test_updates_right_behind_the_session_new_answer_reach_the_session() -> None:
    async def new(ws: ServerConnection, message: dict[str, Any]) -> None:
        # answer and first updates in one frame (a batch): the client reads them in one go
        batch = [
            _answer(message, {"sessionId": "s1"}),
            _update("s1", {"sessionUpdate": "session_info_update", "title": "Fresh"}),
            _chunk("s1", "welcome"),
        ]
        await ws.send(json.dumps(batch))

    async with raw_agent({"session/new": new}) as url, connect(url, protocol_version=2) as client:
        stream = None
        session = await asyncio.wait_for(client.new_session("/w"), bound(5))
        stream = session.updates()
        assert session.transcript.title == "Fresh"
        assert [m.text for m in session.transcript.messages if m.role == "agent"] == ["welcome"]
        assert client.connection.stats["updates_unknown_session"] == 0
        await stream.aclose()  # type: ignore[attr-defined]


async def test_updates_for_an_id_nobody_asked_for_are_not_kept() -> None:
    async def new(ws: ServerConnection, message: dict[str, Any]) -> None:
        await ws.send(json.dumps([_chunk("someone-else", "stray"), _answer(message, {"sessionId": "s1"})]))

    async with raw_agent({"session/new": new}) as url, connect(url, protocol_version=2) as client:
        session = await asyncio.wait_for(client.new_session("/w"), bound(5))
        assert session.transcript.messages == []
        assert client.connection.stats["updates_unknown_session"] == 1
        assert client._inbound.early_updates == 0  # nothing is kept once no session/new is outstanding


async def test_a_stale_idle_does_not_end_the_next_prompt() -> None:
    prompts = 0
    first_running = asyncio.Event()
    release_first = asyncio.Event()

    async def prompt(ws: ServerConnection, message: dict[str, Any]) -> None:
        nonlocal prompts
        prompts += 1
        sid = message["params"]["sessionId"]
        if prompts == 1:  # accepted; runs until the test lets it end
            await ws.send(json.dumps(_answer(message, {})))
            await ws.send(json.dumps(_state(sid, "running")))
            first_running.set()
            return
        # the second prompt: the first turn's idle is still on its way, ahead of this answer
        await release_first.wait()
        await ws.send(json.dumps(_state(sid, "idle", "cancelled")))
        await ws.send(json.dumps(_answer(message, {})))
        await ws.send(json.dumps(_state(sid, "running")))
        await ws.send(json.dumps(_chunk(sid, "second answer")))
        await ws.send(json.dumps(_state(sid, "idle", "end_turn")))

    async def new(ws: ServerConnection, message: dict[str, Any]) -> None:
        await ws.send(json.dumps(_answer(message, {"sessionId": "s1"})))

    async with raw_agent({"session/new": new, "session/prompt": prompt}) as url, connect(url, protocol_version=2) as c:
        session = await asyncio.wait_for(c.new_session("/w"), bound(5))
        with pytest.raises(ACPTimeoutError):
            await session.prompt("first", timeout=0.2)  # the turn goes on at the agent
        await asyncio.wait_for(first_running.wait(), bound(5))
        assert session.state == "running"
        second = asyncio.create_task(session.prompt("second", timeout=bound(5)))
        release_first.set()
        result = await asyncio.wait_for(second, bound(10))
        assert result.stop_reason == "end_turn"  # its own turn's end, not the stale "cancelled"
        assert "second answer" in [m.text for m in session.transcript.messages if m.role == "agent"]

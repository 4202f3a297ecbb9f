"""The recovery marker comes before the live updates an agent sends right behind its resume answer.

The agent (raw v2 WebSocket) answers ``session/resume`` and, in the same loop turn, streams a live chunk of
the session's running turn: both frames reach the client in one read. The connection used to hand the chunk
to the session before the recovering task had run on with the answer, so the application saw a live update
before the marker that says where the reconnect happened (``test_fm06`` failed so under load).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import ServerConnection

from acp_client import MemorySessionStore, ReconnectingClient, RecoveryMarker, SessionRecord, SessionUpdate
from tests.conftest import bound, client_options, serve_raw

SESSION = "s-marker"
CAPABILITIES = {"session": {"status": {}, "delete": {}}}
INFO = {"name": "answer-then-chunk", "version": "1"}


@dataclass
class AnswerThenChunk:
    """v2: ``session/status`` says inactive; ``session/resume`` waits for :attr:`release`, then answers and
    sends one live chunk at once."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""

    async def serve(self, ws: ServerConnection) -> None:
        async for raw in ws:
            message = json.loads(raw)
            method, id_ = message.get("method"), message.get("id")
            if method == "initialize":
                result = {"protocolVersion": 2, "capabilities": CAPABILITIES, "info": INFO, "authMethods": []}
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "result": result}))
            elif method == "session/status":
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "result": {"status": "inactive"}}))
            elif method == "session/resume":
                await self.release.wait()
                answer = {"id": id_, "result": {}}
                text = {"type": "text", "text": "live"}
                chunk = {"sessionUpdate": "agent_message_chunk", "messageId": "m1", "content": text}
                update = {"method": "session/update", "params": {"sessionId": SESSION, "update": chunk}}
                await ws.send(json.dumps({"jsonrpc": "2.0", **answer}))
                await ws.send(json.dumps({"jsonrpc": "2.0", **update}))


@asynccontextmanager
async def answer_then_chunk() -> AsyncIterator[AnswerThenChunk]:
    agent = AnswerThenChunk()
    async with serve_raw(agent.serve) as agent.url:
        yield agent


async def test_the_marker_comes_before_the_live_update_behind_the_answer() -> None:
    store = MemorySessionStore()
    await store.save(SessionRecord(session_id=SESSION, cwd="/w", protocol_version=2))
    async with answer_then_chunk() as agent:
        options = client_options(protocol_version=2, recovery_tries=1)
        client = ReconnectingClient(agent.url, store=store, **options)
        try:
            await client.start()
            session = client.sessions[SESSION]
            stream = session.updates()
            agent.release.set()  # the resume is answered once the stream is open
            items: list[Any] = []
            async with asyncio.timeout(bound(5)):
                async for item in stream:
                    items.append(item)
                    if any(isinstance(i, SessionUpdate) for i in items) and any(
                        isinstance(i, RecoveryMarker) for i in items
                    ):
                        break
            kinds = [type(i).__name__ for i in items]
            assert kinds == ["RecoveryMarker", "SessionUpdate"], kinds
            assert items[0].outcome == "restored"
        finally:
            await client.aclose()

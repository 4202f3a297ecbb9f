"""An attach made in an open :class:`UpdateAcceptance` window reports its answer there and moves nothing.

The reconnect layer's recovery applies an attach later than the agent's answer (its ``Reattached`` outcome
carries the link): in between, the window keeps the session's updates routed to it. A raw v2 WebSocket
agent answers ``session/resume`` and sends a live chunk whenever the test asks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from websockets.asyncio.server import ServerConnection

from acp_client import SessionLink, SessionUpdate, connect
from acp_client.exceptions import UsageError
from tests.conftest import bound, serve_raw

SESSION = "s-window"
CAPABILITIES = {"session": {"status": {}}}
INFO = {"name": "chunk-on-demand", "version": "1"}


@dataclass
class ChunkOnDemand:
    """v2: answers ``initialize``, and any other request with ``{}``; sends one live chunk per :meth:`chunk` call on
    the newest connection."""

    url: str = ""
    sockets: list[ServerConnection] = field(default_factory=list)

    async def serve(self, ws: ServerConnection) -> None:
        self.sockets.append(ws)
        async for raw in ws:
            message = json.loads(raw)
            method, id_ = message.get("method"), message.get("id")
            if method == "initialize":
                result = {"protocolVersion": 2, "capabilities": CAPABILITIES, "info": INFO, "authMethods": []}
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "result": result}))
            elif id_ is not None:  # session/resume, and the test's own _sync
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "result": {}}))

    async def chunk(self, text: str) -> None:
        update = {"sessionUpdate": "agent_message_chunk", "messageId": text, "content": {"type": "text", "text": text}}
        frame = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": SESSION, "update": update}}
        await self.sockets[-1].send(json.dumps(frame))


@asynccontextmanager
async def chunk_on_demand() -> AsyncIterator[ChunkOnDemand]:
    agent = ChunkOnDemand()
    async with serve_raw(agent.serve) as agent.url:
        yield agent


async def _next_text(stream: AsyncIterator[object]) -> str:
    """The text of the next update of a session's stream (bounded wait)."""
    async with asyncio.timeout(bound(5)):
        item = await anext(stream)
    assert isinstance(item, SessionUpdate), item
    return str(item.raw["content"]["text"])


async def test_an_attach_in_a_window_reports_there_and_the_window_routes_until_closed() -> None:
    async with chunk_on_demand() as agent:
        first = await connect(agent.url, protocol_version=2)
        session = await first.resume_session(SESSION, "/w")  # the handle (its owner: the first client)
        await first.aclose()
        assert session.link is SessionLink.DETACHED
        second = await connect(agent.url, protocol_version=2)
        stream = session.updates()
        try:
            window = second.accept_updates(SESSION)
            with window:
                await second.attach(session, mode="resume", replay=False, acceptance=window)
                # answered, reported in the window: no link moved, no record written
                assert session.link is SessionLink.DETACHED
                assert window.attachment is not None
                assert window.attachment.connection_id == second.connection.id
                assert window.attachment.protocol_version == 2
                # what the agent sends behind its answer is routed to the session while the window is open
                await agent.chunk("kept")
                assert await _next_text(stream) == "kept"
            assert not window.open
            await agent.chunk("dropped")  # the window is closed and the link not attached here: dropped
            await second.request("_sync", {})  # answered behind the chunk on the same socket: it was routed
            assert second.connection.stats["updates_other_connection"] == 1
            assert [m.text for m in session.transcript.messages] == ["kept"]
        finally:
            await second.aclose()


async def test_an_attach_refuses_a_window_it_cannot_report_to() -> None:
    async with chunk_on_demand() as agent:
        client = await connect(agent.url, protocol_version=2)
        try:
            session = await client.resume_session(SESSION, "/w")
            other = client.accept_updates("another-session")
            with pytest.raises(UsageError, match="acceptance"):
                await client.attach(session, mode="resume", replay=False, acceptance=other)
            closed = client.accept_updates(SESSION)
            closed.close()
            closed.close()  # idempotent
            with pytest.raises(UsageError, match="acceptance"):
                await client.attach(session, mode="resume", replay=False, acceptance=closed)
            other.close()
        finally:
            await client.aclose()

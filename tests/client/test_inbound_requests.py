"""Agent->client requests are admitted with bounds (issue 18, items 3 and 5): at most ``max_inbound_requests``
handlers at once, a bounded queue behind them, an error naming the bound past it, a duplicate id refused,
and no handler outliving its link. A raw WebSocket agent sends the requests over a real loopback link."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import ServerConnection

from acp_client.client.connection import Connection
from acp_client.transports.websocket import connect_websocket
from tests.conftest import bound, serve_raw


@dataclass
class RawAgent:
    """Sends the frames it is given; collects the client's answers by id."""

    answers: dict[Any, dict[str, Any]] = field(default_factory=dict)
    all_answers: list[dict[str, Any]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    link: ServerConnection | None = None
    linked: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""

    async def send_request(self, id_: Any, method: str = "session/request_permission") -> None:
        assert self.link is not None
        await self.link.send(json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": {"n": id_}}))

    async def send_cancel(self, id_: Any) -> None:
        assert self.link is not None
        await self.link.send(json.dumps({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": id_}}))

    async def wait_answers(self, count: int) -> None:
        async with asyncio.timeout(bound(10)):
            while len(self.all_answers) < count:
                self.changed.clear()
                await self.changed.wait()


@asynccontextmanager
async def raw_agent() -> AsyncIterator[RawAgent]:
    agent = RawAgent()

    async def handler(ws: ServerConnection) -> None:
        agent.link = ws
        agent.linked.set()
        async for raw in ws:
            message = json.loads(raw)
            agent.all_answers.append(message)
            agent.answers[message.get("id")] = message
            agent.changed.set()

    async with serve_raw(handler) as agent.url:
        yield agent


@dataclass
class Dialogs:
    """A request handler that blocks like a permission dialog until released; records concurrency."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    running: int = 0
    most: int = 0
    started: list[Any] = field(default_factory=list)
    cancelled: list[Any] = field(default_factory=list)
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, method: str, params: Any) -> Any:
        self.started.append(params["n"])
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.release.wait()
            return {"outcome": {"outcome": "selected", "optionId": "allow"}}
        except asyncio.CancelledError:
            self.cancelled.append(params["n"])
            raise
        finally:
            self.running -= 1
            if self.running == 0:
                self.idle.set()


async def opened(agent: RawAgent, dialogs: Dialogs, **limits: int) -> Connection:
    transport = await connect_websocket(agent.url, open_timeout=bound(5))
    connection = Connection(transport, on_request=dialogs, **limits)
    await connection.start()
    async with asyncio.timeout(bound(5)):
        await agent.linked.wait()
    return connection


async def test_requests_past_the_cap_wait_and_past_the_queue_are_refused_naming_the_bound() -> None:
    async with raw_agent() as agent:
        dialogs = Dialogs()
        connection = await opened(agent, dialogs, max_inbound_requests=4, max_queued_inbound=50)
        try:
            for n in range(200):
                await agent.send_request(n)
            await agent.wait_answers(146)  # the 146 with no room are answered at once
            busy = [a for a in agent.all_answers if "error" in a]
            assert [a["id"] for a in busy] == list(range(54, 200))
            assert busy[0]["error"]["code"] == -32603 and busy[0]["error"]["data"]["reason"] == "client_busy"
            assert "max_inbound_requests" in busy[0]["error"]["message"]
            assert dialogs.most == 4 and len(dialogs.started) == 4  # never more dialogs than the cap
            dialogs.release.set()
            await agent.wait_answers(200)
            results = [a["id"] for a in agent.all_answers if "result" in a]
            assert sorted(results) == list(range(54)) and dialogs.most == 4
            assert dialogs.started == list(range(54))  # served in arrival order
        finally:
            await connection.close()


async def test_a_duplicate_request_id_is_refused_and_no_handler_outlives_the_link() -> None:
    async with raw_agent() as agent:
        dialogs = Dialogs()
        connection = await opened(agent, dialogs)
        await agent.send_request(7)
        await agent.send_request(7)
        await agent.wait_answers(1)
        (answer,) = agent.all_answers
        assert answer["id"] == 7 and answer["error"]["code"] == -32600
        assert answer["error"]["data"]["reason"] == "duplicate_request_id"
        assert dialogs.started == [7]  # the second never ran
        assert agent.link is not None
        await agent.link.close()  # the link dies with the first handler still waiting on its dialog
        async with asyncio.timeout(bound(5)):
            await connection.wait_closed()
            await dialogs.idle.wait()
        assert dialogs.cancelled == [7] and dialogs.running == 0


async def test_a_queued_request_cancelled_by_the_agent_is_answered_without_running() -> None:
    async with raw_agent() as agent:
        dialogs = Dialogs()
        connection = await opened(agent, dialogs, max_inbound_requests=1, max_queued_inbound=5)
        try:
            await agent.send_request(1)
            await agent.send_request(2)
            await agent.send_cancel(2)
            await agent.wait_answers(1)
            assert agent.answers[2]["error"]["code"] == -32800
            dialogs.release.set()
            await agent.wait_answers(2)
            assert "result" in agent.answers[1] and dialogs.started == [1]
        finally:
            await connection.close()

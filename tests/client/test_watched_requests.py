"""``Connection.request_watched``: a long request is timed by the agent's progress, not by a fixed timeout.

Given up after ``silence`` with no answer and no progress, after ``deadline`` in all, or past
``max_progress``; a give-up sends ``$/cancel_request`` and still receives an answer that comes during
``settle``. Tested against a raw WebSocket agent that answers exactly when the test says so.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection

from acp_client import ACPTimeoutError, connect
from tests.conftest import bound, serve_raw


@dataclass
class Holder:
    """A v1 agent that answers ``initialize`` and holds every other request until the test answers it.

    ``on_cancel``: what a ``$/cancel_request`` gets (``"result"``: the held request's result; ``"error"``:
    ``-32800``; ``None``: nothing)."""

    on_cancel: str | None = "error"
    held: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    cancels: list[int] = field(default_factory=list)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    links: list[ServerConnection] = field(default_factory=list)
    url: str = ""

    async def serve(self, ws: ServerConnection) -> None:
        self.links.append(ws)
        async for raw in ws:
            message = json.loads(raw)
            method, id_ = message.get("method"), message.get("id")
            if method == "initialize":
                result = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "result": result}))
            elif method == "$/cancel_request":
                target = message["params"]["requestId"]
                self.cancels.append(target)
                self.cancelled.set()
                if self.on_cancel == "result":
                    await ws.send(json.dumps({"jsonrpc": "2.0", "id": target, "result": {"late": True}}))
                elif self.on_cancel == "error":
                    error = {"code": -32800, "message": "Request cancelled"}
                    await ws.send(json.dumps({"jsonrpc": "2.0", "id": target, "error": error}))
            elif id_ is not None:
                await self.held.put(message)

    async def answer(self, message: dict[str, Any], result: Any) -> None:
        await self.links[-1].send(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}))


@asynccontextmanager
async def holder(on_cancel: str | None = "error") -> AsyncIterator[Holder]:
    agent = Holder(on_cancel)
    async with serve_raw(agent.serve) as agent.url:
        yield agent


async def test_an_answer_in_time_is_returned_and_nothing_is_cancelled() -> None:
    async with holder() as agent, connect(agent.url, protocol_version=1) as client:
        call = asyncio.create_task(
            client.connection.request_watched("x/long", {}, silence=bound(5), progress=lambda: 0)
        )
        held = await asyncio.wait_for(agent.held.get(), bound(5))
        await agent.answer(held, {"ok": 1})
        assert await asyncio.wait_for(call, bound(5)) == {"ok": 1}
        assert agent.cancels == [] and client.connection.stats["requests_given_up"] == 0


async def test_silence_gives_up_and_a_late_result_during_settle_is_returned() -> None:
    async with holder(on_cancel="result") as agent, connect(agent.url, protocol_version=1) as client:
        given_up: list[bool] = []
        result = await client.connection.request_watched(
            "x/long", {}, silence=0.05, progress=lambda: 0, settle=bound(5), on_give_up=lambda: given_up.append(True)
        )
        assert result == {"late": True}  # the agent answered the cancel with the result: it is not lost
        assert len(agent.cancels) == 1 and given_up == [True]
        stats = client.connection.stats
        assert stats["requests_given_up"] == 1 and stats["given_up_answers_settled"] == 1


async def test_silence_gives_up_with_a_timeout_naming_the_bound() -> None:
    async with holder(on_cancel="error") as agent, connect(agent.url, protocol_version=1) as client:
        with pytest.raises(ACPTimeoutError, match=r"no answer and no progress for 0\.05 s"):
            await client.connection.request_watched("x/long", {}, silence=0.05, progress=lambda: 0, settle=bound(5))
        assert len(agent.cancels) == 1
        assert client.connection.stats["given_up_answers_settled"] == 1  # the -32800 arrived within settle


async def test_progress_keeps_a_request_alive_past_silence_until_the_deadline() -> None:
    async with holder(on_cancel=None) as agent, connect(agent.url, protocol_version=1) as client:
        ticks = iter(range(1_000_000))  # every look sees progress: silence alone would never end it
        with pytest.raises(ACPTimeoutError, match=r"no answer within 0\.3 s"):
            await client.connection.request_watched(
                "x/long", {}, silence=0.02, progress=lambda: next(ticks), deadline=0.3, settle=0.05
            )
        assert len(agent.cancels) == 1
        stats = client.connection.stats
        assert stats["requests_given_up"] == 1 and stats["given_up_answers_settled"] == 0


async def test_more_progress_than_the_bound_gives_up_naming_it() -> None:
    async with holder() as agent, connect(agent.url, protocol_version=1) as client:
        counter = iter(range(0, 10_000_000, 50))
        with pytest.raises(ACPTimeoutError, match="more than 120 updates replayed"):
            await client.connection.request_watched(
                "x/long", {}, silence=0.02, progress=lambda: next(counter), max_progress=120, settle=bound(5)
            )
        assert len(agent.cancels) == 1


async def test_a_cancelled_caller_withdraws_the_request() -> None:
    async with holder() as agent, connect(agent.url, protocol_version=1) as client:
        call = asyncio.create_task(
            client.connection.request_watched("x/long", {}, silence=bound(30), progress=lambda: 0)
        )
        await asyncio.wait_for(agent.held.get(), bound(5))
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.wait_for(agent.cancelled.wait(), bound(5))  # sent from a task of its own
        assert len(agent.cancels) == 1

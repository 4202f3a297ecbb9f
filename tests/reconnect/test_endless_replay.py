"""A replay that never ends (issue 18, item 3): with default-like options the client still becomes READY
within ``Timeouts.recovery_round`` and reports the session failed-and-retrying, and a replay longer than
``Limits.replay_updates`` is given up, so the rebuilt transcript stays bounded. The agent is a raw v1
WebSocket agent whose ``session/load`` streams updates and never answers."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from acp_client import (
    ClientState,
    Limits,
    ReconnectingClient,
    SessionLink,
    SessionRecoveryFailed,
    StateChanged,
    Timeouts,
)
from tests.conftest import bound, client_options, recorder, serve_raw


@dataclass
class EndlessReplayer:
    """v1: ``session/new`` works; every ``session/load`` streams chunks every ``pace`` seconds, forever."""

    pace: float
    links: list[ServerConnection] = field(default_factory=list)
    loads: int = 0
    url: str = ""

    async def serve(self, ws: ServerConnection) -> None:
        self.links.append(ws)
        streams: set[asyncio.Task[None]] = set()

        async def replay(session_id: str) -> None:
            n = 0
            with contextlib.suppress(ConnectionClosed):
                while True:
                    n += 1
                    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"{n} "}}
                    update = {
                        "jsonrpc": "2.0",
                        "method": "session/update",
                        "params": {"sessionId": session_id, "update": chunk},
                    }
                    await ws.send(json.dumps(update))
                    await asyncio.sleep(self.pace)  # the agent's pace (a load, not a wait of the test)

        try:
            async for raw in ws:
                message = json.loads(raw)
                method, id_ = message.get("method"), message.get("id")
                if method == "initialize":
                    result = {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}, "authMethods": []}
                    await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "result": result}))
                elif method == "session/new":
                    await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "result": {"sessionId": "s1"}}))
                elif method == "session/load":
                    self.loads += 1
                    task = asyncio.create_task(replay(message["params"]["sessionId"]))
                    streams.add(task)
        finally:
            for task in streams:
                task.cancel()


@asynccontextmanager
async def endless_replayer(pace: float) -> AsyncIterator[EndlessReplayer]:
    agent = EndlessReplayer(pace)
    async with serve_raw(agent.serve) as agent.url:
        yield agent


async def test_an_endless_replay_cannot_keep_the_client_from_ready() -> None:
    async with endless_replayer(pace=0.01) as agent:  # always progressing: the replay silence never fires
        options = client_options(protocol_version=1, timeouts=Timeouts(recovery_round=bound(1.0)))
        client = ReconnectingClient(agent.url, **options)
        rec = recorder(client)
        try:
            await client.start()
            await client.wait_ready(timeout=bound(5))
            session = await client.new_session("/w")
            await agent.links[0].close()  # the link drops; the next connection loads, and the load never ends
            failed = await rec.wait(
                lambda e: isinstance(e, SessionRecoveryFailed) and "Timeouts.recovery_round" in e.error, timeout=10
            )
            assert failed[0].session_id == session.id and failed[0].will_retry
            await rec.ready_count(2)  # READY again although the replay still runs
            assert client.state is ClientState.READY
            assert session.link is SessionLink.RECOVERING  # its attempt goes on in the background
        finally:
            await rec.close()
            await client.aclose()


async def test_a_replay_past_the_bound_is_given_up_and_retried() -> None:
    async with endless_replayer(pace=0.0005) as agent:
        options = client_options(
            protocol_version=1,
            limits=Limits(replay_updates=300),
            timeouts=Timeouts(recovery_round=None),  # only the replay bound ends this round
            recovery_tries=1,
        )
        client = ReconnectingClient(agent.url, **options)
        rec = recorder(client)
        try:
            await client.start()
            await client.wait_ready(timeout=bound(5))
            session = await client.new_session("/w")
            await agent.links[0].close()
            failed = await rec.wait(
                lambda e: isinstance(e, SessionRecoveryFailed) and "Limits.replay_updates" in e.error, timeout=15
            )
            assert failed[0].session_id == session.id and failed[0].will_retry
            assert "more than 300 updates" in failed[0].error
            # the round counts it failed and ends (the given-up load waited up to 5 s for the cancel's answer)
            ready = lambda e: isinstance(e, StateChanged) and e.new is ClientState.READY and e.generation == 2  # noqa: E731
            await rec.wait(ready, timeout=15)
        finally:
            await rec.close()
            await client.aclose()

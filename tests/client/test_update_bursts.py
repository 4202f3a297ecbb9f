"""A burst of updates that the transport delivers without ever making the reader wait must not starve the
application's consumer: the connection yields to other tasks regularly, so a default-sized ``updates()``
subscription read by a fast consumer loses nothing.

An in-process transport pair makes the burst exact: the agent side queues every frame before the client's
reader runs, so ``recv()`` never suspends during it (over TCP a fast agent produces the same bursts, hundreds
of frames per socket read, but not deterministically).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from acp_client import SessionUpdate, UpdatesDropped, connect
from acp_client.sessions import DEFAULT_UPDATES_BUFFER
from acp_client.transports import memory_pair
from tests.conftest import bound

BURST = 3 * DEFAULT_UPDATES_BUFFER


async def _answer_setup(agent: Any) -> None:
    """Play the agent until the session exists: initialize, then session/new."""
    for _ in range(2):
        request = json.loads(await agent.recv())
        if request["method"] == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": 1,
                "agentCapabilities": {},
                "agentInfo": {"name": "burst", "version": "0"},
                "authMethods": [],
            }
        else:
            result = {"sessionId": "s1"}
        await agent.send(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}))


async def test_a_burst_does_not_overflow_a_fast_consumer() -> None:
    client_side, agent = memory_pair(max_queue=BURST + 16)
    async with asyncio.timeout(bound(20)):
        setup = asyncio.create_task(_answer_setup(agent))
        async with connect(client_side, protocol_version=1) as client:
            session = await client.new_session("/tmp")
            await setup
            stream = session.updates()  # the default bound: a third of the burst
            for i in range(BURST):
                update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"{i} "}}
                frame = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": update}}
                await agent.send(json.dumps(frame))
            received, dropped = 0, 0
            async for item in stream:
                if isinstance(item, UpdatesDropped):
                    dropped += item.count
                elif isinstance(item, SessionUpdate):
                    received += 1
                if received + dropped == BURST:
                    break
            assert (received, dropped) == (BURST, 0)
            assert session.transcript.messages[-1].text.endswith(f"{BURST - 1} ")

"""Hostile input from the agent: the client never crashes or hangs; each frame is a typed error or a counted discard."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.server import ServerConnection

from acp_client import TransportOptions, connect
from acp_client.client import ACPClient
from acp_client.transports import memory_pair
from tests.conftest import bound, serve_raw

INIT_V2 = {"protocolVersion": 2, "info": {"name": "hostile", "version": "0"}, "capabilities": {"session": {}}}


def barrage(session_id: str) -> list[str | bytes]:
    """Adversarial frames an agent might send (by bug or malice)."""
    update = {"jsonrpc": "2.0", "method": "session/update"}
    frames: list[str | bytes] = [
        "{not json",
        "",
        "null",
        "[]",
        "[1, 2, 3]",
        '"just a string"',
        '{"jsonrpc": "2.0"}',
        '{"jsonrpc": "2.0", "id": true, "result": {}}',
        '{"jsonrpc": "2.0", "id": 99999, "result": {}}',
        '{"jsonrpc": "2.0", "id": 99998, "error": {"code": "x", "message": 1}}',
        '{"jsonrpc": "2.0", "method": 42}',
        "[" * 50_000 + "]" * 50_000,
        json.dumps({"jsonrpc": "2.0", "method": "_big", "params": {"blob": "x" * 1_000_000}}),
        b"\x00\x01binary frame",
        json.dumps({**update, "params": "not an object"}),
        json.dumps({**update, "params": {"sessionId": session_id}}),
        json.dumps({**update, "params": {"sessionId": session_id, "update": {"sessionUpdate": 7}}}),
        json.dumps({**update, "params": {"sessionId": session_id, "update": {"sessionUpdate": "agent_message_chunk"}}}),
        json.dumps({**update, "params": {"sessionId": session_id, "update": {"sessionUpdate": "from_the_future"}}}),
        json.dumps(
            {**update, "params": {"sessionId": session_id, "update": {"sessionUpdate": "state_update", "state": 42}}}
        ),
        json.dumps({"jsonrpc": "2.0", "id": 5, "method": "fs/read_text_file", "params": {"path": 3}}),
        json.dumps({"jsonrpc": "2.0", "id": 6, "method": "_unknown/request", "params": {}}),
    ]
    frames += [
        json.dumps({**update, "params": {"sessionId": f"sess_unknown_{i}", "update": {"sessionUpdate": "plan"}}})
        for i in range(5000)
    ]
    return frames


@asynccontextmanager
async def hostile_agent() -> AsyncIterator[str]:
    async def handler(ws: ServerConnection) -> None:
        async for raw in ws:
            msg = json.loads(raw)
            if "id" not in msg:
                continue
            if msg.get("method") == "initialize":
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": INIT_V2}))
            elif msg.get("method") == "session/new":
                for frame in barrage("sess_real"):
                    await ws.send(frame)
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {"sessionId": "sess_real"}}))
            elif msg.get("method") == "session/prompt":
                for frame in barrage("sess_real"):
                    await ws.send(frame)
                chunk = {
                    "sessionUpdate": "agent_message_chunk",
                    "messageId": "m1",
                    "content": {"type": "text", "text": "ok"},
                }
                for update in (chunk, {"sessionUpdate": "state_update", "state": "running"}):
                    await ws.send(
                        json.dumps(
                            {
                                "jsonrpc": "2.0",
                                "method": "session/update",
                                "params": {"sessionId": "sess_real", "update": update},
                            }
                        )
                    )
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {}}))
                idle = {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
                await ws.send(
                    json.dumps(
                        {
                            "jsonrpc": "2.0",
                            "method": "session/update",
                            "params": {"sessionId": "sess_real", "update": idle},
                        }
                    )
                )
            elif "method" in msg:
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {"echo": msg["method"]}}))

    async with serve_raw(handler, max_size=None) as url:
        yield url


async def test_a_barrage_of_hostile_frames_is_survived_and_counted() -> None:
    async with (
        hostile_agent() as url,
        connect(url, transport_options=TransportOptions(max_frame_bytes=4 * 1024 * 1024)) as client,
    ):
        session = await asyncio.wait_for(client.new_session("/w"), bound(30))
        result = await asyncio.wait_for(session.prompt("go"), bound(30))
        assert result.stop_reason == "end_turn"
        assert session.transcript.messages[-1].text == "ok"
        stats = client.connection.stats
        assert stats["invalid_parse_error"] >= 4  # bad JSON, empty frame, deep nesting (twice each)
        assert stats["invalid_invalid_request"] >= 4
        assert stats["invalid_unknown_id"] >= 2
        assert stats["updates_unknown_session"] >= 10000
        assert stats["updates_malformed"] >= 4
        assert client.connection.transport.stats.binary_discarded == 2  # type: ignore[attr-defined]
        # still fully usable afterwards
        assert await asyncio.wait_for(client.request("_still/alive", {}), bound(5)) == {"echo": "_still/alive"}


async def test_an_oversized_frame_drops_the_link_cleanly() -> None:
    async with (
        hostile_agent() as url,
        connect(url, transport_options=TransportOptions(max_frame_bytes=64 * 1024)) as client,
    ):
        try:
            await asyncio.wait_for(client.new_session("/w"), bound(10))
        except Exception as exc:  # the 1 MB frame exceeds the bound: a typed loss, not a hang or a crash
            assert type(exc).__name__ == "ConnectionLost"
            assert getattr(exc, "close_code", None) == 1009
        else:
            raise AssertionError("a 1 MB frame passed a 64 KiB bound")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
        "id": st.one_of(st.integers(-2, 5), st.text(max_size=3), st.none(), st.booleans()),
        "method": st.sampled_from(["session/update", "session/request_permission", "fs/read_text_file", "x", 1]),
        "params": json_values,
        "result": json_values,
        "error": json_values,
    },
)
frames = st.one_of(
    st.text(max_size=200),
    envelopes.map(json.dumps),
    json_values.map(json.dumps),
    st.lists(envelopes, max_size=4).map(json.dumps),
)


@pytest.mark.xdist_group("cpu_heavy")  # one at a time: tracemalloc or thousands of examples, CPU-bound
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(frames, min_size=1, max_size=8))
def test_random_frames_never_break_the_client(batch: list[str]) -> None:
    async def scenario() -> None:
        ours, peer = memory_pair()
        client = ACPClient(ours)
        client.protocol_version = 2
        await client.connection.start()
        client.connection._core._next_id = 1000  # garbage responses (ids -2..5) must not settle the probe
        try:
            for frame in batch:
                await peer.send(frame)
            probe = asyncio.create_task(client.request("_probe", {}, timeout=5))
            async with asyncio.timeout(5):
                while True:  # skip whatever the client answered to the garbage, then answer the probe
                    msg: Any = json.loads(await peer.recv())
                    if msg.get("method") == "_probe":
                        await peer.send(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": "alive"}))
                        break
                assert await probe == "alive"
            assert not client.connection.closed
        finally:
            await client.aclose()

    asyncio.run(scenario())

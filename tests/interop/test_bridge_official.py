"""The bridge between official-SDK peers: the Python SDK's client drives ``acp-client bridge`` as its agent;
the remote is the Python SDK's agent over WebSocket (``official_agent.py``) or the TypeScript SDK's agent
over Streamable HTTP (``ts_http_agent.mjs``), behind a FaultProxy.

Neither agent sends message ids; the Python one replays a loaded session with the user's messages, the
TypeScript one without them. So these tests check the bridge's dedup of id-less history as well as its
outage handling against peers we did not write."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from acp import RequestError, text_block
from acp.schema import ClientCapabilities, Implementation

from acp_client.testing import FaultProxy
from tests.bridge.bridge_kit import error_reason, official_editor
from tests.conftest import bound
from tests.interop._ts_sdk import ts_sdk_dir  # noqa: F401  (a fixture)
from tests.interop.conftest import OfficialAgentServer
from tests.interop.test_http_interop import HERE, running

FAST = ("--ping-interval", "0.5", "--ping-timeout", "0.5", "--connect-timeout", "10")
INFO = Implementation(name="interop-editor", version="1.0")


@pytest.fixture
async def remote(
    start_official_ws_agent: Callable[..., Awaitable[OfficialAgentServer]],
) -> AsyncIterator[tuple[OfficialAgentServer, FaultProxy]]:
    server = await start_official_ws_agent()
    async with FaultProxy("127.0.0.1", server.port) as proxy:
        yield server, proxy


async def test_cut_with_two_sessions_and_a_prompt_in_flight(
    remote: tuple[OfficialAgentServer, FaultProxy], tmp_path: Path
) -> None:
    server, proxy = remote
    async with official_editor(proxy.url(), *FAST, stderr=tmp_path / "bridge.err") as (conn, editor, process):
        init = await conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities(), client_info=INFO)
        assert init.agent_info is not None and init.agent_info.name == "acp-client-interop-official"
        first = (await conn.new_session(cwd="/work/a", mcp_servers=[])).session_id
        second = (await conn.new_session(cwd="/work/b", mcp_servers=[])).session_id
        await conn.prompt(session_id=second, prompt=[text_block("second session before")])
        waiting = asyncio.ensure_future(conn.prompt(session_id=first, prompt=[text_block("/wait for the cut")]))
        await editor.wait_for(lambda: "".join(editor.agent_chunks(first)) == "/wait for the cut", "the echo")
        await proxy.cut_all()
        with pytest.raises(RequestError) as cut:
            async with asyncio.timeout(bound(10)):
                await waiting  # the turn stays open on the agent: only the drop can end it here
        assert error_reason(cut.value) == "connection_lost"
        answer = await conn.prompt(session_id=first, prompt=[text_block("first after")])
        assert answer.stop_reason == "end_turn"
        answer = await conn.prompt(session_id=second, prompt=[text_block("second after")])
        assert answer.stop_reason == "end_turn"
        # the recovery replayed both sessions (session/load): no replayed chunk reached the editor twice
        assert "".join(editor.agent_chunks(first)) == "/wait for the cutfirst after"
        assert "".join(editor.agent_chunks(second)) == "second session beforesecond after"
        assert editor.notices(second, "gap") == []
        assert proxy.connections_accepted >= 2
    assert process.returncode == 0
    assert "Traceback" not in server.stderr_text()


async def test_a_restart_that_forgets_the_sessions(
    remote: tuple[OfficialAgentServer, FaultProxy], tmp_path: Path
) -> None:
    server, proxy = remote
    async with official_editor(proxy.url(), *FAST, stderr=tmp_path / "bridge.err") as (conn, editor, _):
        await conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities(), client_info=INFO)
        sid = (await conn.new_session(cwd="/work", mcp_servers=[])).session_id
        await conn.prompt(session_id=sid, prompt=[text_block("hello there")])
        await server.stop()
        server.store.unlink()  # the restarted agent remembers nothing
        await server.start()
        await editor.wait_for(lambda: editor.notices(sid, "lost"), "the notice that the session is gone", 20)
        with pytest.raises(RequestError) as gone:
            await conn.prompt(session_id=sid, prompt=[text_block("still there?")])
        assert gone.value.code == -32002
        assert error_reason(gone.value) == "session_forgotten"
        fresh = (await conn.new_session(cwd="/work", mcp_servers=[])).session_id
        answer = await conn.prompt(session_id=fresh, prompt=[text_block("a new start")])
        assert answer.stop_reason == "end_turn"
        assert "".join(editor.agent_chunks(fresh)) == "a new start"


async def test_the_typescript_agent_over_streamable_http(ts_sdk_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    command = ["node", str(HERE / "ts_http_agent.mjs"), str(ts_sdk_dir), "h1"]
    async with running(command) as url, FaultProxy("127.0.0.1", urlsplit(url).port or 80) as proxy:
        remote = proxy.url(scheme="http")
        # default liveness settings: over HTTP they also bound how long an idle event stream may stay silent
        async with official_editor(remote, stderr=tmp_path / "bridge.err") as (conn, editor, process):
            init = await conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities(), client_info=INFO)
            assert init.agent_info is not None and init.agent_info.name == "acp-client-interop-ts"
            first = (await conn.new_session(cwd="/work/a", mcp_servers=[])).session_id
            second = (await conn.new_session(cwd="/work/b", mcp_servers=[])).session_id
            for word in ("b1", "b2"):
                await conn.prompt(session_id=second, prompt=[text_block(f"echo: {word}")])
            sleeping = asyncio.ensure_future(conn.prompt(session_id=first, prompt=[text_block("sleep 30")]))
            await editor.wait_for(lambda: editor.agent_chunks(first) == ["sleeping "], "the turn to start")
            await proxy.cut_all()
            with pytest.raises(RequestError) as cut:
                async with asyncio.timeout(bound(10)):
                    await sleeping
            assert error_reason(cut.value) == "connection_lost"
            await conn.cancel(session_id=first)  # reaches the agent once the session is back
            answer = await conn.prompt(session_id=second, prompt=[text_block("echo: b3")])
            assert answer.stop_reason == "end_turn"
            answer = await conn.prompt(session_id=first, prompt=[text_block("echo: after")])
            assert answer.stop_reason == "end_turn"
            # both sessions were reloaded (all their chunks replayed, no user messages): nothing twice
            assert editor.agent_chunks(second) == ["b1", "b2", "b3"]
            assert editor.agent_chunks(first) == ["sleeping ", "after"]
            assert proxy.connections_accepted >= 2
        assert process.returncode == 0

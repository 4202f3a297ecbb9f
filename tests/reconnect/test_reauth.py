"""Authentication is re-done on every new connection (issue 24 item 5).

The reference agent with ``require_auth=True`` refuses ``session/*`` with ``-32000`` until the connection sent
``authenticate`` (v1) or ``auth/login`` (v2), as qwen-code does. Once the application authenticated, every
later connection is authenticated the same way before its sessions are recovered: with the method the
application chose, or with ``on_auth_required`` when it gave one. Real loopback WebSockets, v1 and v2.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from acp_client import ACPClient, ClientState, MemorySessionStore, SessionLink, SessionRecovered
from acp_client.testing import ReferenceAgent
from tests.conftest import bound, started

VERSIONS = pytest.mark.parametrize("version", [2, 1], ids=["v2", "v1"])


def _login_method(version: int) -> str:
    return "auth/login" if version == 2 else "authenticate"


def _recovered(session_id: str) -> Any:
    return lambda e: isinstance(e, SessionRecovered) and e.session_id == session_id


def _methods(agent: ReferenceAgent) -> list[str]:
    return [r.method for r in agent.received]


@VERSIONS
async def test_the_method_the_application_chose_is_sent_again_before_recovery(version: int) -> None:
    login = _login_method(version)
    async with ReferenceAgent(version, require_auth=True) as agent:
        client, rec = await started(agent.url)
        try:
            await client.authenticate("agent-login")
            session = await client.new_session("/w")
            await agent.drop_all_connections()  # the new connection is not authenticated
            (event,) = await rec.wait(_recovered(session.id), timeout=10)
            methods = _methods(agent)
            reattach = f"session/{event.mode}"
            assert agent.count(login) == 2
            assert agent.count(reattach, session.id) == 1  # never refused: the login came first
            assert max(i for i, m in enumerate(methods) if m == login) < methods.index(reattach)
            result = await asyncio.wait_for(session.prompt("echo: still logged in"), bound(5))
            assert result.stop_reason == "end_turn"
        finally:
            await rec.close()
            await client.aclose()


@VERSIONS
async def test_a_new_connection_with_nothing_to_recover_is_authenticated_too(version: int) -> None:
    async with ReferenceAgent(version, require_auth=True) as agent:
        client, rec = await started(agent.url)
        try:
            await client.authenticate("agent-login")
            await agent.drop_all_connections()
            await rec.wait(lambda e: getattr(e, "new", None) is ClientState.READY and e.generation == 2, timeout=10)
            await agent.wait_for(lambda: agent.count(_login_method(version)) == 2, timeout=bound(5))
            session = await client.new_session("/w")  # would answer -32000 on an unauthenticated connection
            assert session.link is SessionLink.ATTACHED
        finally:
            await rec.close()
            await client.aclose()


@VERSIONS
async def test_on_auth_required_is_called_again_on_every_new_connection(version: int) -> None:
    store = MemorySessionStore()
    calls: list[int] = []

    async def login(acp: ACPClient) -> None:
        calls.append(acp.connection.id)
        await acp.authenticate("agent-login")

    async with ReferenceAgent(version, require_auth=True) as agent:
        first, rec = await started(agent.url, store=store)
        await first.authenticate("agent-login")
        session_id = (await first.new_session("/w")).id
        await rec.close()
        await first.aclose()
        # a new process with the stored session and only the hook: its first connection meets -32000
        client, rec = await started(agent.url, store=store, on_auth_required=login)
        try:
            await rec.wait(_recovered(session_id), timeout=10)
            assert len(calls) == 1  # once for the connection, whatever the number of sessions
            await agent.drop_all_connections()
            await rec.wait(lambda e: _recovered(session_id)(e) and e.generation == 2, timeout=10)
            assert client.current is not None
            assert calls[-1] == client.current.connection.id and len(calls) == 2
            methods = _methods(agent)
            # on the second connection the hook ran before the re-attach: no -32000 in between
            assert methods[-1] in ("session/resume", "session/load")
            assert methods[-2] == "session/status" and methods[-3] == _login_method(version)
        finally:
            await rec.close()
            await client.aclose()

"""Our client against claude-agent-acp (npm ``@agentclientprotocol/claude-agent-acp``) over stdio, offline.

No credentials: new/resume/load/list/close work, a prompt answers ``-32000`` "Authentication required". The
session is written to ``~/.claude/projects`` once a prompt was tried, so a restarted process lists it and
resumes or loads it. Its dialect is in QUIRKS.md (claude-agent-acp section).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from acp_client import ACPError, InternalError, MethodNotFound, SessionNotFound, Timeouts, TurnFailed, connect
from acp_client.transports import Transport
from tests.conftest import bound
from tests.interop import _scenarios as scenario
from tests.interop._claude_acp import claude_acp_bin, spawn_claude_acp
from tests.interop._fixtures import home, no_network, project

__all__ = ["claude_acp_bin", "home", "no_network", "project"]

pytestmark = pytest.mark.timeout(bound(240))

NEVER_EXISTED = "00000000-0000-4000-8000-000000acc0de"


@pytest.fixture
def claude(
    claude_acp_bin: Path, home: Path, project: Path, no_network: list[str] | None
) -> Callable[[], Awaitable[Transport]]:
    return functools.partial(spawn_claude_acp, claude_acp_bin, home, project, no_network)


@pytest.fixture
def agent(claude: Callable[[], Awaitable[Transport]], project: Path) -> scenario.Agent:
    return scenario.Agent(
        claude,
        project,
        prompt_error=-32000,
        never_existed=NEVER_EXISTED,
        recovery_mode="resume",
        unknown_via="session/resume",
    )


async def test_lifecycle_speaks_v2(claude: Callable[[], Awaitable[Transport]], project: Path) -> None:
    async with connect(claude, timeouts=Timeouts(initialize=bound(60))) as client:
        assert client.protocol_version == 2  # offered v2 by default, and it answers 2 (SDK 2.4.0)
        assert client.supports("session") and client.supports("delete") and not client.supports("status")
        session = await client.new_session(str(project), timeout=bound(60))
        # the list is empty until a prompt was tried (the transcript file is written then)
        assert [i.session_id async for i in client.list_sessions(timeout=bound(30))] == []
        with pytest.raises(TurnFailed) as failed:  # v2, no credentials: the turn ends in error, not -32000
            await session.prompt("hello", timeout=bound(60))
        assert failed.value.message_id is not None  # the SDK 2.4.0 agent answered the prompt with a receipt
        assert [m.message_id for m in session.transcript.messages if m.role == "user"] == [failed.value.message_id]
        # the transcript is written behind the turn's end (CI once listed nothing right after the answer)
        await scenario.wait_listed(client, session.id, str(project))
        listed = [i async for i in client.list_sessions(timeout=bound(30))]
        assert [i.session_id for i in listed] == [session.id]
        with pytest.raises(SessionNotFound) as unknown:  # a UUID it never had: -32002, data.sessionId
            await client.resume_session(NEVER_EXISTED, str(project), timeout=bound(30))
        assert unknown.value.code == -32002 and unknown.value.data == {"sessionId": NEVER_EXISTED}
        with pytest.raises(MethodNotFound):  # v2 has no session/load
            await client.request("session/load", {"sessionId": session.id, "cwd": str(project), "mcpServers": []})
    assert client.connection.transport.returncode is not None  # type: ignore[attr-defined]


async def test_v1_dialect(claude: Callable[[], Awaitable[Transport]], project: Path) -> None:
    async with connect(claude, protocol_version=1, timeouts=Timeouts(initialize=bound(60))) as client:
        assert client.protocol_version == 1
        assert client.supports("load") and client.supports("resume") and client.supports("list")
        assert client.supports("close") and not client.supports("status")
        session = await client.new_session(str(project), timeout=bound(60))
        with pytest.raises(ACPError) as prompted:  # v1, no credentials: the prompt request fails
            await session.prompt("hello", timeout=bound(60))
        assert prompted.value.code == -32000
        with pytest.raises(SessionNotFound):
            await client.load_session(NEVER_EXISTED, str(project), timeout=bound(30))
        with pytest.raises(InternalError) as not_uuid:  # not a UUID: -32603 with Claude Code's own words
            await client.resume_session("not-a-uuid", str(project), timeout=bound(60))
        assert "is not a UUID" in str(not_uuid.value.data)


class TestRecovery(scenario.RecoveryScenarios):
    """The recovery scenarios (``_scenarios.py``) against claude-agent-acp."""


async def test_runs_with_no_network_but_loopback(
    claude: Callable[[], Awaitable[Transport]], project: Path, no_network: list[str] | None
) -> None:
    if no_network is None:
        pytest.skip("cannot make a network namespace here (unshare -n needs root or user namespaces)")
    # every other test here runs in the same namespace; this one says so by name
    async with connect(claude, timeouts=Timeouts(initialize=bound(60))) as client:
        session = await client.new_session(str(project), timeout=bound(60))
        assert session.id

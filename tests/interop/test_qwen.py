"""Our client against Qwen Code (npm ``@qwen-code/qwen-code``) as ``qwen --acp`` over stdio, offline.

A made-up OpenAI key in its settings lets it create sessions; a prompt answers ``-32603`` "Connection error."
(the base URL is an unused loopback port). ``qwen --acp`` re-executes itself as a child that keeps the stdio
pipes, so a crash here is SIGKILL of the whole tree, and each test ends whatever is left running under its
private HOME. A session is written to disk only once a prompt was tried. Dialect: QUIRKS.md (qwen section).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from acp_client import ACPError, InternalError, MethodNotFound, SessionNotFound, Timeouts, connect
from acp_client.transports import Transport
from tests.conftest import bound
from tests.interop import _scenarios as scenario
from tests.interop._fixtures import no_network, project
from tests.interop._qwen import home, qwen_bin, spawn_qwen

__all__ = ["home", "no_network", "project", "qwen_bin"]

pytestmark = pytest.mark.timeout(bound(240))

NEVER_EXISTED = "00000000-0000-4000-8000-000000acc0de"


@pytest.fixture
def qwen(qwen_bin: Path, home: Path, project: Path, no_network: list[str] | None) -> Callable[[], Awaitable[Transport]]:
    return functools.partial(spawn_qwen, qwen_bin, home, project, no_network)


@pytest.fixture
def agent(qwen: Callable[[], Awaitable[Transport]], project: Path) -> scenario.Agent:
    return scenario.Agent(
        qwen,
        project,
        prompt_error=-32603,
        never_existed=NEVER_EXISTED,
        recovery_mode="load",
        unknown_via="session/load",
    )


async def test_lifecycle_and_dialect(qwen: Callable[[], Awaitable[Transport]], project: Path) -> None:
    async with connect(qwen, timeouts=Timeouts(initialize=bound(60))) as client:
        assert client.protocol_version == 1
        assert client.supports("load") and client.supports("resume") and client.supports("list")
        assert not client.supports("status") and not client.supports("close")
        assert [m.get("id") for m in client.auth_methods] == ["openai"]
        session = await client.new_session(str(project), timeout=bound(60))
        with pytest.raises(InternalError) as prompted:
            await session.prompt("hello", timeout=bound(60))
        assert prompted.value.data == {"details": "Connection error."}
        await scenario.wait_listed(client, session.id, str(project))  # its chat file may lag the failed turn
        listed = [i.session_id async for i in client.list_sessions(str(project), timeout=bound(30))]
        assert listed == [session.id]
        with pytest.raises(SessionNotFound) as unknown:
            await client.load_session(NEVER_EXISTED, str(project), timeout=bound(30))
        assert unknown.value.code == -32002
        assert str(unknown.value.message) == f"Resource not found: session:{NEVER_EXISTED}"
        # a live session not yet prompted, loaded again in its own process: -32023, a writer owns it (not
        # unknown; once prompted, the same load succeeds)
        fresh = await client.new_session(str(project), timeout=bound(60))
        with pytest.raises(ACPError) as owned:
            await client.load_session(fresh.id, str(project), timeout=bound(30))
        assert getattr(owned.value, "code", None) == -32023
        assert getattr(owned.value, "data", None) == {"errorKind": "session_writer_unavailable"}
        with pytest.raises(MethodNotFound):  # session/close is not there at all
            await client.request("session/close", {"sessionId": session.id}, timeout=bound(30))


class TestRecovery(scenario.RecoveryScenarios):
    """The recovery scenarios (``_scenarios.py``) against qwen."""

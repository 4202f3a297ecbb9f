"""Our client against pydantic-acp 1.10.0 (PyPI) serving a pydantic-ai agent on ``TestModel``, over stdio.

The agent is ``pydantic_acp_agent.py``, run from its cached venv (``_pydantic_acp.py``) with a private HOME,
no network and its sessions in a ``FileSessionStore`` folder, so a new process can load them. Its dialect
(QUIRKS.md, "pydantic-acp"): v1; advertises ``loadSession`` and ``sessionCapabilities`` list, resume and
close, but without the SDK's unstable flag resume and close answer ``-32601``; no ``session/status``; and
**a load of an unknown id succeeds** with ``{}`` and replays nothing (the id is not listed afterwards).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from acp_client import MethodNotFound, Timeouts, connect
from acp_client.transports import Transport
from tests.conftest import bound
from tests.interop import _scenarios as scenario
from tests.interop._fixtures import home, offline_turn, project, slow_options, v1_session
from tests.interop._opencode import offline_prefix
from tests.interop._pydantic_acp import pydantic_acp_python, spawn_pydantic_acp

__all__ = ["home", "project", "pydantic_acp_python"]  # fixtures, imported so that pytest finds them here

#: Each test starts the agent one to three times (about 1-2 s each on a loaded 2-core machine).
pytestmark = pytest.mark.timeout(bound(180))

NEVER_EXISTED = "00000000000000000000acpclient00"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """The agent's own session folder (one ``<session id>.json`` per session)."""
    return tmp_path / "agent-sessions"


@pytest.fixture
def pydantic_acp(
    pydantic_acp_python: Path, home: Path, project: Path, store: Path
) -> Callable[[], Awaitable[Transport]]:
    """A transport factory: every call spawns a new agent process on the same session folder."""

    async def spawn() -> Transport:
        return await spawn_pydantic_acp(pydantic_acp_python, home, project, store)

    return spawn


@pytest.fixture
def agent(pydantic_acp: Callable[[], Awaitable[Transport]], project: Path, store: Path) -> scenario.Agent:
    def lose(session_id: str) -> None:  # its file gone: a new process knows only the other sessions
        (store / f"{session_id}.json").unlink()

    # resume answers -32601 although advertised: the client falls back to load, which replays the turn.
    # A load of an id it never had succeeds with nothing replayed, so the unknown session is one it lost
    return scenario.Agent(
        pydantic_acp,
        project,
        prompt_error=None,  # TestModel answers every prompt offline
        never_existed=NEVER_EXISTED,
        recovery_mode="load",
        unknown_via="session/load",
        # the load of the lost id is answered {} with no replay although the session had a turn; session/list
        # (with the session's cwd) names the other session but not this one: a fresh empty session was made
        unknown_reason="not_listed",
        replays=True,
        lose=lose,
        options=slow_options(replay_silence=10, list_check=60, backoff_cap=0.2),
    )


async def test_lifecycle_v1_prompt_list_and_a_load_of_an_unknown_id_that_succeeds(
    pydantic_acp: Callable[[], Awaitable[Transport]], project: Path
) -> None:
    async with connect(pydantic_acp, timeouts=Timeouts(initialize=bound(60))) as client:
        session = await v1_session(client, project, timeout=bound(30))
        assert "echo from TestModel" in await offline_turn(session, "hello", timeout=bound(30))
        listed = [info.session_id async for info in client.list_sessions(cwd=str(project), timeout=bound(30))]
        assert listed == [session.id]
        # advertised, but the SDK routes resume only with its unstable flag
        with pytest.raises(MethodNotFound):
            await client.request("session/resume", {"sessionId": session.id, "cwd": str(project)}, timeout=bound(30))
        # the dialect: a load of an id it never had is answered with success, and the id is not listed after
        answer = await client.request(
            "session/load", {"sessionId": NEVER_EXISTED, "cwd": str(project), "mcpServers": []}, timeout=bound(30)
        )
        assert answer == {}
        listed = [info.session_id async for info in client.list_sessions(cwd=str(project), timeout=bound(30))]
        assert listed == [session.id]


class TestRecovery(scenario.TrappedRecoveryScenarios):
    """The recovery scenarios (``_scenarios.py``) against pydantic-acp."""


async def test_runs_without_network(pydantic_acp_python: Path, home: Path, project: Path, store: Path) -> None:
    prefix = offline_prefix()
    if prefix is None:
        pytest.skip("cannot make a network namespace here (unshare -n needs root or user namespaces)")

    async def spawn() -> Transport:
        return await spawn_pydantic_acp(pydantic_acp_python, home, project, store, prefix=prefix)

    async with connect(spawn, timeouts=Timeouts(initialize=bound(60))) as client:
        session = await client.new_session(str(project), timeout=bound(30))
        assert (await session.prompt("offline", timeout=bound(30))).stop_reason == "end_turn"

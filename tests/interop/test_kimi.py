"""Our client against kimi-cli 1.52.0 (PyPI), ``python -m kimi_cli.cli acp`` over stdio, offline.

kimi runs from its cached venv (``_kimi.py``; Python 3.13, Debian's where the machine has none) with a
private HOME holding a config that picks its built-in ``_echo`` provider and a made-up token file. Its
sessions live under that HOME, so a new process can load them. Its dialect (QUIRKS.md, "kimi-cli"): v1;
advertises ``loadSession`` and ``sessionCapabilities`` list and resume, no ``session/status`` (``-32601``);
**an unknown session is ``-32602 "Invalid params"`` with data ``{"session_id": "Session not found"}``**;
**``session/list`` answers ``[]`` unless ``params.cwd`` is given**.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from acp_client import InvalidParams, Timeouts, connect
from acp_client.transports import Transport
from tests.conftest import bound
from tests.interop import _scenarios as scenario
from tests.interop._fixtures import offline_turn, project, slow_options, v1_session
from tests.interop._kimi import kimi_python, prepare_home, spawn_kimi
from tests.interop._opencode import offline_prefix

__all__ = ["kimi_python", "project"]  # fixtures, imported so that pytest finds them here

#: Each test starts kimi one to three times (about 3-5 s each on a loaded 2-core machine).
pytestmark = pytest.mark.timeout(bound(240))

#: A session id in kimi's format (a UUID) that no kimi HOME ever held.
NEVER_EXISTED = "00000000-0000-4000-8000-00000acpc11e"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    prepare_home(path)
    return path


@pytest.fixture
def kimi(kimi_python: Path, home: Path, project: Path) -> Callable[[], Awaitable[Transport]]:
    """A transport factory: every call spawns a new ``kimi acp`` process on the same HOME."""

    async def spawn() -> Transport:
        return await spawn_kimi(kimi_python, home, project)

    return spawn


def replayable(home: Path, session_id: str) -> bool:
    """kimi's replay log of ``session_id`` holds the prompt (``session/list`` reads another file, written first)."""
    return any(
        scenario.PROMPT in log.read_text(encoding="utf-8", errors="replace")
        for log in home.rglob("wire.jsonl")
        if log.parent.name == session_id
    )


@pytest.fixture
def agent(kimi: Callable[[], Awaitable[Transport]], project: Path, home: Path) -> scenario.Agent:
    # no session/status; v1 restores with session/load, which a new kimi process serves from its HOME; its
    # -32602 with data {"session_id": "Session not found"} is its unknown-session answer. After a transient
    # -32603 the client asks session/list whether the session still exists; kimi lists nothing without a
    # cwd, so only a listing with the session's cwd keeps it
    return scenario.Agent(
        kimi,
        project,
        prompt_error=None,  # the echo provider answers every prompt offline
        never_existed=NEVER_EXISTED,
        recovery_mode="load",
        unknown_via="session/load",
        replays=True,
        trap_springs_on=("session/load",),
        written=lambda session_id: replayable(home, session_id),
        options=slow_options(replay_silence=10, list_check=60, backoff_cap=0.2),
    )


async def test_lifecycle_v1_echo_prompt_list_needs_cwd_and_unknown_is_32602(
    kimi: Callable[[], Awaitable[Transport]], project: Path
) -> None:
    async with connect(kimi, timeouts=Timeouts(initialize=bound(60))) as client:
        session = await v1_session(client, project, timeout=bound(30))
        # the echo provider answers with the prompt
        assert "hello kimi" in await offline_turn(session, "hello kimi", timeout=bound(60))
        assert [info.session_id async for info in client.list_sessions(timeout=bound(30))] == []
        await scenario.wait_listed(client, session.id, str(project))  # its session file may lag the turn
        listed = [info.session_id async for info in client.list_sessions(cwd=str(project), timeout=bound(30))]
        assert listed == [session.id]
        for method in ("session/load", "session/resume"):
            with pytest.raises(InvalidParams) as refused:
                await client.request(
                    method, {"sessionId": NEVER_EXISTED, "cwd": str(project), "mcpServers": []}, timeout=bound(30)
                )
            assert refused.value.code == -32602
            assert refused.value.data == {"session_id": "Session not found"}


class TestRecovery(scenario.TrappedRecoveryScenarios):
    """The recovery scenarios (``_scenarios.py``) against kimi."""


async def test_runs_without_network(kimi_python: Path, home: Path, project: Path) -> None:
    prefix = offline_prefix()
    if prefix is None:
        pytest.skip("cannot make a network namespace here (unshare -n needs root or user namespaces)")

    async def spawn() -> Transport:
        return await spawn_kimi(kimi_python, home, project, prefix=prefix)

    async with connect(spawn, timeouts=Timeouts(initialize=bound(60))) as client:
        session = await client.new_session(str(project), timeout=bound(30))
        assert (await session.prompt("offline", timeout=bound(60))).stop_reason == "end_turn"
        assert "offline" in session.transcript.text()

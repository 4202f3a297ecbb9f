"""Our client against pydantic-acp 1.10.0 (PyPI) serving a pydantic-ai agent on ``TestModel``, over stdio.

The agent is ``pydantic_acp_agent.py``, run from its cached venv (``_pydantic_acp.py``) with a private HOME,
no network and its sessions in a ``FileSessionStore`` folder, so a new process can load them. Its dialect
(QUIRKS.md, "pydantic-acp"): v1; advertises ``loadSession`` and ``sessionCapabilities`` list, resume and
close, but without the SDK's unstable flag resume and close answer ``-32601``; no ``session/status``; and
**a load of an unknown id succeeds** with ``{}`` and replays nothing (the id is not listed afterwards).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from acp_client import (
    Backoff,
    ConnectionDropped,
    MethodNotFound,
    ReconnectingClient,
    RecoveryPolicy,
    SessionForgotten,
    SessionLink,
    SessionRecovered,
    SessionRecoveryFailed,
    SQLiteSessionStore,
    Timeouts,
    connect,
)
from acp_client.transports import Transport
from tests.conftest import bound, recorder
from tests.interop._opencode import offline_prefix
from tests.interop._pydantic_acp import pydantic_acp_python, spawn_pydantic_acp
from tests.interop._trap import Trap

__all__ = ["pydantic_acp_python"]  # the session fixture, imported so that pytest finds it here

#: Each test starts the agent one to three times (about 1-2 s each on a loaded 2-core machine).
pytestmark = pytest.mark.timeout(bound(180))

OPTIONS: dict[str, Any] = {
    "timeouts": Timeouts(
        initialize=bound(60), request=bound(60), probe=bound(60), replay_silence=bound(10), list_check=bound(60)
    ),
    "policy": RecoveryPolicy(start_jitter=0.0, stable_after=0.0),
    "backoff": Backoff(base=0.02, cap=0.2),
}
NEVER_EXISTED = "00000000000000000000acpclient00"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """The agent's own session folder (one ``<session id>.json`` per session)."""
    return tmp_path / "agent-sessions"


@pytest.fixture
def agent(
    pydantic_acp_python: Path, home: Path, project: Path, store: Path
) -> Callable[[], Awaitable[Transport]]:
    """A transport factory: every call spawns a new agent process on the same session folder."""

    async def spawn() -> Transport:
        return await spawn_pydantic_acp(pydantic_acp_python, home, project, store)

    return spawn


def agent_pid(client: ReconnectingClient) -> int:
    current = client.current
    assert current is not None
    pid = current.connection.transport.pid  # type: ignore[attr-defined]
    assert isinstance(pid, int)
    return pid


async def test_lifecycle_v1_prompt_list_and_a_load_of_an_unknown_id_that_succeeds(
    agent: Callable[[], Awaitable[Transport]], project: Path
) -> None:
    async with connect(agent, timeouts=Timeouts(initialize=bound(60))) as client:
        assert client.protocol_version == 1
        assert client.supports("load") and client.supports("list") and client.supports("resume")
        assert not client.supports("status")
        session = await client.new_session(str(project), timeout=bound(30))
        result = await session.prompt("hello", timeout=bound(30))
        assert result.stop_reason == "end_turn"
        assert "echo from TestModel" in session.transcript.text()
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


async def test_recovers_a_session_after_the_agent_is_killed(
    agent: Callable[[], Awaitable[Transport]], project: Path
) -> None:
    client = ReconnectingClient(agent, **OPTIONS)
    rec = recorder(client)
    await client.start()
    try:
        await client.wait_ready(timeout=bound(60))
        session = await client.new_session(str(project), timeout=bound(30))
        await session.prompt("before the crash", timeout=bound(30))
        first_pid = agent_pid(client)
        os.kill(first_pid, signal.SIGKILL)
        dropped = await rec.wait(lambda e: isinstance(e, ConnectionDropped), timeout=30)
        assert "exited" in (dropped[0].reason or "")
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=60)
        # resume answers -32601 although advertised: the client falls back to load, which replays the turn
        assert recovered[0].mode == "load" and recovered[0].replayed
        await client.wait_ready(timeout=bound(30))
        assert agent_pid(client) != first_pid
        assert session.link is SessionLink.ATTACHED
        result = await session.prompt("after the crash", timeout=bound(30))
        assert result.stop_reason == "end_turn"
        assert not rec.of(SessionForgotten)
    finally:
        await rec.close()
        await client.aclose()


async def test_recovers_a_session_in_a_new_client_process_from_the_sqlite_store(
    agent: Callable[[], Awaitable[Transport]], project: Path, tmp_path: Path
) -> None:
    path = tmp_path / "sessions.db"
    async with ReconnectingClient(agent, store=SQLiteSessionStore(path), **OPTIONS) as first:
        created = await first.new_session(str(project), timeout=bound(30))
        await created.prompt("remember me", timeout=bound(30))
    # the first agent exited with its client; a new client (as after a restart) and a new agent pick it up
    client = ReconnectingClient(agent, store=SQLiteSessionStore(path), **OPTIONS)
    rec = recorder(client)
    await client.start()
    try:
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == created.id, timeout=60)
        assert recovered[0].mode == "load" and recovered[0].replayed
        session = client.sessions[created.id]
        assert session.link is SessionLink.ATTACHED and session.record.cwd == str(project)
        assert "remember me" in session.transcript.text()
        assert not rec.of(SessionForgotten)
    finally:
        await rec.close()
        await client.aclose()


async def test_a_session_the_agent_lost_is_forgotten_once_as_not_listed(
    agent: Callable[[], Awaitable[Transport]], project: Path, store: Path
) -> None:
    client = ReconnectingClient(agent, **OPTIONS)
    rec = recorder(client)
    await client.start()
    try:
        await client.wait_ready(timeout=bound(60))
        kept = await client.new_session(str(project), timeout=bound(30))
        await kept.prompt("kept", timeout=bound(30))
        lost = await client.new_session(str(project), timeout=bound(30))
        await lost.prompt("lost", timeout=bound(30))
        # the agent loses one session (its file is gone) and crashes: a new process knows only the other
        (store / f"{lost.id}.json").unlink()
        os.kill(agent_pid(client), signal.SIGKILL)
        # load of the lost id is answered {} with no replay although the session had a turn; session/list
        # (with the session's cwd) names the other session but not this one: a fresh empty session was made
        forgotten = await rec.wait(lambda e: isinstance(e, SessionForgotten) and e.session_id == lost.id, timeout=60)
        assert forgotten[0].reason == "not_listed" and forgotten[0].via == "session/load"
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == kept.id, timeout=60)
        assert recovered[0].mode == "load" and recovered[0].replayed
        await client.wait_ready(timeout=bound(30))
        assert [e.session_id for e in rec.of(SessionForgotten)] == [lost.id]
        assert set(client.sessions) == {kept.id}
        assert not [e for e in rec.of(SessionRecovered) if e.session_id == lost.id]
    finally:
        await rec.close()
        await client.aclose()


@pytest.mark.parametrize("kind", ["kill", "error"])
async def test_a_live_session_is_never_forgotten_by_a_transient_error(
    pydantic_acp_python: Path, home: Path, project: Path, store: Path, kind: str
) -> None:
    trap = Trap("kill" if kind == "kill" else "error")

    async def spawn() -> Transport:
        return trap.wrap(await spawn_pydantic_acp(pydantic_acp_python, home, project, store))

    client = ReconnectingClient(spawn, **OPTIONS)
    rec = recorder(client)
    await client.start()
    try:
        await client.wait_ready(timeout=bound(60))
        session = await client.new_session(str(project), timeout=bound(30))
        await session.prompt("live", timeout=bound(30))
        trap.arm(session.id)
        os.kill(agent_pid(client), signal.SIGKILL)
        # the first recovery request of the session meets the fault: the agent dies under it ("kill"), or
        # it is answered -32603 ("error"); neither says the session is unknown, so it is kept and retried
        if kind == "kill":  # the connection that was recovering drops too: a third agent recovers the session
            await rec.wait(lambda e: isinstance(e, ConnectionDropped) and e.generation == 2, timeout=60)
        else:
            outcome = await rec.wait(
                lambda e: isinstance(e, (SessionRecoveryFailed, SessionForgotten)) and e.session_id == session.id,
                timeout=90,
            )
            assert isinstance(outcome[0], SessionRecoveryFailed), outcome[0]
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=90)
        assert recovered[0].mode == "load"
        assert trap.sprung in (["session/resume"], ["session/load"])
        assert not rec.of(SessionForgotten)
        assert session.link is SessionLink.ATTACHED
    finally:
        await rec.close()
        await client.aclose()


async def test_runs_without_network(pydantic_acp_python: Path, home: Path, project: Path, store: Path) -> None:
    prefix = offline_prefix()
    if prefix is None:
        pytest.skip("cannot make a network namespace here (unshare -n needs root or user namespaces)")

    async def spawn() -> Transport:
        return await spawn_pydantic_acp(pydantic_acp_python, home, project, store, prefix=prefix)

    async with connect(spawn, timeouts=Timeouts(initialize=bound(60))) as client:
        session = await client.new_session(str(project), timeout=bound(30))
        assert (await session.prompt("offline", timeout=bound(30))).stop_reason == "end_turn"

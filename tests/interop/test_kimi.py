"""Our client against kimi-cli 1.52.0 (PyPI), ``python -m kimi_cli.cli acp`` over stdio, offline.

kimi runs from its cached venv (``_kimi.py``; Python 3.13, Debian's where the machine has none) with a
private HOME holding a config that picks its built-in ``_echo`` provider and a made-up token file. Its
sessions live under that HOME, so a new process can load them. Its dialect (QUIRKS.md, "kimi-cli"): v1;
advertises ``loadSession`` and ``sessionCapabilities`` list and resume, no ``session/status`` (``-32601``);
**an unknown session is ``-32602 "Invalid params"`` with data ``{"session_id": "Session not found"}``**;
**``session/list`` answers ``[]`` unless ``params.cwd`` is given**.
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
    InvalidParams,
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
from acp_client.sessions import SessionRecord
from acp_client.transports import Transport
from tests.conftest import bound, recorder
from tests.interop._kimi import kimi_python, prepare_home, spawn_kimi
from tests.interop._opencode import offline_prefix
from tests.interop._trap import Trap

__all__ = ["kimi_python"]  # the session fixture, imported so that pytest finds it here

#: Each test starts kimi one to three times (about 3-5 s each on a loaded 2-core machine).
pytestmark = pytest.mark.timeout(bound(240))

OPTIONS: dict[str, Any] = {
    "timeouts": Timeouts(
        initialize=bound(60), request=bound(60), probe=bound(60), replay_silence=bound(10), list_check=bound(60)
    ),
    "policy": RecoveryPolicy(start_jitter=0.0, stable_after=0.0),
    "backoff": Backoff(base=0.02, cap=0.2),
}
#: A session id in kimi's format (a UUID) that no kimi HOME ever held.
NEVER_EXISTED = "00000000-0000-4000-8000-00000acpc11e"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    prepare_home(path)
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def agent(kimi_python: Path, home: Path, project: Path) -> Callable[[], Awaitable[Transport]]:
    """A transport factory: every call spawns a new ``kimi acp`` process on the same HOME."""

    async def spawn() -> Transport:
        return await spawn_kimi(kimi_python, home, project)

    return spawn


def agent_pid(client: ReconnectingClient) -> int:
    current = client.current
    assert current is not None
    pid = current.connection.transport.pid  # type: ignore[attr-defined]
    assert isinstance(pid, int)
    return pid


async def test_lifecycle_v1_echo_prompt_list_needs_cwd_and_unknown_is_32602(
    agent: Callable[[], Awaitable[Transport]], project: Path
) -> None:
    async with connect(agent, timeouts=Timeouts(initialize=bound(60))) as client:
        assert client.protocol_version == 1
        assert client.supports("load") and client.supports("list") and client.supports("resume")
        assert not client.supports("status")
        session = await client.new_session(str(project), timeout=bound(30))
        result = await session.prompt("hello kimi", timeout=bound(60))
        assert result.stop_reason == "end_turn"
        assert "hello kimi" in session.transcript.text()  # the echo provider answers with the prompt
        assert [info.session_id async for info in client.list_sessions(timeout=bound(30))] == []
        listed = [info.session_id async for info in client.list_sessions(cwd=str(project), timeout=bound(30))]
        assert listed == [session.id]
        for method in ("session/load", "session/resume"):
            with pytest.raises(InvalidParams) as refused:
                await client.request(
                    method, {"sessionId": NEVER_EXISTED, "cwd": str(project), "mcpServers": []}, timeout=bound(30)
                )
            assert refused.value.code == -32602
            assert refused.value.data == {"session_id": "Session not found"}


async def test_recovers_a_session_after_the_agent_is_killed(
    agent: Callable[[], Awaitable[Transport]], project: Path
) -> None:
    client = ReconnectingClient(agent, **OPTIONS)
    rec = recorder(client)
    await client.start()
    try:
        await client.wait_ready(timeout=bound(60))
        session = await client.new_session(str(project), timeout=bound(30))
        await session.prompt("before the crash", timeout=bound(60))
        first_pid = agent_pid(client)
        os.kill(first_pid, signal.SIGKILL)
        dropped = await rec.wait(lambda e: isinstance(e, ConnectionDropped), timeout=30)
        assert "exited" in (dropped[0].reason or "")
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=90)
        # no session/status; v1 restores with session/load, which a new kimi process serves from its HOME
        assert recovered[0].mode == "load" and recovered[0].replayed
        await client.wait_ready(timeout=bound(30))
        assert agent_pid(client) != first_pid
        assert session.link is SessionLink.ATTACHED
        result = await session.prompt("after the crash", timeout=bound(60))
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
        await created.prompt("remember me", timeout=bound(60))
    client = ReconnectingClient(agent, store=SQLiteSessionStore(path), **OPTIONS)
    rec = recorder(client)
    await client.start()
    try:
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == created.id, timeout=90)
        assert recovered[0].mode == "load" and recovered[0].replayed
        session = client.sessions[created.id]
        assert session.link is SessionLink.ATTACHED and session.record.cwd == str(project)
        assert (await session.prompt("still there?", timeout=bound(60))).stop_reason == "end_turn"
        assert not rec.of(SessionForgotten)
    finally:
        await rec.close()
        await client.aclose()


async def test_an_unknown_session_is_forgotten_once_as_unknown(
    agent: Callable[[], Awaitable[Transport]], project: Path, tmp_path: Path
) -> None:
    path = tmp_path / "sessions.db"
    async with ReconnectingClient(agent, store=SQLiteSessionStore(path), **OPTIONS) as first:
        kept = await first.new_session(str(project), timeout=bound(30))
    seed = SQLiteSessionStore(path)
    await seed.save(SessionRecord(NEVER_EXISTED, str(project), protocol_version=1))
    await seed.close()

    client = ReconnectingClient(agent, store=SQLiteSessionStore(path), **OPTIONS)
    rec = recorder(client)
    await client.start()
    try:
        # kimi's -32602 with data {"session_id": "Session not found"} is its unknown-session answer
        forgotten = await rec.wait(
            lambda e: isinstance(e, SessionForgotten) and e.session_id == NEVER_EXISTED, timeout=90
        )
        assert forgotten[0].reason == "unknown" and forgotten[0].via == "session/load"
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == kept.id, timeout=90)
        assert recovered[0].mode == "load" and recovered[0].replayed
        await client.wait_ready(timeout=bound(30))
        assert [e.session_id for e in rec.of(SessionForgotten)] == [NEVER_EXISTED]
        assert set(client.sessions) == {kept.id}
    finally:
        await rec.close()
        await client.aclose()
    reread = SQLiteSessionStore(path)
    try:
        assert [r.session_id for r in await reread.load_all()] == [kept.id]
    finally:
        await reread.close()


@pytest.mark.parametrize("kind", ["kill", "error"])
async def test_a_live_session_is_never_forgotten_by_a_transient_error(
    kimi_python: Path, home: Path, project: Path, kind: str
) -> None:
    trap = Trap("kill" if kind == "kill" else "error")

    async def spawn() -> Transport:
        return trap.wrap(await spawn_kimi(kimi_python, home, project))

    client = ReconnectingClient(spawn, **OPTIONS)
    rec = recorder(client)
    await client.start()
    try:
        await client.wait_ready(timeout=bound(60))
        session = await client.new_session(str(project), timeout=bound(30))
        await session.prompt("live", timeout=bound(60))
        trap.arm(session.id)
        os.kill(agent_pid(client), signal.SIGKILL)
        # the first recovery request meets the fault: the agent dies under it ("kill"), or it is answered
        # -32603 ("error"). For "error" the client asks session/list whether the session still exists; kimi
        # lists nothing without a cwd, so only a listing with the session's cwd keeps it
        if kind == "kill":
            await rec.wait(lambda e: isinstance(e, ConnectionDropped) and e.generation == 2, timeout=90)
        else:
            outcome = await rec.wait(
                lambda e: isinstance(e, (SessionRecoveryFailed, SessionForgotten)) and e.session_id == session.id,
                timeout=90,
            )
            assert isinstance(outcome[0], SessionRecoveryFailed), outcome[0]
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=90)
        assert recovered[0].mode == "load" and recovered[0].replayed
        assert trap.sprung == ["session/load"]
        assert not rec.of(SessionForgotten)
        assert session.link is SessionLink.ATTACHED
    finally:
        await rec.close()
        await client.aclose()


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

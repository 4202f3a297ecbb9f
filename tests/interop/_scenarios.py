"""The recovery scenarios every third-party agent goes through (issue 24, item 1), written once.

Each ``test_<agent>.py`` hands these an :class:`Agent`: a transport factory for the agent's process (or
server), the working directory, and the agent's own answers (which error a prompt gets offline, which id it
never had). The scenarios assert what our client must do; the per-agent modules assert the dialect.

Both npm agents here persist a session only once a prompt was tried (the prompt itself fails offline), so
:meth:`Agent.persisted_session` prompts once before a session is expected to outlive its process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp_client import (
    ACPClient,
    ACPError,
    Backoff,
    ConnectionDropped,
    ReconnectingClient,
    RecoveryPolicy,
    Session,
    SessionForgotten,
    SessionLink,
    SessionRecovered,
    SQLiteSessionStore,
    Timeouts,
)
from acp_client.sessions import SessionRecord
from acp_client.testing import EventRecorder
from acp_client.transports import Transport
from tests.conftest import bound, recorder

#: Bounds for a cold Node agent on a loaded 2-core machine (a qwen or claude start is 1-3 s here).
SLOW: dict[str, Any] = {
    "timeouts": Timeouts(
        initialize=bound(60), request=bound(60), probe=bound(60), replay_silence=bound(30), list_check=bound(120)
    ),
    "policy": RecoveryPolicy(start_jitter=0.0, stable_after=0.0),
    "backoff": Backoff(base=0.02, cap=0.5),
}


@dataclass
class Agent:
    """How to reach one agent, and how it answers."""

    factory: Callable[[], Awaitable[Transport]]
    cwd: Path
    #: the error code its offline prompt gets (the prompt fails, but the session is then on disk)
    prompt_error: int
    #: a session id in its format that it never had
    never_existed: str
    #: what recovery of a live session used on a new process (``"resume"`` or ``"load"``)
    recovery_mode: str
    #: ``SessionForgotten.via`` for :attr:`never_existed`
    unknown_via: str
    options: dict[str, Any] = field(default_factory=dict)

    def client(self, **extra: Any) -> ReconnectingClient:
        return ReconnectingClient(self.factory, **{**SLOW, **self.options, **extra})

    async def persisted_session(self, client: ReconnectingClient) -> Session:
        """A new session, prompted once so that the agent writes it down."""
        session = await client.new_session(str(self.cwd), timeout=bound(60))
        try:
            result = await session.prompt("hello from acp-client", timeout=bound(60))
        except ACPError as refused:  # offline, v1: no model answers, the request fails
            assert refused.code == self.prompt_error, refused
        else:  # offline, v2: the turn ends with an error
            assert result.stop_reason == "error", result
        # the agent writes its transcript after the turn; once session/list names it, it is on disk
        assert client.current is not None
        await wait_listed(client.current, session.id, str(self.cwd))
        return session


async def wait_listed(client: ACPClient, session_id: str, cwd: str) -> None:
    """Until ``session/list`` (with ``cwd``) names ``session_id``; bounded."""
    for _ in range(int(bound(30) / 0.1)):
        # the raw request: qwen serve answers session/list without advertising it
        listed = await client.request("session/list", {"cwd": cwd}, timeout=bound(30))
        if session_id in [s.get("sessionId") for s in listed.get("sessions", [])]:
            return
        await asyncio.sleep(0.1)  # polling the agent's own files: it has no event to wait for
    raise AssertionError(f"session/list never named {session_id}")


@contextlib.asynccontextmanager
async def started(client: ReconnectingClient) -> AsyncIterator[EventRecorder]:
    rec = recorder(client)
    await client.start()
    try:
        yield rec
    finally:
        await rec.close()
        await client.aclose()


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux ``/proc``), parents first."""
    found = [pid]
    for parent in found:
        for task in Path(f"/proc/{parent}/task").glob("*"):
            with contextlib.suppress(OSError):
                found.extend(int(c) for c in (task / "children").read_text().split())
    return found


def kill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid`` and every descendant (the whole agent crashed); returns the pids signalled."""
    pids = process_tree(pid)
    for each in reversed(pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)
    return pids


def agent_pid(client: ReconnectingClient) -> int:
    transport = client.current.connection.transport  # type: ignore[union-attr]
    pid = transport.pid  # type: ignore[attr-defined]
    assert isinstance(pid, int)
    return pid


async def sigkill_mid_session(agent: Agent) -> SessionRecovered:
    """SIGKILL of the agent's whole process tree with a session open: the session comes back on a new
    process, attached, never forgotten. Returns the recovery event."""
    client = agent.client()
    async with started(client) as rec:
        await client.wait_ready(timeout=bound(60))
        session = await agent.persisted_session(client)
        first = agent_pid(client)
        kill_tree(first)
        dropped = await rec.wait(lambda e: isinstance(e, ConnectionDropped), timeout=30)
        assert dropped[0].reason
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=90)
        await client.wait_ready(timeout=bound(30))
        assert agent_pid(client) != first
        assert session.link is SessionLink.ATTACHED and session.id in client.sessions
        assert not rec.of(SessionForgotten)
        return recovered[0]


async def restart_with_sqlite_store(agent: Agent, path: Path) -> SessionRecovered:
    """Our own process restarts: a new client (and a new agent process) reads the SQLite store and
    recovers the session the first client created."""
    async with agent.client(store=SQLiteSessionStore(path)) as first:
        created = await agent.persisted_session(first)
    client = agent.client(store=SQLiteSessionStore(path))
    async with started(client) as rec:
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == created.id, timeout=90)
        session = client.sessions[created.id]
        assert session.link is SessionLink.ATTACHED
        assert session.record.cwd == str(agent.cwd)
        assert not rec.of(SessionForgotten)
        return recovered[0]


async def unknown_forgotten_once(agent: Agent, path: Path) -> SessionForgotten:
    """A stored session the agent never had is forgotten exactly once, with a reason, and the agent's own
    session next to it is recovered; the store keeps only that one."""
    async with agent.client(store=SQLiteSessionStore(path)) as first:
        kept = await agent.persisted_session(first)
    seed = SQLiteSessionStore(path)
    await seed.save(SessionRecord(agent.never_existed, str(agent.cwd), protocol_version=1))
    await seed.close()
    client = agent.client(store=SQLiteSessionStore(path))
    async with started(client) as rec:
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == kept.id, timeout=90)
        assert recovered[0].mode == agent.recovery_mode
        forgotten = await rec.wait(
            lambda e: isinstance(e, SessionForgotten) and e.session_id == agent.never_existed, timeout=90
        )
        assert forgotten[0].via == agent.unknown_via
        await client.wait_ready(timeout=bound(30))
        assert set(client.sessions) == {kept.id}
        assert [e.session_id for e in rec.of(SessionForgotten)] == [agent.never_existed]
    reread = SQLiteSessionStore(path)
    try:
        assert [r.session_id for r in await reread.load_all()] == [kept.id]
    finally:
        await reread.close()
    return forgotten[0]


async def transient_error_keeps_live_session(agent: Agent) -> None:
    """After a crash, the first new agent process dies again during start-up (a transient failure, not an
    answer about the session): the client retries, and the live session is recovered, never forgotten."""
    crashes = {"left": 1}

    async def flaky() -> Transport:
        transport = await agent.factory()
        if crashes["left"] and spawned["n"] >= 1:
            crashes["left"] -= 1
            kill_tree(transport.pid)  # type: ignore[attr-defined]
        spawned["n"] += 1
        return transport

    spawned = {"n": 0}
    client = ReconnectingClient(flaky, **{**SLOW, **agent.options})
    async with started(client) as rec:
        await client.wait_ready(timeout=bound(60))
        session = await agent.persisted_session(client)
        kill_tree(agent_pid(client))
        recovered = await rec.wait(
            lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=120
        )
        assert recovered[0].mode == agent.recovery_mode
        assert crashes["left"] == 0 and spawned["n"] >= 3  # the first respawn died, a later one served
        assert len(rec.of(ConnectionDropped)) >= 1
        assert not rec.of(SessionForgotten)
        assert session.link is SessionLink.ATTACHED


def processes_with_home(home: Path) -> list[int]:
    """The pids of live processes whose environment has ``HOME=<home>`` (a per-test folder, so only ours)."""
    needle = f"HOME={home}".encode() + b"\0"
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if needle in environ.read_bytes():
                found.append(int(environ.parent.name))
    return found


def end_processes_with_home(home: Path) -> list[int]:
    """SIGKILL what :func:`processes_with_home` finds (a test's leftovers); returns their pids."""
    pids = processes_with_home(home)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids

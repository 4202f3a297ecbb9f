"""The recovery scenarios every third-party agent goes through (issue 24, item 1), written once.

Each ``test_<agent>.py`` hands these an :class:`Agent`: a transport factory for the agent's process (or
server), the working directory, and the agent's own answers (whether a prompt works offline or which error it
gets, which id it never had, how it recovers and replays). The scenarios assert what our client must do; the
per-agent modules assert the dialect.

The npm agents here persist a session only once a prompt was tried (the prompt itself fails offline), so
:meth:`Agent.persisted_session` prompts once before a session is expected to outlive its process; the Python
agents (kimi-cli, pydantic-acp) answer that prompt with a real offline turn, and take another one once the
session is recovered (:meth:`Agent.after_recovery`).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from acp_client import (
    ACPClient,
    ACPError,
    ConnectionDropped,
    ReconnectingClient,
    Session,
    SessionForgotten,
    SessionLink,
    SessionRecovered,
    SessionRecoveryFailed,
    SQLiteSessionStore,
    TurnFailed,
)
from acp_client.sessions import SessionRecord
from acp_client.testing import EventRecorder
from acp_client.transports import Transport
from acp_client.transports.stdio import StdioTransport
from tests.conftest import bound, eventually, recorder
from tests.interop._fixtures import slow_options
from tests.interop._trap import Trap

#: Bounds for a cold Node agent on a loaded 2-core machine (a qwen or claude start is 1-3 s here).
SLOW: dict[str, Any] = slow_options(replay_silence=30, list_check=120, backoff_cap=0.5)
#: What :meth:`Agent.persisted_session` prompts.
PROMPT = "hello from acp-client"


@dataclass
class Agent:
    """How to reach one agent, and how it answers."""

    factory: Callable[[], Awaitable[Transport]]
    cwd: Path
    #: the error code its offline prompt gets (the prompt fails, but the session is then on disk); ``None``:
    #: it answers prompts offline (a turn ends ``end_turn``)
    prompt_error: int | None
    #: a session id in its format that it never had
    never_existed: str
    #: what recovery of a live session used on a new process (``"resume"`` or ``"load"``)
    recovery_mode: str
    #: ``SessionForgotten.via`` for :attr:`never_existed` (or the session :attr:`lose` took)
    unknown_via: str
    #: ``SessionForgotten.reason`` for it
    unknown_reason: str = "unknown"
    #: ``SessionRecovered.replayed`` wherever it recovers a session (``None``: not checked); when ``True``
    #: and it answers prompts, the recovered transcript holds the prompt it had before
    replays: bool | None = None
    #: makes the agent lose one of its sessions (its files gone); when set, the unknown session of
    #: :func:`unknown_forgotten_once` is one the agent lost, not an id it never had
    lose: Callable[[str], None] | None = None
    #: the recovery requests a :class:`~tests.interop._trap.Trap` may meet first (the one the client tries
    #: first for this agent)
    trap_springs_on: tuple[str, ...] = ("session/resume", "session/load")
    #: ``True`` once the agent's own files hold what a load replays for this session id (``None``: listed
    #: is enough). kimi lists a session by one file (``context.jsonl``) and replays it from another
    #: (``wire.jsonl``), written later: killed in between, a new process replays nothing
    written: Callable[[str], bool] | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def client(self, **extra: Any) -> ReconnectingClient:
        return ReconnectingClient(self.factory, **{**SLOW, **self.options, **extra})

    async def persisted_session(self, client: ReconnectingClient) -> Session:
        """A new session, prompted once so that the agent writes it down."""
        session = await client.new_session(str(self.cwd), timeout=bound(60))
        try:
            result = await session.prompt(PROMPT, timeout=bound(60))
        except TurnFailed as failed:  # offline, v2: the turn ends idle with stopReason "error"
            assert self.prompt_error is not None, failed
            assert failed.message_id is None or isinstance(failed.message_id, str)
        except ACPError as refused:  # offline, v1: no model answers, the request fails
            assert refused.code == self.prompt_error, refused
        else:  # an offline model ends the turn normally
            assert self.prompt_error is None and result.stop_reason == "end_turn", result
        # the agent writes its transcript after the turn; once session/list names it, it is on disk
        assert client.current is not None
        await wait_listed(client.current, session.id, str(self.cwd))
        if self.written is not None:
            await wait_written(self.written, session.id)
        return session

    def check_recovered(self, event: SessionRecovered) -> None:
        """The recovery went the way this agent recovers (mode, and replay where known)."""
        assert event.mode == self.recovery_mode, event
        if self.replays is not None:
            assert event.replayed == self.replays, event

    async def after_recovery(self, session: Session) -> None:
        """A recovered session holds what it had and takes another turn (when the agent answers offline)."""
        if self.prompt_error is not None:
            return
        if self.replays:
            assert PROMPT in session.transcript.text()
        result = await session.prompt("after the recovery", timeout=bound(60))
        assert result.stop_reason == "end_turn", result


async def wait_listed(client: ACPClient, session_id: str, cwd: str) -> None:
    """Until ``session/list`` (with ``cwd``) names ``session_id``; bounded."""

    async def listed() -> bool:
        # the raw request: qwen serve answers session/list without advertising it
        answer = await client.request("session/list", {"cwd": cwd}, timeout=bound(30))
        return session_id in [s.get("sessionId") for s in answer.get("sessions", [])]

    # polled: the agent lists what its own files hold, and offers no event when it writes them
    await eventually(listed, bound(30), f"session/list names {session_id}", every=0.1)


async def wait_written(written: Callable[[str], bool], session_id: str) -> None:
    """Until ``written(session_id)``; bounded."""

    async def done() -> bool:
        return written(session_id)

    await eventually(done, bound(30), f"the agent's files hold {session_id}", every=0.1)


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
        assert "exited" in (dropped[0].reason or "")
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=90)
        agent.check_recovered(recovered[0])
        assert recovered[0].path == "ladder"  # stdio has no stream of its own to resume
        await client.wait_ready(timeout=bound(30))
        assert agent_pid(client) != first
        assert session.link is SessionLink.ATTACHED and session.id in client.sessions
        await agent.after_recovery(session)
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
        agent.check_recovered(recovered[0])
        session = client.sessions[created.id]
        assert session.link is SessionLink.ATTACHED
        assert session.record.cwd == str(agent.cwd)
        await agent.after_recovery(session)
        assert not rec.of(SessionForgotten)
        return recovered[0]


async def unknown_forgotten_once(agent: Agent, path: Path) -> SessionForgotten:
    """A stored session the agent does not have is forgotten exactly once, with a reason, and the agent's
    own session next to it is recovered; the store keeps only that one.

    The stranger is an id the agent never had, seeded into the store of a restarted client; or, for an agent
    with :attr:`Agent.lose`, a session of its own that it lost before it crashed (the client learns of that
    only by recovering the session within the same process)."""
    if agent.lose is None:
        async with agent.client(store=SQLiteSessionStore(path)) as first:
            kept = await agent.persisted_session(first)
        stranger = agent.never_existed
        seed = SQLiteSessionStore(path)
        await seed.save(SessionRecord(stranger, str(agent.cwd), protocol_version=1))
        await seed.close()
    client = agent.client(store=SQLiteSessionStore(path))
    async with started(client) as rec:
        if agent.lose is not None:
            await client.wait_ready(timeout=bound(60))
            kept = await agent.persisted_session(client)
            stranger = (await agent.persisted_session(client)).id
            agent.lose(stranger)
            kill_tree(agent_pid(client))
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == kept.id, timeout=90)
        agent.check_recovered(recovered[0])
        forgotten = await rec.wait(lambda e: isinstance(e, SessionForgotten) and e.session_id == stranger, timeout=90)
        assert (forgotten[0].reason, forgotten[0].via) == (agent.unknown_reason, agent.unknown_via)
        await client.wait_ready(timeout=bound(30))
        assert set(client.sessions) == {kept.id}
        assert [e.session_id for e in rec.of(SessionForgotten)] == [stranger]
        assert not [e for e in rec.of(SessionRecovered) if e.session_id == stranger]
    reread = SQLiteSessionStore(path)
    try:
        assert [r.session_id for r in await reread.load_all()] == [kept.id]
    finally:
        await reread.close()
    return forgotten[0]


async def transient_error_keeps_live_session(agent: Agent, trap: Trap | None = None) -> None:
    """After a crash, recovery meets a transient failure, not an answer about the session: the client
    retries, and the live session is recovered, never forgotten.

    Without ``trap`` the failure is the first new agent process dying during start-up. With one, it is the
    first recovery request of the session (:mod:`tests.interop._trap`): the agent dies under it (``"kill"``:
    the recovering connection drops too, a third process recovers the session), or it is answered
    ``-32603`` (``"error"``: the attempt fails and is retried)."""
    crashes = {"left": 0 if trap else 1}
    spawned = {"n": 0}

    async def flaky() -> Transport:
        transport = await agent.factory()
        if crashes["left"] and spawned["n"] >= 1:
            crashes["left"] -= 1
            kill_tree(transport.pid)  # type: ignore[attr-defined]
        spawned["n"] += 1
        if trap is not None:
            assert isinstance(transport, StdioTransport)
            return trap.wrap(transport)
        return transport

    client = ReconnectingClient(flaky, **{**SLOW, **agent.options})
    async with started(client) as rec:
        await client.wait_ready(timeout=bound(60))
        session = await agent.persisted_session(client)
        if trap is not None:
            trap.arm(session.id)
        kill_tree(agent_pid(client))
        if trap is not None and trap.kind == "kill":
            await rec.wait(lambda e: isinstance(e, ConnectionDropped) and e.generation == 2, timeout=90)
        elif trap is not None:
            outcome = await rec.wait(
                lambda e: isinstance(e, (SessionRecoveryFailed, SessionForgotten)) and e.session_id == session.id,
                timeout=90,
            )
            assert isinstance(outcome[0], SessionRecoveryFailed), outcome[0]
        recovered = await rec.wait(
            lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=120
        )
        agent.check_recovered(recovered[0])
        # the first respawn died (at start-up, or under the "kill" trap) and a later one served; an "error"
        # trap fails one attempt on a process that stays up and serves the retry
        least = 2 if trap is not None and trap.kind == "error" else 3
        assert crashes["left"] == 0 and spawned["n"] >= least
        assert len(rec.of(ConnectionDropped)) >= 1
        assert not rec.of(SessionForgotten)
        assert session.link is SessionLink.ATTACHED
        if trap is not None:
            assert len(trap.sprung) == 1 and trap.sprung[0] in agent.trap_springs_on, trap.sprung


class RecoveryScenarios:
    """The scenarios above as tests. A ``test_<agent>.py`` subclasses this (``class TestRecovery``) and gives
    it an ``agent`` fixture (an :class:`Agent`); it overrides ``trap`` to meet the transient fault inside a
    recovery request (:mod:`tests.interop._trap`) instead of at a respawn."""

    @pytest.fixture
    def trap(self) -> Trap | None:
        return None

    async def test_sigkill_mid_session_then_recovery(self, agent: Agent) -> None:
        await sigkill_mid_session(agent)

    async def test_restart_of_our_process_with_the_sqlite_store(self, agent: Agent, tmp_path: Path) -> None:
        await restart_with_sqlite_store(agent, tmp_path / "sessions.db")

    async def test_unknown_session_forgotten_once_with_the_reason(self, agent: Agent, tmp_path: Path) -> None:
        await unknown_forgotten_once(agent, tmp_path / "sessions.db")

    async def test_live_session_survives_a_transient_failure(self, agent: Agent, trap: Trap | None) -> None:
        await transient_error_keeps_live_session(agent, trap)


class TrappedRecoveryScenarios(RecoveryScenarios):
    """:class:`RecoveryScenarios` with the transient fault inside the first recovery request, once as the
    agent dying under it and once as a ``-32603`` answer."""

    @pytest.fixture(params=["kill", "error"])
    def trap(self, request: pytest.FixtureRequest) -> Trap:
        return Trap(request.param)


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

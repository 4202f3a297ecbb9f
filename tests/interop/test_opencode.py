"""Our client against a real third-party agent: opencode (npm ``opencode-ai``), ``opencode acp`` over stdio.

The agent runs offline, in a temporary HOME, without credentials (see ``_opencode.py`` and the opencode section
of QUIRKS.md). It speaks v1, advertises ``loadSession`` and ``sessionCapabilities.list``/``resume`` but not
``status``, keeps its sessions in a SQLite file under HOME (so a new process can load them), and answers
``-32603`` "OpenCode service failure", not ``-32002``, for a session it does not know.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from acp_client import (
    ConnectionDropped,
    InternalError,
    ReconnectingClient,
    SessionForgotten,
    SessionLink,
    SessionRecovered,
    SQLiteSessionStore,
    Timeouts,
    connect,
)
from acp_client.sessions import SessionRecord
from acp_client.transports import Transport
from tests.conftest import bound, recorder
from tests.interop._fixtures import home, project, slow_options, v1_session
from tests.interop._opencode import offline_prefix, opencode_bin, spawn_opencode, spawn_opencode_offline

__all__ = ["home", "opencode_bin", "project"]  # fixtures, imported so that pytest finds them here

#: Each test starts opencode one to three times (about 3 s each here) and creates sessions (about 2 s).
pytestmark = pytest.mark.timeout(bound(180))

#: Generous bounds: a cold opencode start answers initialize after 3 s on a loaded 2-core machine.
SLOW: dict[str, Any] = slow_options(replay_silence=60, list_check=240, backoff_cap=0.2)

#: A session id in opencode's format that no opencode HOME ever held.
NEVER_EXISTED = "ses_0000000000000000acpclient"


@pytest.fixture
def opencode(opencode_bin: Path, home: Path, project: Path) -> Callable[[], Awaitable[Transport]]:
    """A transport factory: every call spawns a new ``opencode acp`` process on the same HOME."""

    async def spawn() -> Transport:
        return await spawn_opencode(opencode_bin, home, project)

    return spawn


async def test_opencode_speaks_v1_lists_sessions_and_answers_32603_for_an_unknown_one(
    opencode: Callable[[], Awaitable[Transport]], project: Path
) -> None:
    async with connect(opencode, timeouts=Timeouts(initialize=bound(60))) as client:
        session = await v1_session(client, project, timeout=bound(60))
        assert session.id.startswith("ses_")
        listed = [info.session_id async for info in client.list_sessions(timeout=bound(30))]
        assert session.id in listed
        with pytest.raises(InternalError) as refused:  # not SessionNotFound: opencode's own dialect
            await client.load_session(NEVER_EXISTED, str(project), timeout=bound(30))
        assert refused.value.code == -32603


async def test_reconnecting_client_recovers_a_session_after_the_agent_is_killed(
    opencode: Callable[[], Awaitable[Transport]], project: Path
) -> None:
    client = ReconnectingClient(opencode, **SLOW)
    rec = recorder(client)
    await client.start()
    try:
        await client.wait_ready(timeout=bound(60))
        session = await client.new_session(str(project), timeout=bound(60))
        transport = client.current.connection.transport  # type: ignore[union-attr]
        first_pid = transport.pid  # type: ignore[attr-defined]
        os.kill(first_pid, signal.SIGKILL)
        dropped = await rec.wait(lambda e: isinstance(e, ConnectionDropped), timeout=30)
        assert "exited" in (dropped[0].reason or "")
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=90)
        # no session/status: v1 restores with session/load, which opencode serves from its SQLite file
        assert recovered[0].mode == "load" and recovered[0].replayed
        await client.wait_ready(timeout=bound(30))
        assert client.current.connection.transport.pid != first_pid  # type: ignore[union-attr]
        assert session.link is SessionLink.ATTACHED and session.id in client.sessions
        assert not rec.of(SessionForgotten)
    finally:
        await rec.close()
        await client.aclose()


async def test_reconnecting_client_recovers_a_session_in_a_new_process_from_the_sqlite_store(
    opencode: Callable[[], Awaitable[Transport]], project: Path, tmp_path: Path
) -> None:
    path = tmp_path / "sessions.db"
    async with ReconnectingClient(opencode, store=SQLiteSessionStore(path), **SLOW) as first:
        created = await first.new_session(str(project), timeout=bound(60))
    # the first agent process exited with its client; a new client and a new process pick the session up
    client = ReconnectingClient(opencode, store=SQLiteSessionStore(path), **SLOW)
    rec = recorder(client)
    await client.start()
    try:
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == created.id, timeout=90)
        assert recovered[0].mode == "load"
        session = client.sessions[created.id]
        assert session.link is SessionLink.ATTACHED
        assert session.record.cwd == str(project)
    finally:
        await rec.close()
        await client.aclose()


async def test_reconnecting_client_forgets_a_session_the_agent_never_had_and_keeps_its_own(
    opencode: Callable[[], Awaitable[Transport]], project: Path, tmp_path: Path
) -> None:
    path = tmp_path / "sessions.db"
    async with ReconnectingClient(opencode, store=SQLiteSessionStore(path), **SLOW) as first:
        kept = await first.new_session(str(project), timeout=bound(60))
    seed = SQLiteSessionStore(path)
    await seed.save(SessionRecord(NEVER_EXISTED, str(project), protocol_version=1))
    await seed.close()

    client = ReconnectingClient(opencode, store=SQLiteSessionStore(path), **SLOW)
    rec = recorder(client)
    await client.start()
    try:
        # opencode answers -32603 to the load of the stranger. That is not an unknown-session code (default
        # {-32002}), so the client asks session/list (advertised), and forgets only because no page names it
        forgotten = await rec.wait(
            lambda e: isinstance(e, SessionForgotten) and e.session_id == NEVER_EXISTED, timeout=90
        )
        assert forgotten[0].reason == "not_listed"
        recovered = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == kept.id, timeout=90)
        assert recovered[0].mode == "load"
        assert set(client.sessions) == {kept.id}
        assert [e.session_id for e in rec.of(SessionForgotten)] == [NEVER_EXISTED]
    finally:
        await rec.close()
        await client.aclose()
    reread = SQLiteSessionStore(path)
    try:
        assert [r.session_id for r in await reread.load_all()] == [kept.id]
    finally:
        await reread.close()


async def test_agent_process_exits_by_itself_when_the_client_closes(
    opencode: Callable[[], Awaitable[Transport]],
) -> None:
    async with connect(opencode, timeouts=Timeouts(initialize=bound(60))) as client:
        transport = client.connection.transport
        assert transport.pid is not None  # type: ignore[attr-defined]
    # stdin EOF: opencode exits on its own with status 0 (no SIGTERM or SIGKILL was needed)
    assert transport.returncode == 0  # type: ignore[attr-defined]


async def test_opencode_needs_no_network_once_installed(opencode_bin: Path, home: Path, project: Path) -> None:
    prefix = offline_prefix()
    if prefix is None:
        pytest.skip("cannot make a network namespace here (unshare -n needs root or user namespaces)")

    async def spawn() -> Transport:
        return await spawn_opencode_offline(prefix, opencode_bin, home, project)

    async with connect(spawn, timeouts=Timeouts(initialize=bound(60))) as client:
        assert client.protocol_version == 1
        session = await client.new_session(str(project), timeout=bound(60))
        listed = [info.session_id async for info in client.list_sessions(timeout=bound(30))]
        assert listed == [session.id]
        with pytest.raises(InternalError) as refused:
            await client.load_session(NEVER_EXISTED, str(project), timeout=bound(30))
        # "session": the lookup failed; "directory" would mean opencode could not reach its own loopback server
        assert refused.value.data == {"service": "session"}

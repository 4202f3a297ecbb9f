"""Our client against ``qwen serve`` (npm ``@qwen-code/qwen-code``), a third-party ACP server over Streamable
HTTP and WebSocket at ``/acp`` (issue 24, item 6).

What this server does that matters to recovery (QUIRKS.md, qwen section, has the wire text):

- ``initialize`` over HTTP and WebSocket advertises ``loadSession`` but **no** ``sessionCapabilities``,
  although ``session/list``/``session/resume`` work. The client acts on what was advertised: recovery is
  ``session/load`` (enough to restore a session), and the unknown-session decision rests on the load's answer,
  ``-32602 'No session with id "<id>"'``. See the decision in QUIRKS.md.
- Session streams number their SSE events (``id: <n>``) and honour ``Last-Event-ID`` for ten seconds after
  the stream closed; the connection stream carries JSON-RPC responses without ids.
- Ten seconds after its last client detached it closes the session (``last_client_detached``) and reaps the
  connection; a session that had a prompt is on disk and loads back.
- ``Host`` must be the address it listens on (DNS-rebinding guard), so through a proxy the client sends it.

The server runs in a session of its own and is killed as a group. It cannot run in a loopback-only network
namespace with the client outside it; its settings (``_qwen.SETTINGS``) turn telemetry and update checks off,
and the same binary is checked offline as ``qwen --acp`` in test_qwen.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from acp_client import (
    ClientState,
    ConnectionDropped,
    InvalidParams,
    ReconnectingClient,
    SessionForgotten,
    SessionLink,
    SessionRecovered,
    SessionRecoveryFailed,
    SQLiteSessionStore,
    StateChanged,
    Timeouts,
    TransportOptions,
    connect,
)
from acp_client.sessions import SessionRecord
from acp_client.testing import FaultProxy
from tests.conftest import bound
from tests.interop import _scenarios as scenario
from tests.interop._fixtures import project
from tests.interop._qwen import QwenServe, home, qwen_bin, qwen_serve

__all__ = ["home", "project", "qwen_bin"]

pytestmark = pytest.mark.timeout(bound(240))

NEVER_EXISTED = "00000000-0000-4000-8000-000000acc0de"


@pytest.fixture
async def server(qwen_bin: Path, home: Path, project: Path, tmp_path: Path) -> AsyncIterator[QwenServe]:
    async with qwen_serve(qwen_bin, home, project, tmp_path / "serve.stderr") as running:
        yield running


def url_of(server: QwenServe, kind: str) -> str:
    return server.http_url if kind == "http" else server.ws_url


def agent(target: Any, project: Path, **options: Any) -> scenario.Agent:
    return scenario.Agent(
        target,
        project,
        prompt_error=-32603,
        never_existed=NEVER_EXISTED,
        recovery_mode="load",
        unknown_via="session/load",
        options=options,
    )


@pytest.mark.parametrize("kind", ["http", "ws"])
async def test_lifecycle_and_dialect(server: QwenServe, project: Path, kind: str) -> None:
    async with connect(url_of(server, kind), timeouts=Timeouts(initialize=bound(60))) as client:
        assert client.protocol_version == 1
        assert client.supports("load")
        # list, resume and close work, but are not advertised: no sessionCapabilities at all
        assert "sessionCapabilities" not in client.agent_capabilities
        assert not client.supports("list") and not client.supports("resume") and not client.supports("status")
        session = await client.new_session(str(project), timeout=bound(60))
        with pytest.raises(InvalidParams) as unknown:
            await client.load_session(NEVER_EXISTED, str(project), timeout=bound(30))
        assert unknown.value.message == f'No session with id "{NEVER_EXISTED}"'
        listed = await client.request("session/list", {"cwd": str(project)}, timeout=bound(30))
        assert isinstance(listed["sessions"], list)  # answered, though not advertised
        assert session.id


@pytest.mark.parametrize(
    "kind",
    [
        "http",
        "ws",
    ],
)
async def test_status_less_recovery_across_a_server_restart(server: QwenServe, project: Path, kind: str) -> None:
    # no session/status anywhere, and no resume advertised: the ladder goes straight to session/load
    client = agent(url_of(server, kind), project).client()
    async with scenario.started(client) as rec:
        await client.wait_ready(timeout=bound(60))
        session = await agent(None, project).persisted_session(client)
        await server.restart()
        # a client that gave up (FAILED) ends the wait at once instead of at its bound
        ended = await rec.wait(
            lambda e: (
                (isinstance(e, SessionRecovered) and e.session_id == session.id)
                or (isinstance(e, StateChanged) and e.new is ClientState.FAILED)
            ),
            timeout=90,
        )
        assert not [e for e in ended if isinstance(e, StateChanged)], ended
        recovered = [e for e in ended if isinstance(e, SessionRecovered)]
        assert recovered[0].mode == "load" and recovered[0].path == "ladder"
        if kind == "http":  # the streams went with the server: nothing to resume from
            # whichever stream notices the server's end first reports it: the connection stream (no event ids to
            # resume from), or the session stream, whose reopen with Last-Event-ID found the server gone
            resumption = recovered[0].stream_resumption or ""
            assert resumption.startswith(
                (
                    "not resumed: the connection stream",
                    f"not resumed: the session {session.id} stream reopening it failed",
                )
            ), resumption
        else:
            assert recovered[0].stream_resumption is None  # WebSocket has no stream resumption
        assert session.link is SessionLink.ATTACHED
        assert not rec.of(SessionForgotten)


async def test_session_stream_resumed_with_last_event_id(server: QwenServe, project: Path) -> None:
    # only the session stream's TCP link is cut: the client reopens it with Last-Event-ID and qwen replays
    # from its ring; no new connection, no load
    host = TransportOptions(headers={"Host": f"127.0.0.1:{server.port}"})
    async with FaultProxy("127.0.0.1", server.port) as proxy:
        client = agent(proxy.url(scheme="http"), project).client(transport_options=host)
        async with scenario.started(client) as rec:
            await client.wait_ready(timeout=bound(60))
            before = {id(link) for link in proxy.links}
            session = await agent(None, project).persisted_session(client)  # numbered events arrive
            transport = client.current.connection.transport  # type: ignore[union-attr]
            assert transport.stats.streams_opened >= 2  # type: ignore[attr-defined]
            for link in proxy.links:
                if id(link) not in before:
                    await link.cut()
            resumed = await rec.wait(
                lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=60
            )
            assert resumed[0].path == "stream_resumed"
            assert resumed[0].stream_resumption == "resumed with Last-Event-ID"
            assert transport.stats.streams_resumed >= 1  # type: ignore[attr-defined]
            assert client.generation == 1 and not rec.of(ConnectionDropped)


async def test_idle_drop_last_client_detached_loses_no_session(
    server: QwenServe, project: Path, tmp_path: Path
) -> None:
    # the link stays down past qwen's ten-second grace: it closes the session (last_client_detached) and
    # reaps the connection; the client comes back on a new connection and loads the session from disk
    host = TransportOptions(headers={"Host": f"127.0.0.1:{server.port}"})
    async with FaultProxy("127.0.0.1", server.port) as proxy:
        client = agent(proxy.url(scheme="http"), project).client(transport_options=host)
        async with scenario.started(client) as rec:
            await client.wait_ready(timeout=bound(60))
            session = await agent(None, project).persisted_session(client)
            proxy.set_listener("refuse")
            await proxy.cut_all()
            await wait_for_line(tmp_path / "serve.stderr", "reaping connection", timeout=bound(60))
            proxy.set_listener("accept")
            recovered = await rec.wait(
                lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=90
            )
            assert recovered[0].mode == "load"
            assert (recovered[0].stream_resumption or "").startswith("not resumed")
            assert session.link is SessionLink.ATTACHED and not rec.of(SessionForgotten)


async def test_unknown_session_forgotten_once_over_http(server: QwenServe, project: Path, tmp_path: Path) -> None:
    # no session/list advertised, so no not_listed check: the load's -32602 'No session with id' decides
    path = tmp_path / "sessions.db"
    async with ReconnectingClient(server.http_url, store=SQLiteSessionStore(path), **scenario.SLOW) as first:
        kept = await agent(None, project).persisted_session(first)
    seed = SQLiteSessionStore(path)
    await seed.save(SessionRecord(NEVER_EXISTED, str(project), protocol_version=1))
    await seed.close()
    client = ReconnectingClient(server.http_url, store=SQLiteSessionStore(path), **scenario.SLOW)
    async with scenario.started(client) as rec:
        # the first outcome for the stranger: forgotten, or failed-and-retried (which ends the wait early)
        first = await rec.wait(
            lambda e: isinstance(e, SessionForgotten | SessionRecoveryFailed) and e.session_id == NEVER_EXISTED,
            timeout=90,
        )
        forgotten = [e for e in first if isinstance(e, SessionForgotten)]
        assert forgotten, first
        assert (forgotten[0].reason, forgotten[0].via) == ("unknown", "session/load")
        await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == kept.id, timeout=90)
        assert set(client.sessions) == {kept.id}
        assert len(rec.of(SessionForgotten)) == 1


def _text_of(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


async def wait_for_line(path: Path, text: str, timeout: float) -> None:
    """Until the server's stderr file holds ``text`` (it has no other signal for a reaped connection)."""
    for _ in range(int(timeout / 0.1)):
        if text in await asyncio.to_thread(_text_of, path):
            return
        await asyncio.sleep(0.1)  # polling a file another process writes
    raise AssertionError(f"{path.name} never said {text!r}")

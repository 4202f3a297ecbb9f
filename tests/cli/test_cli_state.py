"""``acp-client sessions --store FILE`` and ``serve-reference --state-dir DIR``: a restarted agent process
restores the sessions of the previous one, and the reconnect manager reports them restored."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from acp_client import Backoff, ReconnectingClient, RecoveryPolicy, SessionRecord, SessionRecovered, SQLiteSessionStore
from acp_client.cli import main
from tests.conftest import bound

ROOT = Path(__file__).resolve().parents[2]


async def test_sessions_lists_a_store_even_while_a_client_holds_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sessions.db"
    store = SQLiteSessionStore(path)
    try:
        await store.save(SessionRecord("sess_one", "/work/a", protocol_version=2, last_state="idle", title="first"))
        await store.save(SessionRecord("sess_two", "/work/b", protocol_version=1))
        code = await asyncio.to_thread(main, ["sessions", "--store", str(path)])  # the store is locked meanwhile
    finally:
        await store.close()
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0].split() == ["session", "protocol", "state", "created", "cwd", "title"]
    assert out[1].split()[:3] == ["sess_one", "v2", "idle"] and out[1].endswith("/work/a  first")
    assert out[2].split()[:3] == ["sess_two", "v1", "-"] and out[2].endswith("/work/b")


def test_sessions_of_a_missing_store_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.db"
    assert main(["sessions", "--store", str(missing)]) == 2
    assert f"no session store at {missing}" in capsys.readouterr().err
    assert not missing.exists()  # listing never creates a store


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def serve_reference(port: int, state_dir: Path) -> AsyncIterator[str]:
    """``acp-client serve-reference`` in a process of its own; yields its URL; SIGTERM and reaped after."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    argv = ["-m", "acp_client.cli", "serve-reference", "--port", str(port), "--state-dir", str(state_dir)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *argv, stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL, env=env
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(bound(20)):
            url = (await proc.stdout.readline()).decode().strip()
        assert url == f"ws://127.0.0.1:{port}/acp", url
        yield url
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(bound(15)):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise


async def test_a_restarted_agent_process_restores_the_sessions(tmp_path: Path) -> None:
    state = tmp_path / "agent-state"
    port = _free_port()
    async with serve_reference(port, state) as url:
        client = ReconnectingClient(url, backoff=Backoff(base=0.05, cap=0.5), policy=RecoveryPolicy(start_jitter=0.0))
        await client.start()
        events = client.events()
        await client.wait_ready(timeout=bound(10))
        session = await client.new_session("/work")
        assert (await session.prompt("echo: remember me", timeout=bound(10))).stop_reason == "end_turn"
    # the first process is gone (SIGTERM); the client is reconnecting with backoff
    assert (state / "sessions.json").is_file()
    try:
        async with serve_reference(port, state):
            async with asyncio.timeout(bound(30)):
                async for event in events:
                    if isinstance(event, SessionRecovered) and event.session_id == session.id:
                        break
            assert event.status == "inactive"  # a new process: known from the state dir, not in memory
            assert event.outcome == "restored" and event.replayed
            assert [m.text for m in session.transcript.messages] == ["echo: remember me", "remember me"]
            assert (await session.prompt("echo: still here", timeout=bound(10))).stop_reason == "end_turn"
    finally:
        await client.aclose()

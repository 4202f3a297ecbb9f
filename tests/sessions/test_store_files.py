"""Files that may hold secrets (MCP server env and headers in a session record, a bridge log) are created for
their owner only, and a symbolic link planted where a lock or log file goes is refused (issue 18, item 2)."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from acp_client import SQLiteSessionStore
from acp_client.exceptions import StoreError
from acp_client.sessions import SessionRecord
from tests.conftest import bound

SECRET_SERVER = {"name": "gh", "command": "gh-mcp", "args": [], "env": [{"name": "GITHUB_TOKEN", "value": "ghp_x"}]}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_store_database_wal_shm_lock_and_new_directories_are_private(tmp_path: Path) -> None:
    previous = os.umask(0o022)  # the usual umask, under which every file was -rw-r--r--
    path = tmp_path / "new" / "deeper" / "sessions.db"
    store = SQLiteSessionStore(path)
    try:
        await store.save(SessionRecord(session_id="s1", cwd="/w", mcp_servers=[SECRET_SERVER]))
        files = [path, path.with_name("sessions.db-wal"), path.with_name("sessions.db-shm"), store.lock_path]
        for file in files:
            assert file.exists(), file
            assert mode(file) == 0o600, (file, oct(mode(file)))
        assert mode(tmp_path / "new") == 0o700 and mode(tmp_path / "new" / "deeper") == 0o700
    finally:
        os.umask(previous)
        await store.close()


async def test_a_symlinked_lock_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep me")
    path = tmp_path / "sessions.db"
    (tmp_path / "sessions.db.lock").symlink_to(target)
    store = SQLiteSessionStore(path)
    with pytest.raises(StoreError, match="symbolic link"):
        await store.save(SessionRecord(session_id="s1", cwd="/w"))
    await store.close()
    assert target.read_text() == "keep me"


def bridge_log(log_file: Path) -> subprocess.CompletedProcess[str]:
    """The bridge with a log file and a closed stdin: it logs, finds no editor, and exits."""
    argv = [sys.executable, "-m", "acp_client.cli", "bridge", "ws://127.0.0.1:9/acp", "--log-file", str(log_file)]
    return subprocess.run(argv, input="", capture_output=True, text=True, timeout=bound(30), check=False)


async def test_the_bridge_log_file_is_private_and_never_a_followed_link(tmp_path: Path) -> None:
    log_file = tmp_path / "bridge.log"
    await asyncio.to_thread(bridge_log, log_file)
    assert log_file.exists() and mode(log_file) == 0o600
    target = tmp_path / "target"
    target.write_text("")
    link = tmp_path / "link.log"
    link.symlink_to(target)
    result = await asyncio.to_thread(bridge_log, link)
    assert result.returncode == 2
    assert "--log-file" in result.stderr and "symbolic link" in result.stderr
    assert target.read_text() == ""

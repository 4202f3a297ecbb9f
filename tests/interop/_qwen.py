"""Qwen Code (npm ``@qwen-code/qwen-code``) for interop tests: ``qwen --acp`` over stdio and ``qwen serve``
over HTTP and WebSocket at ``/acp``, run offline with a dummy OpenAI key.

``python -m tests.interop._qwen`` installs it (see ``_npm.py``) and prints the binary, the time and size.
The HOME it runs in holds a ``settings.json`` that turns telemetry, usage statistics and update checks off
and selects the ``openai`` auth type with a made-up key and an unroutable loopback base URL: sessions can be
created, a prompt answers ``-32603`` "Connection error." (see the qwen section of QUIRKS.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from acp_client.transports.stdio import StdioTransport, spawn_stdio
from tests.conftest import bound
from tests.interop._npm import NpmPackage, base_env
from tests.interop._scenarios import end_processes_with_home

PACKAGE = NpmPackage("@qwen-code/qwen-code", "0.24.4", "qwen-code", "qwen")

#: ``~/.qwen/settings.json``: nothing leaves the machine, and an auth type is chosen so that sessions work.
SETTINGS = {
    "telemetry": {"enabled": False},
    "privacy": {"usageStatisticsEnabled": False},
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    "security": {
        "auth": {"selectedType": "openai", "apiKey": "acp-client-dummy-key", "baseUrl": "http://127.0.0.1:9/v1"}
    },
    "model": {"name": "acp-client-dummy-model"},
}
#: Bound on ``qwen serve`` printing that it listens.
SERVE_START = bound(60.0)
#: what ``qwen serve`` writes on stderr once ``/acp`` answers
ROUTES_READY = "/acp WebSocket transport enabled on /acp"


def prepare_home(home: Path) -> None:
    """Write the settings into ``home`` (an existing folder)."""
    (home / ".qwen").mkdir(exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(SETTINGS))


def agent_env(home: Path) -> dict[str, str]:
    """A private HOME (with :data:`SETTINGS`), no credentials of ours."""
    prepare_home(home)
    return {**base_env(home), "OPENAI_API_KEY": "acp-client-dummy-key"}


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """An empty private HOME for qwen; every process still running under it is ended after the test (``qwen``
    re-executes itself as a child that outlives its parent)."""
    path = tmp_path / "home"
    path.mkdir()
    yield path
    end_processes_with_home(path)


@pytest.fixture(scope="session")
def qwen_bin() -> Path:
    """The ``qwen`` launcher (installed on first use)."""
    return PACKAGE.fixture_value()


async def spawn_qwen(binary: Path, home: Path, cwd: Path, prefix: list[str] | None = None) -> StdioTransport:
    """``qwen --acp`` over stdio (it re-executes itself as a child that keeps the pipes); ``prefix`` (see
    :func:`tests.interop._opencode.offline_prefix`) runs it with no network but loopback."""
    argv = [*(prefix or []), str(binary), "--acp"]
    return await spawn_stdio(argv, env=agent_env(home), cwd=cwd, close_timeout=10.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class QwenServe:
    """``qwen serve`` on a loopback port, restartable on the same port and HOME (its sessions are files there)."""

    def __init__(self, binary: Path, home: Path, cwd: Path, stderr_path: Path) -> None:
        self.binary, self.home, self.cwd, self.stderr_path = binary, home, cwd, stderr_path
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0
        self._drainer: asyncio.Task[None] | None = None

    @property
    def http_url(self) -> str:
        return f"{self.base}/acp"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/acp"

    async def start(self) -> None:
        """Start and wait until its ``/acp`` routes exist: it listens about a second before that, and answers
        404 (HTTP) or 406 (WebSocket upgrade) meanwhile; it says so on stderr."""
        argv = [str(self.binary), "serve", "--port", str(self.port), "--hostname", "127.0.0.1"]
        with self.stderr_path.open("ab") as err:
            self.proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                env=agent_env(self.home),
                cwd=self.cwd,
                start_new_session=True,
            )
        assert self.proc.stdout is not None
        self._drainer = asyncio.get_running_loop().create_task(self._drain(self.proc.stdout))
        for _ in range(int(SERVE_START / 0.05)):
            if self.proc.returncode is not None:
                raise RuntimeError(f"qwen serve exited:\n{self.stderr_path.read_text()[-2000:]}")
            if self.stderr_path.read_text(errors="replace").count(ROUTES_READY) >= self.starts + 1:
                self.starts += 1
                return
            await asyncio.sleep(0.05)  # polling its stderr file: it has no other readiness signal
        raise RuntimeError(f"qwen serve did not open /acp within {SERVE_START} s")

    @staticmethod
    async def _drain(stream: asyncio.StreamReader) -> None:
        while await stream.read(65536):
            pass

    async def kill(self) -> None:
        """SIGKILL its whole process group (it runs in a session of its own)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        if self._drainer is not None:
            await self._drainer

    async def restart(self) -> None:
        await self.kill()
        await self.start()


@contextlib.asynccontextmanager
async def qwen_serve(binary: Path, home: Path, cwd: Path, stderr_path: Path) -> AsyncIterator[QwenServe]:
    server = QwenServe(binary, home, cwd, stderr_path)
    await server.start()
    try:
        yield server
    finally:
        await server.kill()


if __name__ == "__main__":
    sys.exit(PACKAGE.main())

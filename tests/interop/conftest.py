"""Fixtures that run the official-SDK agent (``official_agent.py``) for interop tests.

``official_ws_agent``
    async, ``str``: the ``ws://127.0.0.1:<port>/acp`` URL of the agent served by the SDK's ASGI app under uvicorn.
``official_ws_agent_server``
    async, :class:`OfficialAgentServer`: the handle behind that URL, for tests that stop, kill or restart it.
``start_official_ws_agent``
    async factory: ``await start_official_ws_agent(*agent_options)`` starts another one (own port and store).
``official_stdio_agent_command``
    ``list[str]``: the argv that spawns the same agent over stdio.

Why a subprocess and not uvicorn in the test's event loop: pytest runs tests under ``filterwarnings = error``,
and the SDK refuses ``session/resume``/``session/close`` by calling ``warnings.warn(UserWarning)`` inside the
request handler; under ``-W error`` that warning becomes an exception and the agent answers ``-32603`` instead
of the ``-32601`` real deployments send. A child process keeps the SDK under normal warning filters, keeps its
tasks, threads and log output out of ours, and can be killed to simulate a crash.

The listening socket is created here (``127.0.0.1``, port 0) and handed to the child (``pass_fds``), so the
port is known before the child starts and stays the same across :meth:`OfficialAgentServer.restart`. The child
prints ``READY <port>`` from uvicorn's startup hook (uvicorn has no started event to await), and exits when
its stdin is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import IO

import pytest

from tests.conftest import bound

AGENT_SCRIPT = Path(__file__).with_name("official_agent.py")
#: Bound on starting the agent (importing the SDK and uvicorn in a fresh interpreter) and on stopping it.
START_TIMEOUT = bound(30.0)
STOP_TIMEOUT = bound(10.0)
READY_PREFIX = b"READY "


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.interop)


class AgentStartError(RuntimeError):
    """The official agent process did not come up."""


class OfficialAgentServer:
    """The official-SDK agent served over WebSocket by uvicorn in a child process.

    ``url`` and ``port`` stay valid for the server's whole life: the parent owns the listening socket, so
    while the child is stopped new connections wait in the backlog (they are neither refused nor accepted)
    until :meth:`start` runs again. Sessions live in ``store`` (a JSON file) and survive :meth:`restart`.
    """

    def __init__(self, store: Path, stderr_path: Path, extra_args: Sequence[str] = ()) -> None:
        self.store = store
        self.stderr_path = stderr_path
        self.extra_args = list(extra_args)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port: int = self._sock.getsockname()[1]
        self.url = f"ws://127.0.0.1:{self.port}/acp"
        self._proc: asyncio.subprocess.Process | None = None
        self._stderr: IO[bytes] | None = None
        self.starts = 0

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def stderr_text(self) -> str:
        """Everything the agent processes wrote on stderr so far (SDK warnings, tracebacks)."""
        return self.stderr_path.read_text(encoding="utf-8", errors="replace") if self.stderr_path.exists() else ""

    async def start(self) -> None:
        if self.running:
            raise RuntimeError("the agent is already running")
        self._stderr = self.stderr_path.open("ab")
        fd = self._sock.fileno()
        options = ["--ws-fd", str(fd), "--exit-on-stdin-eof", "--store", str(self.store), *self.extra_args]
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(AGENT_SCRIPT),
            *options,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._stderr,
            pass_fds=(fd,),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.starts += 1
        assert self._proc.stdout is not None
        try:
            async with asyncio.timeout(START_TIMEOUT):
                line = await self._proc.stdout.readline()
        except TimeoutError:
            await self._reap(kill=True)
            raise AgentStartError(f"the agent did not start within {START_TIMEOUT} s:\n{self.stderr_text()}") from None
        if not line.startswith(READY_PREFIX) or int(line[len(READY_PREFIX) :]) != self.port:
            await self._reap(kill=True)
            raise AgentStartError(f"the agent did not start ({line!r}):\n{self.stderr_text()}")

    async def stop(self) -> int | None:
        """Graceful stop: close the child's stdin; uvicorn closes open WebSockets and exits. Returns the exit code."""
        return await self._reap(kill=False)

    async def kill(self) -> int | None:
        """Crash: SIGKILL, so open WebSockets die without a close frame (the client sees 1006)."""
        return await self._reap(kill=True)

    async def restart(self, *, kill: bool = False) -> None:
        await self._reap(kill=kill)
        await self.start()

    async def aclose(self) -> None:
        try:
            await self._reap(kill=False)
        finally:
            self._sock.close()

    async def _reap(self, *, kill: bool) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        try:
            if kill and proc.returncode is None:
                proc.kill()
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                async with asyncio.timeout(STOP_TIMEOUT):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()
            if proc.stdout is not None:
                await proc.stdout.read()  # EOF: lets asyncio close the pipe transport now
            if proc.stdin is not None:
                with contextlib.suppress(ConnectionError):
                    await proc.stdin.wait_closed()
        finally:
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None
        return proc.returncode


@pytest.fixture
async def start_official_ws_agent(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[OfficialAgentServer]]]:
    """A factory: ``await start_official_ws_agent(*extra_args)`` starts one more agent (own port, own store).

    Every agent it started is stopped, and its port released, when the test ends. ``extra_args`` are
    ``official_agent.py`` options such as ``--echo-protocol-version`` or ``--advertise-status``.
    """
    servers: list[OfficialAgentServer] = []

    async def start(*extra_args: str) -> OfficialAgentServer:
        n = len(servers)
        server = OfficialAgentServer(tmp_path / f"ws-sessions-{n}.json", tmp_path / f"ws-agent-{n}.stderr", extra_args)
        servers.append(server)
        await server.start()
        return server

    try:
        yield start
    finally:
        errors: list[BaseException] = []
        for server in reversed(servers):
            try:
                await server.aclose()
            except BaseException as exc:  # stop the others anyway, then report
                errors.append(exc)
        if errors:
            raise errors[0]


@pytest.fixture
async def official_ws_agent_server(
    start_official_ws_agent: Callable[..., Awaitable[OfficialAgentServer]],
) -> OfficialAgentServer:
    """The official agent over WebSocket, as a handle (``url``, ``port``, ``stop``, ``kill``, ``restart``)."""
    return await start_official_ws_agent()


@pytest.fixture
async def official_ws_agent(official_ws_agent_server: OfficialAgentServer) -> str:
    """``ws://127.0.0.1:<port>/acp`` of the official agent served by the SDK's ASGI app under uvicorn."""
    return official_ws_agent_server.url


@pytest.fixture
def official_stdio_agent_command(tmp_path: Path) -> list[str]:
    """argv spawning the official agent over stdio. Every process spawned from it shares one session store
    (a JSON file), so a respawned agent can ``session/load`` earlier sessions. Append ``--unstable`` to let
    the SDK route ``session/resume``/``session/close`` (refused with -32601 otherwise)."""
    return [sys.executable, str(AGENT_SCRIPT), "--stdio", "--store", str(tmp_path / "stdio-sessions.json")]

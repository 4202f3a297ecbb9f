"""An agent that cannot start: `async with ReconnectingClient(...)` says so instead of waiting forever.

Real stdio processes: a program that does not exist, one that prints a fatal line and exits 3 before
answering `initialize`, and one that never answers. The verdict carries the exit code and the agent's last
stderr lines, on the raised error and on the FAILED event.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from acp_client import (
    Backoff,
    ClientState,
    CrashLoopBreaker,
    ReconnectFailed,
    ReconnectingClient,
    RecoveryPolicy,
    StateChanged,
    Timeouts,
    TransportOptions,
)
from tests.conftest import bound

FAST = {"backoff": Backoff(base=0.01, cap=0.02), "policy": RecoveryPolicy(start_jitter=0.0)}

DIES_AT_START = """
import sys
sys.stderr.write("starting up\\n")
sys.stderr.write("FATAL: model quota exhausted\\n")
sys.stderr.flush()
sys.exit(3)
"""

NEVER_ANSWERS = "import sys, time\nsys.stdin.readline()\ntime.sleep(60)\n"


async def _events_of(client: ReconnectingClient, into: list[StateChanged]) -> None:
    async for event in client.events():
        if isinstance(event, StateChanged):
            into.append(event)


async def test_a_missing_executable_is_fatal_at_once(tmp_path: Path) -> None:
    client = ReconnectingClient([str(tmp_path / "no-such-agent")], **FAST)  # type: ignore[arg-type]
    seen: list[StateChanged] = []
    watcher = asyncio.create_task(_events_of(client, seen))
    with pytest.raises(ReconnectFailed) as caught:
        await asyncio.wait_for(client.__aenter__(), bound(10))
    await asyncio.wait_for(watcher, bound(5))  # the iterator ends when the client closes
    assert caught.value.reason == "agent_not_found"
    assert "no-such-agent" in str(caught.value)
    attempts = [e for e in seen if e.new is ClientState.CONNECTING]
    assert len(attempts) == 1  # no retry: it cannot start
    (failed,) = [e for e in seen if e.new is ClientState.FAILED]
    assert failed.reason == "agent_not_found" and failed.error and "no-such-agent" in failed.error
    assert client.state is ClientState.CLOSED


async def test_an_agent_that_dies_before_initialize_trips_the_breaker_with_its_exit_code_and_stderr() -> None:
    breaker = CrashLoopBreaker(threshold=3)
    client = ReconnectingClient([sys.executable, "-c", DIES_AT_START], breaker=breaker, **FAST)  # type: ignore[arg-type]
    seen: list[StateChanged] = []
    watcher = asyncio.create_task(_events_of(client, seen))
    with pytest.raises(ReconnectFailed) as caught:
        await asyncio.wait_for(client.__aenter__(), bound(20))
    await asyncio.wait_for(watcher, bound(5))
    error = caught.value
    assert error.reason == "agent_keeps_dying"
    cause = error.cause
    assert getattr(cause, "exit_code", None) == 3
    assert "FATAL: model quota exhausted" in getattr(cause, "stderr_tail", ())
    (failed,) = [e for e in seen if e.new is ClientState.FAILED]
    assert failed.exit_code == 3 and "FATAL: model quota exhausted" in failed.stderr_tail
    assert len([e for e in seen if e.new is ClientState.CONNECTING]) == breaker.threshold
    assert not [e for e in seen if e.new is ClientState.SUSPENDED]  # never ready: failed, not suspended


async def test_ready_timeout_bounds_the_first_wait() -> None:
    client = ReconnectingClient(
        [sys.executable, "-c", NEVER_ANSWERS], timeouts=Timeouts(initialize=None, ready=0.5), **FAST
    )  # type: ignore[arg-type]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(client.__aenter__(), bound(10))
    assert client.state is ClientState.CLOSED


async def test_stdio_env_and_cwd_reach_the_spawned_agent(tmp_path: Path) -> None:
    script = "import os, sys\nsys.stderr.write(os.environ['ACP_T'] + ' ' + os.getcwd() + '\\n')\nsys.exit(4)\n"
    client = ReconnectingClient(
        [sys.executable, "-c", script],
        transport_options=TransportOptions(
            stdio_env={"ACP_T": "from-options", "PATH": "/usr/bin:/bin"}, stdio_cwd=str(tmp_path)
        ),
        breaker=CrashLoopBreaker(threshold=1),
        **FAST,  # type: ignore[arg-type]
    )
    with pytest.raises(ReconnectFailed) as caught:
        await asyncio.wait_for(client.__aenter__(), bound(10))
    assert getattr(caught.value.cause, "exit_code", None) == 4
    assert f"from-options {tmp_path}" in getattr(caught.value.cause, "stderr_tail", ())

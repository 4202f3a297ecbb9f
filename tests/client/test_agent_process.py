"""Agents that cannot start or die early: typed errors with the OS error, exit code and stderr tail; the
agent process (pid, exit status) is public on the connection."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest

import acp_client
from acp_client import AgentNotFound, AgentProcess, ConnectError, ConnectionLost
from acp_client.client.connection import Connection
from acp_client.testing import ReferenceAgent
from acp_client.transports import spawn_stdio
from acp_client.transports.stdio import STDERR_LINE_CHARS, STDERR_TAIL_LINES
from tests.conftest import bound


def python(script: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(script)]


# writes its complaint to stderr and exits 3 without reading a byte of stdin
DIES_AT_START = python(
    """
    import sys
    sys.stderr.write("loading model\\n")
    sys.stderr.write("FATAL: model quota exhausted\\n")
    sys.stderr.flush()
    sys.exit(3)
    """
)


async def test_a_missing_program_is_agent_not_found() -> None:
    with pytest.raises(AgentNotFound) as caught:
        await spawn_stdio(["no-such-agent-7f3e"])
    error = caught.value
    assert isinstance(error, ConnectError)
    assert error.program == "no-such-agent-7f3e"
    assert isinstance(error.os_error, FileNotFoundError)
    assert "no-such-agent-7f3e" in str(error) and "No such file" in str(error)
    assert error.exit_code is None and error.stderr_tail == ()


async def test_a_program_that_is_not_executable_is_agent_not_found(tmp_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(stat.S_IRUSR | stat.S_IWUSR)
    if os.access(script, os.X_OK):  # root may execute anything
        pytest.skip("this user can execute files without the execute bit")
    with pytest.raises(AgentNotFound) as caught:
        await spawn_stdio([str(script)])
    assert isinstance(caught.value.os_error, PermissionError)


async def test_connect_to_a_missing_program_raises_agent_not_found() -> None:
    with pytest.raises(AgentNotFound):
        await acp_client.connect(["no-such-agent-7f3e", "--stdio"])


async def test_an_agent_that_exits_before_answering_says_why() -> None:
    async with asyncio.timeout(bound(20)):
        with pytest.raises(ConnectionLost) as caught:
            await acp_client.connect(DIES_AT_START)
    error = caught.value
    assert error.exit_code == 3
    assert error.stderr_tail == ("loading model", "FATAL: model quota exhausted")
    assert "FATAL: model quota exhausted" in str(error)
    assert "code 3" in str(error)


async def test_the_stderr_tail_is_bounded_in_lines_and_length() -> None:
    transport = await spawn_stdio(
        python(
            f"""
            import sys
            for i in range(100):
                sys.stderr.write(f"line {{i}}\\n")
            sys.stderr.write("x" * {STDERR_LINE_CHARS * 4} + "\\n")
            sys.stderr.flush()
            sys.exit(5)
            """
        )
    )
    try:
        async with asyncio.timeout(bound(20)):
            with pytest.raises(ConnectionLost) as caught:
                await transport.recv()
    finally:
        await transport.close()
    tail = caught.value.stderr_tail
    assert len(tail) == STDERR_TAIL_LINES
    assert tail[-2] == "line 99"
    assert len(tail[-1]) == STDERR_LINE_CHARS and tail[-1].endswith("…")
    assert transport.stderr_tail == tail
    assert caught.value.exit_code == transport.returncode == 5


async def test_requests_failed_by_a_dying_agent_carry_its_exit_code() -> None:
    transport = await spawn_stdio(
        python(
            """
            import sys
            sys.stdin.readline()
            sys.stderr.write("crashed on the first request\\n")
            sys.stderr.flush()
            sys.exit(9)
            """
        )
    )
    async with Connection(transport) as conn:
        async with asyncio.timeout(bound(20)):
            with pytest.raises(ConnectionLost) as caught:
                await conn.request("initialize", {})
        assert caught.value.request_sent is True
        assert caught.value.exit_code == 9
        assert caught.value.stderr_tail == ("crashed on the first request",)
        process = conn.agent_process
        assert process == AgentProcess(transport.pid or -1, 9)


async def test_the_agent_process_is_public_on_the_connection() -> None:
    command = [sys.executable, "-m", "acp_client.testing.reference_agent", "--stdio"]
    async with asyncio.timeout(bound(30)):
        client = await acp_client.connect(command)
        try:
            process = client.connection.agent_process
            assert isinstance(process, AgentProcess)
            assert process.returncode is None
            os.kill(process.pid, 0)  # it is running, and it is ours
        finally:
            await client.aclose()
        after = client.connection.agent_process
        assert after is not None and after.pid == process.pid and after.returncode is not None


async def test_a_network_connection_has_no_agent_process() -> None:
    async with ReferenceAgent(2) as agent, acp_client.connect(agent.url) as client:
        assert client.connection.agent_process is None

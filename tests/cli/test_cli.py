"""The ``acp-client`` command: demo, status, locate, usage errors (in-process and as a real subprocess)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
import structlog

from acp_client import __version__, connect
from acp_client.cli import main
from acp_client.testing import ReferenceAgent
from tests.conftest import bound


@pytest.fixture(autouse=True)
def quiet_agent_logs() -> Iterator[None]:
    """The reference agents run in the test process: keep their debug logs out of the captured output."""
    was_configured, previous = structlog.is_configured(), structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    try:
        yield
    finally:
        if was_configured:
            structlog.configure(**previous)
        else:
            structlog.reset_defaults()


def free_port_url() -> str:
    """A ws:// URL on 127.0.0.1 where nothing listens (the port was free a moment ago)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"ws://127.0.0.1:{port}/acp"


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


async def run_cli(*argv: str) -> int:
    """``main(argv)`` on a worker thread (it runs its own event loop), bounded."""
    return await asyncio.wait_for(asyncio.to_thread(main, list(argv)), bound(30))


# ---------------------------------------------------------------------- demo


def test_demo_v2_as_a_subprocess() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "acp_client.cli", "demo"],
        capture_output=True,
        text=True,
        timeout=bound(60),
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    out = done.stdout
    assert "\033[" not in out  # not a terminal: no colour
    assert "raised ConnectionLost" in out
    assert out.count("probe active -> reattached via session/resume") == 3
    assert out.count("probe inactive -> restored via session/resume, replayed=yes") == 2
    assert "forgotten (reason unknown: the agent answered -32002 to session/status)" in out
    summary = out.split("== summary after the restart", 1)[1]
    rows = [re.split(r"\s{2,}", line) for line in summary.splitlines() if line[:1].isalnum()][1:4]
    assert [row[2] for row in rows] == ["restored", "restored", "forgotten"]
    assert [row[1] for row in rows] == ["inactive", "inactive", "not found"]
    assert all(int(row[4]) > 0 for row in rows[:2])  # each restored session replayed its history
    assert "2 session(s) restored, 1 forgotten" in out


def test_demo_v1_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--protocol", "1", "--sessions", "2"]) == 0
    out = capsys.readouterr().out
    assert "restored via session/load, replayed=yes" in out
    assert "1 session(s) restored, 1 forgotten" in out
    assert "protocol v1" in out


def test_demo_rejects_too_few_sessions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--sessions", "1"])
    assert exit_info.value.code == 2
    assert "between 2 and 50" in capsys.readouterr().err


# ---------------------------------------------------------------------- status


async def test_status_reports_active_inactive_not_found_and_other_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with ReferenceAgent(2) as agent:
        async with connect(agent.url) as client:
            active = await client.new_session("/w")
            odd = await client.new_session("/w")
            asleep = await client.new_session("/w")
        agent.status_override[odd.id] = "hibernating"
        agent.sessions[asleep.id].unload()
        code = await run_cli("status", agent.url, active.id, "sess_nope", odd.id, asleep.id)
    out = capsys.readouterr().out
    assert code == 1, out  # one of them is not found
    lines = dict(line.split(": ", 1) for line in out.strip().splitlines())
    assert lines[active.id] == "active (state: idle)"
    assert lines["sess_nope"] == "not found (-32002)"
    assert lines[odd.id].startswith("unknown value: hibernating")
    assert lines[asleep.id].startswith("inactive")


async def test_status_v1(capsys: pytest.CaptureFixture[str]) -> None:
    async with ReferenceAgent(1) as agent:
        async with connect(agent.url) as client:
            session = await client.new_session("/w")
        code = await run_cli("status", agent.url, session.id)
    assert code == 0
    assert capsys.readouterr().out.strip() == f"{session.id}: active"


async def test_status_needs_the_capability(capsys: pytest.CaptureFixture[str]) -> None:
    async with ReferenceAgent(2, capabilities={"session.status": False}) as agent:
        code = await run_cli("status", agent.url, "sess_x")
    assert code == 1
    assert "does not advertise session/status" in one_error_line(capsys.readouterr().err)


async def test_status_unreachable_agent_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = await run_cli("status", free_port_url(), "sess_x", "--timeout", "3")
    assert code == 1
    assert "could not connect" in one_error_line(capsys.readouterr().err)


async def test_status_of_found_sessions_exits_0_and_accepts_http(capsys: pytest.CaptureFixture[str]) -> None:
    async with ReferenceAgent(2) as agent:
        async with connect(agent.url) as client:
            session = await client.new_session("/w")
        assert await run_cli("status", agent.url, session.id) == 0
        assert await run_cli("status", agent.url, session.id, "sess_nope") == 1
        assert await run_cli("status", agent.http_url, session.id) == 0  # Streamable HTTP
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == [f"{session.id}: active (state: idle)"] * 2 + ["sess_nope: not found (-32002)"] + [
        f"{session.id}: active (state: idle)"
    ]


@pytest.mark.parametrize("url", ["ftp://127.0.0.1:1/acp", "not a url", "ws://host:99999/x"])
def test_bad_url_is_a_usage_error(capsys: pytest.CaptureFixture[str], url: str) -> None:
    assert main(["status", url, "sess_x"]) == 2
    assert "bad URL" in one_error_line(capsys.readouterr().err)


# ---------------------------------------------------------------------- locate


async def test_locate_across_endpoints(capsys: pytest.CaptureFixture[str]) -> None:
    nowhere = free_port_url()
    async with ReferenceAgent(2) as holder, ReferenceAgent(1) as other:
        async with connect(holder.url) as client:
            session = await client.new_session("/w")
        code = await run_cli("locate", session.id, holder.url, other.url, nowhere, "--timeout", "3")
        captured = capsys.readouterr()
        assert code == 0, captured.out
        assert captured.err == ""
        results = {line.split()[0]: line.split(None, 1)[1] for line in captured.out.splitlines()[:3]}
        assert results[holder.url].startswith("active")
        assert results[other.url].startswith("not found")
        assert results[nowhere].startswith("unreachable")
        assert f"is active on: {holder.url}" in captured.out

        holder.sessions[session.id].unload()  # known but not in memory: not active anywhere
        code = await run_cli("locate", session.id, holder.url, other.url)
        captured = capsys.readouterr()
        assert code == 1
        assert "inactive" in captured.out and "not active on any endpoint" in captured.out


def test_locate_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["locate", "sess_x", "ftp://example.invalid/"]) == 2
    one_error_line(capsys.readouterr().err)
    with pytest.raises(SystemExit) as exit_info:
        main(["locate", "sess_x"])  # no URL at all
    assert exit_info.value.code == 2


# ---------------------------------------------------------------------- misc


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"acp-client {__version__}"


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


async def test_serve_reference_stdio_subprocess() -> None:
    frame = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}\n'
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "acp_client.cli",
        "serve-reference",
        "--stdio",
        "--protocol",
        "1",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(frame)
        await proc.stdin.drain()
        answer = json.loads(await asyncio.wait_for(proc.stdout.readline(), bound(20)))
        assert answer["id"] == 1 and answer["result"]["protocolVersion"] == 1
        proc.stdin.close()  # end of input ends the stdio agent
        assert await asyncio.wait_for(proc.wait(), bound(10)) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

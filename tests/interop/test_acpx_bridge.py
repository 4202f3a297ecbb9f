"""A real third-party client, acpx 0.19.1 (npm), drives ``acp-client bridge`` as its agent (issue 24, item 7).

acpx speaks v1. It starts its agent (here the bridge) when a prompt needs it, keeps it for ``--ttl`` seconds
as a "queue owner", and on every start resumes the session it remembers under its HOME. ``--format json``
prints every JSON-RPC message it exchanges, so the tests read acpx's own wire. The remote is the shipped
reference agent over WebSocket behind a FaultProxy (``--also-v1``-style: versions 1 and 2), or ``qwen serve``
over Streamable HTTP. A v2-only remote in front of acpx gets a clear refusal (design.md, the bridge).
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acp_client.testing import FaultProxy, ReferenceAgent
from tests.conftest import bound
from tests.interop import _scenarios as scenario
from tests.interop._acpx import acpx_bin, client_env
from tests.interop._qwen import qwen_bin, qwen_serve

__all__ = ["acpx_bin", "qwen_bin"]

pytestmark = pytest.mark.timeout(bound(240))


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "home").mkdir()
    yield tmp_path / "home"
    scenario.end_processes_with_home(tmp_path / "home")  # acpx's queue owner and the bridge it started


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    return tmp_path / "project"


def bridge_command(url: str, tmp_path: Path, *extra: str) -> str:
    argv = [sys.executable, "-m", "acp_client.cli", "bridge", url, "--store", str(tmp_path / "bridge.db")]
    argv += ["--log-file", str(tmp_path / "bridge.log"), *extra]
    return shlex.join(argv)


async def acpx(
    binary: Path, home: Path, cwd: Path, agent: str, *args: str, ttl: int = 60
) -> tuple[int, list[Any], str]:
    """Run acpx once; returns its exit code, the JSON-RPC messages it printed, and its stderr."""
    argv = [str(binary), "--agent", agent, "--approve-all", "--ttl", str(ttl), "--format", "json", *args]
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=client_env(home), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(bound(90)):
        out, err = await proc.communicate()
    wire = []
    for line in out.decode(errors="replace").splitlines():
        try:
            wire.append(json.loads(line))
        except ValueError:
            continue
    assert proc.returncode is not None
    return proc.returncode, wire, err.decode(errors="replace")


def requests(wire: list[Any], method: str) -> list[Any]:
    return [m for m in wire if isinstance(m, dict) and m.get("method") == method and "id" in m]


def answer_to(wire: list[Any], request: Any) -> Any:
    return next(m for m in wire if m.get("id") == request["id"] and "method" not in m)


BRIDGE_META = "acpClient/bridge"  # the documented marker of the bridge's own updates (examples/editor_bridge.md)


def chunks(wire: list[Any]) -> list[dict[str, Any]]:
    return [
        m["params"]["update"]
        for m in wire
        if m.get("method") == "session/update" and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
    ]


def text_of(wire: list[Any]) -> str:
    """The agent's text, without the bridge's own notices (marked in ``_meta``): whether a gap notice reaches
    this acpx process depends on whether the bridge's recovery ends before or after acpx opens the session."""
    return "".join(u.get("content", {}).get("text", "") for u in chunks(wire) if BRIDGE_META not in u.get("_meta", {}))


def notices(wire: list[Any]) -> list[dict[str, Any]]:
    return [u["_meta"][BRIDGE_META] for u in chunks(wire) if BRIDGE_META in u.get("_meta", {})]


async def test_acpx_prompts_are_answered_across_a_cut_of_the_remote_link(
    acpx_bin: Path, home: Path, project: Path, tmp_path: Path
) -> None:
    async with ReferenceAgent(2, supported_versions=(1, 2)) as remote, FaultProxy("127.0.0.1", remote.port) as proxy:
        agent = bridge_command(proxy.url(), tmp_path, "--ping-interval", "0.5", "--ping-timeout", "0.5")
        code, _, err = await acpx(acpx_bin, home, project, agent, "sessions", "new", ttl=1)
        assert code == 0, err
        # a new acpx process: it starts the bridge again and resumes its session, and the bridge forwards it
        code, wire, err = await acpx(acpx_bin, home, project, agent, "before the cut")
        assert code == 0, err
        (init,) = requests(wire, "initialize")
        assert init["params"]["protocolVersion"] == 1 and answer_to(wire, init)["result"]["protocolVersion"] == 1
        (resumed,) = requests(wire, "session/resume")
        assert answer_to(wire, resumed)["result"] == {}
        assert remote.count("session/resume") >= 1  # acpx's resume reached the remote through the bridge
        assert text_of(wire) == "before the cut"
        links = await proxy.cut_all()
        assert links >= 1
        # the queue owner (and its bridge) lives on; the next prompt waits for the bridge's recovery
        code, wire, err = await acpx(acpx_bin, home, project, agent, "after the cut")
        assert code == 0, err
        assert text_of(wire) == "after the cut"
        # the only words of the bridge's own: a gap notice (v1 resume replays nothing) when its recovery
        # ended while this acpx process had the session open
        assert all(n.get("gap") is True for n in notices(wire))
        (prompt,) = requests(wire, "session/prompt")
        assert answer_to(wire, prompt)["result"]["stopReason"] == "end_turn"
        log = (tmp_path / "bridge.log").read_text()
        assert "acp.connection_dropped" in log and "acp.session_recovered" in log


async def test_acpx_in_front_of_a_v2_only_remote_gets_a_clear_refusal(
    acpx_bin: Path, home: Path, project: Path, tmp_path: Path
) -> None:
    async with ReferenceAgent(2) as remote:
        agent = bridge_command(f"ws://127.0.0.1:{remote.port}/acp", tmp_path)
        code, wire, _ = await acpx(acpx_bin, home, project, agent, "exec", "hello", ttl=1)
    assert code != 0
    (init,) = requests(wire, "initialize")
    error = answer_to(wire, init)["error"]
    assert error["data"]["acpClient/bridge"]["reason"] == "protocol_mismatch"
    assert "speaks only ACP protocol version 2" in error["message"]
    assert "does not translate" in error["message"]


async def test_acpx_through_the_bridge_to_qwen_serve_across_a_restart(
    acpx_bin: Path, qwen_bin: Path, home: Path, project: Path, tmp_path: Path
) -> None:
    qwen_home = tmp_path / "qwen-home"
    qwen_home.mkdir()
    try:
        async with qwen_serve(qwen_bin, qwen_home, project, tmp_path / "serve.stderr") as server:
            # default pings: qwen's SSE keepalive comes every 15 s, and the read-idle watchdog is interval+timeout
            agent = bridge_command(server.http_url, tmp_path)
            code, _, err = await acpx(acpx_bin, home, project, agent, "sessions", "new", ttl=1)
            assert code == 0, err
            code, wire, err = await acpx(acpx_bin, home, project, agent, "before the restart")
            (prompt,) = requests(wire, "session/prompt")
            # no model offline: over HTTP qwen fails the turn with -32603, data {"errorKind": "internal"}; the
            # bridge forwards it as it is (a bridge-made error would carry _meta reason connection_lost)
            assert answer_to(wire, prompt)["error"]["data"] == {"errorKind": "internal"}
            await server.restart()
            code, wire, err = await acpx(acpx_bin, home, project, agent, "after the restart")
            (prompt,) = requests(wire, "session/prompt")
            assert answer_to(wire, prompt)["error"]["data"] == {"errorKind": "internal"}  # qwen answered
            log = (tmp_path / "bridge.log").read_text()
            assert "acp.connection_dropped" in log and "acp.session_recovered" in log
    finally:
        scenario.end_processes_with_home(qwen_home)

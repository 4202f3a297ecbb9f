"""``acp-client bridge --wire-log FILE``: the bridge writes its remote link's wire log, a cut is marked with a new
generation, and ``acp-client wire-log FILE`` prints it as a table with the reconnect marked."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from acp import text_block

from acp_client.cli import main
from acp_client.testing import FaultProxy, ReferenceAgent
from tests.bridge.bridge_kit import official_editor
from tests.bridge.test_bridge import CAPS, FAST, INFO
from tests.conftest import bound

SECRET = "bridge-s3cret-token"


def read_log(path: Path) -> list[dict[str, object]]:
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    text = path.read_text(encoding="utf-8")
    assert SECRET not in text
    return [json.loads(line) for line in text.splitlines()]


async def test_the_bridge_writes_a_wire_log_that_the_reader_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wire = tmp_path / "wire.jsonl"
    options = (*FAST, "--wire-log", str(wire), "--wire-log-payloads", "--header", f"Authorization: Bearer {SECRET}")
    async with ReferenceAgent(1) as agent, FaultProxy("127.0.0.1", agent.port) as proxy:
        async with official_editor(proxy.url(), *options, stderr=tmp_path / "bridge.err") as (conn, _, process):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS, client_info=INFO)
            sid = (await conn.new_session(cwd="/work", mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("echo: before")])
            await proxy.cut_all()
            await agent.wait_for_method("session/load", session_id=sid, timeout=bound(15))  # the bridge is back
            answer = await conn.prompt(session_id=sid, prompt=[text_block("echo: after")])
            assert answer.stop_reason == "end_turn"
        assert process.returncode == 0
    log = read_log(wire)
    opened = [line["gen"] for line in log if line.get("event") == "connection_open"]
    assert len(opened) >= 2 and opened[-1] != opened[0]
    prompts = [line for line in log if line.get("method") == "session/prompt" and line.get("dir") == "out"]
    assert [line["gen"] for line in prompts] == [opened[0], opened[-1]]
    assert all("payload" in line for line in prompts)

    capsys.readouterr()
    assert main(["wire-log", str(wire)]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split() == ["time", "gen", "dir", "kind", "method", "/", "id", "bytes"]
    assert f"reconnect: generation {opened[0]} -> {opened[-1]}" in table
    assert "session/prompt" in table and "connection_closed" in table

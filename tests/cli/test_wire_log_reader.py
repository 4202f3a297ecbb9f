"""``acp-client wire-log FILE`` reads a real client's rotated wire log, oldest first, and survives a last line
cut short (the bridge test checks the table of a log with a reconnect in it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acp_client import WireLog
from acp_client.cli import main
from tests.conftest import WEBSOCKET, running_client


def cut_last_line(path: Path) -> None:
    with path.open("a", encoding="utf-8") as stream:
        stream.write('{"t": "2026-12-05T13:00:00.000000Z", "gen": 1, "dir": "in", "ki')  # a crash mid-write


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def test_the_reader_reads_a_rotated_set_oldest_first_and_skips_a_cut_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "wire.jsonl"
    async with WEBSOCKET.agent(2) as agent:
        wire_log = WireLog(path, max_bytes=2048, backups=5)
        async with running_client(agent.url, wire_log=wire_log) as (client, _):
            session = await client.new_session("/tmp")
            for n in range(6):
                await session.prompt(f"turn {n}")
    assert "wire.jsonl.2" in names(tmp_path)
    cut_last_line(path)
    capsys.readouterr()
    assert main(["wire-log", str(path)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:4] == ["time", "gen", "dir", "kind"]
    body = [line for line in table[1:-1] if "---" not in line]
    assert body[0].split()[2:5] == ["out", "request", "initialize"]  # the oldest file comes first
    times = [line.split()[0] for line in body]
    assert times == sorted(times)
    assert "1 damaged line(s) skipped: wire.jsonl:" in table[-1] and "(cut short)" in table[-1]
    assert table[-1].startswith(f"{len(body)} frames from ")


def test_the_reader_says_when_there_is_no_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["wire-log", str(tmp_path / "none.jsonl")]) == 1
    assert "no such file" in capsys.readouterr().err

"""What the ``acp-client`` command prints from agent- or store-controlled text is shown, never interpreted by
the terminal (escape sequences, forged lines), and credentials in URLs are not echoed (issue 18, item 8)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from acp_client import SQLiteSessionStore, connect
from acp_client.cli import main
from acp_client.cli._console import printable, shown_url
from acp_client.sessions import SessionRecord
from acp_client.testing import AgentError, ReferenceAgent
from tests.cli.test_cli import quiet_agent_logs  # noqa: F401  (autouse: the agents' logs stay quiet)
from tests.conftest import bound

#: sets the terminal title, clears the screen, then forges a line of output
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\rsess_forged: active\n\u202edesrever"


async def run_cli(*argv: str) -> int:
    return await asyncio.wait_for(asyncio.to_thread(main, list(argv)), bound(30))


def assert_inert(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text and "\u202e" not in text, repr(text)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain", "plain"),
        ("a\x1b[2Jb", "a\\x1b[2Jb"),
        ("one\ntwo\rthree\tfour", "one\\ntwo\\rthree\\tfour"),
        ("\x9b31m\x7f", "\\x9b31m\\x7f"),
        ("\u202eabc\u2066", "\\u202eabc\\u2066"),
        ("é and 漢字 stay", "é and 漢字 stay"),
    ],
)
def test_printable_escapes_every_control_character(raw: str, shown: str) -> None:
    assert printable(raw) == shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("ws://127.0.0.1:8765/acp", "ws://127.0.0.1:8765/acp"),
        ("wss://me:hunter2@host/acp", "wss://<redacted>@host/acp"),
        ("https://host/acp?token=abc&x=1", "https://host/acp?token=<redacted>&x=1"),
        ("http://host/acp?api_key=k&sig=s&page=2", "http://host/acp?api_key=<redacted>&sig=<redacted>&page=2"),
    ],
)
def test_shown_urls_carry_no_credentials(url: str, shown: str) -> None:
    assert shown_url(url) == shown


async def test_status_shows_a_hostile_status_and_error_inert(capsys: pytest.CaptureFixture[str]) -> None:
    async with ReferenceAgent(2) as agent:
        async with connect(agent.url) as client:
            odd = await client.new_session("/w")
            broken = await client.new_session("/w")
        agent.status_override[odd.id] = HOSTILE
        agent.status_override[broken.id] = AgentError(-32603, HOSTILE)
        code = await run_cli("status", agent.url, odd.id, broken.id)
    out = capsys.readouterr().out
    assert code == 1
    assert_inert(out)
    lines = out.strip().splitlines()
    assert len(lines) == 2, out  # no forged line
    assert lines[0].startswith(f"{odd.id}: unknown value: \\x1b]0;pwned\\x07")
    assert lines[1].startswith(f"{broken.id}: error -32603: \\x1b]0;pwned")


async def test_locate_echoes_no_credentials(capsys: pytest.CaptureFixture[str]) -> None:
    async with ReferenceAgent(2) as agent:
        async with connect(agent.url) as client:
            session = await client.new_session("/w")
        url = agent.url.replace("ws://", "ws://me:hunter2@") + "?token=s3cret"
        code = await run_cli("locate", session.id, url)
    captured = capsys.readouterr()
    assert code == 0, captured
    assert "hunter2" not in captured.out + captured.err and "s3cret" not in captured.out + captured.err
    assert "<redacted>" in captured.out


async def test_sessions_table_shows_hostile_record_fields_inert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sessions.db"
    store = SQLiteSessionStore(path)
    await store.save(SessionRecord(session_id="sess_1" + HOSTILE, cwd="/w" + HOSTILE, title=HOSTILE))
    await store.close()
    code = await run_cli("sessions", "--store", str(path))
    out = capsys.readouterr().out
    assert code == 0
    assert_inert(out)
    assert len(out.strip().splitlines()) == 2, out  # the header and one row

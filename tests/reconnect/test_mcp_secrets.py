"""MCP server secrets can stay out of the store (issue 18, item 2): with ``mcp_secrets=`` the store keeps the
servers with every ``env``/``headers`` value blanked, and the hook supplies them at each re-attach, in v1
and v2, over a real link, with a SQLite store whose file is read back byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acp_client import ReconnectingClient, SessionRecovered, SQLiteSessionStore
from acp_client.testing import ReferenceAgent
from tests.conftest import bound, client_options, recorder

TOKEN = "ghp_secret_value_123"
SERVER = {
    "name": "github",
    "command": "gh-mcp",
    "args": ["--stdio"],
    "env": [{"name": "GITHUB_TOKEN", "value": TOKEN}],
}


def read_all(folder: Path) -> bytes:
    """Every byte the store wrote: the database and its -wal/-shm/lock files."""
    return b"".join(path.read_bytes() for path in folder.iterdir() if path.is_file())


@pytest.mark.parametrize("version", [1, 2])
async def test_secrets_stay_out_of_the_store_and_come_back_from_the_hook(version: int, tmp_path: Path) -> None:
    asked: list[tuple[str, list[dict[str, Any]]]] = []

    async def mcp_secrets(session_id: str, servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        asked.append((session_id, servers))
        return [
            {**s, "env": [{**e, "value": TOKEN} if e["name"] == "GITHUB_TOKEN" else e for e in s.get("env", [])]}
            for s in servers
        ]

    db = tmp_path / "sessions.db"
    async with ReferenceAgent(version) as agent:
        client = ReconnectingClient(
            agent.url, **client_options(store=SQLiteSessionStore(db), mcp_secrets=mcp_secrets, protocol_version=version)
        )
        rec = recorder(client)
        try:
            await client.start()
            await client.wait_ready(timeout=bound(5))
            session = await client.new_session("/w", mcp_servers=[SERVER])
            await agent.drop_all_connections()
            await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=10)
        finally:
            await rec.close()
            await client.aclose()
        stored = read_all(tmp_path)
        assert TOKEN.encode() not in stored and b"GITHUB_TOKEN" in stored  # the name is kept, not the value
        (session_id, blanked), *_ = asked
        assert session_id == session.id and blanked[0]["env"] == [{"name": "GITHUB_TOKEN", "value": ""}]
        reattach = [r for r in agent.received if r.method in ("session/load", "session/resume")][-1]
        sent = reattach.params["mcpServers"][0]
        env = sent["env"]
        env = env if isinstance(env, list) else [{"name": k, "value": v} for k, v in env.items()]
        assert {"name": "GITHUB_TOKEN", "value": TOKEN} in env  # the agent got the value from the hook


def test_a_record_without_secrets_keeps_names_and_shapes() -> None:
    from acp_client.sessions import SessionRecord

    record = SessionRecord(
        session_id="s1",
        cwd="/w",
        mcp_servers=[
            SERVER,
            {"name": "api", "type": "http", "url": "https://x", "headers": [{"name": "A", "value": "b"}]},
        ],
    )
    clean = record.without_mcp_secrets()
    assert clean.mcp_servers[0]["env"] == [{"name": "GITHUB_TOKEN", "value": ""}]
    assert clean.mcp_servers[1]["headers"] == [{"name": "A", "value": ""}] and clean.mcp_servers[1]["url"] == "https://x"
    assert record.mcp_servers[0]["env"][0]["value"] == TOKEN  # the original is untouched

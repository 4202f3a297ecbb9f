"""Wrong arguments say what is wrong (issue 20, item 2): paths may be ``os.PathLike``, a lone string or dict
where a list belongs is a ``UsageError`` naming the argument, and an agent's ``data.reason`` reaches the
error's text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acp_client import ReconnectingClient, SQLiteSessionStore, connect
from acp_client.exceptions import InvalidParams, RPCError, SessionLost, UsageError
from acp_client.testing import ReferenceAgent
from tests.conftest import Link, client_options, over_links

link = over_links("ws")


async def test_paths_may_be_pathlike(link: Link, agent: ReferenceAgent, tmp_path: Path) -> None:
    async with connect(link.url(agent), **link.options) as client:
        session = await client.new_session(tmp_path, additional_directories=[tmp_path / "extra"])
        assert session.record.cwd == str(tmp_path)
        assert session.record.additional_directories == [str(tmp_path / "extra")]
        again = await client.resume_session(session.id, tmp_path) if client.supports("resume") else session
        assert again.record.cwd == str(tmp_path)


async def test_the_reconnecting_client_and_its_store_take_pathlike(agent: ReferenceAgent, tmp_path: Path) -> None:
    store = SQLiteSessionStore(tmp_path / "sessions.db")
    async with ReconnectingClient(agent.url, store=store, **client_options()) as client:
        await client.wait_ready()
        session = await client.new_session(tmp_path)
        assert session.record.cwd == str(tmp_path)
    assert (tmp_path / "sessions.db").exists()


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"mcp_servers": "fs"}, "mcp_servers takes a list of MCP server entries"),
        ({"mcp_servers": {"name": "fs", "command": "fs"}}, "mcp_servers takes a list"),
        ({"mcp_servers": ["fs"]}, r"mcp_servers\[0\] must be an MCP server entry"),
        ({"additional_directories": "/home/me/extra"}, "additional_directories takes a list of paths"),
        ({"additional_directories": Path("/home/me/extra")}, "additional_directories takes a list of paths"),
        ({"additional_directories": ["/x", 3]}, r"additional_directories\[1\] must be a path"),
    ],
)
async def test_a_lone_value_where_a_list_belongs_is_refused(
    link: Link, agent: ReferenceAgent, arguments: dict[str, Any], says: str
) -> None:
    async with connect(link.url(agent), **link.options) as client:
        with pytest.raises(UsageError, match=says):
            await client.new_session("/work/project", **arguments)
        assert not agent.sessions  # nothing was sent


async def test_a_cwd_that_is_no_path_is_refused(link: Link, agent: ReferenceAgent) -> None:
    async with connect(link.url(agent), **link.options) as client:
        with pytest.raises(UsageError, match="cwd must be a path"):
            await client.new_session(42)  # type: ignore[arg-type]


async def test_the_agents_reason_is_in_the_text(link: Link, agent: ReferenceAgent) -> None:
    async with connect(link.url(agent), **link.options) as client:
        with pytest.raises(InvalidParams) as caught:
            await client.new_session("project")
    assert str(caught.value) == "[-32602] Invalid params: 'cwd' must be an absolute path"


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (None, "[-32602] Invalid params"),
        ({"reason": "bad cwd"}, "[-32602] Invalid params: bad cwd"),
        ({"message": "more", "reason": "why"}, "[-32602] Invalid params: why; more"),
        ({"reason": "Invalid"}, "[-32602] Invalid params"),  # nothing new: not repeated
        ({"reason": 3}, "[-32602] Invalid params"),
        ("a string", "[-32602] Invalid params"),
    ],
)
def test_rpc_error_text(data: object, text: str) -> None:
    assert str(RPCError(-32602, "Invalid params", data)) == text


def test_a_long_reason_is_cut() -> None:
    assert len(str(RPCError(-32603, "Internal error", {"reason": "x" * 5000}))) < 250


@pytest.mark.parametrize(
    ("reason", "says"),
    [
        ("unknown", "the agent no longer knows it"),
        ("not_listed", "no longer lists it"),
        ("application", "forgotten by your application"),
        ("forgotten", "forgotten by your application"),
        ("not known to this client", "not known to this client"),
    ],
)
def test_loss_reasons_read_as_sentences(reason: str, says: str) -> None:
    error = SessionLost("sess_1", reason)
    assert str(error) == f"session sess_1 is lost: {says}" or says in str(error)
    assert "(" not in str(error) and error.reason == reason

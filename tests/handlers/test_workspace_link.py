"""A Workspace over a real loopback WebSocket link: the reference agent drives read, write, run and kill
through its prompt mini-language, in v1 (the spec's methods) and v2 (the ``_acp-client/`` extension)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest

import acp_client
from acp_client import ReconnectingClient
from acp_client.exceptions import UsageError
from acp_client.handlers import (
    PermissionOption,
    PermissionRequest,
    Workspace,
    allow_reads,
    ask,
    deny,
    request_kind,
)
from acp_client.testing import ReferenceAgent
from tests.conftest import bound
from tests.handlers.test_hostile import gone


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "a.txt").write_text("alpha\nbeta\n", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("the secret", encoding="utf-8")
    return (tmp_path / "root").resolve()


class Dialog:
    """The user: answers every question with "allow once" and remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[PermissionRequest] = []

    async def __call__(self, request: PermissionRequest) -> str | None:
        self.asked.append(request)
        option = request.option("allow_once")
        return option.option_id if option else None


async def test_read_write_run_kill_over_a_real_link(agent: ReferenceAgent, version: int, root: Path) -> None:
    dialog = Dialog()
    workspace = Workspace([root], permission=ask(dialog))
    script = "\n".join(
        [
            f"read {root}/a.txt",
            f"write {root}/b.txt hello there",
            f"read {root}/b.txt",
            f"read {root}/../secret.txt",
            "run echo ran in the workspace",
            "kill sleep 300",
            "permission",
        ]
    )
    async with acp_client.connect(agent.url, handlers=workspace, protocol_version=version) as client:
        assert client.protocol_version == version
        session = await client.new_session(str(root))
        result = await session.prompt(script, timeout=bound(20))
    said = session.transcript.messages[-1].text
    assert result.stop_reason == "end_turn"
    assert f"read {root}/a.txt: alpha\nbeta\n" in said
    assert f"wrote {root}/b.txt" in said and (root / "b.txt").read_text(encoding="utf-8") == "hello there"
    assert f"read {root}/b.txt: hello there" in said
    assert f"read {root}/../secret.txt failed: [-32602] refused (outside_roots)" in said
    assert "ran echo: exit 0\nran in the workspace\n" in said
    assert "killed sleep: signal SIGKILL\n" in said
    assert said.endswith("permission granted")
    asked = [(request_kind(r), r.title) for r in dialog.asked]
    assert asked == [
        ("edit", f"Write {root}/b.txt"),
        ("execute", "Run echo ran in the workspace"),
        ("execute", "Run sleep 300"),
        ("execute", "Run the reference tool?" if version >= 2 else None),
    ]
    assert workspace.terminal_ids() == []


async def test_the_default_policy_denies_writes_terminals_and_the_agents_requests(
    agent: ReferenceAgent, version: int, root: Path
) -> None:
    async with Workspace([root]) as workspace, acp_client.connect(
        agent.url, handlers=workspace, protocol_version=version
    ) as client:
        session = await client.new_session(str(root))
        await session.prompt(f"read {root}/a.txt\nwrite {root}/c.txt no\nrun echo no\npermission", timeout=bound(20))
    said = session.transcript.messages[-1].text
    assert f"read {root}/a.txt: alpha" in said  # reads need no permission
    assert f"write {root}/c.txt failed: [-32602] refused (permission_denied)" in said
    assert "run echo failed: [-32602] refused (permission_denied)" in said
    assert said.endswith("permission denied")  # the agent's own request got its reject option
    assert not (root / "c.txt").exists()


async def test_the_prompt_names_the_file_that_will_be_written_not_the_agents_spelling(
    agent: ReferenceAgent, version: int, root: Path
) -> None:
    # a hostile agent dresses a git hook up as a file under docs/: the user must be asked about the hook
    (root / "docs").mkdir()
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / "notes").symlink_to(root / ".git" / "hooks")
    dialog = Dialog()
    async with Workspace([root], permission=ask(dialog)) as workspace, acp_client.connect(
        agent.url, handlers=workspace, protocol_version=version
    ) as client:
        session = await client.new_session(str(root))
        script = f"write {root}/docs/../.git/hooks/pre-commit owned\nwrite {root}/notes/post-merge owned"
        await session.prompt(script, timeout=bound(20))
    hooks = root / ".git" / "hooks"
    assert [r.title for r in dialog.asked] == [f"Write {hooks}/pre-commit", f"Write {hooks}/post-merge"]
    assert all(".." not in str(r.raw) for r in dialog.asked)
    assert (hooks / "pre-commit").read_text(encoding="utf-8") == "owned"


async def test_read_only_session_refuses_writes_and_terminals(root: Path) -> None:
    async with ReferenceAgent(1) as agent, Workspace([root], ask_before=()) as workspace, acp_client.connect(
        agent.url, handlers=workspace
    ) as client:
        session = await client.new_session(str(root))
        workspace.set_read_only(session.id)
        await session.prompt(f"write {root}/c.txt no\nrun echo no\nread {root}/a.txt", timeout=bound(20))
    said = session.transcript.messages[-1].text
    assert f"write {root}/c.txt failed: [-32602] refused (read_only)" in said
    assert "run echo failed: [-32602] refused (read_only)" in said
    assert "read" in said and "alpha" in said


class Started(Workspace):
    """A workspace that says when a terminal has started (so a test can act while it runs)."""

    def __init__(self, root: Path) -> None:
        super().__init__([root], ask_before=())
        self.started: asyncio.Queue[str] = asyncio.Queue()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        *,
        args: list[str],
        env: dict[str, str],
        cwd: str | None,
        output_byte_limit: int | None,
    ) -> str:
        terminal_id = await super().create_terminal(
            session_id, command, args=args, env=env, cwd=cwd, output_byte_limit=output_byte_limit
        )
        self.started.put_nowait(terminal_id)
        return terminal_id


async def running_terminal(session: acp_client.Session, workspace: Started) -> tuple[asyncio.Task[object], int]:
    """Have the agent run ``sleep 300`` in ``session``; returns the prompt task and the command's pid."""
    turn: asyncio.Task[object] = asyncio.ensure_future(session.prompt("run sleep 300", timeout=bound(30)))
    async with asyncio.timeout(bound(10)):
        terminal_id = await workspace.started.get()
    return turn, workspace.terminal_pid(terminal_id)


async def settle(turn: asyncio.Task[object]) -> None:
    async with asyncio.timeout(bound(10)):
        with contextlib.suppress(Exception):
            await turn


async def test_closing_a_session_kills_its_running_terminals(agent: ReferenceAgent, version: int, root: Path) -> None:
    workspace = Started(root)
    async with acp_client.connect(agent.url, handlers=workspace, protocol_version=version) as client:
        session = await client.new_session(str(root))
        turn, pid = await running_terminal(session, workspace)
        assert not gone(pid)
        await client.close_session(session.id)
        assert gone(pid) and workspace.terminal_ids() == []
        await settle(turn)


async def test_closing_the_client_kills_every_terminal(agent: ReferenceAgent, version: int, root: Path) -> None:
    workspace = Started(root)
    async with acp_client.connect(agent.url, handlers=workspace, protocol_version=version) as client:
        session = await client.new_session(str(root))
        turn, pid = await running_terminal(session, workspace)
    assert gone(pid) and workspace.terminal_ids() == []
    await settle(turn)


async def test_a_reconnecting_client_ends_terminals_on_forget_and_on_close(
    agent: ReferenceAgent, version: int, root: Path
) -> None:
    workspace = Started(root)
    async with ReconnectingClient(agent.url, handlers=workspace, protocol_version=version) as client:
        first = await client.new_session(str(root))
        second = await client.new_session(str(root))
        turn1, pid1 = await running_terminal(first, workspace)
        turn2, pid2 = await running_terminal(second, workspace)
        await client.forget(first.id)
        assert gone(pid1) and not gone(pid2)
    assert gone(pid2) and workspace.terminal_ids() == []
    await settle(turn1)
    await settle(turn2)


# ---------------------------------------------------------------------------------------------- policies

ALLOW = PermissionOption("ok", "Allow", "allow_once")
REJECT = PermissionOption("no", "Reject", "reject_once")


def v1_request(kind: str) -> PermissionRequest:
    return PermissionRequest.from_params(
        {"sessionId": "s", "toolCall": {"toolCallId": "t", "kind": kind}, "options": [vars_of(ALLOW), vars_of(REJECT)]}
    )


def v2_request(subject: dict[str, object]) -> PermissionRequest:
    return PermissionRequest.from_params(
        {"sessionId": "s", "title": "t", "subject": subject, "options": [vars_of(ALLOW), vars_of(REJECT)]}
    )


def vars_of(option: PermissionOption) -> dict[str, str]:
    return {"optionId": option.option_id, "name": option.name, "kind": option.kind}


async def test_policies_read_both_shapes() -> None:
    read_v1, edit_v1 = v1_request("read"), v1_request("edit")
    read_v2 = v2_request({"type": "tool_call", "toolCall": {"toolCallId": "t", "kind": "search"}})
    command_v2 = v2_request({"type": "command", "command": "rm -rf /", "cwd": "/"})
    assert [request_kind(r) for r in (read_v1, edit_v1, read_v2, command_v2)] == ["read", "edit", "search", "execute"]
    assert [await allow_reads(r) for r in (read_v1, edit_v1, read_v2, command_v2)] == ["ok", "no", "ok", "no"]
    assert [await deny(r) for r in (read_v1, command_v2)] == ["no", "no"]

    async def confused(request: PermissionRequest) -> str | None:
        return "not-an-offered-option"

    assert await ask(confused)(read_v1) is None  # an unknown answer is cancelled, never approval


async def test_ask_before_opts_out_per_kind(root: Path) -> None:
    dialog = Dialog()
    async with Workspace([root], permission=ask(dialog), ask_before=("terminal",)) as workspace:
        await workspace.write_text_file("s", str(root / "d.txt"), "no question asked")
        assert dialog.asked == []
        terminal = await workspace.create_terminal("s", "true", args=[], env={}, cwd=None, output_byte_limit=None)
        assert [r.title for r in dialog.asked] == ["Run true"]
        await workspace.release_terminal("s", terminal)
    with pytest.raises(UsageError, match="ask_before"):
        Workspace([root], ask_before=("read",))


async def test_before_write_and_unsaved_buffers(root: Path) -> None:
    shown: list[tuple[str, str | None, str]] = []

    async def buffer(path: str) -> str | None:
        return "unsaved 1\nunsaved 2\n" if path.endswith("a.txt") else None

    async def before_write(write: acp_client.PendingWrite) -> bool:
        shown.append((os.path.basename(write.real_path), write.previous, write.content))
        return write.real_path.endswith("a.txt")  # the editor applies a.txt to its buffer itself

    async with Workspace([root], ask_before=(), buffers=buffer, before_write=before_write) as workspace:
        assert await workspace.read_text_file("s", str(root / "a.txt"), line=2, limit=None) == "unsaved 2\n"
        await workspace.write_text_file("s", str(root / "a.txt"), "to the buffer")
        await workspace.write_text_file("s", str(root / "e.txt"), "to the disk")
    assert shown == [("a.txt", "alpha\nbeta\n", "to the buffer"), ("e.txt", None, "to the disk")]
    assert (root / "a.txt").read_text(encoding="utf-8") == "alpha\nbeta\n"
    assert (root / "e.txt").read_text(encoding="utf-8") == "to the disk"


async def test_a_session_can_be_narrowed_to_its_own_directories(root: Path) -> None:
    (root / "project").mkdir()
    (root / "other").mkdir()
    (root / "other" / "x.txt").write_text("x", encoding="utf-8")
    async with Workspace([root]) as workspace:
        workspace.confine("s", root / "project")
        assert workspace.roots_for("s") == (str(root / "project"),)
        with pytest.raises(acp_client.WorkspaceRefusal, match="outside_roots"):
            await workspace.read_text_file("s", str(root / "other" / "x.txt"), line=None, limit=None)
        assert await workspace.read_text_file("t", str(root / "other" / "x.txt"), line=None, limit=None) == "x"
        with pytest.raises(acp_client.WorkspaceRefusal, match="outside_roots"):
            workspace.confine("s", root.parent)

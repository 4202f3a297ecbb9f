"""The prompt mini-language's file-system and terminal commands reach the client's handlers."""

from __future__ import annotations

import asyncio
import sys

import acp_client
from acp_client import ClientHandlers
from acp_client.handlers import TerminalExit, TerminalOutput
from acp_client.testing import ReferenceAgent
from tests.conftest import bound


class Workspace(ClientHandlers):
    """An in-memory file system and a terminal that really runs the command (a subprocess)."""

    def __init__(self) -> None:
        self.files = {"/work/a.txt": "alpha"}
        self.calls: list[str] = []
        self.terminals: dict[str, tuple[int, str]] = {}

    async def read_text_file(self, session_id: str, path: str, *, line: int | None, limit: int | None) -> str:
        self.calls.append(f"read {path}")
        return self.files[path]

    async def write_text_file(self, session_id: str, path: str, content: str) -> None:
        self.calls.append(f"write {path}")
        self.files[path] = content

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
        self.calls.append(f"terminal {command} {' '.join(args)}")
        proc = await asyncio.create_subprocess_exec(command, *args, stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        terminal_id = f"term-{len(self.terminals) + 1}"
        self.terminals[terminal_id] = (proc.returncode or 0, out.decode())
        return terminal_id

    async def terminal_output(self, session_id: str, terminal_id: str) -> TerminalOutput:
        code, out = self.terminals[terminal_id]
        return TerminalOutput(out, exit_code=code)

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str) -> TerminalExit:
        return TerminalExit(exit_code=self.terminals[terminal_id][0])

    async def release_terminal(self, session_id: str, terminal_id: str) -> None:
        self.calls.append(f"release {terminal_id}")


SCRIPT = f"read /work/a.txt\nwrite /work/b.txt hello there\nread /work/b.txt\nrun {sys.executable} -c print(6*7)"


async def test_v1_commands_call_the_clients_handlers() -> None:
    handlers = Workspace()
    async with ReferenceAgent(1) as agent, acp_client.connect(agent.url, handlers=handlers) as client:
        session = await client.new_session("/work")
        result = await session.prompt(SCRIPT, timeout=bound(20))
    assert result.stop_reason == "end_turn"
    said = session.transcript.messages[-1].text
    assert "read /work/a.txt: alpha" in said
    assert "wrote /work/b.txt" in said and handlers.files["/work/b.txt"] == "hello there"
    assert "read /work/b.txt: hello there" in said
    assert f"ran {sys.executable}: exit 0\n42" in said
    assert handlers.calls == [
        "read /work/a.txt",
        "write /work/b.txt",
        "read /work/b.txt",
        f"terminal {sys.executable} -c print(6*7)",
        "release term-1",
    ]


async def test_without_the_capability_the_agent_says_why() -> None:
    async with ReferenceAgent(1) as agent, acp_client.connect(agent.url) as client:
        session = await client.new_session("/work")
        await session.prompt("read /work/a.txt", timeout=bound(10))
    assert (
        "read /work/a.txt failed: the client did not advertise fs.readTextFile" in session.transcript.messages[-1].text
    )


async def test_v2_uses_the_extension_only_when_the_client_advertised_it() -> None:
    # v2 removed fs/* and terminal/*: without the client's _acp-client extension the agent says so
    async with ReferenceAgent(2) as agent, acp_client.connect(agent.url, handlers=Workspace()) as client:
        session = await client.new_session("/work")
        await session.prompt("run ls", timeout=bound(10))
    assert (
        "run ls failed: the client did not advertise capabilities._meta.acp-client.terminal"
        in session.transcript.messages[-1].text
    )

"""An IDE-plugin style client: spawn an agent over stdio and let it use the workspace, safely.

The agent here is the shipped reference agent speaking ACP v1, run as a child process exactly as an editor
would run a real agent. The plugin answers with the SDK's :class:`~acp_client.handlers.Workspace`: the
agent may read files inside a temporary project (anything outside is refused), and a write or a command
first goes through the "user" (the ``dialog`` below, which a real plugin would show as a prompt). The agent
reads a file, writes one after asking, tries to read outside the project, and asks for a permission of its
own.

Run: ``python examples/ide_plugin.py``
"""

from __future__ import annotations

import asyncio
import logging
import sys
import tempfile
from pathlib import Path

import structlog

from acp_client import Workspace, connect
from acp_client.handlers import PermissionRequest, ask

permission_requests: list[PermissionRequest] = []


async def dialog(request: PermissionRequest) -> str | None:
    """The user's answer: "allow once" (a real plugin shows a dialog); ``None`` would answer *cancelled*."""
    permission_requests.append(request)
    choice = request.option("allow_once")
    offered = ", ".join(f"{o.name} [{o.kind}]" for o in request.options)
    print(f"  permission asked: {request.title or 'the agent wants to run a tool'}; options: {offered}")
    print(f"  -> answering {choice.name if choice else 'cancelled'}")
    return choice.option_id if choice else None


async def main() -> int:
    # an application decides about logging; the library only emits structlog events
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    with tempfile.TemporaryDirectory(prefix="acp-ide-") as tmp:
        project = Path(tmp)
        (project / "main.py").write_text('print("hello from the workspace")\n', encoding="utf-8")
        agent_command = [sys.executable, "-m", "acp_client.testing.reference_agent", "--stdio", "--protocol", "1"]

        print(f"spawning the agent over stdio: {' '.join(agent_command[1:])}")
        async with Workspace([project], permission=ask(dialog)) as workspace, connect(
            agent_command, handlers=workspace, protocol_version=1
        ) as client:
            caps = workspace.client_capabilities(client.protocol_version)
            print(f"connected: protocol v{client.protocol_version}, agent {client.agent_info.get('name')}")
            print(f"client capabilities advertised: {caps}")

            session = await client.new_session(str(project))
            script = [
                f"read {project}/main.py",
                f"write {project}/notes.txt written by the agent",
                f"read {project}/../outside.txt",
                "permission",
            ]
            print(f"session {session.id}; prompt:")
            for line in script:
                print(f"  {line.replace(str(project), '<project>')}")
            result = await session.prompt("\n".join(script), timeout=30)
            reply = session.transcript.messages[-1].text if session.transcript.messages else ""
            print(f"outcome: stop reason {result.stop_reason}; the agent said:")
            for line in reply.replace(str(project), "<project>").splitlines():
                print(f"  {line}")
            written = (project / "notes.txt").read_text(encoding="utf-8")
            print(f"notes.txt on disk: {written!r}")

    ok = (
        result.stop_reason == "end_turn"
        and 'print("hello from the workspace")' in reply
        and "refused (outside_roots)" in reply
        and reply.endswith("permission granted")
        and written == "written by the agent"
        and len(permission_requests) == 2
    )
    print("done" if ok else "unexpected outcome")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

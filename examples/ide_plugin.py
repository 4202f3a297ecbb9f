"""An IDE-plugin style client: spawn an agent over stdio and answer its permission and file requests.

The agent here is the shipped reference agent speaking ACP v1 (file-system handlers exist only in v1), run
as a child process exactly as an editor would run a real agent. The handlers answer for the "user":
permission requests pick the *allow once* option, and file reads are served from a temporary workspace
(paths outside it are refused).

Run: ``python examples/ide_plugin.py``
"""

from __future__ import annotations

import asyncio
import logging
import sys
import tempfile
from pathlib import Path

import structlog

from acp_client import ClientHandlers, InvalidParams, PermissionRequest, connect


class IDEHandlers(ClientHandlers):
    """What the editor answers when the agent asks it something."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace.resolve()
        self.permission_requests: list[PermissionRequest] = []

    async def request_permission(self, request: PermissionRequest) -> str | None:
        """Pick "allow once" (a real plugin would show a dialog); ``None`` would answer *cancelled*."""
        self.permission_requests.append(request)
        choice = request.option("allow_once")
        offered = ", ".join(f"{o.name} [{o.kind}]" for o in request.options)
        print(f"  agent asks for permission; options: {offered}")
        print(f"  -> answering {choice.name if choice else 'cancelled'}")
        return choice.option_id if choice else None

    async def read_text_file(self, session_id: str, path: str, *, line: int | None, limit: int | None) -> str:
        """Serve a file from the workspace (1-based ``line``, at most ``limit`` lines), off the event loop."""
        return await asyncio.to_thread(self._read, path, line, limit)

    def _read(self, path: str, line: int | None, limit: int | None) -> str:
        target = Path(path).resolve()
        if not target.is_relative_to(self.workspace):
            raise InvalidParams(-32602, "Invalid params", {"reason": f"{path} is outside the workspace"})
        lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        end = start + limit if limit is not None else None
        return "".join(lines[start:end])


async def main() -> int:
    # an application decides about logging; the library only emits structlog events
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    with tempfile.TemporaryDirectory(prefix="acp-ide-") as tmp:
        workspace = Path(tmp)
        (workspace / "main.py").write_text('print("hello from the workspace")\n', encoding="utf-8")
        handlers = IDEHandlers(workspace)
        agent_command = [sys.executable, "-m", "acp_client.testing.reference_agent", "--stdio", "--protocol", "1"]

        print(f"spawning the agent over stdio: {' '.join(agent_command[1:])}")
        async with connect(agent_command, handlers=handlers, protocol_version=1) as client:
            caps = handlers.client_capabilities(client.protocol_version)
            print(f"connected: protocol v{client.protocol_version}, agent {client.agent_info.get('name')}")
            print(f"client capabilities advertised: {caps}")

            # the reference agent never reads files by itself: show what fs/read_text_file would answer
            text = await handlers.read_text_file("-", str(workspace / "main.py"), line=1, limit=1)
            print(f"fs/read_text_file main.py -> {text.strip()!r}")

            session = await client.new_session(str(workspace))
            print(f"session {session.id} in {workspace}")
            print('prompt: "permission"')
            result = await session.prompt("permission", timeout=30)
            reply = session.transcript.messages[-1].text if session.transcript.messages else ""
            print(f"outcome: stop reason {result.stop_reason}, agent said {reply!r}")

    ok = result.stop_reason == "end_turn" and reply == "permission granted" and len(handlers.permission_requests) == 1
    print("done" if ok else "unexpected outcome")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

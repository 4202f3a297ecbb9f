"""A Workspace answering a third-party agent: the official Python SDK's client calls (``read_text_file``,
``write_text_file``, the terminal calls), made by the interop agent over stdio, offline."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from acp_client import Workspace, connect
from acp_client.handlers import PermissionRequest, ask
from tests.conftest import bound


async def allow(request: PermissionRequest) -> str | None:
    option = request.option("allow_once")
    return option.option_id if option else None


async def test_the_official_sdk_reads_writes_and_runs_through_a_workspace(
    official_stdio_agent_command: list[str], tmp_path: Path
) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "a.txt").write_text("alpha", encoding="utf-8")
    async with (
        Workspace([root], permission=ask(allow)) as workspace,
        connect(official_stdio_agent_command, handlers=workspace) as client,
    ):
        assert client.protocol_version == 1
        session = await client.new_session(str(root))

        async def said(prompt: str) -> str:
            await asyncio.wait_for(session.prompt(prompt), bound(20))
            return session.transcript.messages[-1].text

        assert (await said(f"/read {root}/a.txt")).endswith(" => read: alpha")
        assert (await said(f"/read {root}/../secret.txt")).endswith(" => error -32602 outside_roots")
        assert (await said(f"/write {root}/b.txt from the sdk")).endswith(" => written")
        assert (root / "b.txt").read_text(encoding="utf-8") == "from the sdk"
        assert (await said(f"/run {sys.executable} -c print(6*7)")).endswith(" => exit 0: 42\n")
        assert workspace.terminal_ids() == []

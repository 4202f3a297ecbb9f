"""A benchmark agent that is not the bottleneck: a raw ``websockets`` server streaming pre-encoded updates.

The reference agent builds, validates and records every update it sends (about 20k updates/s on these
machines), so a throughput benchmark against it measures the agent. This one does the least an ACP agent can
do: it answers ``initialize``, ``session/new`` and ``session/prompt`` minimally, and a prompt ``stream N``
(N ≤ ``--max``) makes it write N ``session/update`` frames prepared when the process started, already UTF-8
encoded (``agent_message_chunk``, ``"chunk i "``, one ``messageId`` per turn: the frames the reference agent
sends). Every connection uses the same session id (``bench-session``): each client has its own connection.

Both protocol versions, chosen per connection by the version the client offers in ``initialize``:

- v1: the N updates, then the ``session/prompt`` response ``{"stopReason": "end_turn"}``;
- v2: the response ``{}`` at once (the prompt is accepted), the N updates, then the ``state_update`` to
  ``idle`` with ``stopReason`` ``end_turn`` that ends a v2 turn.

It runs in its own process (``python benchmarks/_stream_agent.py``), binds 127.0.0.1 on a free port, prints
its URL as the first line of stdout, and after each stream one line ``sent <n> <wall s> <cpu s>``: the wall
time from the first frame to the last one handed to the socket, and the CPU time this process spent on it. A
client slower than the agent pushes back through the socket buffers, so the wall rate then equals the
client's; ``n / cpu`` is the rate the agent could sustain on its own (its capacity). Permessage-deflate is
negotiated when the client offers it (the ``websockets`` default), so compressed runs pay the compression on
this side too. End of stdin stops it.

The same agent serves Streamable HTTP (HTTP/1.1 and h2c) on the same port and path: ``_stream_agent_http.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from _stream_agent_http import HttpSide
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

SESSION_ID = "bench-session"
#: The ``session/status`` answer (the session is always active).
STATUS_RESULT = {"status": "active"}
#: Frames per socket write.
BATCH = 64


def _frame(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def prepare(count: int) -> list[bytes]:
    """The ``count`` update frames (version-independent: the same ``agent_message_chunk`` shape)."""
    return [
        _frame(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {
                    "sessionId": SESSION_ID,
                    "update": {
                        "sessionUpdate": "agent_message_chunk",
                        "messageId": "bench-message",
                        "content": {"type": "text", "text": f"chunk {i} "},
                    },
                },
            }
        )
        for i in range(1, count + 1)
    ]


def _initialize_result(version: int) -> dict[str, Any]:
    info = {"name": "acp-client-stream-agent", "version": "0"}
    if version >= 2:
        return {"protocolVersion": 2, "capabilities": {"session": {"status": {}}}, "info": info, "authMethods": []}
    return {
        "protocolVersion": 1,
        "agentCapabilities": {"loadSession": False, "sessionCapabilities": {"status": {}}},
        "agentInfo": info,
        "authMethods": [],
    }


def _prompt_count(params: Any) -> int:
    blocks = params.get("prompt") if isinstance(params, dict) else None
    text = blocks[0].get("text", "") if isinstance(blocks, list) and blocks and isinstance(blocks[0], dict) else ""
    head, _, rest = str(text).partition(" ")
    return int(rest) if head == "stream" and rest.strip().isdigit() else 0


class StreamAgent:
    def __init__(self, frames: list[bytes]) -> None:
        self.frames = frames

    async def handle(self, ws: ServerConnection) -> None:
        version = 2
        try:
            async for message in ws:
                msg = json.loads(message)
                method, id_, params = msg.get("method"), msg.get("id"), msg.get("params")
                if id_ is None:
                    continue  # notifications (session/cancel ...) are ignored
                if method == "initialize":
                    offered = params.get("protocolVersion") if isinstance(params, dict) else None
                    version = 1 if offered == 1 else 2
                    await self._reply(ws, id_, _initialize_result(version))
                elif method == "session/new":
                    await self._reply(ws, id_, {"sessionId": SESSION_ID})
                elif method == "session/prompt":
                    await self._stream(ws, id_, min(_prompt_count(params), len(self.frames)), version)
                elif method == "session/status":
                    await self._reply(ws, id_, STATUS_RESULT)
                else:
                    error = {"code": -32601, "message": "Method not found"}
                    await ws.send(_frame({"jsonrpc": "2.0", "id": id_, "error": error}), text=True)
        except ConnectionClosed:
            pass

    @staticmethod
    async def _reply(ws: ServerConnection, id_: Any, result: Any) -> None:
        await ws.send(_frame({"jsonrpc": "2.0", "id": id_, "result": result}), text=True)

    async def _stream(self, ws: ServerConnection, id_: Any, n: int, version: int) -> None:
        if version >= 2:
            await self._reply(ws, id_, {})
        c0, t0 = time.process_time(), time.perf_counter()
        # Frames go through websockets' own protocol object (so permessage-deflate applies when negotiated),
        # BATCH at a time, joined into one socket write, then the usual flow control: a write per frame would
        # cost a system call each and make the agent the bottleneck.
        protocol, transport = ws.protocol, ws.transport
        frames = self.frames
        for start in range(0, n, BATCH):
            for frame in frames[start : min(n, start + BATCH)]:
                protocol.send_text(frame)
            transport.write(b"".join(protocol.data_to_send()))
            await ws.drain()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if version >= 2:
            idle = {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
            notification = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": SESSION_ID}}
            notification["params"]["update"] = idle
            await ws.send(_frame(notification), text=True)
        else:
            await self._reply(ws, id_, {"stopReason": "end_turn"})
        sys.stdout.write(f"sent {n} {wall:.6f} {cpu:.6f}\n")
        sys.stdout.flush()


async def _serve(count: int) -> None:
    frames = prepare(count)
    agent = StreamAgent(frames)
    http = HttpSide(frames, _frame, _initialize_result, _prompt_count, SESSION_ID, STATUS_RESULT, BATCH)
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    options = http.serve_options()
    async with serve(agent.handle, "127.0.0.1", 0, max_size=None, ping_interval=None, **options) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        sys.stdout.write(f"ws://127.0.0.1:{port}/acp\n")
        sys.stdout.flush()
        while await stdin.readline():
            pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=100_000, help="largest stream a prompt may ask for")
    args = parser.parse_args()
    asyncio.run(_serve(args.max))
    return 0


if __name__ == "__main__":
    sys.exit(main())

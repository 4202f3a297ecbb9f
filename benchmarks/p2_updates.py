"""P2: ``session/update`` throughput on one long stream — ours vs the official Python SDK vs raw websockets.

The prompt ``stream N`` makes the reference agent send N ``agent_message_chunk`` updates, then answer the
prompt. The official SDK (``agent-client-protocol`` 0.12.1) speaks protocol v1 only, so the agent (separate
process) speaks v1 here and every client uses v1. Each client has its own connection and session; the clock
runs from just before the prompt is sent until the turn is over *and* every update was consumed:

- **ours**: ``session.prompt(...)`` while a task consumes ``session.updates()`` (typed ``SessionUpdate``
  items; the subscription is sized to hold the whole stream so no item is dropped — the count is checked).
- **official SDK**: ``ClientSideConnection.prompt(...)`` over ``acp.ws.create_websocket_stream``; its
  ``session_update`` handler counts the (pydantic-validated) updates. Its ``prompt`` returns once every
  update handler ran.
- **raw floor**: ``websockets`` + ``json.loads`` of every frame, counting notifications until the response.

The agent produces the stream in every case (its send rate bounds all three). The client process's CPU time
per update (``time.process_time``) is reported too: it is what each client costs, independent of the agent.
WebSocket keepalive is off for all three (a long burst can starve the agent's reader past a Pong deadline).
Targets: ours ≥ 1.5x the official SDK's throughput and ≥ 0.5x the raw one.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import time
from typing import Any

import _common
import websockets
from websockets.asyncio.client import connect as _WS_CONNECT

from acp_client import SessionUpdate, connect

SDK_TARGET = 1.5
RAW_TARGET = 0.5
CWD = "/tmp"
STEP_TIMEOUT = 600.0


async def ours(url: str, n: int) -> tuple[float, float]:
    async with connect(url, protocol_version=1, ping_interval=None) as client:
        session = await client.new_session(CWD)
        updates = session.updates(maxsize=n + 16)
        got = 0

        async def consume() -> None:
            nonlocal got
            async for item in updates:
                if isinstance(item, SessionUpdate) and item.kind == "agent_message_chunk":
                    got += 1
                    if got == n:
                        return

        consumer = asyncio.create_task(consume())
        await asyncio.sleep(0)
        c0, t0 = time.process_time(), time.perf_counter()
        async with asyncio.timeout(STEP_TIMEOUT):
            result = await session.prompt(f"stream {n}")
            await consumer
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        if result.stop_reason != "end_turn" or got != n:
            raise RuntimeError(f"ours: {got}/{n} updates, stop {result.stop_reason!r}")
        return elapsed, cpu


class _CountingClient:
    """The official SDK's client-side handler object: counts updates, refuses everything else."""

    def __init__(self) -> None:
        self.count = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if getattr(update, "session_update", None) == "agent_message_chunk":
            self.count += 1

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def official(url: str, n: int) -> tuple[float, float]:
    import acp.ws.client
    from acp import connect_to_agent, text_block
    from acp.ws import create_websocket_stream

    # keepalive off, as for the other two clients (a 100k-update burst can starve the agent's reader, and a
    # late Pong must not end the run); the SDK exposes no option for it, so wrap the connect it calls
    acp.ws.client.ws_connect = functools.partial(_WS_CONNECT, ping_interval=None)

    handler = _CountingClient()
    transport = await create_websocket_stream(url)
    conn = connect_to_agent(handler, transport)  # type: ignore[arg-type]
    try:
        await conn.initialize(protocol_version=1)
        session = await conn.new_session(cwd=CWD, mcp_servers=[])
        c0, t0 = time.process_time(), time.perf_counter()
        async with asyncio.timeout(STEP_TIMEOUT):
            response = await conn.prompt(session_id=session.session_id, prompt=[text_block(f"stream {n}")])
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        if response.stop_reason != "end_turn" or handler.count != n:
            raise RuntimeError(f"official: {handler.count}/{n} updates, stop {response.stop_reason!r}")
        return elapsed, cpu
    finally:
        await conn.close()
        await transport.close()


async def raw(url: str, n: int) -> tuple[float, float]:
    async with websockets.connect(url, max_size=16 * 1024 * 1024, ping_interval=None) as ws:
        init = {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "raw-bench", "version": "0"}}
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}))
        json.loads(await ws.recv())
        new = {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": CWD, "mcpServers": []}}
        await ws.send(json.dumps(new))
        session_id = json.loads(await ws.recv())["result"]["sessionId"]
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": f"stream {n}"}]}
        c0, t0 = time.process_time(), time.perf_counter()
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt}))
        got = 0
        async with asyncio.timeout(STEP_TIMEOUT):
            while True:
                msg = json.loads(await ws.recv())
                if msg.get("method") == "session/update":
                    got += 1
                elif msg.get("id") == 3:
                    break
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        if got != n or msg.get("result", {}).get("stopReason") != "end_turn":
            raise RuntimeError(f"raw: {got}/{n} updates, answer {msg!r}")
        return elapsed, cpu


async def main() -> int:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    _common.quiet_logging()
    n, reps = (10_000, 2) if args.quick else (100_000, 3)
    runs = {"raw": raw, "official": official, "ours": ours}
    wall: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    async with _common.AgentProcess(1) as agent:
        for run in runs.values():  # warm-up: imports, first connection, JIT-less caches
            await run(agent.url, min(n, 2000))
        names = list(runs)
        for rep in range(reps):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:  # rotate the order
                elapsed, spent = await runs[name](agent.url, n)
                wall[name].append(elapsed)
                cpu[name].append(spent)
                print(
                    f"rep {rep + 1}/{reps} {name:>8}: {_common.ms(elapsed)} ({n / elapsed:,.0f} updates/s)", flush=True
                )

    med = {k: _common.median(v) for k, v in wall.items()}
    rate = {k: n / med[k] for k in runs}
    cpu_med = {k: _common.median(v) for k, v in cpu.items()}
    labels = {
        "raw": "raw websockets + `json.loads` (floor)",
        "official": "official SDK `ClientSideConnection` (acp 0.12.1)",
        "ours": "acp-client `session.updates()`",
    }
    header = ["client", "median", "min", "updates/s (median)", "client CPU µs/update", "÷ raw rate", "÷ SDK rate"]
    rows = [
        [
            labels[k],
            _common.ms(med[k]),
            _common.ms(min(wall[k])),
            f"{rate[k]:,.0f}",
            f"{cpu_med[k] / n * 1e6:.1f}",
            f"{rate[k] / rate['raw']:.2f}x",
            f"{rate[k] / rate['official']:.2f}x",
        ]
        for k in runs
    ]
    print(_common.table(header, rows))
    vs_sdk = rate["ours"] / rate["official"]
    vs_raw = rate["ours"] / rate["raw"]
    cpu_sdk = cpu_med["official"] / cpu_med["ours"]
    lines = [
        _common.ratio_line("p2 ours/official throughput", vs_sdk, f">= {SDK_TARGET}x", vs_sdk >= SDK_TARGET),
        _common.ratio_line("p2 ours/raw throughput", vs_raw, f">= {RAW_TARGET}x", vs_raw >= RAW_TARGET),
        f"RATIO p2 official/ours client CPU per update: {cpu_sdk:.2f}x (informational)",
    ]
    for line in lines:
        print(line)
    body = "\n\n".join(
        [
            f"One prompt `stream {n}` (**{n:,} `agent_message_chunk` updates**), protocol v1 (the official SDK "
            f"speaks v1 only), reference agent in a separate process. {reps} repetitions per client, clients "
            "alternating in rotating order, after one warm-up each. The agent's send rate bounds every client; "
            "client CPU per update is each client's own cost.",
            _common.table(header, rows),
            f"Targets: ≥ {SDK_TARGET}x the official SDK's throughput, ≥ {RAW_TARGET}x raw.\n\n"
            + "\n".join(f"- `{line}`" for line in lines),
        ]
    )
    _common.write_section(_common.docs_target(args), "p2", "P2 — session/update throughput", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""P7: what ``acp-client bridge`` costs an editor — prompt round trips and a streamed turn through the bridge.

The editor is the official SDK's client (``acp`` 0.12.1, protocol v1), spawning its agent over stdio as
editors do. Two agents, measured in the same run:

- **baseline**: the reference agent itself over stdio (``acp-client serve-reference --stdio --protocol 1``);
- **bridge**: ``acp-client bridge ws://…`` over stdio, forwarding to the same reference agent served over
  WebSocket in a child process.

Measured per agent: the median round trip of a short prompt (``echo: ping``, one update then the answer),
and the time of one streamed turn of N ``agent_message_chunk`` updates (``stream N``) until its answer, i.e.
updates per second. Then the outage bounds, through a FaultProxy: how long a prompt in flight takes to end
(with the bridge's error) after a TCP cut and after a silent (half-open) drop, and how long a prompt sent
during an outage waits before its error, each against the bound the options set.

Ratios are bridge / baseline (or measured / bound); they are informational: the bridge adds two process
hops per direction (editor → bridge over stdio, bridge → agent over WebSocket), each a system call and a
context switch, which a local stdio agent does not pay. What matters to an editor is the absolute added
latency per prompt (a few milliseconds) and that streaming keeps thousands of updates per second.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from typing import Any

import _common
from acp import RequestError, spawn_agent_process, text_block
from acp.schema import ClientCapabilities

from acp_client.testing import FaultProxy, ReferenceAgent

STEP_TIMEOUT = 300.0


class _Editor:
    def __init__(self) -> None:
        self.updates = 0
        self.changed = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates += 1
        self.changed.set()

    async def until(self, count: int, timeout: float = 30.0) -> None:
        async with asyncio.timeout(timeout):
            while self.updates < count:
                self.changed.clear()
                await self.changed.wait()

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - not asked
        raise RuntimeError("no permission requests in this benchmark")


async def _measure(argv: list[str], prompts: int, chunks: int) -> tuple[list[float], float]:
    editor = _Editor()
    env = {**os.environ, "PYTHONPATH": str(_common.REPO)}
    async with spawn_agent_process(editor, argv[0], *argv[1:], env=env, cwd=str(_common.REPO)) as (conn, _):
        await conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities())
        sid = (await conn.new_session(cwd="/tmp", mcp_servers=[])).session_id
        for _ in range(5):  # warm-up
            await conn.prompt(session_id=sid, prompt=[text_block("echo: ping")])
        rtts = []
        for _ in range(prompts):
            started = time.perf_counter()
            await conn.prompt(session_id=sid, prompt=[text_block("echo: ping")])
            rtts.append(time.perf_counter() - started)
        before = editor.updates
        started = time.perf_counter()
        await conn.prompt(session_id=sid, prompt=[text_block(f"stream {chunks}")])
        streamed = time.perf_counter() - started
        assert editor.updates - before == chunks, (editor.updates - before, chunks)
    return rtts, streamed


async def _outage(kind: str, options: list[str]) -> float:
    """Seconds from the fault to the bridge's error for a prompt (in flight, or sent during the outage)."""
    editor = _Editor()
    env = {**os.environ, "PYTHONPATH": str(_common.REPO)}
    argv = [sys.executable, "-m", "acp_client.cli", "bridge"]
    async with ReferenceAgent(1) as agent, FaultProxy("127.0.0.1", agent.port) as proxy:
        command = [*argv, proxy.url(), *options]
        async with spawn_agent_process(editor, command[0], *command[1:], env=env, cwd=str(_common.REPO)) as (conn, _):
            await conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities())
            sid = (await conn.new_session(cwd="/tmp", mcp_servers=[])).session_id
            if kind == "outage":
                proxy.set_listener("refuse")
                await proxy.cut_all()
                turn = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("echo: x")]))
                started = time.perf_counter()
            else:
                turn = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("stream 600 every 0.05")]))
                await editor.until(3)
                started = time.perf_counter()
                if kind == "cut":
                    await proxy.cut_all()
                else:
                    proxy.blackhole_all()
            with contextlib.suppress(RequestError):  # the error is what is timed
                await turn
            elapsed = time.perf_counter() - started
            proxy.restore()
    return elapsed


async def main() -> int:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    _common.quiet_logging()
    prompts, chunks = (30, 500) if args.quick else (300, 5000)
    cli = [sys.executable, "-m", "acp_client.cli"]
    async with asyncio.timeout(STEP_TIMEOUT), _common.AgentProcess(1) as agent:
        base_rtt, base_stream = await _measure([*cli, "serve-reference", "--stdio", "--protocol", "1"], prompts, chunks)
        bridge_rtt, bridge_stream = await _measure([*cli, "bridge", agent.url], prompts, chunks)
        ping = 0.5 if args.quick else 2.0
        wait = 1.0 if args.quick else 3.0
        liveness = ["--ping-interval", str(ping), "--ping-timeout", str(ping)]
        cut = await _outage("cut", liveness)
        silent = await _outage("blackhole", liveness)
        waited = await _outage("outage", ["--outage-timeout", str(wait)])
    rtt_ratio = _common.median(bridge_rtt) / _common.median(base_rtt)
    stream_ratio = bridge_stream / base_stream
    rows = [
        [
            "prompt round trip (median, p95)",
            f"{_common.ms(_common.median(base_rtt))}, {_common.ms(_common.percentile(base_rtt, 95))}",
            f"{_common.ms(_common.median(bridge_rtt))}, {_common.ms(_common.percentile(bridge_rtt, 95))}",
            f"{rtt_ratio:.2f}x",
        ],
        [
            f"streamed turn of {chunks} chunks",
            f"{_common.ms(base_stream)} ({chunks / base_stream:,.0f}/s)",
            f"{_common.ms(bridge_stream)} ({chunks / bridge_stream:,.0f}/s)",
            f"{stream_ratio:.2f}x",
        ],
    ]
    body = _common.table(["measure", "baseline (agent on stdio)", "through the bridge", "ratio"], rows)
    bounds = [
        ["prompt in flight, TCP cut", "immediate", _common.ms(cut)],
        ["prompt in flight, silent drop", f"ping {ping:g} s + timeout {ping:g} s", _common.ms(silent)],
        ["prompt sent during an outage", f"--outage-timeout {wait:g} s", _common.ms(waited)],
    ]
    body += "\n\nOutage bounds (time from the fault to the editor's error):\n\n"
    body += _common.table(["case", "bound", "measured"], bounds)
    print(body)
    added = _common.median(bridge_rtt) - _common.median(base_rtt)
    print(f"added latency per prompt (median): {_common.ms(added)}")
    print(_common.ratio_line("bridge prompt round trip / direct stdio", rtt_ratio, "informational", True))
    print(_common.ratio_line("bridge streamed turn / direct stdio", stream_ratio, "informational", True))
    silent_ratio = silent / (2 * ping)
    print(_common.ratio_line("silent drop noticed / ping bound", silent_ratio, "<= 1x", silent_ratio <= 1.0))
    _common.write_section(_common.docs_target(args), "p7", "P7: the editor bridge's overhead", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

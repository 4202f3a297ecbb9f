"""P7: what ``acp-client bridge`` costs an editor — prompt round trips and a streamed turn through the bridge.

The editor is the official SDK's client (``acp`` 0.12.1, protocol v1), spawning its agent over stdio as
editors do. Two agents, measured in the same run:

- **baseline**: the reference agent itself over stdio (``acp-client serve-reference --stdio --protocol 1``);
- **bridge**: ``acp-client bridge ws://…`` over stdio, forwarding to the same reference agent served over
  WebSocket in a child process.

Measured per agent: the median round trip of a short prompt (``echo: ping``, one update then the answer),
and the time of one streamed turn of N ``agent_message_chunk`` updates (``stream N``) until its answer, i.e.
updates per second. Ratios are bridge / baseline; they are informational: the bridge adds two process
hops per direction (editor → bridge over stdio, bridge → agent over WebSocket), each a system call and a
context switch, which a local stdio agent does not pay. What matters to an editor is the absolute added
latency per prompt (a few milliseconds) and that streaming keeps thousands of updates per second.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import _common
from acp import spawn_agent_process, text_block
from acp.schema import ClientCapabilities

STEP_TIMEOUT = 300.0


class _Editor:
    def __init__(self) -> None:
        self.updates = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates += 1

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


async def main() -> int:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    _common.quiet_logging()
    prompts, chunks = (30, 500) if args.quick else (300, 5000)
    cli = [sys.executable, "-m", "acp_client.cli"]
    async with asyncio.timeout(STEP_TIMEOUT), _common.AgentProcess(1) as agent:
        base_rtt, base_stream = await _measure([*cli, "serve-reference", "--stdio", "--protocol", "1"], prompts, chunks)
        bridge_rtt, bridge_stream = await _measure([*cli, "bridge", agent.url], prompts, chunks)
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
    print(body)
    added = _common.median(bridge_rtt) - _common.median(base_rtt)
    print(f"added latency per prompt (median): {_common.ms(added)}")
    print(_common.ratio_line("bridge prompt round trip / direct stdio", rtt_ratio, "informational", True))
    print(_common.ratio_line("bridge streamed turn / direct stdio", stream_ratio, "informational", True))
    _common.write_section(_common.docs_target(args), "p7", "P7: the editor bridge's overhead", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

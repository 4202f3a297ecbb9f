"""P10: P2 (update throughput) and P3 (status round trip) over Streamable HTTP next to WebSocket, same run.

One reference agent (v2, separate process) serves WebSocket and Streamable HTTP on the same port and path.
Three acp-client clients, each with its own connection and session: WebSocket (permessage-deflate off, the
fastest WebSocket setting), Streamable HTTP over HTTP/1.1 and over h2c (HTTP/2 with prior knowledge).
Keepalives are off for all. Rounds alternate between the clients so drift on a noisy machine hits all alike.

- **P3**: ``client.session_status`` one at a time; p50/p99 of every round trip. Over HTTP a round trip is a
  POST answered 202 plus the answer on the connection's SSE stream.
- **P2**: ``session.prompt("stream N")`` while a task consumes ``session.updates()``; updates per second from
  just before the prompt until the turn is over and every update was consumed. The reference agent builds
  every update itself (it tops out near 20k updates/s), so this compares the transports under the same
  agent, not the client's ceiling (P2 in its own section measures that).

Reported as ratios HTTP/WebSocket (latency: higher is slower; throughput: lower is slower), without a
target: the price of the transport, to choose by (``docs/topics/transports.md``).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import _common

from acp_client import TransportOptions, connect
from acp_client.sessions import SessionUpdate

CLIENTS = (
    ("WebSocket", "ws", TransportOptions(ping_interval=None, compression=None)),
    ("Streamable HTTP, HTTP/1.1", "http", TransportOptions(ping_interval=None, http2=False)),
    ("Streamable HTTP, h2c", "http", TransportOptions(ping_interval=None, http2="prior_knowledge")),
)


async def status_round(client: Any, session_id: str, n: int) -> list[float]:
    samples = []
    perf = time.perf_counter
    for _ in range(n):
        t0 = perf()
        await client.session_status(session_id)
        samples.append(perf() - t0)
    return samples


async def stream_round(session: Any, n: int) -> float:
    """Updates per second of one ``stream n`` turn, every update consumed."""
    updates = session.updates(maxsize=n + 100)
    seen = 0

    async def consume() -> None:
        nonlocal seen
        async for item in updates:
            if isinstance(item, SessionUpdate) and item.kind == "agent_message_chunk":
                seen += 1
                if seen == n:
                    return

    t0 = time.perf_counter()
    consumer = asyncio.create_task(consume())
    await session.prompt(f"stream {n}")
    await asyncio.wait_for(consumer, 60)
    elapsed = time.perf_counter() - t0
    return n / elapsed


async def main() -> int:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    _common.quiet_logging()
    status_n, stream_n, rounds, warmup = (200, 500, 2, 30) if args.quick else (1500, 3000, 5, 200)
    async with _common.AgentProcess(2) as agent:
        urls = {"ws": agent.url, "http": "http" + agent.url[2:]}
        clients = []
        for name, scheme, options in CLIENTS:
            client = await connect(urls[scheme], protocol_version=2, transport_options=options)
            session = await client.new_session("/tmp")
            clients.append((name, client, session))
        try:
            latency: dict[str, list[float]] = {name: [] for name, _, _ in clients}
            throughput: dict[str, list[float]] = {name: [] for name, _, _ in clients}
            for _name, client, session in clients:
                await status_round(client, session.id, warmup)
                await stream_round(session, warmup)
            for _ in range(rounds):
                for name, client, session in clients:
                    latency[name] += await status_round(client, session.id, status_n)
                for name, _client, session in clients:
                    throughput[name].append(await stream_round(session, stream_n))
        finally:
            for _name, client, _session in clients:
                await client.aclose()

    p = _common.percentile
    ws_name = CLIENTS[0][0]
    ws50, ws99 = p(latency[ws_name], 0.5), p(latency[ws_name], 0.99)
    ws_rate = _common.median(throughput[ws_name])
    rows = []
    lines = []
    for name, _, _ in CLIENTS:
        p50, p99 = p(latency[name], 0.5), p(latency[name], 0.99)
        rate = _common.median(throughput[name])
        rows.append(
            [
                name,
                _common.us(p50),
                _common.us(p99),
                f"{p50 / ws50:.2f}x",
                f"{rate:,.0f}/s",
                f"{rate / ws_rate:.2f}x",
            ]
        )
        if name != ws_name:
            lines.append(f"RATIO p10 P3 status p50 {name}/WebSocket: {p50 / ws50:.2f}x (higher is slower)")
            lines.append(f"RATIO p10 P3 status p99 {name}/WebSocket: {p99 / ws99:.2f}x (higher is slower)")
            lines.append(f"RATIO p10 P2 updates/s {name}/WebSocket: {rate / ws_rate:.2f}x (lower is slower)")
    header = ["transport", "P3 p50", "P3 p99", "P3 p50 vs WS", "P2 updates/s (median)", "P2 vs WS"]
    table = _common.table(header, rows)
    print(table)
    for line in lines:
        print(line)
    body = "\n\n".join(
        [
            "The reference agent (v2, separate process) serves WebSocket and Streamable HTTP on one port; one "
            f"client per transport, each with its own session. {rounds} alternating rounds of {status_n} "
            f"`session/status` round trips (P3) and one `stream {stream_n}` turn (P2) per client, after a "
            "warm-up. WebSocket without permessage-deflate; keepalives off.",
            table,
            "\n".join(f"- {line}" for line in lines),
        ]
    )
    _common.write_section(_common.docs_target(args), "p10", "P10 — P2 and P3 over Streamable HTTP", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

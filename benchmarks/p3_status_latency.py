"""P3: ``session/status`` round-trip latency — ``ACPClient.session_status`` vs raw ``websockets`` send/recv.

Both clients talk to the same reference agent (v2, separate process) over their own WebSocket, each with one
session. The raw client sends the very frame ours sends (``{"jsonrpc":"2.0","id":N,"method":"session/status",
"params":{"sessionId":…}}``), built with ``json.dumps`` inside the timing as ours builds it inside the call
(until 2026-12-02 the raw frame was built before the clock started), and waits for the answer with ``recv``
+ ``json.loads``: the floor for one request on this stack. Neither side compresses: our client offers no
permessage-deflate to a loopback host, and the raw client is told the same (with both compressing, as
before 2026-12-02, each round trip was about 220 µs slower on both sides). Rounds alternate (raw, ours,
raw, ours, …) so drift on a noisy machine hits both.
Reported: p50 and p99 of every single round trip, and the ratio ours/raw of each. Target: p50 ≤ 1.3x raw.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import _common
import websockets

from acp_client import connect

TARGET = 1.3


async def raw_client(url: str) -> tuple[websockets.ClientConnection, str]:
    # no permessage-deflate: our client offers none to a loopback host either (the same wire format)
    ws = await websockets.connect(url, max_size=16 * 1024 * 1024, compression=None)
    init = {"protocolVersion": 2, "capabilities": {}, "info": {"name": "raw-bench", "version": "0"}}
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}))
    json.loads(await ws.recv())
    await ws.send(
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}})
    )
    while True:
        msg = json.loads(await ws.recv())
        if msg.get("id") == 2:
            return ws, msg["result"]["sessionId"]


async def raw_round(ws: websockets.ClientConnection, session_id: str, first_id: int, n: int) -> list[float]:
    samples = []
    perf = time.perf_counter
    for i in range(first_id, first_id + n):
        t0 = perf()  # the frame is built inside the timing, as ours builds its own inside session_status()
        frame = json.dumps({"jsonrpc": "2.0", "id": i, "method": "session/status", "params": {"sessionId": session_id}})
        await ws.send(frame)
        while True:
            msg = json.loads(await ws.recv())
            if msg.get("id") == i:
                break
        samples.append(perf() - t0)
        if "result" not in msg:
            raise RuntimeError(f"status failed: {msg}")
    return samples


async def ours_round(client, session_id: str, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    samples = []
    perf = time.perf_counter
    status = client.session_status
    for _ in range(n):
        t0 = perf()
        await status(session_id)
        samples.append(perf() - t0)
    return samples


async def bare_span_round(client, session_id: str, n: int, tracer) -> list[float]:  # type: ignore[no-untyped-def]
    """``ours_round`` with one bare SDK span (no attributes, no propagation) started and ended around each call
    by the benchmark itself: what any span per request costs, whoever makes it."""
    samples = []
    perf = time.perf_counter
    status = client.session_status
    start_span = tracer.start_span
    for _ in range(n):
        t0 = perf()
        span = start_span("session/status")
        await status(session_id)
        span.end()
        samples.append(perf() - t0)
    return samples


async def floor_round(client, session_id: str, n: int, tracer, histogram) -> list[float]:  # type: ignore[no-untyped-def]
    """``ours_round`` with the SDK calls a per-request instrumentation under a 1 % sampler cannot avoid, made
    by the benchmark itself: a span started (the sampler's decision; dropped 99 times in 100) and ended, and
    one duration recorded on an SDK histogram with the four attributes ours carries."""
    samples = []
    perf = time.perf_counter
    status = client.session_status
    start_span = tracer.start_span
    record = histogram.record
    attributes = {"rpc.method": "session/status", "rpc.system.name": "jsonrpc", "server.address": "127.0.0.1",
                  "server.port": 1}  # fmt: skip
    for _ in range(n):
        t0 = perf()
        span = start_span("session/status")
        await status(session_id)
        span.end()
        record(perf() - t0, attributes)
        samples.append(perf() - t0)
    return samples


async def otel_main(args: argparse.Namespace) -> int:
    """``--otel``: the same round trips with the otel extra not installed, off and on, and the breakdown modes
    (one client each, short alternating rounds so that load drifting on a shared machine hits every mode
    alike); reports each mode's p50/p99 and the ratios against ``none``."""
    per_round, rounds, warmup = (100, 6, 50) if args.quick else (250, 84, 300)
    modes = _common.OtelModes(with_breakdown=True)
    samples: dict[str, list[float]] = {name: [] for name in modes.names}
    async with _common.AgentProcess(2) as agent:
        clients = {}
        sids: dict[str, str] = {}
        try:
            for name in modes.names:  # "none" first: OpenTelemetry is not imported before it connects
                with modes.mode(name):
                    client = clients[name] = await connect(agent.url, protocol_version=2)
                    sids[name] = (await client.new_session("/tmp")).id
                    await ours_round(client, sids[name], warmup)
            tracer = modes.bare_tracer()
            floor_tracer, floor_histogram = modes.floor_instruments()
            for round_ in range(rounds):
                for name in _common.rotated(modes.names, round_):  # no mode always runs first
                    if name == "sdk-span":
                        samples[name] += await bare_span_round(clients[name], sids[name], per_round, tracer)
                    elif name == "sdk-floor-1pct":
                        samples[name] += await floor_round(
                            clients[name], sids[name], per_round, floor_tracer, floor_histogram
                        )
                    else:
                        samples[name] += await ours_round(clients[name], sids[name], per_round)
        finally:
            for client in clients.values():
                await client.aclose()
            modes.shutdown()
    return _common.report_otel(args, "p3", "P3 (otel) — session/status latency with the otel extra", samples, modes,
                               "`session/status` round trips, one at a time, one connection per mode (WebSocket, v2; "
                               f"agent in its own process); {rounds} alternating rounds of {per_round} per mode after "
                               f"{warmup} warm-up ones.", lower_is_better=True)


async def main() -> int:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    _common.quiet_logging()
    if args.otel:
        return await otel_main(args)
    per_round, rounds, warmup = (300, 3, 50) if args.quick else (3000, 7, 300)
    async with _common.AgentProcess(2) as agent:
        ws, raw_sid = await raw_client(agent.url)
        client = await connect(agent.url, protocol_version=2)
        try:
            ours_sid = (await client.new_session("/tmp")).id
            await raw_round(ws, raw_sid, 10, warmup)
            await ours_round(client, ours_sid, warmup)
            raw: list[float] = []
            ours: list[float] = []
            next_id = 10 + warmup
            for _ in range(rounds):
                raw += await raw_round(ws, raw_sid, next_id, per_round)
                next_id += per_round
                ours += await ours_round(client, ours_sid, per_round)
        finally:
            await client.aclose()
            await ws.close()

    p = _common.percentile
    rows = []
    for name, samples in (("raw websockets + json (baseline)", raw), ("acp-client `session_status`", ours)):
        rows.append(
            [
                name,
                str(len(samples)),
                _common.us(p(samples, 0.5)),
                _common.us(p(samples, 0.99)),
                _common.us(min(samples)),
            ]
        )
    r50 = p(ours, 0.5) / p(raw, 0.5)
    r99 = p(ours, 0.99) / p(raw, 0.99)
    print(_common.table(["client", "round trips", "p50", "p99", "min"], rows))
    line50 = _common.ratio_line("p3 status p50 ours/raw", r50, f"<= {TARGET}x", r50 <= TARGET)
    line99 = f"RATIO p3 status p99 ours/raw: {r99:.2f}x (informational)"
    print(line50)
    print(line99)
    body = "\n\n".join(
        [
            "`session/status` round trips, one at a time, on one connection per client; the agent (v2, separate "
            f"process) answers both. {rounds} alternating rounds of {per_round} round trips per client after "
            f"{warmup} warm-up ones.",
            _common.table(["client", "round trips", "p50", "p99", "min"], rows),
            f"Ratio ours/raw: **p50 {r50:.2f}x**, p99 {r99:.2f}x — target p50 ≤ {TARGET}x: "
            f"**{'met' if r50 <= TARGET else 'missed'}**.",
        ]
    )
    _common.write_section(_common.docs_target(args), "p3", "P3 — session/status latency", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

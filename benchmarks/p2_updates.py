"""P2: ``session/update`` throughput on one long stream — ours vs the official Python SDK vs raw websockets.

The agent is ``_stream_agent.py`` (its own process): a raw ``websockets`` server that writes pre-encoded
``agent_message_chunk`` frames as fast as the socket takes them, so the *client* is the bottleneck (the
reference agent, which builds and records every update, tops out near 20k updates/s and made every client look
alike). One prompt ``stream N`` per run; each client has its own connection and session; the clock runs from
just before the prompt is sent until the turn is over *and* every update was consumed:

- **ours**: ``session.prompt(...)`` while a task consumes ``session.updates()`` (typed ``SessionUpdate``
  items; the transcript is on, as by default; the subscription holds the whole stream so nothing is dropped
  — the count is checked).
- **official SDK** (``agent-client-protocol`` 0.12.1, v1 only): ``ClientSideConnection.prompt(...)`` over
  ``acp.ws.create_websocket_stream``; its ``session_update`` handler counts the (pydantic-validated)
  updates. Its ``prompt`` returns once every update handler ran.
- **raw floor**: ``websockets`` + ``json.loads`` of every frame, counting notifications until the end of the
  turn (v1: the response; v2: the ``idle`` ``state_update``).

Every combination of protocol v1/v2 and permessage-deflate on/off (``compression="deflate"``/``None``; the
official SDK always offers deflate, so it is measured with the websockets default, and with it turned off by
wrapping the connect it calls). Beside each client: the agent's own send rate in that run (wall, from its first
frame to its last) and its capacity (updates per agent CPU second): when the agent's capacity is well above a
client's rate, the client is what limits the stream. WebSocket keepalive is off for all clients.
Targets: ours ≥ 1.5x the official SDK's throughput and ≥ 0.7x the raw one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import functools
import gc
import json
import pstats
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import _common
import websockets
from websockets.asyncio.client import connect as _WS_CONNECT

from acp_client import SessionUpdate, TransportOptions, connect

SDK_TARGET = 1.5
RAW_TARGET = 0.7
CWD = "/tmp"
STEP_TIMEOUT = 600.0
AGENT_SCRIPT = _common.HERE / "_stream_agent.py"
Compression = str | None


class StreamAgentProcess(_common.ChildProcess):
    """``_stream_agent.py`` in a child process; :meth:`sent` reads its report of the last stream."""

    def __init__(self, max_count: int) -> None:
        super().__init__()
        self.max_count = max_count

    def argv(self) -> list[str]:
        return [str(AGENT_SCRIPT), "--max", str(self.max_count)]

    async def sent(self) -> tuple[int, float, float]:
        """``(n, wall seconds, agent CPU seconds)`` of the stream the agent finished last."""
        words = (await self._line(_common.AGENT_START_TIMEOUT)).split()
        if len(words) != 4 or words[0] != "sent":
            raise RuntimeError(f"the stream agent reported {' '.join(words)!r}")
        return int(words[1]), float(words[2]), float(words[3])


# ---------------------------------------------------------------------------------------------- clients


#: ``--wire-log FILE``: our client writes a wire log there (payload-free lines; the cost of the log when on)
WIRE_LOG: dict[str, Any] = {}


async def ours(url: str, n: int, version: int, compression: Compression) -> tuple[float, float]:
    async with connect(
        url,
        protocol_version=version,
        transport_options=TransportOptions(ping_interval=None, compression=compression),
        **WIRE_LOG,
    ) as client:
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
        roles = [m.role for m in session.transcript.messages]
        if roles != ["user", "agent"]:
            raise RuntimeError(f"ours: transcript of {roles}, expected the prompt and one agent message")
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


async def official(url: str, n: int, version: int, compression: Compression) -> tuple[float, float]:
    import acp.ws.client
    from acp import connect_to_agent, text_block
    from acp.ws import create_websocket_stream

    assert version == 1, "the official SDK 0.12.1 speaks protocol v1 only"
    # keepalive off, as for the other clients; the SDK exposes no option for it (nor for compression), so
    # wrap the connect it calls
    extra: dict[str, Any] = {} if compression == "deflate" else {"compression": None}
    acp.ws.client.ws_connect = functools.partial(_WS_CONNECT, ping_interval=None, **extra)

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


async def raw(url: str, n: int, version: int, compression: Compression) -> tuple[float, float]:
    options: dict[str, Any] = {"max_size": 16 * 1024 * 1024, "ping_interval": None}
    if compression is None:
        options["compression"] = None
    async with websockets.connect(url, **options) as ws:
        init = {"protocolVersion": version, "clientCapabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
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
                    update = msg["params"]["update"]
                    if update.get("sessionUpdate") == "agent_message_chunk":
                        got += 1
                    elif version >= 2 and update.get("state") == "idle":
                        break
                elif version < 2 and msg.get("id") == 3:
                    break
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        if got != n:
            raise RuntimeError(f"raw: {got}/{n} updates, last {msg!r}")
        return elapsed, cpu


Runner = Callable[[str, int, int, Compression], Awaitable[tuple[float, float]]]
RUNNERS: dict[str, Runner] = {"raw": raw, "official": official, "ours": ours}
LABELS = {
    "raw": "raw websockets + `json.loads` (floor)",
    "official": "official SDK (acp 0.12.1)",
    "ours": "acp-client `session.updates()`",
}


@dataclass
class Runs:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    agent_wall: list[float] = field(default_factory=list)
    agent_cpu: list[float] = field(default_factory=list)


SCENARIOS: list[tuple[int, Compression]] = [(1, "deflate"), (1, None), (2, "deflate"), (2, None)]


def _scenarios() -> list[tuple[int, Compression]]:
    return SCENARIOS


def _clients(version: int) -> list[str]:
    return ["raw", "official", "ours"] if version == 1 else ["raw", "ours"]


async def measure(agent: StreamAgentProcess, n: int, reps: int) -> dict[tuple[int, Compression, str], Runs]:
    results: dict[tuple[int, Compression, str], Runs] = {}
    for version, compression in _scenarios():
        names = _clients(version)
        for name in names:  # warm-up: imports, first connection, lazily built validators
            await RUNNERS[name](agent.url, min(n, 2000), version, compression)
            await agent.sent()
        for rep in range(reps):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:  # rotate the order
                # a full collection walks the whole process's heap (every module, the SDK's pydantic models,
                # the previous clients' garbage): tens of ms, a fifth of a 20,000-update run, that would land
                # on whichever client happens to cross the threshold. Each starts from a collected heap.
                gc.collect()
                elapsed, spent = await RUNNERS[name](agent.url, n, version, compression)
                _, agent_wall, agent_cpu = await agent.sent()
                runs = results.setdefault((version, compression, name), Runs())
                runs.wall.append(elapsed)
                runs.cpu.append(spent)
                runs.agent_wall.append(agent_wall)
                runs.agent_cpu.append(agent_cpu)
                print(
                    f"v{version} {compression or 'no compression':>14} rep {rep + 1}/{reps} {name:>8}: "
                    f"{_common.ms(elapsed)} ({n / elapsed:,.0f} updates/s; agent capacity "
                    f"{n / max(agent_cpu, 1e-9):,.0f}/s)",
                    flush=True,
                )
    return results


#: Where the client's CPU goes, by the file a function lives in (first match wins).
_LAYERS = [
    ("websockets", "websockets: frame parsing, UTF-8, the per-message recv hand-off"),
    ("asyncio", "asyncio: event loop, tasks, socket reads"),
    ("acp_client/jsonrpc", "acp-client JSON-RPC: the JSON parse (pydantic_core, called here), envelope checks"),
    ("acp_client/connection", "acp-client connection: read loop, dispatch"),
    ("acp_client/transports", "acp-client WebSocket transport wrapper"),
    ("acp_client/client", "acp-client routing to the session"),
    ("acp_client/schema", "acp-client update parse (lazy model)"),
    ("acp_client/sessions/_transcript", "acp-client transcript"),
    ("acp_client/sessions", "acp-client session: state, SessionUpdate, fan-out, iterator"),
    ("p2_updates", "benchmark consumer loop"),
    ("~", "builtins called from anywhere (dict and str methods, isinstance ...)"),
]


async def profile(url: str, n: int, version: int, compression: Compression) -> list[list[str]]:
    """One ``ours`` run under cProfile: the share of own time (tottime) per layer. cProfile's per-call cost
    inflates layers of many small calls, so read the shares as a rough picture."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        await ours(url, n, version, compression)
    finally:
        profiler.disable()
    stats: Any = pstats.Stats(profiler).stats
    shares: dict[str, float] = {}
    for (filename, _line, _name), (_cc, _nc, tottime, _ct, _callers) in stats.items():
        label = next((label for key, label in _LAYERS if key in filename), "other Python code")
        shares[label] = shares.get(label, 0.0) + tottime
    total = sum(shares.values()) or 1.0
    ordered = sorted(shares.items(), key=lambda kv: kv[1], reverse=True)
    return [
        [label, f"{seconds / total * 100:.0f}%", f"{seconds / n * 1e6:.1f}"] for label, seconds in ordered if seconds
    ]


def report(
    results: dict[tuple[int, Compression, str], Runs],
    n: int,
    reps: int,
    args: Any,
    layers: list[list[str]] | None = None,
    write: bool = True,
) -> str:
    header = [
        "protocol, compression",
        "client",
        "median",
        "updates/s",
        "client CPU µs/update",
        "agent send rate",
        "agent capacity",
        "÷ raw",
        "÷ SDK",
    ]
    rows: list[list[str]] = []
    lines: list[str] = []
    for version, compression in _scenarios():
        rate = {name: n / _common.median(results[(version, compression, name)].wall) for name in _clients(version)}
        for name in _clients(version):
            runs = results[(version, compression, name)]
            rows.append(
                [
                    f"v{version}, {compression or 'off'}",
                    LABELS[name],
                    _common.ms(_common.median(runs.wall)),
                    f"{rate[name]:,.0f}",
                    f"{_common.median(runs.cpu) / n * 1e6:.1f}",
                    f"{n / _common.median(runs.agent_wall):,.0f}/s",
                    f"{n / max(_common.median(runs.agent_cpu), 1e-9):,.0f}/s",
                    f"{rate[name] / rate['raw']:.2f}x",
                    f"{rate[name] / rate['official']:.2f}x" if "official" in rate else "n/a",
                ]
            )
        tag = f"v{version} {compression or 'uncompressed'}"
        vs_raw = rate["ours"] / rate["raw"]
        met_raw = vs_raw >= RAW_TARGET
        lines.append(_common.ratio_line(f"p2 {tag} ours/raw throughput", vs_raw, f">= {RAW_TARGET}x", met_raw))
        cpu = {name: _common.median(results[(version, compression, name)].cpu) for name in _clients(version)}
        lines.append(
            f"RATIO p2 {tag} ours/raw by client CPU per update: {cpu['raw'] / cpu['ours']:.2f}x (informational: "
            "what each client costs, independent of how the shared machine schedules the processes)"
        )
        if "official" in rate:
            vs_sdk = rate["ours"] / rate["official"]
            met_sdk = vs_sdk >= SDK_TARGET
            lines.append(_common.ratio_line(f"p2 {tag} ours/official throughput", vs_sdk, f">= {SDK_TARGET}x", met_sdk))
    table = _common.table(header, rows)
    print(table)
    for line in lines:
        print(line)
    body = "\n\n".join(
        [
            f"One prompt `stream {n}` (**{n:,} `agent_message_chunk` updates**) per run from `_stream_agent.py` "
            f"(raw websockets, pre-encoded frames, its own process), protocol v1 and v2, permessage-deflate on "
            f"and off. Median of {reps} runs per client, clients alternating in rotating order, after one "
            "warm-up each; the transcript is on for acp-client. *Agent send rate* is the agent's wall rate in "
            "the same runs (it equals the client's when the client pushes back); *agent capacity* is updates "
            "per agent CPU second, what the agent could send if no client held it back. The official SDK "
            "speaks v1 only.",
            table,
            f"Targets: ≥ {SDK_TARGET}x the official SDK's throughput, ≥ {RAW_TARGET}x raw.\n\n"
            + "\n".join(f"- `{line}`" for line in lines),
        ]
        + (
            [
                "Where acp-client's CPU goes (one more v1 uncompressed run under cProfile, in this run; own time "
                "per layer; cProfile's per-call overhead inflates many-small-call layers, so shares are rough). The "
                "raw floor pays the websockets and asyncio rows too, plus `json.loads`; everything else is what "
                "acp-client adds per update:",
                _common.table(["layer", "share of own time", "µs per update (profiled)"], layers),
            ]
            if layers
            else []
        )
    )
    if write:
        _common.write_section(_common.docs_target(args), "p2", "P2 — session/update throughput", body)
    return body


#: a process that only burns CPU, as another job on a shared machine does
HOG = "while True: pass"


@contextlib.asynccontextmanager
async def cpu_hogs(count: int) -> AsyncIterator[None]:
    """``count`` busy processes for the duration of the block (each takes a core if the scheduler lets it)."""
    procs = [await asyncio.create_subprocess_exec(sys.executable, "-c", HOG) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            await proc.wait()


async def otel_main(args: argparse.Namespace) -> int:
    """``--otel``: our client's throughput (v2, no compression) with the otel extra not installed, off and
    on, alternating runs; reports the median updates/s of each mode and the slowdowns on/none, off/none."""
    n, reps = (3_000, 2) if args.quick else (10_000, 25)  # many short runs: load drift hits every mode alike
    modes = _common.OtelModes()
    rates: dict[str, list[float]] = {name: [] for name in modes.names}
    async with StreamAgentProcess(n) as agent:
        try:
            await ours(agent.url, n, 2, None)  # warm-up, before OpenTelemetry is imported
            await agent.sent()
            for rep in range(reps):
                for name in _common.rotated(modes.names, rep):  # no mode always runs first
                    with modes.mode(name):
                        elapsed, _cpu = await ours(agent.url, n, 2, None)
                    await agent.sent()
                    rates[name].append(n / elapsed)
        finally:
            modes.shutdown()
    return _common.report_otel(
        args,
        "p2",
        "P2 (otel) — session/update throughput with the otel extra",
        rates,
        modes,
        f"One `stream {n}` turn per run (WebSocket, v2, no compression; the stream agent in its own process), a "
        f"new connection per run; {reps} alternating runs per mode after one warm-up.",
        lower_is_better=False,
    )


async def main() -> int:
    cli = _common.parser(__doc__.splitlines()[0])
    cli.add_argument("--hog", type=int, nargs="?", const=1, default=0, help="run N busy processes beside it (1)")
    cli.add_argument("--size", type=int, default=None, help="updates per stream (default 50,000; quick 3,000)")
    cli.add_argument("--reps", type=int, default=None, help="runs per client (default 5; quick 1)")
    cli.add_argument("--only", default=None, help="one scenario, e.g. v1-off or v2-deflate")
    cli.add_argument("--wire-log", metavar="FILE", default=None, help="our client writes a wire log to FILE")
    args = cli.parse_args()
    if args.wire_log:
        WIRE_LOG["wire_log"] = args.wire_log
    _common.quiet_logging()
    if args.otel:
        return await otel_main(args)
    n, reps = (3_000, 1) if args.quick else (50_000, 5)
    n, reps = args.size or n, args.reps or reps
    if args.only:
        version, _, comp = args.only.partition("-")
        SCENARIOS[:] = [(int(version.lstrip("v")), None if comp == "off" else comp)]
    if args.hog:
        return await under_load(args, n, reps)
    async with StreamAgentProcess(n) as agent:
        results = await measure(agent, n, reps)
        layers = None
        if not args.quick:
            layers = await profile(agent.url, n, 1, None)
            await agent.sent()
            print(_common.table(["layer", "share", "µs/update (profiled)"], layers))
    report(results, n, reps, args, layers)
    return 0


async def under_load(args: Any, n: int, reps: int) -> int:
    """The same measurement twice in one run: on the machine as it is, then beside ``--hog`` busy processes
    (the same agent process for both); each with its own ratios against the SDK and raw."""
    bodies = []
    async with StreamAgentProcess(n) as agent:
        for hogs in (0, args.hog):
            print(f"-- {hogs} CPU hog(s)")
            async with cpu_hogs(hogs):
                results = await measure(agent, n, reps)
            body = report(results, n, reps, args, write=False)
            title = f"**{hogs} CPU hog process{'es' if hogs != 1 else ''}**" if hogs else "**no CPU hog**"
            bodies.append(f"{title}\n\n" + body.replace("RATIO p2 ", f"RATIO p2 hog{hogs} "))
    intro = (
        f"Paired in one run: the machine as it is, then with {args.hog} busy process(es) (`python -c '{HOG}'`) "
        "beside the benchmark, as on a machine busy with other jobs. Target under load: ours ≥ 2x the SDK."
    )
    _common.write_section(
        _common.docs_target(args),
        "p2hog",
        "P2 under load — session/update throughput beside a CPU hog",
        "\n\n".join([intro, *bodies]),
    )
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(asyncio.run(main()))

"""P8: a few sessions that never answer do not stall the healthy ones (issue 9, item 5).

A minimal v2 agent runs in a separate process (this script with ``--agent``): it answers ``initialize`` and
answers every ``session/resume`` at once with ``{}``, except for the ids starting with ``slow-``, which it
never answers (not even the client's ``$/cancel_request``). A ``ReconnectingClient`` starts with a store of
N session records (``recovery_timeout=1``, ``recovery_start_jitter=0``, default adaptive concurrency) and
recovers them all on its first connection. The clock runs from ``client.start()`` until every *healthy*
session is attached (its ``SessionRecovered`` event).

- **healthy alone**: the store holds only the N - S healthy sessions.
- **with slow (first)**: the S slow sessions come first in the store (they are tried first).
- **with slow (spread)**: the S slow sessions are spread evenly among the healthy ones.

Target: the healthy sessions are all attached within the time they take alone plus about the slow
sessions' own timeout (``recovery_timeout``), i.e. ``with slow - alone <= 1.5 s``; the ratio is reported.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import _common

from acp_client import (
    Limits,
    MemorySessionStore,
    ReconnectingClient,
    RecoveryPolicy,
    SessionRecord,
    SessionRecovered,
    Timeouts,
)

RECOVERY_TIMEOUT = 1.0
EXTRA_TARGET = 1.5  # seconds beyond "healthy alone" allowed: the slow sessions' own timeout plus slack
STEP_TIMEOUT = 60.0


# ---------------------------------------------------------------------------- the agent (child process)


async def agent_main() -> None:
    from websockets.asyncio.server import ServerConnection, serve

    async def handle(ws: ServerConnection) -> None:
        async for text in ws:
            msg = json.loads(text)
            method, id_ = msg.get("method"), msg.get("id")
            if id_ is None:
                continue  # notifications ($/cancel_request included) are ignored: the slow ones stay silent
            if method == "initialize":
                result: object = {"protocolVersion": 2, "capabilities": {"session": {}}, "info": {"name": "p8"}}
            elif method == "session/resume":
                if str((msg.get("params") or {}).get("sessionId", "")).startswith("slow-"):
                    continue  # never answered
                result = {}
            else:
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": "no"}}))
                continue
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "result": result}))

    async with serve(handle, "127.0.0.1", 0, max_size=None, ping_interval=None) as server:
        port = server.sockets[0].getsockname()[1]
        print(f"ws://127.0.0.1:{port}/acp", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # until stdin closes


class Agent:
    """The agent child process (stopped on exit)."""

    async def __aenter__(self) -> Agent:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--agent", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), _common.AGENT_START_TIMEOUT)
        self.url = line.decode().strip()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), _common.AGENT_STOP_TIMEOUT)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


# ---------------------------------------------------------------------------- the measurement


def session_ids(n: int, slow: int, layout: str) -> list[str]:
    healthy = [f"ok-{i}" for i in range(n - slow)]
    slow_ids = [f"slow-{i}" for i in range(slow)]
    if layout == "alone":
        return healthy
    if layout == "first":
        return slow_ids + healthy
    ids = list(healthy)
    step = max(1, len(healthy) // max(1, slow))
    for i, sid in enumerate(slow_ids):
        ids.insert(i * (step + 1), sid)
    return ids


async def measure(url: str, ids: list[str]) -> float:
    """Seconds from ``start()`` until every healthy session in ``ids`` is attached."""
    store = MemorySessionStore()
    for sid in ids:
        await store.save(SessionRecord(sid, "/tmp", protocol_version=2))
    healthy = {sid for sid in ids if not sid.startswith("slow-")}
    client = ReconnectingClient(
        url,
        store=store,
        timeouts=Timeouts(replay_silence=RECOVERY_TIMEOUT),
        policy=RecoveryPolicy(start_jitter=0.0),
        limits=Limits(event_buffer=8 * len(ids) + 64),
    )
    events = client.events()
    done = asyncio.Event()
    attached: set[str] = set()

    async def watch() -> None:
        async for event in events:
            if isinstance(event, SessionRecovered) and event.session_id in healthy:
                attached.add(event.session_id)
                if len(attached) == len(healthy):
                    done.set()
                    return

    watcher = asyncio.create_task(watch())
    try:
        t0 = time.perf_counter()
        await client.start()
        async with asyncio.timeout(STEP_TIMEOUT):
            await done.wait()
        return time.perf_counter() - t0
    finally:
        watcher.cancel()
        await asyncio.wait({watcher})
        await client.aclose()


async def main() -> int:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    _common.quiet_logging()
    n, slow = 500, 10
    reps = 1 if args.quick else 3
    layouts = ("alone", "first", "spread")
    results: dict[str, list[float]] = {}
    async with Agent() as agent:
        await measure(agent.url, session_ids(20, 0, "alone"))  # warm-up (imports, first connection)
        for rep in range(reps):
            for layout in layouts:
                elapsed = await measure(agent.url, session_ids(n, slow, layout))
                results.setdefault(layout, []).append(elapsed)
                print(f"rep {rep + 1}/{reps} {layout:>7}: {_common.ms(elapsed)}", flush=True)
    med = {k: _common.median(v) for k, v in results.items()}
    labels = {
        "alone": f"{n - slow} healthy sessions alone",
        "first": f"{n - slow} healthy + {slow} silent, silent first",
        "spread": f"{n - slow} healthy + {slow} silent, spread",
    }
    rows = [
        [
            label,
            _common.ms(med[k]),
            _common.ms(min(results[k])),
            f"{med[k] / med['alone']:.2f}x",
            f"{med[k] - med['alone']:+.2f} s",
        ]
        for k, label in labels.items()
    ]
    print(_common.table(["run", "median", "min", "÷ alone", "extra"], rows))
    lines = []
    for key in ("first", "spread"):
        extra = med[key] - med["alone"]
        lines.append(
            _common.ratio_line(
                f"p8 healthy with {slow} silent ({key}) / alone",
                med[key] / med["alone"],
                f"extra <= {EXTRA_TARGET:g} s (measured {extra:+.2f} s)",
                extra <= EXTRA_TARGET,
            )
        )
    for line in lines:
        print(line)
    body = "\n\n".join(
        [
            f"Time until the **{n - slow} healthy sessions** are attached on a `ReconnectingClient`'s first "
            f"connection, alone and with **{slow} sessions whose `session/resume` is never answered** "
            f"(`recovery_timeout={RECOVERY_TIMEOUT:g}`, default adaptive concurrency; agent in a separate "
            f"process; {reps} repetition(s), median).",
            _common.table(["run", "median", "min", "÷ alone", "extra"], rows),
            "\n".join(f"- `{line}`" for line in lines),
        ]
    )
    _common.write_section(_common.docs_target(args), "p8", "P8: silent sessions never stall healthy ones", body)
    return 0


if __name__ == "__main__":
    if "--agent" in sys.argv:
        asyncio.run(agent_main())
        sys.exit(0)
    sys.exit(asyncio.run(main()))

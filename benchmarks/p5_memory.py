"""P5: memory per tracked idle session — a ``ReconnectingClient`` holding 10,000 sessions (tracemalloc).

The reference agent (v2) runs in a separate process, so tracemalloc sees only the client's allocations.
A ``ReconnectingClient`` (default in-memory store) connects, and after a warm-up (one session created and
closed, so lazily built caches are already paid for) tracemalloc takes the baseline: the empty client on a
live connection. Then N sessions are created through ``client.new_session`` — the normal way an
application gets them — and the traced memory is read again after a full ``gc.collect()``. Per session =
(after - baseline) / N. It includes the handle (``Session`` with its transcript, counters, record), the
client's and the connection-level indexes, and the store's serialized record. The same is measured again
after a reconnect that recovered every session (status + resume), when the steady-state is reached.

For a floor measured in the same run: the bytes of a plain ``dict`` mapping each session id to a dict of the
record's fields (``sessionId``, ``cwd``, ``mcpServers``, ``protocolVersion``), id strings included — what any
client must keep.
Target: ≤ 1 KiB per session, at 100,000 sessions too (``--sessions 100000``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
import tracemalloc

import _common

from acp_client import (
    Backoff,
    ClientState,
    ReconnectingClient,
    RecoveryPolicy,
    SessionLink,
    StateChanged,
    Timeouts,
)
from acp_client.sessions import Transcript

TARGET = 1024
CWD = "/tmp"
STEP_TIMEOUT = 600.0


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def transcript_bytes_per_chunk(chunks: int) -> dict[str, float]:
    """tracemalloc bytes per chunk of one streamed agent message of ``chunks`` text chunks held by a
    ``Transcript``: as streamed, after the message was read once, and the same chunks kept one content
    dictionary each (what a transcript without coalescing holds); plus the text itself (UTF-8 bytes)."""
    frames = [
        json.dumps(
            {
                "sessionUpdate": "agent_message_chunk",
                "messageId": "m1",
                "content": {"type": "text", "text": f"chunk {i} "},
            }
        )
        for i in range(chunks)
    ]
    text_bytes = sum(len(f"chunk {i} ".encode()) for i in range(chunks))
    tracemalloc.start(1)
    base = traced()
    transcript = Transcript()
    for frame in frames:
        transcript.apply(json.loads(frame))  # parsed like a received frame; only what the transcript keeps stays
    streamed = traced() - base
    assert transcript.messages[0].text.endswith(f"chunk {chunks - 1} ")
    read = traced() - base
    del transcript
    base = traced()
    per_chunk_dicts = [json.loads(frame)["content"] for frame in frames]
    dicts = traced() - base
    tracemalloc.stop()
    del per_chunk_dicts
    return {
        "streamed": streamed / chunks,
        "read": read / chunks,
        "dicts": dicts / chunks,
        "text": text_bytes / chunks,
    }


async def main() -> int:
    cli = _common.parser(__doc__.splitlines()[0])
    cli.add_argument("--sessions", type=int, default=None, help="how many sessions (default 10,000; quick 1,000)")
    args = cli.parse_args()
    _common.quiet_logging()
    n = args.sessions or (1000 if args.quick else 10_000)
    async with _common.AgentProcess(2) as agent:
        tracemalloc.start(1)
        client = ReconnectingClient(
            agent.url,
            protocol_version=2,
            backoff=Backoff(base=0.001),
            policy=RecoveryPolicy(stable_after=0.0),
            timeouts=Timeouts(recovery_round=None),  # READY only once every session is recovered, however many
        )
        try:
            async with asyncio.timeout(STEP_TIMEOUT * max(1, n // 10_000)):  # 100,000 sessions take minutes
                await client.start()
                await client.wait_ready()
                warm = await client.new_session(CWD)
                await client.close_session(warm.id)
                del warm
                baseline = traced()
                snap0 = tracemalloc.take_snapshot()
                made = time.monotonic()
                for start in range(0, n, 64):
                    await asyncio.gather(*(client.new_session(CWD) for _ in range(min(64, n - start))))
                print(f"{n} sessions made in {time.monotonic() - made:.0f} s", flush=True)
                after_new = traced()
                snap1 = tracemalloc.take_snapshot()
                peak_new = tracemalloc.get_traced_memory()[1]
                # a reconnect that recovers every session, then the steady state again
                events = client.events()
                await agent.command("restart")
                restarted = time.monotonic()
                async for event in events:
                    if isinstance(event, StateChanged) and event.new is ClientState.READY:
                        break
                print(f"{n} sessions recovered in {time.monotonic() - restarted:.0f} s", flush=True)
                await events.aclose()  # unsubscribe: its buffered events are not session state
                attached = sum(s.link is SessionLink.ATTACHED for s in client.sessions.values())
                if attached != n:
                    raise RuntimeError(f"{attached}/{n} sessions attached after recovery")
                after_recovery = traced()
                snap2 = tracemalloc.take_snapshot()
            ids = list(client.sessions)
        finally:
            await client.aclose()
        tracemalloc.stop()

    # the floor: the irreducible per-session data, measured the same way
    tracemalloc.start(1)
    floor0 = traced()
    floor = {
        sid: {"sessionId": sid, "cwd": CWD, "mcpServers": [], "protocolVersion": 2}
        for sid in map("".join, map(list, ids))
    }
    floor_bytes = traced() - floor0
    tracemalloc.stop()
    del floor

    per_new = (after_new - baseline) / n
    per_recovered = (after_recovery - baseline) / n
    per_floor = floor_bytes / n
    top = snap1.compare_to(snap0, "lineno")[:8]
    top_recovered = snap2.compare_to(snap0, "lineno")[:8]
    print(f"baseline (empty connected client): {baseline / 1024:,.0f} KiB traced")
    rows = [
        ["floor: dict of per-session dicts (same run)", f"{per_floor:,.0f} B", "1.00x"],
        ["after `new_session` xN", f"{per_new:,.0f} B", f"{per_new / per_floor:.1f}x"],
        ["after a reconnect that recovered all N", f"{per_recovered:,.0f} B", f"{per_recovered / per_floor:.1f}x"],
    ]
    header = ["state", "bytes per session", "÷ floor"]
    print(_common.table(header, rows))
    print("largest allocation sites for the N sessions (tracemalloc, by line):")
    sites = []
    for stat in top:
        frame = stat.traceback[0]
        where = f"{frame.filename.split('/acp_client/')[-1].split('/lib/python')[-1]}:{frame.lineno}"
        sites.append([f"`{where}`", f"{stat.size_diff / n:,.0f} B", f"{stat.count_diff / n:.1f}"])
        print(f"  {where}: {stat.size_diff / n:,.0f} B/session in {stat.count_diff / n:.1f} blocks/session")
    print("after the recovery:")
    for stat in top_recovered:
        frame = stat.traceback[0]
        where = f"{frame.filename.split('/acp_client/')[-1].split('/lib/python')[-1]}:{frame.lineno}"
        print(f"  {where}: {stat.size_diff / n:,.0f} B/session in {stat.count_diff / n:.1f} blocks/session")
    worst = max(per_new, per_recovered)
    chunks = 10_000 if args.quick else 100_000
    per_chunk = transcript_bytes_per_chunk(chunks)
    chunk_header = ["transcript of one streamed message", "bytes per chunk", "÷ text bytes"]
    chunk_rows = [
        [label, f"{per_chunk[key]:,.1f} B", f"{per_chunk[key] / per_chunk['text']:.1f}x"]
        for label, key in [
            ("as streamed (text parts, joined every 256 chunks)", "streamed"),
            ("after the message was read once (one text block)", "read"),
            ("one content dictionary per chunk (no coalescing, for comparison)", "dicts"),
            ("the chunk text itself, UTF-8", "text"),
        ]
    ]
    print(_common.table(chunk_header, chunk_rows))
    lines = [
        _common.ratio_line("p5 bytes per session / 1 KiB target", worst / TARGET, "<= 1.00x", worst <= TARGET),
        f"RATIO p5 bytes per session / floor: {worst / per_floor:.2f}x (informational)",
        f"RATIO p5 transcript bytes per chunk / per-chunk dicts: {per_chunk['streamed'] / per_chunk['dicts']:.2f}x "
        f"({per_chunk['streamed']:.1f} B per chunk as streamed, {chunks:,} chunks; informational)",
    ]
    for line in lines:
        print(line)
    body = "\n\n".join(
        [
            f"**{n:,} idle sessions** held by one `ReconnectingClient` (in-memory store) connected to the reference "
            "agent (v2, separate process); tracemalloc after `gc.collect()`, minus the empty connected client "
            f"({baseline / 1024:,.0f} KiB traced). Peak while creating: {peak_new / 1024 / 1024:,.1f} MiB.",
            _common.table(header, rows),
            "Largest allocation sites for the sessions (per session):\n\n"
            + _common.table(["site", "bytes", "blocks"], sites),
            f'A transcript of **{chunks:,} chunks** of one agent message (`"chunk i "`, about 12 characters '
            "each; every frame parsed from JSON as received, tracemalloc of what stays):",
            _common.table(chunk_header, chunk_rows),
            f"Target ≤ {TARGET} B per session.\n\n" + "\n".join(f"- `{line}`" for line in lines),
        ]
    )
    _common.write_section(_common.docs_target(args), "p5", "P5 — memory per tracked idle session", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""P15: drop mid-stream — stream resume (PR 2208) against the recovery ladder, at 1 and 100 sessions.

A ``ReconnectingClient`` (v2, WebSocket) holds N sessions on the reference agent (its own process): N - 1 idle
ones with a short history (one ``echo`` turn each) and one whose turn streams a chunk every 10 ms. A
``FaultProxy`` between them cuts the TCP link (FIN both ways) once 20 chunks arrived. Measured from the cut:

- **time to the first update**: until the streaming session's next update that is not history (a replay of
  ``session/resume`` is history; a message the agent replays for ``stream/resume`` is not: the client never
  had it);
- **frames**: the frames the client received from the cut to that update, over the old and the new socket
  (history replayed, status and resume answers, missed messages).

Three agents, one path each, in the same run: ``stream resume`` (``resumable``: the socket is replaced, the
agent replays what the client missed), ``ladder`` (no capability: reconnect, initialize, ``session/status``
and ``session/resume`` with replay per session) and ``refused`` (``resumable`` with ``refuse``: one refused
``stream/resume``, then the ladder). The client's reconnect backoff is set to the transport's resume backoff
(the first attempt within 40 ms, jittered), so both paths wait alike before their first attempt. The ladder
is the baseline: ``RATIO`` lines give stream resume's time to the first update, and its frames, over the
ladder's, per N. Reps alternate the paths. The proxy runs in this process (its
forwarding is CPU the client's loop shares, for every path alike).
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from typing import Any

import _common

from acp_client import (
    Backoff,
    CrashLoopBreaker,
    ReconnectingClient,
    RecoveryPolicy,
    Session,
    SessionUpdate,
)
from acp_client.testing import FaultProxy
from acp_client.transports.websocket._resume import RESUME_BACKOFF

STEP_TIMEOUT = 120.0
CHUNKS_BEFORE_CUT = 20
PATHS = {"stream resume": ("--resumable",), "ladder": (), "refused": ("--resumable", "--refuse")}


@dataclass
class Sample:
    first_update: float
    frames: int


def frames_in(client: ReconnectingClient) -> tuple[Any, int]:
    current = client.current
    assert current is not None
    transport = current.connection.transport
    return transport, transport.stats.frames_in  # type: ignore[attr-defined]


async def first_new_update(updates: Any, *, after_cut: asyncio.Event) -> None:
    """Return at the first update that is not history once ``after_cut`` is set."""
    async for item in updates:
        if isinstance(item, SessionUpdate) and after_cut.is_set() and not item.replay:
            return


async def chunks(updates: Any, n: int) -> None:
    seen = 0
    async for item in updates:
        if isinstance(item, SessionUpdate) and item.kind == "agent_message_chunk":
            seen += 1
            if seen >= n:
                return


async def one_drop(url: str, port: int, sessions: int) -> Sample:
    async with FaultProxy("127.0.0.1", port) as proxy:
        client = ReconnectingClient(
            proxy.url(),
            protocol_version=2,
            backoff=Backoff(base=RESUME_BACKOFF.base, cap=RESUME_BACKOFF.cap),  # the ladder's first reconnect
            # draws from the same jitter as the transport's first resume attempt: the paths differ in work only
            policy=RecoveryPolicy(start_jitter=0.0),
            breaker=CrashLoopBreaker(threshold=1_000_000),
        )
        turn: asyncio.Task[Any] | None = None
        try:
            async with asyncio.timeout(STEP_TIMEOUT):
                await client.start()
                await client.wait_ready()
                idle = [await client.new_session(f"/w/{i}") for i in range(sessions - 1)]
                await asyncio.gather(*(s.prompt("echo: history") for s in idle))
                streaming: Session = await client.new_session("/w/stream")
                updates = streaming.updates(maxsize=100_000)
                turn = asyncio.create_task(streaming.prompt("stream 100000 every 0.01"))
                await chunks(updates, CHUNKS_BEFORE_CUT)
                cut = asyncio.Event()
                waiter = asyncio.create_task(first_new_update(updates, after_cut=cut))
                old, before = frames_in(client)
                cut.set()
                t0 = time.perf_counter()
                await proxy.cut_all()
                await waiter
                elapsed = time.perf_counter() - t0
                new, after = frames_in(client)
                frames = after - before if new is old else old.stats.frames_in - before + after
                await streaming.cancel()
                return Sample(elapsed, frames)
        finally:
            if turn is not None:
                turn.cancel()
                await asyncio.gather(turn, return_exceptions=True)
            async with asyncio.timeout(STEP_TIMEOUT):
                await client.aclose()


async def main() -> int:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    _common.quiet_logging()
    sizes = (1, 10) if args.quick else (1, 100)
    # both paths wait a jittered U(0, 40 ms) before their first attempt; at one session that draw is most of
    # the time, so the small size runs more often (the median settles)
    reps = {n: 1 if args.quick else (15 if n == 1 else 5) for n in sizes}
    results: dict[tuple[str, int], list[Sample]] = {(p, n): [] for p in PATHS for n in sizes}
    async with (
        _common.AgentProcess(2, flags=PATHS["stream resume"]) as resumable,
        _common.AgentProcess(2, flags=PATHS["ladder"]) as plain,
        _common.AgentProcess(2, flags=PATHS["refused"]) as refusing,
    ):
        agents = {"stream resume": resumable, "ladder": plain, "refused": refusing}
        for n in sizes:
            for rep in range(reps[n]):
                for path in _common.rotated(list(PATHS), rep):
                    agent = agents[path]
                    port = int(agent.url.rsplit(":", 1)[1].split("/", 1)[0])
                    sample = await one_drop(agent.url, port, n)
                    results[(path, n)].append(sample)
                    print(f"{path:14} N={n:<4} first update {_common.ms(sample.first_update):>10}  "
                          f"frames {sample.frames}", flush=True)
    header = ["path", "sessions", "first update: median", "min", "frames: median", "÷ ladder (time)"]
    rows, lines = [], []
    for n in sizes:
        ladder = _common.median([s.first_update for s in results[("ladder", n)]])
        for path in PATHS:
            samples = results[(path, n)]
            median = _common.median([s.first_update for s in samples])
            rows.append([
                path,
                str(n),
                _common.ms(median),
                _common.ms(min(s.first_update for s in samples)),
                f"{_common.median([float(s.frames) for s in samples]):.0f}",
                f"{median / ladder:.2f}x",
            ])
        resumed = _common.median([s.first_update for s in results[("stream resume", n)]])
        lines.append(
            _common.ratio_line(
                f"p15 stream resume / ladder, time from the drop to the first update (N={n})",
                resumed / ladder,
                "< 1.00x",
                resumed < ladder,
            )
        )
        frames_resumed = _common.median([float(s.frames) for s in results[("stream resume", n)]])
        frames_ladder = _common.median([float(s.frames) for s in results[("ladder", n)]])
        lines.append(
            _common.ratio_line(
                f"p15 stream resume / ladder, frames from the drop to the first update (N={n})",
                frames_resumed / frames_ladder,
                "< 1.00x",
                frames_resumed < frames_ladder,
            )
        )
    print(_common.table(header, rows))
    for line in lines:
        print(line)
    body = "\n\n".join(
        [
            f"A cut (FIN) mid-stream, {' and '.join(f'{reps[n]} runs at N={n}' for n in sizes)} per path, paths "
            "alternating; the streaming session's "
            "first update that is not history after the cut, and the frames the client received until then. "
            "`stream resume`: the agent advertises `transport.resumable`; `ladder`: it does not (initialize, "
            "status, resume with replay per session); `refused`: it advertises and refuses. The client's "
            "reconnect backoff equals the transport's resume backoff (first attempt within 40 ms, jittered). "
            "Frames: a resumed v2 stream sends a `state_update` for every session attached to the connection "
            "before live data (the draft's rule), so at 100 sessions a resume costs about 100 frames even when "
            "nothing was missed; the ladder re-sends every session's history (5 frames each here).",
            _common.table(header, rows),
            "\n".join(f"- `{line}`" for line in lines),
        ]
    )
    _common.write_section(_common.docs_target(args), "p15", "P15 — drop mid-stream: stream resume vs the ladder", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""P12: the recovery concurrency limit's queue scales linearly with the sessions waiting on it.

A recovery round of N sessions puts about N waiters (2N acquires: status, then resume) behind the limit.
Each release wakes the next waiter; if a release cost anything proportional to the queue (copying or
searching it), a round would cost O(N²): with 10,000 sessions that was about a second of pure
bookkeeping. Here N tasks each take a slot of a fixed limit of 8, hold it over one event-loop turn (a
request on the wire), and give it back; measured: the time per acquire at N = 1,000, 10,000 and 20,000.
Baseline: the time per acquire at N = 1,000 in the same run. Target: at 20,000 ≤ 2x the baseline.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import _common

from acp_client.reconnect._recovery.limits import FixedLimit

TARGET = 2.0


async def per_acquire(n: int) -> float:
    """Seconds per acquire/release with ``n`` tasks queued on a limit of 8."""
    limit = FixedLimit(8)

    async def job() -> None:
        started = await limit.acquire()
        await asyncio.sleep(0)
        limit.release(started, ok=True)

    t0 = time.perf_counter()
    await asyncio.gather(*(job() for _ in range(n)))
    return (time.perf_counter() - t0) / n


async def main() -> int:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    _common.quiet_logging()
    sizes, reps = ((1_000, 5_000), 1) if args.quick else ((1_000, 10_000, 20_000), 5)
    results: dict[int, list[float]] = {}
    for _ in range(reps):
        for n in sizes:  # sizes alternate within each repetition
            results.setdefault(n, []).append(await per_acquire(n))
    base = statistics.median(results[sizes[0]])
    rows = [
        [f"{n:,}", f"{statistics.median(v) * 1e6:.1f} µs", f"{statistics.median(v) / base:.2f}x"]
        for n, v in results.items()
    ]
    print(_common.table(["waiters", "per acquire (median)", "÷ at 1,000"], rows))
    ratio = statistics.median(results[sizes[-1]]) / base
    line = _common.ratio_line(
        f"p12 per acquire at {sizes[-1]:,} / at {sizes[0]:,}", ratio, f"<= {TARGET}x", ratio <= TARGET
    )
    print(line)
    body = "\n\n".join(
        [
            __doc__.split("\n", 2)[2].strip().replace("\n", " "),
            f"Median of {reps} repetitions, sizes alternating.",
            _common.table(["waiters", "per acquire (median)", "÷ at 1,000"], rows),
            f"- `{line}`",
        ]
    )
    _common.write_section(_common.docs_target(args), "p12", "P12 — the concurrency limit's queue at scale", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

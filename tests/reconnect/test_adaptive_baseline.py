"""The adaptive recovery limit re-learns the round trip (issue 21, item 1): its baseline is a sliding minimum,
forgotten at each new connection, so a path that got slower (loopback, then a 20 ms tether) is not read as
congestion for the rest of the client's life. Driven with a scripted clock: no network, no sleeps."""

from __future__ import annotations

import pytest

from acp_client.reconnect import AdaptiveLimit

LOOPBACK, TETHER = 0.0003, 0.020


class Path:
    """Round trips of a link without queueing of its own: every request of a burst takes ``rtt``."""

    def __init__(self) -> None:
        self.now = 0.0
        self.limit = AdaptiveLimit(clock=lambda: self.now)

    async def round_trips(self, rtt: float, count: int) -> None:
        """``count`` bursts, each as wide as the limit allows, answered fine after ``rtt``."""
        for _ in range(count):
            starts = [await self.limit.acquire() for _ in range(self.limit.limit)]
            self.now += rtt
            for started in starts:
                self.limit.release(started, ok=True)


async def test_a_new_connection_on_a_slower_path_keeps_the_limit() -> None:
    path = Path()
    await path.round_trips(LOOPBACK, 60)
    learned = path.limit.limit
    assert learned >= 64  # it grew on the fast path
    path.limit.new_path()  # the reconnect after the laptop moved to a tether
    await path.round_trips(TETHER, 30)
    assert path.limit.limit >= learned // 2, path.limit.limit  # was pinned near 4 by the loopback baseline
    await path.round_trips(LOOPBACK, 10)  # and back: a faster round trip lowers the baseline at once
    assert path.limit.fastest == pytest.approx(LOOPBACK) and path.limit.limit >= learned // 2


async def test_within_one_connection_the_baseline_follows_the_path_after_its_window() -> None:
    path = Path()
    await path.round_trips(LOOPBACK, 60)
    learned = path.limit.limit
    await path.round_trips(TETHER, 30)  # same connection: at first every answer reads as congestion
    assert path.limit.limit < learned // 2
    window_trips = int(path.limit.baseline_window / TETHER)
    await path.round_trips(TETHER, window_trips + 200)  # the old minimum leaves the window, the limit regrows
    assert path.limit.fastest == pytest.approx(TETHER)
    assert path.limit.limit >= learned // 2, path.limit.limit


async def test_its_own_queueing_still_reads_as_congestion() -> None:
    """A burst whose round trips grow with its width (the agent queues it) is not taken for a path change:
    quieter answers keep the windowed minimum low, so the limit settles instead of growing forever."""
    path = Path()
    for _ in range(200):
        width = path.limit.limit
        starts = [await path.limit.acquire() for _ in range(width)]
        path.now += LOOPBACK * (1 + width / 8)  # a worker pool of 8: the queue grows with the burst
        for started in starts:
            path.limit.release(started, ok=True)
        path.now += LOOPBACK
        quiet = await path.limit.acquire()  # one request alone: the path's own round trip
        path.now += LOOPBACK
        path.limit.release(quiet, ok=True)
    assert path.limit.fastest == pytest.approx(LOOPBACK)
    assert path.limit.limit <= 128, path.limit.limit  # settles far below the 512 maximum


async def settle_low_on_loopback(path: Path) -> None:
    """A first connection to a busy local agent: it learned the loopback round trip, and overload answers
    cut the limit to 4 (what the path-changed run of benchmarks/p1_recovery.py showed after its first
    recovery)."""
    await path.round_trips(LOOPBACK, 5)
    while path.limit.limit > 4:
        started = await path.limit.acquire()
        path.now += LOOPBACK
        path.limit.release(started, ok=False, overloaded=True)


async def trips_until(path: Path, rtt: float, wanted: int, bound: int) -> int:
    """Round trips of ``rtt`` (each burst as wide as the limit) until the limit reaches ``wanted``."""
    for trip in range(1, bound + 1):
        await path.round_trips(rtt, 1)
        if path.limit.limit >= wanted:
            return trip
    raise AssertionError(f"the limit is {path.limit.limit} after {bound} round trips of {rtt * 1000:g} ms")


async def test_a_baseline_shift_and_back_is_relearned_within_a_few_round_trips() -> None:
    """0.3 ms -> 20 ms -> 0.3 ms, a reconnect at each change, from a limit of 4: pipelining 1,000 sessions
    needs a limit in the hundreds, and while no answer shows queueing the limit doubles every round trip
    (slow start), so it is there within 8 round trips of the new path (160 ms at 20 ms), not 14 or more."""
    path = Path()
    await settle_low_on_loopback(path)
    assert path.limit.limit == 4
    path.limit.new_path()
    await trips_until(path, TETHER, 256, bound=8)
    assert path.limit.fastest == pytest.approx(TETHER)
    await settle_low_on_loopback(path)
    path.limit.new_path()
    await trips_until(path, LOOPBACK, 256, bound=8)
    assert path.limit.fastest == pytest.approx(LOOPBACK)


async def test_a_limit_used_only_now_and_then_does_not_grow() -> None:
    """Slow start grows a limit that is filled, not one that a lone request at a time passes through."""
    path = Path()
    for _ in range(200):
        started = await path.limit.acquire()
        path.now += TETHER
        path.limit.release(started, ok=True)
    assert path.limit.limit == 8  # the initial limit


async def test_one_round_trip_of_slow_answers_at_most_halves_the_limit() -> None:
    """After an overshoot every answer of the window comes back slow; each moves the limit down a little,
    and hundreds of them must not compound to the minimum within one round trip (they did: 442 -> 4)."""
    path = Path()
    await path.round_trips(TETHER, 12)
    before = path.limit.limit
    assert before >= 256
    await path.round_trips(TETHER * 4, 1)  # the agent queues: the whole window is slow
    assert before // 2 <= path.limit.limit < before


async def test_a_standing_queue_of_a_busy_pipeline_trims_the_limit_without_collapsing_it() -> None:
    """Round trips 2.6 times the baseline at every width (the client, agent and link are busy, not
    congested): each round trip's answers together move the limit part of the way down, once. Before, every
    answer of a burst stepped it down on its own and four round trips took 512 to 32, far below the
    pipeline the 20 ms path needs (the 10 ms run of benchmarks/p1_recovery.py fell to 60)."""
    path = Path()
    await path.round_trips(TETHER, 12)
    assert path.limit.limit == 512
    await path.round_trips(TETHER * 2.6, 4)
    assert 256 <= path.limit.limit < 512, path.limit.limit

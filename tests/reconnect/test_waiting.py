"""The test kit's one wait-until helper (used by ReferenceAgent, FaultProxy and the demo)."""

from __future__ import annotations

import asyncio

import pytest

from acp_client.testing._waiting import Waiters


async def test_a_waiter_wakes_when_its_predicate_holds_after_a_change() -> None:
    waiters = Waiters()
    state = {"n": 0}
    checks: list[int] = []
    registered = asyncio.Event()

    def predicate() -> bool:
        checks.append(state["n"])
        registered.set()
        return state["n"] >= 2

    task = asyncio.create_task(waiters.wait_until(predicate, timeout=5))
    await asyncio.wait_for(registered.wait(), 5)
    assert len(waiters) == 1
    state["n"] = 1
    waiters.changed()  # re-checked, still false: keeps waiting
    assert not task.done() and checks == [0, 1]
    state["n"] = 2
    waiters.changed()
    await asyncio.wait_for(task, 5)
    assert len(waiters) == 0 and checks == [0, 1, 2]


async def test_a_timeout_names_what_was_awaited() -> None:
    with pytest.raises(TimeoutError, match=r"gave up waiting for the moon after 0\.05 s"):
        await Waiters().wait_until(lambda: False, 0.05, what="the moon")


async def test_fail_all_wakes_every_waiter_with_the_error() -> None:
    waiters = Waiters()
    registered = asyncio.Event()

    def never() -> bool:
        registered.set()
        return False

    task = asyncio.create_task(waiters.wait_until(never, timeout=5))
    await asyncio.wait_for(registered.wait(), 5)
    waiters.fail_all(RuntimeError("closed"))
    with pytest.raises(RuntimeError, match="closed"):
        await task

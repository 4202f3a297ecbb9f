"""A session's ``updates()`` subscriptions: one wake-up per wait, shared by every task waiting on it."""

from __future__ import annotations

import asyncio

from acp_client.sessions import RecoveryMarker, SessionLink
from tests.sessions.test_session_link import CONTROL, make


async def _waiting(task: asyncio.Future[object]) -> None:
    """Let ``task`` run up to its first wait (bounded: a task that finishes instead fails the test)."""
    for _ in range(10):
        if task.done():
            raise AssertionError(f"{task!r} did not wait")
        await asyncio.sleep(0)


async def test_a_cancelled_wait_spoils_no_other_waiter_and_loses_nothing() -> None:
    session = make(SessionLink.ATTACHED)
    first, second = session.updates(), session.updates()
    cancelled = asyncio.ensure_future(anext(first))
    other = asyncio.ensure_future(anext(second))
    same = asyncio.ensure_future(anext(first))  # a second task waiting on the same subscription
    await _waiting(cancelled)
    cancelled.cancel()
    await asyncio.wait({cancelled})
    marker = RecoveryMarker(session.id, "reattached")
    CONTROL.mark(session, marker)
    async with asyncio.timeout(5):
        assert await other == marker
        assert await same == marker
    later = RecoveryMarker(session.id, "failed")
    CONTROL.mark(session, later)
    async with asyncio.timeout(5):
        assert await anext(first) == later  # the subscription whose wait was cancelled goes on


async def test_a_burst_is_taken_in_order_after_one_wake_up() -> None:
    session = make(SessionLink.ATTACHED)
    updates = session.updates(maxsize=8)
    waiting = asyncio.ensure_future(anext(updates))
    await _waiting(waiting)
    markers = [RecoveryMarker(session.id, "reattached", reason=str(i)) for i in range(5)]
    for marker in markers:
        CONTROL.mark(session, marker)
    async with asyncio.timeout(5):
        got = [await waiting] + [await anext(updates) for _ in markers[1:]]
    assert got == markers

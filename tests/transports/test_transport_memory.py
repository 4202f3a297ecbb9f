"""The in-process transport pair: round trip, backpressure, close propagation."""

from __future__ import annotations

import asyncio

import pytest

from acp_client.exceptions import ConnectionLost, UsageError
from acp_client.transports import MemoryTransport, Transport, memory_pair

WAIT = 2.0  # upper bound on any wait for something that must happen


async def test_round_trip_both_directions() -> None:
    a, b = memory_pair()
    assert isinstance(a, Transport) and isinstance(b, Transport)
    await a.send("hello")
    await b.send("wörld")
    assert await asyncio.wait_for(b.recv(), WAIT) == "hello"
    assert await asyncio.wait_for(a.recv(), WAIT) == "wörld"
    assert a.stats.frames_out == 1 and a.stats.frames_in == 1
    assert a.stats.bytes_in == len("wörld".encode())
    assert a.description.endswith("/a") and b.description.endswith("/b")
    await a.close()


async def test_send_waits_when_the_queue_is_full() -> None:
    a, b = memory_pair(max_queue=1)
    await a.send("1")
    blocked = asyncio.create_task(a.send("2"))
    done, _ = await asyncio.wait([blocked], timeout=0.05)
    assert not done, "send must wait while the peer's queue is full"
    assert await asyncio.wait_for(b.recv(), WAIT) == "1"
    await asyncio.wait_for(blocked, WAIT)
    assert await asyncio.wait_for(b.recv(), WAIT) == "2"
    await a.close()


async def test_close_propagates_with_code_after_queued_frames() -> None:
    a, b = memory_pair()
    await a.send("last words")
    await a.close(4001, "bye")
    assert a.closed and b.closed
    # what a sent before closing is still delivered, then the loss
    assert await asyncio.wait_for(b.recv(), WAIT) == "last words"
    with pytest.raises(ConnectionLost) as lost:
        await asyncio.wait_for(b.recv(), WAIT)
    assert lost.value.close_code == 4001 and lost.value.reason == "bye"
    with pytest.raises(ConnectionLost):
        await b.send("too late")
    with pytest.raises(ConnectionLost):
        await a.recv()
    assert b.close_code == 4001 and b.close_reason == "bye"
    await a.close()  # idempotent
    await b.close()


async def test_close_wakes_a_waiting_receiver_and_a_blocked_sender() -> None:
    a, b = memory_pair(max_queue=1)
    receiver = asyncio.create_task(b.recv())
    await a.send("x")
    assert await asyncio.wait_for(receiver, WAIT) == "x"
    receiver = asyncio.create_task(a.recv())
    await a.send("fill")
    sender = asyncio.create_task(a.send("blocked"))
    done, _ = await asyncio.wait([sender, receiver], timeout=0.05)
    assert not done
    await b.close()
    for task in (sender, receiver):
        with pytest.raises(ConnectionLost) as lost:
            await asyncio.wait_for(task, WAIT)
        assert lost.value.close_code == 1000


async def test_recv_is_cancel_safe() -> None:
    a, b = memory_pair()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(b.recv(), 0.01)
    await a.send("after cancel")
    assert await asyncio.wait_for(b.recv(), WAIT) == "after cancel"
    await a.close()


def test_max_queue_must_be_positive() -> None:
    with pytest.raises(UsageError):
        memory_pair(max_queue=0)


def test_repr_has_state() -> None:
    a, _ = memory_pair()
    assert isinstance(a, MemoryTransport)
    assert "open" in repr(a)

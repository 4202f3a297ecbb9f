"""The blocking facade: plain blocking code, and calls made from inside a running event loop.

The reference agent runs on its own event loop in its own thread, so that a test blocking its own thread (or
its own event loop) never starves the agent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from acp_client import (
    ClientState,
    RecoveryMarker,
    SessionNotFound,
    SessionRecovered,
    SessionUpdate,
    StateChanged,
    UsageError,
    sync,
)
from acp_client.testing import FAST_RETRY, AgentThread
from tests.conftest import Link, bound, over_links

#: tests that take ``link`` (or ``agent``) run over WebSocket, and Streamable HTTP over HTTP/1.1 and h2c
link = over_links("ws", "http1", "h2c")

T = TypeVar("T")


@pytest.fixture(params=[1, 2], ids=["v1", "v2"])
def host(request: pytest.FixtureRequest) -> Iterator[AgentThread]:
    """A reference agent (v1 and v2) in its own thread, stopped afterwards."""
    with AgentThread(int(request.param), timeout=bound(15)) as running:
        yield running


def drain_until(items: Iterator[T], predicate: Any) -> list[T]:
    """Consume ``items`` until one satisfies ``predicate``; returns everything seen (each wait is bounded by the
    iterator's own timeout)."""
    seen: list[T] = []
    for item in items:
        seen.append(item)
        if predicate(item):
            return seen
    raise AssertionError(f"the stream ended without the expected item; saw {seen!r}")


def test_plain_blocking_client(link: Link, host: AgentThread) -> None:
    baseline = threading.active_count()
    with sync.connect(link.url(host.agent), **link.options, timeout=bound(10)) as client:
        assert client.protocol_version == host.version
        session = client.new_session("/w")
        updates = session.updates(timeout=bound(5))
        result = session.prompt("echo: hello", timeout=bound(10))
        assert result.stop_reason == "end_turn"
        assert session.transcript.messages[-1].text == "hello"
        seen = drain_until(updates, lambda item: isinstance(item, SessionUpdate) and item.kind == "agent_message_chunk")
        assert all(not item.replay for item in seen if isinstance(item, SessionUpdate))
        updates.close()

        assert client.session_status(session.id).status == "active"
        with pytest.raises(SessionNotFound):
            client.session_status("sess_unknown")
        listed = client.list_sessions()
        assert isinstance(listed, list) and [info.session_id for info in listed] == [session.id]
        assert session.state == ("idle" if host.version == 2 else None)

        idle = session.updates(timeout=0.2)
        with pytest.raises(TimeoutError):
            next(idle)  # nothing arrives on an idle session: the per-item bound applies
    assert client.closed
    with pytest.raises(UsageError):
        client.session_status(session.id)
    assert threading.active_count() == baseline


def test_reconnecting_client_recovers_after_restart(link: Link, host: AgentThread) -> None:
    baseline = threading.active_count()
    with sync.ReconnectingClient(link.url(host.agent), **link.options, **FAST_RETRY) as client:
        assert client.state is ClientState.READY
        session = client.new_session("/w")
        session.prompt("echo: before the restart", timeout=bound(10))
        assert client.sessions == {session.id: session}
        events = client.events(timeout=bound(10))
        markers = session.updates(timeout=bound(10))

        host.call(host.agent.restart(keep_sessions=True))
        recovered = drain_until(events, lambda e: isinstance(e, SessionRecovered))[-1]
        assert isinstance(recovered, SessionRecovered) and recovered.outcome == "restored"
        drain_until(events, lambda e: isinstance(e, StateChanged) and e.new is ClientState.READY)
        client.wait_ready(bound(5))
        assert client.recover(session.id) is session  # already attached: the same stable handle
        marker = drain_until(markers, lambda item: isinstance(item, RecoveryMarker))[-1]
        assert isinstance(marker, RecoveryMarker) and marker.replayed
        assert [m.text for m in session.transcript.messages if m.role == "agent"] == ["before the restart"]
        assert session.prompt("echo: after", timeout=bound(10)).stop_reason == "end_turn"

        generation = client.generation
        client.reconnect_now()
        drain_until(events, lambda e: isinstance(e, StateChanged) and e.new is ClientState.READY)
        assert client.generation > generation
        events.close()
        markers.close()

        client.forget(session.id)
        assert client.sessions == {}
    final: ClientState = client.state
    assert client.closed and final is ClientState.CLOSED
    assert threading.active_count() == baseline


async def test_called_from_inside_a_running_event_loop(link: Link) -> None:
    """A notebook cell or an IDE callback: the caller's loop is busy, the facade runs on its own loop."""
    loop = asyncio.get_running_loop()
    with AgentThread(2, timeout=bound(15)) as host:
        baseline = threading.active_count()
        # off the loop thread (our own pool, so that its threads are accounted for): the caller's loop runs on
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:

            async def off_loop(fn: Callable[..., T], *args: Any) -> T:
                return await asyncio.wait_for(loop.run_in_executor(pool, fn, *args), bound(15))

            client = await off_loop(lambda: sync.connect(link.url(host.agent), **link.options))
            try:
                session = await off_loop(client.new_session, "/w")
                first = await off_loop(session.prompt, "echo: via a worker thread")
                assert first.stop_reason == "end_turn"
                # directly on the loop thread: blocks this loop for the call, but never deadlocks
                assert session.prompt("echo: direct", timeout=bound(10)).stop_reason == "end_turn"
                assert client.session_status(session.id).status == "active"
                texts = [m.text for m in session.transcript.messages if m.role == "agent"]
                assert texts == ["via a worker thread", "direct"]
            finally:
                client.close()
            await off_loop(client.close)  # idempotent
        assert threading.active_count() == baseline
        # asyncio.to_thread works the same way (its pool is the loop's default executor, left running)
        with sync.connect(link.url(host.agent), **link.options) as other:
            status = await asyncio.wait_for(asyncio.to_thread(other.session_status, session.id), bound(15))
            assert status.is_active


def test_cancel_from_another_thread(link: Link, host: AgentThread) -> None:
    with (
        sync.connect(link.url(host.agent), **link.options) as client,
        concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool,
    ):
        session = client.new_session("/w")
        pending = pool.submit(lambda: session.prompt("sleep 30", timeout=bound(20)))
        host.call(host.agent.wait_for_method("session/prompt", timeout=bound(10)))
        session.cancel()
        assert pending.result(bound(15)).stop_reason == "cancelled"
        with pytest.raises(TimeoutError):
            session.prompt("sleep 30", timeout=0.3)  # the bound of the async call applies
        session.cancel()


def test_a_call_from_the_clients_own_loop_is_refused(link: Link, host: AgentThread) -> None:
    with sync.connect(link.url(host.agent), **link.options) as client:
        session = client.new_session("/w")

        async def inside() -> BaseException | None:
            try:
                client.session_status(session.id)
            except UsageError as exc:
                return exc
            return None

        refused = client._runner.run(inside(), bound(5))
        assert isinstance(refused, UsageError) and "deadlock" in str(refused)


def test_connect_failure_leaves_no_thread() -> None:
    baseline = threading.active_count()
    with pytest.raises(UsageError):
        sync.connect("ftp://127.0.0.1:1/nope")
    assert threading.active_count() == baseline

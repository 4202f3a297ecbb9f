"""The rebuilt recovery engine (issue 9), one test (or more) per numbered behaviour, over real loopback links.

Most tests talk to :class:`acp_client.testing.ScriptedAgent`, a small ACP agent on a real WebSocket server
(127.0.0.1) whose answers each test scripts: a handler per method may hold its answer until the test
releases it, stream a replay slowly, answer an error, or wait for the client's ``$/cancel_request``. Every
frame it receives is logged, so "no further request reached the agent" is read from the agent's own log.
The others use the reference agent (``acp_client.testing.ReferenceAgent``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from acp_client import (
    ACPTimeoutError,
    Backoff,
    ClientState,
    ConnectionDropped,
    CrashLoopBreaker,
    MemorySessionStore,
    NotConnected,
    ReconnectingClient,
    SessionForgotten,
    SessionLink,
    SessionLost,
    SessionRecord,
    SessionRecovered,
    SessionRecoveryFailed,
    SessionUpdate,
    SQLiteSessionStore,
    StateChanged,
    Timeouts,
    TransportOptions,
)
from acp_client.reconnect import EventsDropped, RecoveryRoundFinished, SessionStoreFailed
from acp_client.reconnect._backoff import Clock
from acp_client.testing import (
    FAST_RETRY,
    AgentError,
    EventRecorder,
    ReferenceAgent,
    ScriptedAgent,
    ScriptedCall,
    ScriptedError,
)
from tests.conftest import bound, client_options, recorder, running_client, started

FAST_POLICY = FAST_RETRY["policy"]


client_of = running_client  # a started, ready client with FAST_RETRY settings and its recorder


class Gate:
    """An answer held back until the test releases it."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def hold(self) -> None:
        self.entered.set()
        await self.release.wait()


class HeldClock(Clock):
    """A clock whose sleeps last until :meth:`release_all` (so a scheduled retry stays scheduled)."""

    def __init__(self) -> None:
        self.sleepers = 0
        self._release = asyncio.Event()
        self.asleep = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.sleepers += 1
        self.asleep.set()
        try:
            await self._release.wait()
        finally:
            self.sleepers -= 1

    def release_all(self) -> None:
        self._release.set()


def is_state(state: ClientState) -> Callable[[Any], bool]:
    return lambda e: isinstance(e, StateChanged) and e.new is state


def recovered(session_id: str) -> Callable[[Any], bool]:
    return lambda e: isinstance(e, SessionRecovered) and e.session_id == session_id


async def round_trip(client: ReconnectingClient) -> None:
    """One request answered by the agent on the current connection: whatever the client wrote before it on
    this connection has been received (the link is ordered)."""
    current = client.current
    assert current is not None
    await current.connection.request("session/list", {}, timeout=bound(5))


def forgotten_of(rec: EventRecorder, session_id: str) -> list[SessionForgotten]:
    return [e for e in rec.of(SessionForgotten) if e.session_id == session_id]


async def stored_ids(store: MemorySessionStore) -> set[str]:
    return {r.session_id for r in await store.load_all()}


# ---------------------------------------- 1. forget is final


async def test_forget_during_a_status_probe_sends_nothing_more_and_discards_the_late_answer() -> None:
    gate = Gate()
    store = MemorySessionStore()
    async with ScriptedAgent(2, status=True) as agent, client_of(agent.url, store=store) as (client, rec):
        doomed, other = await client.new_session("/w/doomed"), await client.new_session("/w/other")

        async def status(call: ScriptedCall) -> Any:
            if call.session_id == doomed.id and call.conn.number == 2:
                await gate.hold()
            return {"status": "active"}

        agent.handlers["session/status"] = status
        await agent.drop()
        await asyncio.wait_for(gate.entered.wait(), bound(5))
        await client.forget(doomed.id)
        sent_at_forget = len(agent.log)
        gate.release.set()  # the probe's answer arrives after forget()
        await agent.wait_for(
            lambda: any(m == "session/status" and p.get("sessionId") == doomed.id for _n, m, p, _a in agent.answered)
        )
        await rec.wait(recovered(other.id), timeout=5)
        await round_trip(client)
        await round_trip(client)
        late = [m for _n, m, p in agent.log[sent_at_forget:] if p.get("sessionId") == doomed.id]
        assert late == []  # no resume, no second probe
        assert [m for _n, m, _p in agent.log[sent_at_forget:]].count("$/cancel_request") == 1
        assert agent.requests("session/resume", doomed.id) == []
        assert doomed.id not in client.sessions and doomed.link is SessionLink.LOST
        assert doomed.id not in await stored_ids(store)
        assert [e.reason for e in forgotten_of(rec, doomed.id)] == ["application"]
        assert client.current is not None
        stats = client.current.connection.stats
        assert stats["late_responses"] == 1 and stats["invalid_unknown_id"] == 0
        assert other.link is SessionLink.ATTACHED


async def test_forget_during_an_outstanding_resume_never_brings_the_session_back() -> None:
    gate = Gate()
    store = MemorySessionStore()
    async with ScriptedAgent(2) as agent, client_of(agent.url, store=store) as (client, rec):
        doomed, other = await client.new_session("/w/doomed"), await client.new_session("/w/other")

        async def resume(call: ScriptedCall) -> Any:
            agent.known(call)
            if call.session_id == doomed.id:
                await call.update(
                    {
                        "sessionUpdate": "agent_message",
                        "messageId": "m1",
                        "content": [{"type": "text", "text": "history"}],
                    }
                )
                await gate.hold()
            return {}

        agent.handlers["session/resume"] = resume
        await agent.drop()
        await asyncio.wait_for(gate.entered.wait(), bound(5))
        await client.forget(doomed.id)
        gate.release.set()  # the resume's answer arrives after forget()
        await agent.wait_for(
            lambda: any(m == "session/resume" and p.get("sessionId") == doomed.id for _n, m, p, _a in agent.answered)
        )
        await rec.wait(recovered(other.id), timeout=5)
        await round_trip(client)
        await round_trip(client)
        assert len(agent.requests("session/resume", doomed.id)) == 1
        assert doomed.id not in client.sessions and doomed.link is SessionLink.LOST
        assert doomed.id not in await stored_ids(store)
        assert [e.reason for e in forgotten_of(rec, doomed.id)] == ["application"]
        assert not [e for e in rec.of(SessionRecovered) if e.session_id == doomed.id]
        with pytest.raises(SessionLost):
            await asyncio.wait_for(doomed.prompt("hi"), bound(5))
        # and a later reconnect does not resurrect it either
        await agent.drop()
        await rec.ready_count(3, timeout=5)
        assert len(agent.requests("session/resume", doomed.id)) == 1
        assert doomed.id not in client.sessions and len(forgotten_of(rec, doomed.id)) == 1


async def test_forget_while_a_background_retry_is_scheduled_cancels_it() -> None:
    clock = HeldClock()
    store = MemorySessionStore()
    async with ScriptedAgent(2) as agent:
        client = ReconnectingClient(agent.url, **client_options(clock=clock, store=store, recovery_tries=1))
        rec = recorder(client)
        await client.start()
        try:
            await client.wait_ready(timeout=bound(5))
            doomed = await client.new_session("/w/doomed")

            async def resume(call: ScriptedCall) -> Any:
                agent.known(call)
                if call.session_id == doomed.id:
                    raise ScriptedError(-32099, "transient storage error")
                return {}

            agent.handlers["session/resume"] = resume
            await agent.drop()
            await rec.wait(is_state(ClientState.BACKOFF))
            client.reconnect_now()  # the held clock would keep the loop's own backoff forever
            (failure,) = await rec.wait(lambda e: isinstance(e, SessionRecoveryFailed), timeout=5)
            assert failure.session_id == doomed.id and failure.will_retry
            await rec.wait(is_state(ClientState.READY), timeout=5)
            assert client._recoverer.busy(doomed.id)  # its retry is scheduled (sleeping on the held clock)
            await client.forget(doomed.id)
            assert not client._recoverer.busy(doomed.id)
            clock.release_all()  # the retry's backoff would be over now
            await round_trip(client)
            await round_trip(client)
            assert len(agent.requests("session/resume", doomed.id)) == 1
            assert doomed.id not in client.sessions and doomed.id not in await stored_ids(store)
            assert [e.reason for e in forgotten_of(rec, doomed.id)] == ["application"]
        finally:
            await rec.close()
            await client.aclose()


# ---------------------------------------- 2. local faults stay local


class FlakyStore:
    """An application's own session store whose writes can be made to fail (a read-only disk, a full one)."""

    def __init__(self) -> None:
        self.records: dict[str, SessionRecord] = {}
        self.fail_save = False
        self.fail_delete = False
        self.calls: list[tuple[str, str, bool]] = []  # (operation, session id, succeeded)
        self.wrote = asyncio.Event()

    async def load_all(self) -> list[SessionRecord]:
        return list(self.records.values())

    async def save(self, record: SessionRecord) -> None:
        self.calls.append(("save", record.session_id, not self.fail_save))
        if self.fail_save:
            raise OSError(30, "Read-only file system")
        self.records[record.session_id] = SessionRecord.from_json(record.to_json())
        self.wrote.set()

    async def delete(self, session_id: str) -> None:
        self.calls.append(("delete", session_id, not self.fail_delete))
        if self.fail_delete:
            raise OSError(28, "No space left on device")
        self.records.pop(session_id, None)
        self.wrote.set()

    async def close(self) -> None:
        pass

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        async with asyncio.timeout(bound(timeout)):
            while not predicate():
                self.wrote.clear()
                await self.wrote.wait()


async def test_a_failing_store_save_never_fails_recovery_nor_causes_another_resume() -> None:
    store = FlakyStore()
    async with ReferenceAgent(2) as agent:
        client, rec = await started(agent.url, store=store)
        try:
            session = await client.new_session("/w")
            assert session.id in store.records
            store.fail_save = True
            await agent.drop_all_connections()
            await rec.wait(recovered(session.id), timeout=5)
            await rec.wait(lambda e: isinstance(e, RecoveryRoundFinished), timeout=5)
            await client.wait_ready(timeout=bound(5))
            (failed,) = await rec.wait(lambda e: isinstance(e, SessionStoreFailed), timeout=5)
            assert failed.session_id == session.id and failed.operation == "save"
            assert "Read-only" in failed.error and failed.generation == client.generation
            assert session.link is SessionLink.ATTACHED
            result = await asyncio.wait_for(session.prompt("echo: still usable"), bound(5))
            assert result.stop_reason == "end_turn"
            # a second drop while the store still fails: recovered again, the fault is not reported again
            await agent.drop_all_connections()
            await rec.ready_count(3, timeout=5)
            assert agent.count("session/resume", session.id) == 2  # one per connection, never a retry
            assert not rec.of(SessionRecoveryFailed)
            assert len(rec.of(SessionStoreFailed)) == 1
            (round1, round2) = rec.of(RecoveryRoundFinished)
            assert (round1.reattached, round1.failed, round2.reattached, round2.failed) == (1, 0, 1, 0)
            # the write is retried later and lands once the store works again
            saves_before = len(store.calls)
            store.fail_save = False
            await store.wait_for(lambda: any(ok for op, _s, ok in store.calls[saves_before:] if op == "save"))
            assert client._writer.pending == 0
            assert agent.count("session/resume", session.id) == 2
        finally:
            await rec.close()
            await client.aclose()


async def test_a_write_refused_inside_a_sqlite_batch_costs_only_its_session(tmp_path: Path) -> None:
    """The SQLite store commits the saves of one recovery turn together; one save the database refuses (a
    trigger here) is reported for its session alone, the others land, and it is written once allowed."""
    path = tmp_path / "s.db"
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE acp_sessions (session_id TEXT PRIMARY KEY, record TEXT NOT NULL)")
        db.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON acp_sessions WHEN NEW.record LIKE '%/refused%' "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )
    async with ReferenceAgent(2) as agent:
        client, rec = await started(agent.url, store=SQLiteSessionStore(path))
        try:
            a, refused, b = [await client.new_session(cwd) for cwd in ("/a", "/refused", "/b")]
            await agent.drop_all_connections()
            for session in (a, refused, b):
                await rec.wait(recovered(session.id), timeout=5)
            await rec.wait(lambda e: isinstance(e, RecoveryRoundFinished), timeout=5)
            (failed,) = rec.of(SessionStoreFailed)  # reported once, at its first save
            assert (failed.session_id, failed.operation) == (refused.id, "save")
            assert "refused by the test" in failed.error
            with contextlib.closing(sqlite3.connect(path)) as db:
                stored = {row[0] for row in db.execute("SELECT session_id FROM acp_sessions")}
                assert stored == {a.id, b.id}
                with db:
                    db.execute("DROP TRIGGER refuse")
        finally:
            await rec.close()
            await client.aclose()  # flushes the owed write, which the database now takes
    reopened = SQLiteSessionStore(path)
    try:
        assert {r.session_id for r in await reopened.load_all()} == {a.id, refused.id, b.id}
    finally:
        await reopened.close()


async def test_a_failing_store_never_fails_new_session_either() -> None:
    store = FlakyStore()
    store.fail_save = True  # e.g. a read-only database from the start
    async with ReferenceAgent(1) as agent:
        client, rec = await started(agent.url, store=store)
        try:
            session = await client.new_session("/w")
            (failed,) = await rec.wait(lambda e: isinstance(e, SessionStoreFailed), timeout=5)
            assert (failed.session_id, failed.operation) == (session.id, "save")
            assert session.id in client.sessions and store.records == {}
            result = await asyncio.wait_for(session.prompt("echo: works anyway"), bound(5))
            assert result.stop_reason == "end_turn"
            store.fail_save = False
            await store.wait_for(lambda: session.id in store.records)  # the owed write lands later
        finally:
            await rec.close()
            await client.aclose()


async def test_unknown_session_is_forgotten_even_when_the_store_delete_fails() -> None:
    store = FlakyStore()
    async with ReferenceAgent(2, capabilities={"status": False}) as agent:
        client, rec = await started(agent.url, store=store)
        try:
            gone, kept = await client.new_session("/w/gone"), await client.new_session("/w/kept")
            store.fail_delete = True
            agent.forget_session(gone.id)
            await agent.drop_all_connections()
            (forgotten,) = await rec.wait(lambda e: isinstance(e, SessionForgotten), timeout=5)
            assert (forgotten.session_id, forgotten.reason, forgotten.via) == (gone.id, "unknown", "session/resume")
            await rec.wait(recovered(kept.id), timeout=5)
            (failed,) = await rec.wait(lambda e: isinstance(e, SessionStoreFailed), timeout=5)
            assert (failed.session_id, failed.operation) == (gone.id, "delete")
            assert gone.id not in client.sessions and gone.link is SessionLink.LOST
            assert agent.count("session/resume", gone.id) == 1 and not rec.of(SessionRecoveryFailed)
            store.fail_delete = False  # the owed delete is retried: the record leaves the store
            await store.wait_for(lambda: gone.id not in store.records)
            assert kept.id in store.records and len(forgotten_of(rec, gone.id)) == 1
            # a later reconnect (the store is read back only at start) does not bring it back either
            await agent.drop_all_connections()
            await rec.ready_count(3, timeout=5)
            assert gone.id not in client.sessions and agent.count("session/resume", gone.id) == 1
        finally:
            await rec.close()
            await client.aclose()


# ---------------------------------------- 3. one request at a time

HISTORY = [("user", "u1", "what is 6 x 7?"), ("agent", "a1", "42")]


def replayed(version: int, role: str, message_id: str, text: str) -> dict[str, Any]:
    """One history message as a replayed update (v2 whole message, v1 chunk)."""
    if version >= 2:
        return {
            "sessionUpdate": f"{role}_message",
            "messageId": message_id,
            "content": [{"type": "text", "text": text}],
        }
    return {
        "sessionUpdate": f"{role}_message_chunk",
        "messageId": message_id,
        "content": {"type": "text", "text": text},
    }


async def collect(session: Any, into: list[Any]) -> None:
    async for item in session.updates():
        into.append(item)


@pytest.mark.parametrize("version", [2, 1], ids=["v2-resume", "v1-load"])
async def test_an_abandoned_attempt_is_cancelled_and_settled_before_the_next_and_leaks_nothing(version: int) -> None:
    method = "session/resume" if version == 2 else "session/load"
    async with (
        ScriptedAgent(version) as agent,
        client_of(agent.url, timeouts=Timeouts(replay_silence=bound(0.5))) as (client, rec),
    ):
        session = await client.new_session("/w")
        attempts: list[ScriptedCall] = []
        overlapped: list[bool] = []

        async def attach(call: ScriptedCall) -> Any:
            agent.known(call)
            attempts.append(call)
            previous = [a for a in attempts[:-1] if a.conn is call.conn]
            overlapped.append(
                any(not any(m == method and ans["id"] == a.id for _n, m, _p, ans in agent.answered) for a in previous)
            )
            if len(attempts) == 1:
                await call.update(replayed(version, *HISTORY[0]))  # part of the history, then silence
                await call.cancelled.wait()
                await call.update(replayed(version, *HISTORY[1]))  # still in flight when the cancel arrived
                # a slow agent: the -32800 comes later; a next resume sent meanwhile would overlap this one
                with contextlib.suppress(TimeoutError):
                    await agent.wait_for(lambda: len(attempts) > 1, timeout=0.5)
                raise ScriptedError(-32800, "Request cancelled")
            for message in HISTORY:
                await call.update(replayed(version, *message))
            if version == 2:
                await call.update({"sessionUpdate": "state_update", "state": "idle"})
            return {}

        agent.handlers[method] = attach
        items: list[Any] = []
        reader = asyncio.create_task(collect(session, items))
        try:
            await agent.drop()
            (event,) = await rec.wait(recovered(session.id), timeout=10)
            assert event.replayed
            (failure,) = rec.of(SessionRecoveryFailed)
            assert failure.attempt == 1 and "Timeout" in failure.error
            assert len(attempts) == 2 and overlapped == [False, False]
            cancels = agent.requests("$/cancel_request")
            assert [p["requestId"] for _n, p in cancels] == [attempts[0].id]
            assert session.transcript.text() == "user: what is 6 x 7?\nagent: 42"
            assert [m.message_id for m in session.transcript.messages] == ["u1", "a1"]
            await round_trip(client)
        finally:
            reader.cancel()
            await asyncio.wait({reader})
        updates = [i for i in items if isinstance(i, SessionUpdate)]
        assert updates and all(u.replay for u in updates)  # nothing of either attempt was delivered as live
        assert session.stats["live"] == 0


# ---------------------------------------- 4. timed by progress


@pytest.mark.parametrize("version", [2, 1], ids=["v2-resume", "v1-load"])
async def test_a_long_replay_that_keeps_streaming_recovers_on_the_first_attempt(version: int) -> None:
    silence = bound(0.6)
    gap = 0.1
    count = int(2.5 * silence / gap)  # the whole replay lasts about 2.5 x replay_silence
    async with (
        ScriptedAgent(version) as agent,
        client_of(agent.url, timeouts=Timeouts(replay_silence=silence)) as (client, rec),
    ):
        session = await client.new_session("/w")
        loop = asyncio.get_running_loop()
        took: list[float] = []

        async def attach(call: ScriptedCall) -> Any:
            agent.known(call)
            started = loop.time()
            for i in range(count):
                await asyncio.sleep(gap)  # a slow link: each message takes a while, none takes long
                await call.update(replayed(version, "agent", f"m{i}", f"part {i}"))
            took.append(loop.time() - started)
            return {}

        agent.handlers["session/resume" if version >= 2 else "session/load"] = attach
        await agent.drop()
        (event,) = await rec.wait(recovered(session.id), timeout=20)
        assert event.mode == ("resume" if version >= 2 else "load") and event.replayed
        assert took[0] > silence  # the replay outlasted the silence timeout ...
        assert not rec.of(SessionRecoveryFailed)  # ... and was never cut off
        assert agent.requests("$/cancel_request") == []
        assert len(agent.requests(f"session/{event.mode}", session.id)) == 1
        assert len(session.transcript.messages) == count


async def test_a_replay_that_never_ends_is_cut_by_the_optional_overall_deadline() -> None:
    options = {
        "timeouts": Timeouts(replay_silence=bound(0.6), recovery_deadline=bound(1.2)),
        "policy": replace(FAST_POLICY, tries=1),
    }
    async with ScriptedAgent(2) as agent, client_of(agent.url, **options) as (client, rec):
        session = await client.new_session("/w")
        calls: list[ScriptedCall] = []
        streamed = 0

        async def endless(call: ScriptedCall) -> Any:
            nonlocal streamed
            agent.known(call)
            calls.append(call)
            if len(calls) > 1:
                return {}  # the retry is answered at once
            while not call.cancelled.is_set():
                await asyncio.sleep(0.1)  # never silent for long, never done
                streamed += 1
                await call.update(replayed(2, "agent", f"m{streamed}", "more"))
            raise ScriptedError(-32800, "Request cancelled")

        agent.handlers["session/resume"] = endless
        await agent.drop()
        (failure,) = await rec.wait(lambda e: isinstance(e, SessionRecoveryFailed), timeout=10)
        assert failure.session_id == session.id and "no answer within" in failure.error
        assert streamed * 0.1 > bound(0.6)  # it streamed for longer than the silence timeout
        assert [p["requestId"] for _n, p in agent.requests("$/cancel_request")] == [calls[0].id]
        await rec.wait(recovered(session.id), timeout=10)
        assert len(calls) == 2 and session.link is SessionLink.ATTACHED
        assert session.transcript.messages == []  # nothing of the cut replay was kept


# ---------------------------------------- 6. the breaker suspends


async def die_at_initialize(call: ScriptedCall) -> Any:
    """An agent that crashes while initializing: the connection closes without an answer."""
    await call.conn.ws.close(1011, "crashed")
    await asyncio.Event().wait()


@pytest.mark.parametrize("rearm", ["reconnect_now", "slow_retry"])
async def test_flapping_after_ready_suspends_with_one_event_and_recovers(rearm: str) -> None:
    breaker = CrashLoopBreaker(threshold=3, short_lived=60.0, window=600.0)
    interval = 600.0 if rearm == "reconnect_now" else bound(0.5)
    async with (
        ScriptedAgent(2) as agent,
        client_of(agent.url, breaker=breaker, policy=replace(FAST_POLICY, suspended_interval=interval)) as (
            client,
            rec,
        ),
    ):
        session = await client.new_session("/w")
        agent.handlers["initialize"] = die_at_initialize
        await agent.drop()
        (suspended,) = await rec.wait(is_state(ClientState.SUSPENDED), timeout=10)
        # the agent now dies before initialize completes: "agent_keeps_dying" (after a ready drop: "flapping")
        assert suspended.reason == "agent_keeps_dying" and suspended.delay == interval
        assert client.state is ClientState.SUSPENDED  # not FAILED: it keeps trying, slowly
        assert client.failure is not None and client.failure.reason == "agent_keeps_dying"
        assert not [e for e in rec.of(StateChanged) if e.new is ClientState.FAILED]
        with pytest.raises(NotConnected):  # calls fail fast while suspended; nothing is sent
            await asyncio.wait_for(session.prompt("hi"), bound(5))
        del agent.handlers["initialize"]  # the agent is healthy again
        attempts = len(agent.links)
        if rearm == "reconnect_now":
            client.reconnect_now()
        await client.wait_ready(timeout=bound(10))
        await rec.wait(recovered(session.id), timeout=5)
        assert len(agent.links) == attempts + 1
        assert [e.new for e in rec.of(StateChanged)].count(ClientState.SUSPENDED) == 1
        assert client.failure is None
        result = await asyncio.wait_for(session.prompt("hi"), bound(5))
        assert result.stop_reason == "end_turn"


async def test_an_agent_that_dies_before_it_was_ever_ready_fails_and_async_with_raises() -> None:
    breaker = CrashLoopBreaker(threshold=3, short_lived=60.0, window=600.0)
    async with ScriptedAgent(2) as agent:
        agent.handlers["initialize"] = die_at_initialize
        client = ReconnectingClient(agent.url, **client_options(breaker=breaker))
        with pytest.raises(Exception) as caught:
            async with asyncio.timeout(bound(10)):
                async with client:
                    pytest.fail("never ready: entering must raise")
        from acp_client import ReconnectFailed

        assert isinstance(caught.value, ReconnectFailed)
        assert caught.value.reason in ("agent_keeps_dying", "flapping")
        assert len(agent.links) == 3
        assert client.state is ClientState.CLOSED


# ---------------------------------------- 7. who sent the close code


async def test_an_oversized_frame_from_the_agent_is_a_retryable_link_fault() -> None:
    async with (
        ScriptedAgent(2) as agent,
        client_of(agent.url, transport_options=TransportOptions(max_frame_bytes=4096)) as (client, rec),
    ):
        session = await client.new_session("/w")
        await agent.live.notify(
            "session/update", {"sessionId": session.id, "update": replayed(2, "agent", "big", "x" * 10_000)}
        )
        (dropped,) = await rec.wait(lambda e: isinstance(e, ConnectionDropped), timeout=5)
        assert dropped.close_code == 1009 and dropped.closed_by_client
        await rec.wait(recovered(session.id), timeout=5)
        await client.wait_ready(timeout=bound(5))
        states = [e for e in rec.of(StateChanged)]
        assert not [e for e in states if e.new is ClientState.FAILED]
        (backoff,) = [e for e in states if e.new is ClientState.BACKOFF]
        assert backoff.reason == "close_1009_sent"
        assert len(agent.links) == 2


async def test_oversized_frames_in_a_loop_are_guarded_by_the_breaker_not_fatal() -> None:
    breaker = CrashLoopBreaker(threshold=3, short_lived=60.0, window=600.0)
    options = {
        "transport_options": TransportOptions(max_frame_bytes=4096),
        "breaker": breaker,
        "policy": replace(FAST_POLICY, suspended_interval=600.0),
    }
    async with ScriptedAgent(2) as agent, client_of(agent.url, **options) as (client, rec):
        default_initialize = agent.defaults["initialize"]

        async def bloated(call: ScriptedCall) -> Any:
            return {**await default_initialize(call), "_padding": "x" * 10_000}  # too big for the client

        agent.handlers["initialize"] = bloated
        await agent.drop()
        (suspended,) = await rec.wait(is_state(ClientState.SUSPENDED), timeout=10)
        assert suspended.reason == "agent_keeps_dying"  # dies at every initialize: counted, then suspended
        pauses = [e for e in rec.of(StateChanged) if e.new is ClientState.BACKOFF]
        assert [p.reason for p in pauses][1:] == ["close_1009_sent"] * (len(pauses) - 1) and len(pauses) >= 2
        assert not [e for e in rec.of(StateChanged) if e.new is ClientState.FAILED]
        del agent.handlers["initialize"]
        client.reconnect_now()
        await client.wait_ready(timeout=bound(5))


@pytest.mark.parametrize("code", [1007, 1009])
async def test_a_1007_or_1009_sent_by_the_agent_stays_fatal(code: int) -> None:
    async with ScriptedAgent(2) as agent, client_of(agent.url) as (_client, rec):
        await agent.drop(code=code)
        (failed,) = await rec.wait(is_state(ClientState.FAILED), timeout=5)
        assert failed.reason == f"close_{code}"
        (dropped,) = rec.of(ConnectionDropped)
        assert dropped.close_code == code and not dropped.closed_by_client
        assert len(agent.links) == 1


# ---------------------------------------- 8. reconnect_now mid-attempt


async def test_reconnect_now_while_initializing_spares_only_that_attempt() -> None:
    breaker = CrashLoopBreaker(threshold=3, short_lived=60.0, window=600.0)
    gate = Gate()
    slow = Backoff(base=bound(0.5), cap=bound(0.5))
    async with ScriptedAgent(2) as agent, client_of(agent.url, breaker=breaker, backoff=slow) as (client, rec):
        default_initialize = agent.defaults["initialize"]

        async def held_initialize(call: ScriptedCall) -> Any:
            if call.conn.number == 2:
                await gate.hold()
            return await default_initialize(call)

        agent.handlers["initialize"] = held_initialize
        await agent.drop()  # death 1
        await asyncio.wait_for(gate.entered.wait(), bound(5))
        assert client.state is ClientState.INITIALIZING
        client.reconnect_now()
        gate.release.set()
        await rec.ready_count(2, timeout=5)
        await agent.drop()  # death 2: a normal drop, with its normal backoff
        await rec.ready_count(3, timeout=10)
        pauses = [e for e in rec.of(StateChanged) if e.new is ClientState.BACKOFF]
        assert len(pauses) == 2
        assert pauses[1].reason == "close_1011" and pauses[1].delay is not None and pauses[1].delay > 0
        await agent.drop()  # death 3: the breaker counted every drop, so it trips now
        (suspended,) = await rec.wait(is_state(ClientState.SUSPENDED), timeout=10)
        assert suspended.reason == "flapping"


async def test_reconnect_now_while_connecting_cuts_the_backoff_after_that_failed_attempt_only() -> None:
    slow = Backoff(base=bound(0.3), cap=bound(0.3))
    async with ScriptedAgent(2) as agent, client_of(agent.url, backoff=slow, breaker=None) as (client, rec):
        arrived: list[int] = []
        gate = Gate()

        async def failing_initialize(call: ScriptedCall) -> Any:
            arrived.append(call.conn.number)
            if call.conn.number == 2:
                await gate.hold()
            raise ScriptedError(-32603, "not ready yet")

        agent.handlers["initialize"] = failing_initialize
        await agent.drop()
        await asyncio.wait_for(gate.entered.wait(), bound(5))
        client.reconnect_now()  # during this attempt: it alone gets no backoff
        gate.release.set()
        await agent.wait_for(lambda: len(arrived) >= 3, timeout=10)
        del agent.handlers["initialize"]
        await client.wait_ready(timeout=bound(10))
        pauses = [e for e in rec.of(StateChanged) if e.new is ClientState.BACKOFF]
        assert pauses[0].delay is not None and pauses[0].delay > 0  # the drop itself: normal backoff
        assert pauses[1].delay == 0.0  # the attempt reconnect_now() hurried
        assert all(p.delay is not None and p.delay > 0 for p in pauses[2:]) and len(pauses) >= 3


# ---------------------------------------- 9. subscriptions and round events


async def test_event_subscriptions_register_on_the_call_and_never_leak() -> None:
    async with ScriptedAgent(2) as agent:
        client = ReconnectingClient(agent.url, **FAST_RETRY)
        bus = client._bus
        try:
            assert bus.subscribers == 0
            early = client.events()
            assert bus.subscribers == 1  # subscribed from the call on: nothing emitted afterwards is missed
            await client.start()
            await client.wait_ready(timeout=bound(5))
            first = await asyncio.wait_for(anext(early), bound(5))
            assert isinstance(first, StateChanged) and first.old is ClientState.IDLE
            await early.aclose()
            assert bus.subscribers == 0
            # a reader task that is cancelled leaks nothing
            reading = asyncio.Event()

            async def reader() -> None:
                stream = client.events()
                reading.set()
                async for _event in stream:
                    pass

            task = asyncio.create_task(reader())
            await asyncio.wait_for(reading.wait(), bound(5))
            assert bus.subscribers == 1
            task.cancel()
            await asyncio.wait({task})
            del task
            gc.collect()
            assert bus.subscribers == 0
            # an iterator dropped without being closed leaks nothing
            dropped = client.events()
            assert bus.subscribers == 1
            del dropped
            gc.collect()
            assert bus.subscribers == 0
            # the same for a session's updates()
            session = await client.new_session("/w")
            updates = session.updates()
            assert len(session._subs) == 1
            await updates.aclose()
            assert session._subs == []
            stream = session.updates()
            del stream
            gc.collect()
            assert session._subs == []
            # and a reader still iterating when the client closes just ends
            last = client.events()
            ending = asyncio.create_task(collect_all(last))
        finally:
            await client.aclose()
        seen = await asyncio.wait_for(ending, bound(5))
        assert isinstance(seen[-1], StateChanged) and seen[-1].new is ClientState.CLOSED
        assert bus.subscribers == 0


async def collect_all(stream: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in stream]


async def test_a_slow_events_reader_gets_events_dropped_with_the_count() -> None:
    async with ReferenceAgent(2) as agent:
        client, rec = await started(agent.url, event_buffer=4)
        try:
            await client.new_session("/w")
            slow = client.events()
            before = len(rec.events)
            await agent.drop_all_connections()
            await rec.ready_count(2, timeout=5)
            emitted = rec.events[before:]
            assert len(emitted) > 4 and not rec.of(EventsDropped)  # the fast reader lost nothing
            notice = await asyncio.wait_for(anext(slow), bound(5))
            assert notice == EventsDropped(len(emitted) - 4)
            rest = [await asyncio.wait_for(anext(slow), bound(5)) for _ in range(4)]
            assert rest == emitted[-4:]
            await slow.aclose()
        finally:
            await rec.close()
            await client.aclose()


class KeepOne:
    """A per-session strategy that keeps its session detached (the application decides later)."""

    def decide(self, record: Any, probe: Any, capabilities: Any) -> Any:
        from acp_client import Keep

        return Keep("the application decides")


async def test_one_recovery_round_finished_per_round_with_counts_and_generations_on_every_event() -> None:
    async with ReferenceAgent(2) as agent:
        client, rec = await started(agent.url, recovery_timeout=bound(0.5), recovery_tries=1)
        try:
            live, odd, gone, hung, kept = [await client.new_session(f"/w/{i}") for i in range(5)]
            agent.status_override[odd.id] = "hibernating"  # not active: restored
            agent.forget_session(gone.id)
            agent.hang_status.add(hung.id)
            client.set_strategy(kept.id, KeepOne())
            await agent.drop_all_connections()
            await rec.ready_count(2, timeout=10)
            generation = client.generation
            (round_event,) = rec.of(RecoveryRoundFinished)
            assert round_event == RecoveryRoundFinished(
                generation, reattached=1, restored=1, forgotten=1, failed=1, kept=1
            )
            per_session = [
                e
                for e in rec.events
                if isinstance(e, SessionRecovered | SessionForgotten | SessionRecoveryFailed)
                or type(e).__name__ == "SessionDetached"
            ]
            assert {e.session_id for e in per_session} == {live.id, odd.id, gone.id, hung.id, kept.id}
            assert all(e.generation == generation for e in per_session)
            outcome = {e.session_id: e.outcome for e in rec.of(SessionRecovered)}
            assert outcome == {live.id: "reattached", odd.id: "restored"}
            # the next round has its own event, with its own generation
            agent.hang_status.clear()
            await agent.drop_all_connections()
            await rec.ready_count(3, timeout=10)
            rounds = rec.of(RecoveryRoundFinished)
            assert [r.generation for r in rounds] == [generation, client.generation]
            assert rounds[1].reattached + rounds[1].restored == 3 and rounds[1].kept == 1
        finally:
            await rec.close()
            await client.aclose()


# ---------------------------------------- 10. unknown-session dialects

INTERNAL = AgentError(-32603, "Internal error")


DIALECT_CASES = [
    (1, "absent_from_list"),
    (1, "present_in_list"),
    (1, "no_list"),  # v2 always has session/list
    (1, "configured_code"),
    (2, "absent_from_list"),
    (2, "present_in_list"),
    (2, "configured_code"),
]


@pytest.mark.parametrize(("version", "case"), DIALECT_CASES, ids=[f"v{v}-{c}" for v, c in DIALECT_CASES])
async def test_a_32603_to_resume_is_read_through_session_list_or_the_configured_codes(version: int, case: str) -> None:
    # without session/status the re-attach (v1 session/load, v2 session/resume) is the first to hear of it
    via = "session/load" if version == 1 else "session/resume"
    capabilities = {"status": False} if version == 2 else {"status": False, "list": case != "no_list"}
    codes = {-32603} if case == "configured_code" else {-32002}
    options: dict[str, Any] = {"policy": replace(FAST_POLICY, tries=1, unknown_session_codes=codes)}
    async with ReferenceAgent(version, capabilities=capabilities) as agent:
        client, rec = await started(agent.url, **options)
        try:
            session = await client.new_session("/w")
            # a listing that names nobody proves nothing (docs/topics/reconnect.md, Dialects): another session
            # in the same cwd makes the listing say something
            other = await client.new_session("/w") if case == "absent_from_list" else None
            if case != "present_in_list":
                agent.forget_session(session.id)  # the agent does not know it any more...
            agent.method_errors[via] = INTERNAL  # ...and says so in its own dialect
            await agent.drop_all_connections()
            await rec.wait(lambda e: isinstance(e, RecoveryRoundFinished), timeout=10)
            if case in ("absent_from_list", "configured_code"):
                (forgotten,) = rec.of(SessionForgotten)
                reason = "not_listed" if case == "absent_from_list" else "unknown"
                assert (forgotten.session_id, forgotten.reason, forgotten.via) == (session.id, reason, via)
                assert session.id not in client.sessions and session.link is SessionLink.LOST
                if case == "absent_from_list":  # the other session's failed attempts look it up too
                    assert other is not None and other.id in client.sessions
                    assert agent.count("session/list") >= 1
                else:
                    assert agent.count("session/list") == 0
                assert not [e for e in rec.of(SessionRecoveryFailed) if e.session_id == session.id]
                return
            # a transient error as far as the client can tell: kept and retried with backoff, never forgotten
            failures = await rec.wait(lambda e: isinstance(e, SessionRecoveryFailed) and e.attempt >= 2, timeout=10)
            assert failures and all(e.session_id == session.id and e.will_retry for e in failures)
            if case == "no_list":
                assert agent.count("session/list") == 0
            else:  # each failed attempt looked the session up (the next attempt's lookup may be under way)
                assert agent.count("session/list") >= len(failures)
            assert not rec.of(SessionForgotten) and session.id in client.sessions
            if case == "present_in_list":
                del agent.method_errors[via]  # the hiccup passes: the retry recovers it
                await rec.wait(recovered(session.id), timeout=10)
                assert session.link is SessionLink.ATTACHED
            else:
                assert session.link is not SessionLink.LOST
        finally:
            await rec.close()
            await client.aclose()


# ---------------------------------------- 11. across protocol versions


@pytest.mark.parametrize("first", [1, 2], ids=["v1-v2-v1", "v2-v1-v2"])
async def test_a_session_crossing_protocol_versions_is_sent_in_the_new_shape(first: int) -> None:
    store = MemorySessionStore()
    server = {"name": "files", "command": "/usr/bin/mcp-files", "args": ["--root", "/w"], "env": []}
    async with ScriptedAgent(first) as agent, client_of(agent.url, store=store) as (client, rec):
        session = await client.new_session("/w", mcp_servers=[server if first == 1 else {"type": "stdio", **server}])
        sent = [(n, p["mcpServers"]) for n, p in agent.requests("session/new")]
        for version in (3 - first, first):
            agent.version = version  # the agent was upgraded (or rolled back) while the link was down
            await agent.drop()
            expected = len(sent)
            await rec.wait(lambda _e, n=expected: len(rec.of(SessionRecovered)) >= n, timeout=5)
            method = "session/resume" if version == 2 else "session/load"
            (_n, params), *_ = [r for r in agent.requests(method, session.id) if r[0] == len(agent.links)]
            (entry,) = params["mcpServers"]
            if version == 2:
                assert entry == {"type": "stdio", **server}
            else:
                assert entry == server and "type" not in entry
            assert client.protocol_version == version
            (record,) = await store.load_all()
            assert record.protocol_version == version and record.mcp_servers == params["mcpServers"]
            sent.append((len(agent.links), params["mcpServers"]))


# ---------------------------------------- 12. prompt while re-attaching


@pytest.mark.parametrize("bounded_by", ["session_wait_timeout", "prompt_timeout"])
@pytest.mark.parametrize("version", [2, 1], ids=["v2", "v1"])
async def test_a_prompt_waiting_for_reattachment_says_it_was_never_sent(version: int, bounded_by: str) -> None:
    gate = Gate()
    wait = bound(0.3)
    options = {"timeouts": Timeouts(session_wait=wait if bounded_by == "session_wait_timeout" else bound(30))}
    async with ScriptedAgent(version) as agent, client_of(agent.url, **options) as (client, rec):
        session = await client.new_session("/w")

        async def held(call: ScriptedCall) -> Any:
            agent.known(call)
            await gate.hold()
            return {}

        agent.handlers["session/resume" if version == 2 else "session/load"] = held
        await agent.drop()
        await asyncio.wait_for(gate.entered.wait(), bound(5))
        timeout = wait if bounded_by == "prompt_timeout" else None
        with pytest.raises((NotConnected, ACPTimeoutError)) as caught:
            await asyncio.wait_for(session.prompt("hello", timeout=timeout), bound(10))
        assert "never sent" in str(caught.value), str(caught.value)
        assert "may still be running" not in str(caught.value)
        assert agent.requests("session/prompt") == []
        gate.release.set()
        await rec.wait(recovered(session.id), timeout=5)
        result = await asyncio.wait_for(session.prompt("hello"), bound(5))
        assert result.stop_reason == "end_turn"
        assert len(agent.requests("session/prompt")) == 1


# ---------------------------------------- 13. unknown agent requests


@pytest.mark.parametrize("params", [None, {}, {"sessionId": "s1"}], ids=["no-params", "empty", "with-params"])
async def test_an_agent_request_for_an_unknown_method_gets_method_not_found(params: dict[str, Any] | None) -> None:
    async with ScriptedAgent(2) as agent, client_of(agent.url) as (client, _rec):
        answer = await asyncio.wait_for(agent.live.request("_vendor/unknown_thing", params), bound(5))
        assert "result" not in answer
        assert answer["error"]["code"] == -32601
        # the connection is unharmed: the next call works
        session = await client.new_session("/w")
        assert (await asyncio.wait_for(session.prompt("hi"), bound(5))).stop_reason == "end_turn"


# ---------------------------------------- 5. slow sessions never stall healthy ones (the timing is benchmarks/p8)


class AfterResumeOf:
    """A per-session strategy that re-attaches only once another session's resume reached the agent."""

    def __init__(self, agent: ScriptedAgent, session_id: str) -> None:
        self.agent, self.session_id = agent, session_id

    async def decide(self, record: Any, probe: Any, capabilities: Any) -> Any:
        from acp_client import Reattach

        await self.agent.wait_for(lambda: bool(self.agent.requests("session/resume", self.session_id)))
        return Reattach("resume", replay=False, outcome="reattached")


async def test_a_given_up_request_frees_its_slot_before_its_cancel_is_answered() -> None:
    options = {"policy": replace(FAST_POLICY, concurrency=1), "timeouts": Timeouts(replay_silence=bound(1.0))}
    async with ScriptedAgent(2) as agent, client_of(agent.url, **options) as (client, rec):
        silent, healthy = await client.new_session("/w/silent"), await client.new_session("/w/healthy")

        async def resume(call: ScriptedCall) -> Any:
            agent.known(call)
            if call.session_id == silent.id:
                await asyncio.Event().wait()  # never answered, not even the cancel
            return {}

        agent.handlers["session/resume"] = resume
        client.set_strategy(healthy.id, AfterResumeOf(agent, silent.id))  # the silent one holds the slot first
        await agent.drop()
        await rec.wait(recovered(healthy.id), timeout=15)
        # the healthy session got the only slot as soon as the silent request was given up, not after the
        # bounded wait for the answer to its $/cancel_request (which never comes)
        assert agent.requests("$/cancel_request")
        assert not [e for e in rec.of(SessionRecoveryFailed) if e.session_id == silent.id]
        assert len(agent.requests("session/resume", silent.id)) == 1


async def test_a_session_resumes_on_the_slot_its_probe_held() -> None:
    """With one slot, each session's resume goes out right after its own status answer: a started session
    finishes first instead of queueing again behind every session still waiting for its probe."""
    one_slot = replace(FAST_POLICY, concurrency=1)
    async with ScriptedAgent(2, status=True) as agent, client_of(agent.url, policy=one_slot) as (client, rec):
        sessions = [await client.new_session(f"/w/{i}") for i in range(3)]

        async def inactive(call: ScriptedCall) -> dict[str, Any]:
            return {"status": "inactive"}  # the agent restarted: every session is resumed

        agent.handlers["session/status"] = inactive
        before = len(agent.log)
        await agent.drop()
        for session in sessions:
            await rec.wait(recovered(session.id), timeout=15)
        wire = [(m, p.get("sessionId")) for _n, m, p in agent.log[before:] if m in ("session/status", "session/resume")]
        assert len(wire) == 6
        pairs = [(wire[i], wire[i + 1]) for i in range(0, 6, 2)]
        assert all(s[0] == "session/status" and r == ("session/resume", s[1]) for s, r in pairs)
        assert {s[1] for s, _r in pairs} == {session.id for session in sessions}


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_hung_request_does_not_halve_the_adaptive_limit_while_others_are_answered() -> None:
    from acp_client.reconnect import AdaptiveLimit

    clock = FakeTime()
    limit = AdaptiveLimit(16, clock=clock)
    hung = await limit.acquire()  # a request that will never be answered
    for _ in range(4):
        started = await limit.acquire()
        clock.now += 0.01
        limit.release(started, ok=True)
    before = limit.limit
    clock.now += 1.0
    limit.release(hung, ok=False)  # given up after the silence timeout: only its session's fault
    assert limit.limit == before
    # with no answer at all since it started, a timeout is a congestion signal: the limit halves
    stalled = await limit.acquire()
    clock.now += 1.0
    limit.release(stalled, ok=False)
    assert limit.limit == before // 2
    # and an agent that says it is overloaded always halves it
    busy = await limit.acquire()
    clock.now += 1.0
    limit.release(busy, ok=True, overloaded=True)
    assert limit.limit == before // 4


async def test_a_renewed_slot_is_kept_while_the_limit_has_room_and_given_back_when_it_shrank() -> None:
    from acp_client.reconnect import AdaptiveLimit

    clock = FakeTime()
    limit = AdaptiveLimit(2, maximum=2, clock=clock)
    first, _second = await limit.acquire(), await limit.acquire()
    waiter = asyncio.create_task(limit.acquire())
    await asyncio.sleep(0)  # one loop turn: the task runs up to its wait (asserted next, not assumed)
    assert limit.waiting == 1  # queued behind the two held slots
    clock.now += 0.01
    kept = limit.renew(first)  # answered fine: the same job's next request goes out on this slot
    assert kept == clock.now and limit.in_flight == 2 and not waiter.done()
    assert limit.fastest == pytest.approx(0.01)  # the answer was learnt from, as by release()
    limit.maximum = 1  # the limit shrank below what is in flight: the renewed slot is given back
    clock.now += 0.01
    assert limit.renew(kept) is None and limit.in_flight == 1 and not waiter.done()
    limit.give_back()  # kept for a request that was not made: freed, and the waiter gets it
    async with asyncio.timeout(bound(5)):
        await waiter
    assert limit.in_flight == 1
    assert limit.fastest == pytest.approx(0.01)  # nothing learnt from a slot that carried no request

"""Several ReconnectingClients (workers) on one shared RedisSessionStore, against the reference agent: each
session is served by exactly one worker; a dead worker's sessions are adopted, released ones handed over,
taken ones reported (SessionTakenOver) and never silently broken; a partition from Redis and a Redis that
lost its data are survived. Real servers: Valkey 8 and Redis 6.2 from their wheels."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

from acp_client import Backoff, ReconnectingClient, RecoveryPolicy, SessionLink, Timeouts, connect
from acp_client.exceptions import InvalidParams, LeaseLost, UsageError
from acp_client.reconnect import (
    Event,
    SessionForgotten,
    SessionRecovered,
    SessionsAdopted,
    SessionStoreReset,
    SessionTakenOver,
)
from acp_client.sessions import MemorySessionStore, RedisSessionStore
from acp_client.testing import FaultProxy, ProxyMode, ReferenceAgent
from acp_client.testing.redis_server import RedisServer
from tests.conftest import bound, raw_redis
from tests.sessions._layout import session_key

#: Lease TTL, scaled like every bound: a worker renews every TTL/3 s, and on a loaded 2-core machine its loop can
#: stall for seconds (unscaled 2 s leases expired under their own healthy owner, who then re-attached its own
#: sessions a second time).
TTL = bound(2.0)
FAST: dict[str, Any] = {
    "backoff": Backoff(base=0.02, cap=0.2),
    "policy": RecoveryPolicy(start_jitter=0.0),
    "timeouts": Timeouts(probe=5.0, replay_silence=5.0),
}


class Recorder:
    """The events of one client, with bounded waits on them."""

    def __init__(self, client: ReconnectingClient) -> None:
        self.events: list[Event] = []
        self._changed = asyncio.Event()
        self._stream = client.events()
        self._task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        async for event in self._stream:
            self.events.append(event)
            self._changed.set()

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    async def wait(
        self, predicate: Callable[[], bool], timeout: float = 10.0, *, also: Sequence[Recorder] = ()
    ) -> None:
        """Return once ``predicate()`` holds, re-checked on every event of this recorder and of ``also``."""
        recorders = [self, *also]
        async with asyncio.timeout(bound(timeout)):
            while not predicate():
                for each in recorders:
                    each._changed.clear()
                waits = [asyncio.ensure_future(each._changed.wait()) for each in recorders]
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiting in waits:
                        waiting.cancel()
                    await asyncio.gather(*waits, return_exceptions=True)

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.wait({self._task})


class Workers:
    """Makes worker clients on one namespace of a server; closes them (and their recorders) at the end."""

    def __init__(self, agent: ReferenceAgent, url: str) -> None:
        self.agent = agent
        self.url = url
        self.namespace = f"t{uuid.uuid4().hex[:8]}"
        self._made: list[tuple[ReconnectingClient, Recorder]] = []

    async def start(
        self, owner: str, *, url: str | None = None, store_options: dict[str, Any] | None = None, **kwargs: Any
    ) -> tuple[ReconnectingClient, Recorder]:
        options = {"lease_ttl": TTL, **(store_options or {})}
        store = RedisSessionStore(url or self.url, namespace=self.namespace, owner_id=owner, **options)
        client = ReconnectingClient(self.agent.url, store=store, **{**FAST, **kwargs})
        rec = Recorder(client)
        self._made.append((client, rec))
        await client.start()
        await client.wait_ready(timeout=bound(10))
        return client, rec

    async def close(self) -> None:
        for client, rec in self._made:
            await client.aclose()
            await rec.close()


@pytest.fixture
async def agent() -> AsyncIterator[ReferenceAgent]:
    async with ReferenceAgent(2) as running:
        yield running


@pytest.fixture
async def workers(agent: ReferenceAgent, redis_url: str) -> AsyncIterator[Workers]:
    """Workers on a fresh namespace of the session's Valkey 8, Redis 6.2 or Redis Cluster (each test thrice)."""
    made = Workers(agent, redis_url)
    yield made
    await made.close()


def reattaches(agent: ReferenceAgent, session_id: str) -> int:
    return agent.count("session/resume", session_id) + agent.count("session/load", session_id)


async def test_a_worker_loads_only_what_it_owns(workers: Workers, agent: ReferenceAgent) -> None:
    a, _ = await workers.start("A")
    ids = [(await a.new_session(f"/w/{i}")).id for i in range(3)]
    b, _ = await workers.start("B")
    assert dict(b.sessions) == {}  # held by A: not loaded, not recovered, not stolen
    assert all(reattaches(agent, sid) == 0 for sid in ids)
    assert a.owner_id == "A" and b.owner_id == "B"
    result = await a.sessions[ids[0]].prompt("echo: still mine", timeout=bound(10))
    assert result.stop_reason == "end_turn"


async def test_dead_worker_sessions_are_adopted_once_each(workers: Workers, agent: ReferenceAgent) -> None:
    a, _ = await workers.start("A", store_options={"release_on_close": False})  # dies without a word
    ids = {(await a.new_session(f"/w/{i}")).id for i in range(6)}
    b, b_events = await workers.start("B")
    c, c_events = await workers.start("C")
    await a.aclose()  # its leases stay in Redis until they expire

    def adopted() -> set[str]:
        return {e.session_id for r in (b_events, c_events) for e in r.of(SessionRecovered)}

    await b_events.wait(lambda: adopted() >= ids, timeout=10, also=[c_events])  # whichever worker adopts
    assert all(reattaches(agent, sid) == 1 for sid in ids)  # exactly one re-attach each
    assert not set(b.sessions) & set(c.sessions)
    assert set(b.sessions) | set(c.sessions) == ids
    sid = next(iter(ids))
    owner = b if sid in b.sessions else c
    assert (await owner.sessions[sid].prompt("echo: adopted", timeout=bound(10))).stop_reason == "end_turn"


async def test_sticky_routing_adopts_only_what_the_hook_wants(workers: Workers, agent: ReferenceAgent) -> None:
    a, _ = await workers.start("A")
    ids = sorted([(await a.new_session(f"/w/{i}")).id for i in range(4)])
    wanted = set(ids[:2])
    b, b_events = await workers.start("B", should_own=wanted.__contains__)
    await a.aclose()  # release_on_close: free at once
    await b_events.wait(lambda: {e.session_id for e in b_events.of(SessionRecovered)} >= wanted)
    c, _ = await workers.start("C")  # any session: picks up the rest at its start
    assert set(c.sessions) == set(ids[2:])
    assert set(b.sessions) == wanted
    assert all(reattaches(agent, sid) == 1 for sid in ids)


async def test_release_and_adopt_hand_a_session_over(workers: Workers, agent: ReferenceAgent) -> None:
    a, a_events = await workers.start("A")
    b, _ = await workers.start("B")
    session = await a.new_session("/w/handover")
    assert await a.release(session.id) is True
    await a_events.wait(lambda: bool(a_events.of(SessionTakenOver)))
    taken = a_events.of(SessionTakenOver)
    assert [(e.session_id, e.reason) for e in taken] == [(session.id, "released")]
    assert session.link is SessionLink.DETACHED
    with pytest.raises(LeaseLost):
        await session.prompt("echo: not mine any more", timeout=bound(5))
    adopted = await b.adopt(session.id)
    assert adopted.link is SessionLink.ATTACHED and reattaches(agent, session.id) == 1
    assert (await adopted.prompt("echo: mine now", timeout=bound(10))).stop_reason == "end_turn"
    with pytest.raises(LeaseLost):
        await a.adopt(session.id)  # B holds it
    with pytest.raises(LeaseLost):
        await a.recover(session.id)  # never re-attached behind B's back


async def test_forgetting_a_taken_over_handle_leaves_the_new_owner_alone(
    workers: Workers, agent: ReferenceAgent
) -> None:
    # leases that outlive a loaded machine's stalls: nothing here waits for one to expire, and B must still
    # own the session at the end (a 2 s lease lapsed once under load on the cluster)
    a, a_events = await workers.start("A", store_options={"lease_ttl": 30.0})
    b, _ = await workers.start("B", store_options={"lease_ttl": 30.0})
    session = await a.new_session("/w/moved")
    await a.release(session.id)
    await b.adopt(session.id)
    await a_events.wait(lambda: bool(a_events.of(SessionTakenOver)))
    assert a._ownership is not None and a._ownership.taken(session.id)

    await a.forget(session.id)  # the application drops the stale handle
    assert session.id not in a.sessions
    await a._ownership.tick()
    assert not a._ownership.taken(session.id)  # a long-lived worker does not remember every departed session
    # B's record and lease are untouched: the forget was local, its store delete refused by the fencing
    observer = RedisSessionStore(workers.url, namespace=workers.namespace, owner_id="observer", lease_ttl=TTL)
    try:
        assert [r.session_id for r in await observer.load_all()] == [session.id]
    finally:
        await observer.close()
    assert b._ownership is not None and b._ownership.owns(session.id)
    assert (await b.sessions[session.id].prompt("echo: still B's", timeout=bound(10))).stop_reason == "end_turn"
    await a._ownership.tick(adopt=True)
    assert session.id not in a.sessions  # forgotten here for good: never adopted back


async def test_agent_says_attached_elsewhere(workers: Workers, agent: ReferenceAgent) -> None:
    a, a_events = await workers.start("A", store_options={"lease_ttl": 30.0})
    b, _ = await workers.start("B", store_options={"lease_ttl": 30.0})
    mine = await a.new_session("/w/mine")
    theirs = await a.new_session("/w/theirs")

    # a client that holds no lease re-attaches one session on its own connection: A still holds the lease,
    # so A re-attaches it (the caller gets the agent's error once)
    async with connect(agent.url, protocol_version=2) as rogue:
        await rogue.resume_session(mine.id, "/w/mine")
        with pytest.raises(InvalidParams) as refused:
            await mine.prompt("echo: hello?", timeout=bound(5))
        assert "not attached" in refused.value.data["reason"]
        await a_events.wait(lambda: any(e.session_id == mine.id for e in a_events.of(SessionRecovered)))
        assert (await mine.prompt("echo: back", timeout=bound(10))).stop_reason == "end_turn"

    # the server-side lease ends early (as after a paused VM: A's local clock still says valid), B takes it
    raw = raw_redis(workers.url)
    try:
        await raw.delete(session_key(workers.namespace, "lease", theirs.id))
    finally:
        await raw.aclose()
    await b.adopt(theirs.id)
    # (not a prompt: a prompt writes its ledger entry first, and the fenced write would find the lease gone
    # before the agent could say so: reason "write_rejected". set_config_option writes only after its answer)
    with pytest.raises(LeaseLost) as caught:
        await theirs.set_config_option("model", "smart", timeout=bound(5))
    assert caught.value.reason == "attached_elsewhere"
    await a_events.wait(lambda: bool(a_events.of(SessionTakenOver)))
    assert [(e.session_id, e.reason) for e in a_events.of(SessionTakenOver)] == [(theirs.id, "attached_elsewhere")]
    assert theirs.link is SessionLink.DETACHED
    assert (await b.sessions[theirs.id].prompt("echo: B serves it", timeout=bound(10))).stop_reason == "end_turn"


@pytest.fixture
async def single_server_workers(agent: ReferenceAgent, redis_server: RedisServer) -> AsyncIterator[Workers]:
    """Workers on a fresh namespace of one server (Valkey 8 or Redis 6.2) that a fault proxy can stand before."""
    made = Workers(agent, redis_server.url)
    yield made
    await made.close()


async def test_partition_from_redis(
    single_server_workers: Workers, agent: ReferenceAgent, redis_server: RedisServer
) -> None:
    workers = single_server_workers
    async with FaultProxy("127.0.0.1", redis_server.port) as proxy:
        cut, cut_events = await workers.start(
            "cut",
            url=f"redis://127.0.0.1:{proxy.port}/0",
            # short round trips, so the partition is noticed within a lease; scaled, so load alone is not one
            store_options={"retry_for": bound(0.5), "socket_timeout": bound(0.5), "release_on_close": False},
        )
        ids = {(await cut.new_session(f"/w/{i}")).id for i in range(3)}
        other, other_events = await workers.start("other")
        proxy.blackhole_all()
        # the cut-off worker stops serving its sessions once their leases run out, and says so
        await cut_events.wait(lambda: {e.session_id for e in cut_events.of(SessionTakenOver)} >= ids)
        assert {e.reason for e in cut_events.of(SessionTakenOver)} == {"lease_expired"}
        with pytest.raises(LeaseLost):
            await cut.sessions[next(iter(ids))].prompt("echo: partitioned", timeout=bound(5))
        # the other worker adopts them, one re-attach each
        await other_events.wait(lambda: {e.session_id for e in other_events.of(SessionRecovered)} >= ids)
        assert all(reattaches(agent, sid) == 1 for sid in ids)
        # the link returns: the cut-off worker resumes cleanly, without taking anything back
        await proxy.reset_all()
        proxy.restore()
        fresh = await cut.new_session("/w/after")
        assert (await fresh.prompt("echo: working again", timeout=bound(10))).stop_reason == "end_turn"
        assert all(reattaches(agent, sid) == 1 for sid in ids)
        assert set(other.sessions) == ids
        store = RedisSessionStore(redis_server.url, namespace=workers.namespace, owner_id="observer")
        try:
            records = {r.session_id for r in await store.load_all()}
        finally:
            await store.close()
        assert records == ids | {fresh.id}


async def test_a_lease_run_out_by_the_local_clock_is_given_back(
    single_server_workers: Workers, agent: ReferenceAgent, redis_server: RedisServer
) -> None:
    """One renewal reaches the server (the heartbeat there lives on) but its answer misses the round's
    deadline: the worker stops serving its sessions, whose leases ran out by its local clock. It must give
    them back, since its next renewal succeeds and would otherwise keep them held, served by nobody (found
    at 100,000 sessions with saturated loops, where one round in a few came back late)."""
    workers = single_server_workers
    async with FaultProxy("127.0.0.1", redis_server.port) as proxy:
        late, late_events = await workers.start(
            "late", url=f"redis://127.0.0.1:{proxy.port}/0", store_options={"socket_timeout": 4 * TTL}
        )
        ids = {(await late.new_session(f"/w/{i}")).id for i in range(2)}
        other, other_events = await workers.start("other")
        ownership = late._ownership
        assert ownership is not None
        # Right after a renewal, the links the worker has open turn slow both ways (new ones stay fast). The
        # next renewal, due TTL/3 later with a deadline of 2/3 TTL, takes one of them: its command reaches
        # the server after 0.45 TTL, while the heartbeat there still lives, and extends it; the answer would
        # come after 0.9 TTL, past the deadline. The renewal after it, on a new link, succeeds.
        await asyncio.wait_for(ownership.next_renewal(), bound(5))
        for link in proxy.links:
            proxy.set_mode(ProxyMode.delay(0.45 * TTL), "both", link=link)
        await late_events.wait(lambda: {e.session_id for e in late_events.of(SessionTakenOver)} >= ids)
        assert {e.reason for e in late_events.of(SessionTakenOver)} == {"lease_expired"}
        proxy.restore()

        def adopted() -> set[str]:
            events = late_events.of(SessionsAdopted) + other_events.of(SessionsAdopted)
            return {sid for event in events for sid in event.session_ids}

        def served() -> bool:
            return all(
                any((h := c.sessions.get(sid)) is not None and h.link is SessionLink.ATTACHED for c in (late, other))
                for sid in ids
            )

        # given back, so one of the two adopts each (either may: the late one wants its sessions back too)
        await late_events.wait(lambda: adopted() >= ids and served(), timeout=10 * TTL, also=[other_events])


async def test_redis_lost_its_data(agent: ReferenceAgent, redis_server: RedisServer) -> None:
    async with RedisServer(redis_server.flavour) as private:
        workers = Workers(agent, private.url)
        try:
            a, a_events = await workers.start("A")
            sessions = [await a.new_session(f"/w/{i}") for i in range(4)]
            gone = sessions[0]
            agent.forget_session(gone.id)  # meanwhile the agent lost one of them too
            await asyncio.to_thread(private.restart)  # same port, every key gone
            await a_events.wait(lambda: bool(a_events.of(SessionStoreReset)))
            reset = a_events.of(SessionStoreReset)[0]
            assert (reset.reclaimed, reset.taken) == (4, 0)
            # reconciled with the agent (session/status), not dropped: the one it lost is forgotten
            await a_events.wait(lambda: bool(a_events.of(SessionForgotten)))
            assert [(e.session_id, e.reason) for e in a_events.of(SessionForgotten)] == [(gone.id, "unknown")]
            assert not a_events.of(SessionTakenOver)
            assert all(s.link is SessionLink.ATTACHED for s in sessions[1:])
            assert all(reattaches(agent, s.id) == 0 for s in sessions)  # still attached: nothing re-sent
            assert (await sessions[1].prompt("echo: still here", timeout=bound(10))).stop_reason == "end_turn"
            store = RedisSessionStore(private.url, namespace=workers.namespace, owner_id="observer")
            try:
                assert {r.session_id for r in await store.load_all()} == {s.id for s in sessions[1:]}
            finally:
                await store.close()
        finally:
            await workers.close()


async def test_should_own_needs_a_shared_store() -> None:
    with pytest.raises(UsageError):
        ReconnectingClient("ws://127.0.0.1:1/acp", store=MemorySessionStore(), should_own=lambda sid: True)
    client = ReconnectingClient("ws://127.0.0.1:1/acp")
    assert client.owner_id is None
    with pytest.raises(UsageError):
        await client.release("s")

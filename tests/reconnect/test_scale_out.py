"""Several workers at scale on a shared store (Valkey 8, and the session's Redis Cluster where noted): a lease
renewal never waits for a recovery or a probe that hangs, a hand-over storm is paced (the claim cap,
jittered adoption rounds), and a cluster primary killed during a recovery round loses nothing (no session
lost, forgotten or owned twice; the fencing token of each checked). Real reference agent, real servers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from acp_client import Limits, RecoveryPolicy, Timeouts
from acp_client.exceptions import UsageError
from acp_client.reconnect import (
    SessionForgotten,
    SessionRecovered,
    SessionsAdopted,
    SessionStoreReset,
    SessionTakenOver,
)
from acp_client.sessions import RedisSessionStore
from acp_client.testing import ReferenceAgent
from acp_client.testing.redis_cluster import RedisClusterServer
from tests.conftest import CLUSTER, RedisServers, bound, raw_redis
from tests.reconnect.test_ownership import TTL, Workers

KINDS = [pytest.param("valkey", id="valkey8"), CLUSTER]


@pytest.fixture
async def agent() -> AsyncIterator[ReferenceAgent]:
    async with ReferenceAgent(2) as running:
        yield running


def test_the_pacing_options_are_checked_when_given() -> None:
    with pytest.raises(UsageError, match="adopt_per_second"):
        Limits(adopt_per_second=0)
    with pytest.raises(UsageError, match="adopt_per_second"):
        Limits(adopt_per_second=2.5)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="adopt_jitter"):
        RecoveryPolicy(adopt_jitter=-1.0)
    assert Limits().adopt_per_second == 1000 and RecoveryPolicy().adopt_jitter == 0.25


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", KINDS)
async def test_a_hanging_probe_does_not_delay_the_lease_renewals(
    redis_servers: RedisServers, agent: ReferenceAgent, kind: str
) -> None:
    url = redis_servers.url(kind)
    workers = Workers(agent, url)
    raw = raw_redis(url)
    try:
        a, a_events = await workers.start("A", timeouts=Timeouts(probe=bound(60), replay_silence=5.0))
        sessions = [await a.new_session(f"/w/{i}") for i in range(3)]
        ownership = a._ownership
        assert ownership is not None
        # the store loses its data (every group's epoch gone) while the agent answers nothing: the worker
        # writes its sessions back (SessionStoreReset), then probes them with session/status, and those
        # probes hang (bounded by Timeouts.probe, a minute here)
        agent.stall()
        for bucket in range(64):
            await raw.delete(f"{workers.namespace}:{{{workers.namespace}:{bucket}}}:epoch")
        await a_events.wait(lambda: bool(a_events.of(SessionStoreReset)), timeout=30)
        renewed, failures = ownership.counts.renewed, ownership.counts.renew_failures
        # meanwhile the leases are renewed on time: well past a TTL of renewal rounds, every one good
        for _ in range(4):
            await asyncio.wait_for(ownership.next_renewal(), bound(TTL))
        assert agent.stalled and ownership.counts.renew_failures == failures
        assert ownership.counts.renewed - renewed >= 3 * len(sessions)
        for session in sessions:
            lease = await raw.get(
                f"{workers.namespace}:{{{workers.namespace}:{_bucket(session.id)}}}:lease:{session.id}"
            )
            assert lease is not None and lease.split("|")[1] == "A"
        assert not a_events.of(SessionTakenOver)
        agent.unstall()
    finally:
        agent.unstall()
        await workers.close()
        await raw.aclose()


def _bucket(session_id: str) -> int:
    import zlib

    return zlib.crc32(session_id.encode()) % 64


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", KINDS)
async def test_the_claim_cap_paces_a_hand_over_storm(
    redis_servers: RedisServers, agent: ReferenceAgent, kind: str
) -> None:
    url = redis_servers.url(kind)
    freed, rate = 30, 10
    workers = Workers(agent, url)
    try:
        b, b_events = await workers.start(
            "B",
            policy=RecoveryPolicy(start_jitter=0.0, adopt_jitter=0.0),
            limits=Limits(adopt_per_second=rate),
        )
        a, _ = await workers.start("A")
        ids = {(await a.new_session(f"/w/{i}")).id for i in range(freed)}
        await a.aclose()  # release_on_close: every session free at once, for B's adoption rounds
        seen: list[tuple[float, SessionsAdopted]] = []

        def adopted() -> set[str]:
            for event in b_events.of(SessionsAdopted)[len(seen) :]:
                seen.append((time.monotonic(), event))
            return {sid for _, e in seen for sid in e.session_ids}

        await b_events.wait(lambda: adopted() >= ids, timeout=30)
        assert adopted() == ids
        chunks = [len(e.session_ids) for _, e in seen]
        assert max(chunks) <= rate and sum(chunks) == freed  # never more than a second's worth at once
        # after the first second's burst the rest came at the pace: the span can only be longer than this
        assert seen[-1][0] - seen[0][0] >= 0.9 * (freed - rate) / rate
        await b_events.wait(
            lambda: set(b.sessions) == ids and all(s.link.value == "attached" for s in b.sessions.values())
        )
    finally:
        await workers.close()


async def test_adoption_rounds_start_out_of_step(redis_servers: RedisServers, agent: ReferenceAgent) -> None:
    """Two workers racing for one freed pool with jitter: the store lets each session go to exactly one."""
    workers = Workers(agent, redis_servers.url("valkey"))
    try:
        policy = RecoveryPolicy(start_jitter=0.0, adopt_jitter=bound(0.3))
        (b, b_events), (c, c_events) = [await workers.start(name, policy=policy) for name in ("B", "C")]
        a, _ = await workers.start("A")
        ids = {(await a.new_session(f"/w/{i}")).id for i in range(40)}
        await a.aclose()

        def taken(events: Any) -> list[str]:
            return [sid for e in events.of(SessionsAdopted) for sid in e.session_ids]

        await b_events.wait(lambda: set(taken(b_events) + taken(c_events)) >= ids, timeout=30, also=[c_events])
        both = taken(b_events) + taken(c_events)
        assert sorted(both) == sorted(ids)  # each adopted once, by one of them
        assert set(taken(b_events)) == set(b.sessions) and set(taken(c_events)) == set(c.sessions)
    finally:
        await workers.close()


# --------------------------------------------------------------------------- a primary killed mid-round


@pytest.fixture
async def replicated() -> AsyncIterator[RedisClusterServer]:
    """A private cluster this test may break: 3 primaries with one replica each, failover after 1 s."""
    async with RedisClusterServer(primaries=3, replicas=1, node_timeout=1000, start_timeout=bound(30)) as made:
        yield made


@pytest.mark.timeout(180)
async def test_a_primary_killed_during_a_recovery_round_loses_nothing(
    replicated: RedisClusterServer, agent: ReferenceAgent
) -> None:
    workers = Workers(agent, replicated.url)
    # leases and retries outlast the failover (about 1-2 s here): nobody's lease runs out meanwhile
    store_options = {"lease_ttl": bound(8.0), "retry_for": bound(30.0)}
    try:
        a, a_events = await workers.start("A", store_options=store_options)
        b, b_events = await workers.start("B", store_options=store_options)
        ids = {(await a.new_session(f"/a/{i}")).id for i in range(20)}
        ids |= {(await b.new_session(f"/b/{i}")).id for i in range(20)}
        recovered_before = len(a_events.of(SessionRecovered)) + len(b_events.of(SessionRecovered))
        assert recovered_before == 0

        await agent.restart(keep_sessions=True)  # every session inactive: a recovery round on each worker
        victim = replicated.nodes[0]
        await asyncio.to_thread(victim.kill)  # while the rounds run and write their records back

        def recovered() -> set[str]:
            return {e.session_id for r in (a_events, b_events) for e in r.of(SessionRecovered)}

        await a_events.wait(lambda: recovered() >= ids, timeout=60, also=[b_events])
        await asyncio.to_thread(replicated.wait_until_healthy)
        for events in (a_events, b_events):
            assert not events.of(SessionForgotten) and not events.of(SessionTakenOver)
        # every session attached on exactly one worker, which the store names as its owner, under the
        # latest fencing token (no older holder could write it)
        attached = {
            name: {sid for sid, s in client.sessions.items() if s.link.value == "attached"}
            for name, client in (("A", a), ("B", b))
        }
        assert not attached["A"] & attached["B"] and attached["A"] | attached["B"] == ids
        observer = RedisSessionStore(replicated.url, namespace=workers.namespace, owner_id="observer")
        try:
            stored = await observer.describe()
        finally:
            await observer.close()
        assert {s.session_id for s in stored} == ids and all(s.record is not None for s in stored)
        for s in stored:
            assert s.session_id in attached[str(s.owner)]
            assert s.token == s.fence
    finally:
        await workers.close()

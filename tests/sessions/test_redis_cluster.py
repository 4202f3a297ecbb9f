"""RedisSessionStore on a Redis Cluster: how it is reached (a ``redis+cluster://`` URL or a client), the key
layout that keeps every script on one slot, and a primary killed under a running store (its replica takes
over; a store that gives up sooner fails typed and works again afterwards). The store contract and the
lease rules run on the session's cluster in test_session_stores.py, the several-workers tests in
tests/reconnect/."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.crc import key_slot

from acp_client.exceptions import StoreUnavailable, UsageError
from acp_client.sessions import RedisSessionStore, SessionRecord
from acp_client.testing.redis_cluster import RedisClusterServer
from tests.conftest import RedisServers, bound, raw_redis
from tests.sessions._layout import group_key, group_prefix, index_key, session_key

pytestmark = pytest.mark.xdist_group("redis-cluster")


def record(sid: str, cwd: str = "/w") -> SessionRecord:
    return SessionRecord(sid, cwd)


def slot_of(key: str) -> int:
    return int(key_slot(key.encode()))


@pytest.fixture
def cluster(redis_servers: RedisServers) -> RedisClusterServer:
    return redis_servers.cluster()


def test_a_session_and_its_group_share_one_slot() -> None:
    for sid in ("s1", "a{b}c", "ünïcode", "x" * 300):
        keys = [session_key("acp", kind, sid) for kind in ("rec", "lease", "fence")]
        keys += [index_key("acp", sid), group_prefix("acp", sid) + "epoch"]
        assert len({slot_of(key) for key in keys}) == 1, keys
        assert all(key.startswith("acp:") for key in keys)  # the namespace stays a plain prefix


def test_a_namespace_with_braces_is_refused() -> None:
    with pytest.raises(UsageError, match="hash tags"):
        RedisSessionStore("redis://127.0.0.1:1/0", namespace="a{b}")


async def test_the_store_uses_every_node_and_writes_the_documented_keys(cluster: RedisClusterServer) -> None:
    ns = f"t{uuid.uuid4().hex[:8]}"
    store = RedisSessionStore(cluster.url, namespace=ns, owner_id="A")
    raw = raw_redis(cluster.url)
    try:
        assert store.cluster
        ids = [f"s{i}" for i in range(60)]
        await asyncio.gather(*(store.save(record(sid)) for sid in ids))
        nodes = {cluster.primary_for_slot(slot_of(session_key(ns, "rec", sid))).port for sid in ids}
        assert len(nodes) == 3  # 60 sessions fall in groups on all three primaries
        assert await raw.hget(session_key(ns, "rec", "s7"), "owner") == "A"
        token, owner, inc = (await raw.get(session_key(ns, "lease", "s7"))).split("|")
        assert (token, owner) == ("1", "A")
        assert await raw.get(group_key(ns, "s7", "hb:A")) == inc  # the lease lives while A's heartbeat does
        assert await raw.sismember(group_key(ns, "s7", f"owned:A|{inc}"), "s7")
        assert await raw.sismember(group_key(ns, "s7", "owners"), f"A|{inc}")
        assert await raw.sismember(index_key(ns, "s7"), "s7")
    finally:
        await store.close()
        await raw.aclose()


async def test_a_given_cluster_client_is_used_and_left_open(cluster: RedisClusterServer) -> None:
    raw = raw_redis(cluster.url)
    store = RedisSessionStore(raw, namespace=f"t{uuid.uuid4().hex[:8]}")
    try:
        assert store.cluster
        await store.save(record("s1"))
        assert [r.session_id for r in await store.load_all()] == ["s1"]
        await store.close()
        assert await raw.ping() is True  # the application's client: not closed by the store
    finally:
        await raw.aclose()


async def test_a_client_without_decoded_responses_is_refused(cluster: RedisClusterServer) -> None:
    import redis.asyncio as aioredis

    node = cluster.nodes[0]
    raw = aioredis.RedisCluster(node.host, node.port)
    try:
        with pytest.raises(UsageError, match="decode_responses"):
            RedisSessionStore(raw)
        with pytest.raises(UsageError, match="not dict"):
            RedisSessionStore({})  # type: ignore[arg-type]
    finally:
        await raw.aclose()


async def test_unreachable_cluster_fails_typed_without_the_password() -> None:
    store = RedisSessionStore("redis+cluster://user:s3cret@127.0.0.1:1/0", retry_for=0.2, socket_timeout=0.2)
    try:
        assert store.cluster and "s3cret" not in repr(store)
        with pytest.raises(StoreUnavailable) as caught:
            await store.save(record("s1"))
        assert caught.value.operation == "claim" and "s3cret" not in str(caught.value)
    finally:
        await store.close()


# --------------------------------------------------------------------------- failover


@pytest.fixture
async def replicated() -> AsyncIterator[RedisClusterServer]:
    """A private cluster this test may break: 3 primaries with one replica each, failover after 1 s."""
    async with RedisClusterServer(primaries=3, replicas=1, node_timeout=1000, start_timeout=bound(30)) as made:
        yield made


@pytest.mark.timeout(120)
async def test_a_killed_primary_is_replaced_by_its_replica(replicated: RedisClusterServer) -> None:
    ns = "fo"
    patient = RedisSessionStore(replicated.url, namespace=ns, owner_id="patient", retry_for=bound(30))
    impatient = RedisSessionStore(
        replicated.url, namespace=ns, owner_id="impatient", retry_for=0.3, socket_timeout=0.3
    )
    try:
        ids = [f"s{i}" for i in range(40)]
        await asyncio.gather(*(patient.save(record(sid)) for sid in ids))
        victim = replicated.primary_for_slot(slot_of(session_key(ns, "rec", ids[0])))
        on_victim = [sid for sid in ids if replicated.primary_for_slot(slot_of(session_key(ns, "rec", sid))) is victim]
        mine = next(  # a session of the impatient store in a group on the same primary
            sid for sid in (f"i{n}" for n in range(1000))
            if replicated.primary_for_slot(slot_of(session_key(ns, "rec", sid))) is victim
        )  # fmt: skip
        await impatient.save(record(mine))
        [replica] = replicated.replicas_of(victim)
        tokens = {sid: lease.token for sid, lease in patient.leases().items()}
        await asyncio.to_thread(replicated.wait_replicated, victim)  # the replica has every write so far

        await asyncio.to_thread(victim.kill)
        # a store that gives up within 0.3 s (well before the 1 s node timeout lets a replica take over)
        # fails typed, naming the operation
        with pytest.raises(StoreUnavailable) as caught:
            await impatient.save(record(mine, "/during"))
        assert caught.value.operation == "save"

        # a store that waits longer rides through the failover: the write lands on the promoted replica,
        # under the same lease and token
        async with asyncio.timeout(bound(30)):
            await patient.save(record(on_victim[0], "/after"))
        assert replicated.role(replica) == "master"
        assert {sid: lease.token for sid, lease in patient.leases().items()} == tokens
        renewal = await patient.renew_all()
        assert renewal.renewed == set(ids) and not renewal.lost and not renewal.store_reset

        # the impatient store works again on the same object, its lease intact
        await impatient.save(record(mine, "/recovered"))
        await asyncio.to_thread(replicated.wait_until_healthy)
        fresh = RedisSessionStore(replicated.url, namespace=ns, owner_id="observer")
        try:
            stored = {r.session_id: r.cwd for r in await fresh.load_all()}
        finally:
            await fresh.close()
        assert stored == {**dict.fromkeys(ids, "/w"), on_victim[0]: "/after", mine: "/recovered"}
    finally:
        await patient.close()
        await impatient.close()

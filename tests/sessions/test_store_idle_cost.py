"""What RedisSessionStore costs the server while sessions are idle (key layout 3), against real servers (a
private Valkey 8 and a private 3-primary Valkey cluster, so no other test's traffic is counted): the
adoption scan and the renewal cost the same number of server commands (INFO commandstats) whether live
workers hold 64 sessions or ten times more; sessions freed by a worker whose heartbeat lapsed are all found
by the next scan and claimed by exactly one worker; data written by key layout 2 is read as it is."""

from __future__ import annotations

import asyncio
import uuid
import zlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from acp_client.sessions import RedisSessionStore, SessionRecord
from acp_client.testing.redis_cluster import RedisClusterServer
from acp_client.testing.redis_server import RedisServer
from tests.conftest import bound, eventually, raw_redis
from tests.sessions._layout import BUCKETS, group_key, index_key, session_key


@pytest.fixture(params=["valkey", "cluster"])
async def url(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    if request.param == "valkey":
        async with RedisServer("valkey") as server:
            yield server.url
    else:
        async with RedisClusterServer(primaries=3, replicas=0, start_timeout=bound(30)) as cluster:
            yield cluster.url


async def commands(raw: Any) -> int:
    """Commands the server (every primary of a cluster) has run so far, the INFO calls that ask left out."""
    from redis.asyncio.cluster import RedisCluster

    if isinstance(raw, RedisCluster):
        values = list((await raw.info("commandstats", target_nodes=RedisCluster.PRIMARIES)).values())
    else:
        values = [await raw.info("commandstats")]
    return sum(int(calls["calls"]) for info in values for name, calls in info.items() if name != "cmdstat_info")


def one_per_group(count: int, prefix: str) -> list[str]:
    """``count`` session ids per key group (so the groups hold sessions whatever ``count``)."""
    per: dict[int, list[str]] = {}
    i = 0
    while len(per) < BUCKETS or min(len(v) for v in per.values()) < count:
        sid = f"{prefix}{i}"
        per.setdefault(zlib.crc32(sid.encode()) % BUCKETS, []).append(sid)
        i += 1
    return [sid for ids in per.values() for sid in ids[:count]]


async def cost(raw: Any, step: Any) -> int:
    before = await commands(raw)
    await step()
    return await commands(raw) - before


@pytest.mark.timeout(120)
async def test_the_adoption_scan_and_the_renewal_do_not_grow_with_idle_sessions(url: str) -> None:
    ns = f"t{uuid.uuid4().hex[:8]}"
    live = RedisSessionStore(url, namespace=ns, owner_id="live")
    scanner = RedisSessionStore(url, namespace=ns, owner_id="scanner")
    raw = raw_redis(url)
    try:
        assert await live.reclaim([SessionRecord(sid, "/w") for sid in one_per_group(1, "a")]) == []
        assert await scanner.claimable() == []  # epochs read, scripts loaded
        scan_small = await cost(raw, scanner.claimable)
        renew_small = await cost(raw, live.renew_all)
        # ten times more sessions, all held by the live worker and idle
        assert await live.reclaim([SessionRecord(sid, "/w") for sid in one_per_group(10, "b")]) == []
        assert len(live.leases()) == 11 * BUCKETS
        found: list[str] = []

        async def scan() -> None:
            found.extend(await scanner.claimable())

        assert await cost(raw, scan) == scan_small and found == []
        assert await cost(raw, live.renew_all) == renew_small
        # one scripted call per key group, each reading the group's owners, one heartbeat and the free set;
        # the renewal: one call per group reading and extending one heartbeat
        assert scan_small <= BUCKETS * 5 and renew_small <= BUCKETS * 4
    finally:
        await live.close()
        await scanner.close()
        await raw.aclose()


@pytest.mark.timeout(120)
async def test_a_dead_workers_sessions_are_found_by_the_next_scan_and_claimed_once(url: str) -> None:
    ns = f"t{uuid.uuid4().hex[:8]}"
    ttl = bound(1.0)
    dead = RedisSessionStore(url, namespace=ns, owner_id="dead", lease_ttl=ttl, release_on_close=False)
    others = [RedisSessionStore(url, namespace=ns, owner_id=f"o{i}") for i in range(3)]
    raw = raw_redis(url)
    ids = one_per_group(3, "d")
    try:
        assert await dead.reclaim([SessionRecord(sid, "/d") for sid in ids]) == []
        assert await others[0].claimable() == []  # its heartbeats live: nothing is free
        await dead.close()  # stops renewing, releases nothing: as if killed
        # its heartbeats run out after the TTL (the server's own expiry, waited for by polling the keys)
        async def expired() -> bool:
            return not await raw.exists(*[group_key(ns, sid, "hb:dead") for sid in ids[:BUCKETS]])

        await eventually(expired, bound(10), "the dead worker's heartbeats expire")
        assert sorted(await others[0].claimable()) == sorted(ids)  # every one, from one scan
        # three workers race for them: each session goes to exactly one, under a new fencing token
        taken = await asyncio.gather(*(o.load_owned() for o in others))
        owners = [{r.session_id for r in records} for records in taken]
        assert sum(len(o) for o in owners) == len(ids) and set().union(*owners) == set(ids)
        assert await others[0].claimable() == []
        stored = await others[0].describe()
        assert all(s.owner in {"o0", "o1", "o2"} and s.token == s.fence == 2 for s in stored)
    finally:
        for store in others:
            await store.close()
        await raw.aclose()


async def test_data_of_key_layout_2_is_read_as_it_is(url: str) -> None:
    ns = f"t{uuid.uuid4().hex[:8]}"
    raw = raw_redis(url)
    # what a worker of the previous release left: records, index, fence, epochs, and leases "token|owner" with
    # an expiry: one still running (held by "old"), one of the new worker's own id, none on the third
    for sid, lease in (("held", "3|old"), ("mine", "5|new"), ("free", None)):
        await raw.set(group_key(ns, sid, "epoch"), "e")
        await raw.hset(session_key(ns, "rec", sid), mapping={"record": SessionRecord(sid, "/2").to_json(), "token": 3})
        await raw.sadd(index_key(ns, sid), sid)
        await raw.set(session_key(ns, "fence", sid), lease.split("|")[0] if lease else 3)
        if lease:
            await raw.set(session_key(ns, "lease", sid), lease, px=60_000)
    store = RedisSessionStore(url, namespace=ns, owner_id="new")
    try:
        assert sorted(await store.claimable()) == ["free", "mine"]  # indexed once; "held" still runs
        owned = await store.load_owned()
        assert sorted(r.session_id for r in owned) == ["free", "mine"]
        lease = store.lease("mine")
        assert lease is not None and lease.token == 5  # its own lease of layout 2, taken over as it was
        assert store.lease("held") is None and await store.claim("held") is None  # still running: honoured
        assert (await raw.get(session_key(ns, "lease", "mine"))).startswith("5|new|")
        assert await raw.pttl(session_key(ns, "lease", "mine")) == -1  # now lives with the heartbeat
        assert [await raw.get(group_key(ns, sid, "layout")) for sid in ("held", "mine", "free")] == ["3"] * 3
    finally:
        await store.close()
        await raw.aclose()

"""RedisSessionStore at scale, against real servers (Valkey 8, Redis 6.2, a 3-primary Valkey cluster): the
claims of many sessions made at once and the renewal of many leases each cost a fixed number of round trips
(the store's own counter) and one scripted call per key group on the server (its INFO commandstats), not
one per session."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from acp_client.exceptions import LeaseLost
from acp_client.sessions import RedisSessionStore, SessionRecord
from tests.conftest import raw_redis

SESSIONS = 500
#: key groups of layout 2: the most scripted calls one bulk step may cost, whatever the number of sessions
GROUPS = 64


async def evalsha_calls(raw: Any) -> int:
    """EVALSHA calls the server (every primary of a cluster) has run so far."""
    from redis.asyncio.cluster import RedisCluster

    if isinstance(raw, RedisCluster):
        infos = await raw.info("commandstats", target_nodes=RedisCluster.PRIMARIES)
        values = list(infos.values())
    else:
        values = [await raw.info("commandstats")]
    return sum(int(info.get("cmdstat_evalsha", {}).get("calls", 0)) for info in values)


async def test_claims_saves_and_renewals_of_500_sessions_cost_a_few_round_trips(redis_url: str) -> None:
    store = RedisSessionStore(redis_url, namespace=f"t{uuid.uuid4().hex[:8]}", owner_id="A")
    raw = raw_redis(redis_url)
    ids = [f"s{i}" for i in range(SESSIONS)]
    try:
        await store.save(SessionRecord("warm", "/w"))  # epochs read, scripts loaded
        before, calls_before = store.round_trips, await evalsha_calls(raw)
        # 500 new sessions saved at once (a worker opening them, or a recovery round writing them back): their
        # claims go out together, then their fenced saves together
        await asyncio.gather(*(store.save(SessionRecord(sid, "/w")) for sid in ids))
        assert store.round_trips - before <= 4, store.round_trips - before
        assert await evalsha_calls(raw) - calls_before <= 2 * GROUPS + SESSIONS  # bulk claims, one save each
        assert {sid for sid in ids if store.lease(sid) is not None} == set(ids)

        before, calls_before = store.round_trips, await evalsha_calls(raw)
        renewal = await store.renew_all()
        assert renewal.renewed == {*ids, "warm"} and not renewal.lost
        assert store.round_trips - before == 1  # one pipeline (split by node on a cluster)
        assert await evalsha_calls(raw) - calls_before <= GROUPS  # one bulk call per key group, not 500
    finally:
        await store.close()
        await raw.aclose()


async def test_claims_batched_together_still_fence_each_session(redis_url: str) -> None:
    namespace = f"t{uuid.uuid4().hex[:8]}"
    a = RedisSessionStore(redis_url, namespace=namespace, owner_id="A")
    b = RedisSessionStore(redis_url, namespace=namespace, owner_id="B")
    try:
        await asyncio.gather(*(a.save(SessionRecord(f"a{i}", "/a")) for i in range(20)))
        # B's batch mixes sessions A holds with new ones: each answer goes to its own caller
        results = await asyncio.gather(
            *(b.save(SessionRecord(sid, "/b")) for sid in [f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)]),
            return_exceptions=True,
        )
        refused = [r for r in results[:10] if isinstance(r, LeaseLost)]
        assert len(refused) == 10 and {r.holder for r in refused} == {"A"}
        assert results[10:] == [None] * 10
        assert await asyncio.gather(*(b.claim(f"a{i}") for i in range(3))) == [None, None, None]
        stored = {r.session_id: r.cwd for r in await a.load_all()}
        assert stored == {**{f"a{i}": "/a" for i in range(20)}, **{f"b{i}": "/b" for i in range(10)}}
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("count", [0, 1])
async def test_a_claim_with_the_server_gone_fails_typed_for_every_caller(count: int) -> None:
    from acp_client.exceptions import StoreUnavailable

    store = RedisSessionStore("redis://user:s3cret@127.0.0.1:1/0", retry_for=0.2, socket_timeout=0.2)
    try:
        results = await asyncio.gather(
            *(store.save(SessionRecord(f"s{i}", "/w")) for i in range(count + 3)), return_exceptions=True
        )
        assert all(isinstance(r, StoreUnavailable) and r.operation == "claim" for r in results)
        assert all("s3cret" not in str(r) for r in results)
    finally:
        await store.close()


async def test_claiming_given_ids_skips_and_frees_the_ones_gone(redis_url: str) -> None:
    namespace = f"t{uuid.uuid4().hex[:8]}"
    a = RedisSessionStore(redis_url, namespace=namespace, owner_id="A")
    b = RedisSessionStore(redis_url, namespace=namespace, owner_id="B")
    try:
        await a.save(SessionRecord("kept", "/w"))
        await a.save(SessionRecord("held", "/w"))
        assert await a.release("kept")
        # an adoption round saw "kept" and "ghost" free; "ghost" was deleted since: no lease is left on it
        records = await b.load_owned(ids=["kept", "ghost", "held"])
        assert [r.session_id for r in records] == ["kept"]
        assert set(b.leases()) == {"kept"}
        assert await a.claim("ghost") is not None  # free, not held by B
    finally:
        await a.close()
        await b.close()

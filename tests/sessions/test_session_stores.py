"""The session-store contract, shared by the memory, SQLite and Redis stores (Valkey 8 and Redis 6.2, real
servers from their wheels), and the lease rules of the shared Redis store: claims, fencing, expiry, release,
a server killed mid-write, a server restarted without its data, and a partition behind the fault proxy."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from acp_client.exceptions import ACPError, LeaseLost, StoreError, StoreLocked, StoreUnavailable
from acp_client.sessions import MemorySessionStore, SessionRecord, SessionStore, SQLiteSessionStore
from acp_client.sessions._lease import SharedSessionStore
from acp_client.sessions.redis._store import RedisSessionStore
from acp_client.testing import FaultProxy
from acp_client.testing.redis_server import RedisServer
from tests.conftest import CLUSTER, bound, eventually, raw_redis
from tests.sessions._layout import index_key, session_key


def record(sid: str, cwd: str = "/w", **meta: Any) -> SessionRecord:
    return SessionRecord(sid, cwd, mcp_servers=[{"name": "m", "command": "x"}], meta=dict(meta))


# --------------------------------------------------------------------------- the contract, every store


@dataclass
class Backend:
    """Opens stores of one kind on one shared place (file, server namespace, memory object)."""

    kind: str
    open: Callable[..., SessionStore]
    opened: list[SessionStore] = field(default_factory=list)

    def store(self, **kwargs: Any) -> Any:
        store = self.open(**kwargs)
        self.opened.append(store)
        return store


@pytest.fixture(
    params=[
        pytest.param("memory", id="memory"),
        pytest.param("sqlite", id="sqlite"),
        pytest.param("valkey", id="valkey8"),
        pytest.param("redis", id="redis6"),
        CLUSTER,
    ]
)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    kind = request.param
    if kind == "memory":
        shared = MemorySessionStore()
        made = Backend("memory", lambda **_: shared)
    elif kind == "sqlite":
        made = Backend("sqlite", lambda **_: SQLiteSessionStore(tmp_path / "s.db"))
    else:
        url = request.getfixturevalue("redis_servers").url(kind)
        namespace = f"t{uuid.uuid4().hex[:8]}"
        made = Backend(f"redis-{kind}", lambda **kw: RedisSessionStore(url, namespace=namespace, **kw))
    yield made
    for store in made.opened:
        await store.close()


async def test_round_trip_replace_delete(backend: Backend) -> None:
    store = backend.store()
    assert await store.load_all() == []
    first = record("s1", title_hint="one")
    await store.save(first)
    await store.save(record("s2"))
    first.cwd = "/changed"
    first.additional_directories = ["/extra"]
    first.last_state = "idle"
    await store.save(first)
    loaded = {r.session_id: r for r in await store.load_all()}
    assert set(loaded) == {"s1", "s2"}
    assert loaded["s1"] == first
    assert loaded["s1"] is not first  # a copy, never the caller's object
    await store.delete("s2")
    await store.delete("s2")  # a missing one is not an error
    await store.delete("never-stored")
    assert [r.session_id for r in await store.load_all()] == ["s1"]


async def test_a_reopened_store_sees_every_record(backend: Backend) -> None:
    store = backend.store()
    await asyncio.gather(*(store.save(record(f"s{i:03}", meta_i=i)) for i in range(120)))
    await store.close()
    again = backend.store()
    loaded = await again.load_all()
    assert sorted(r.session_id for r in loaded) == [f"s{i:03}" for i in range(120)]
    assert all(r.meta == {"meta_i": int(r.session_id[1:])} for r in loaded)


async def test_stores_are_what_the_protocol_says(backend: Backend) -> None:
    store = backend.store()
    assert isinstance(store, SessionStore)
    assert isinstance(store, SharedSessionStore) == backend.kind.startswith("redis")


# --------------------------------------------------------------------------- damaged data


async def test_sqlite_damaged_row_is_discarded_and_counted(tmp_path: Path) -> None:
    import sqlite3

    store = SQLiteSessionStore(tmp_path / "s.db")
    await store.save(record("good"))
    await store.close()
    db = sqlite3.connect(tmp_path / "s.db")
    db.execute("INSERT INTO acp_sessions VALUES ('bad', '{not json')")
    db.commit()
    db.close()
    store = SQLiteSessionStore(tmp_path / "s.db")
    try:
        assert [r.session_id for r in await store.load_all()] == ["good"]
        assert store.discarded == 1
    finally:
        await store.close()


async def test_redis_damaged_record_is_discarded_and_counted(redis_url: str) -> None:
    ns = f"t{uuid.uuid4().hex[:8]}"
    store = RedisSessionStore(redis_url, namespace=ns)
    raw = raw_redis(redis_url)
    try:
        await store.save(record("good"))
        await raw.hset(session_key(ns, "rec", "bad"), "record", "{not json")
        await raw.hset(session_key(ns, "rec", "other"), "record", record("not-other").to_json())
        for sid in ("bad", "other", "gone"):  # "gone" has no record at all
            await raw.sadd(index_key(ns, sid), sid)
        assert [r.session_id for r in await store.load_all()] == ["good"]
        assert store.discarded == 2
        assert [r.session_id for r in await store.load_owned()] == ["good"]
    finally:
        await store.close()
        await raw.aclose()


# --------------------------------------------------------------------------- SQLite: one owner at a time


async def test_sqlite_second_owner_gets_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    first = SQLiteSessionStore(path)
    await first.save(record("s1"))
    second = SQLiteSessionStore(path)
    with pytest.raises(StoreLocked) as caught:
        await second.load_all()
    assert isinstance(caught.value, StoreError) and isinstance(caught.value, ACPError)
    assert "RedisSessionStore" in str(caught.value)
    import os

    assert caught.value.holder == f"pid {os.getpid()}"
    await second.close()
    await first.close()  # hands the file over
    third = SQLiteSessionStore(path)
    try:
        assert [r.session_id for r in await third.load_all()] == ["s1"]
    finally:
        await third.close()


async def test_sqlite_writes_of_one_turn_share_one_transaction(tmp_path: Path) -> None:
    store = SQLiteSessionStore(tmp_path / "s.db")
    try:
        await asyncio.gather(*(store.save(record(f"s{i}")) for i in range(20)))
        assert store.transactions == 1
        assert sorted(r.session_id for r in await store.load_all()) == sorted(f"s{i}" for i in range(20))
        # writes to one session in one turn apply in call order: the newest intent is what lands
        await asyncio.gather(store.save(record("s0", cwd="/new")), store.delete("s0"), store.delete("s1"))
        await asyncio.gather(store.delete("s2"), store.save(record("s2", cwd="/back")))
        assert store.transactions == 3
        kept = {r.session_id: r.cwd for r in await store.load_all()}
        assert "s0" not in kept and "s1" not in kept and kept["s2"] == "/back"
    finally:
        await store.close()


async def test_sqlite_a_failing_batch_loses_only_the_failing_write(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "s.db"
    with sqlite3.connect(path) as db:  # a row the database refuses, so that the batch's transaction fails
        db.execute("CREATE TABLE acp_sessions (session_id TEXT PRIMARY KEY, record TEXT NOT NULL)")
        db.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON acp_sessions WHEN NEW.session_id = 'bad' "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )
    db.close()
    store = SQLiteSessionStore(path)
    try:
        results = await asyncio.gather(
            store.save(record("ok1")), store.save(record("bad")), store.save(record("ok2")), return_exceptions=True
        )
        assert results[0] is None and results[2] is None
        assert isinstance(results[1], sqlite3.Error) and "refused by the test" in str(results[1])
        assert sorted(r.session_id for r in await store.load_all()) == ["ok1", "ok2"]
        # the next batch is not held back by the failed one
        await asyncio.gather(store.save(record("ok3")), store.delete("ok1"))
        assert sorted(r.session_id for r in await store.load_all()) == ["ok2", "ok3"]
    finally:
        await store.close()


async def test_sqlite_close_waits_for_writes_already_made(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteSessionStore(path)
    await store.save(record("first"))
    # the saves start first (gather runs them in order) and are queued for the next batch; close waits for it
    await asyncio.gather(*(store.save(record(f"s{i}")) for i in range(5)), store.close())
    reopened = SQLiteSessionStore(path)
    try:
        assert len(await reopened.load_all()) == 6
    finally:
        await reopened.close()


async def test_sqlite_second_process_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteSessionStore(path)
    await store.save(record("s1"))
    script = textwrap.dedent(
        f"""
        import asyncio
        from acp_client.exceptions import StoreLocked
        from acp_client.sessions import SQLiteSessionStore
        async def main():
            store = SQLiteSessionStore({str(path)!r})
            try:
                await store.load_all()
            except StoreLocked as exc:
                print("locked", exc.holder)
            else:
                print("not locked")
            await store.close()
        asyncio.run(main())
        """
    )
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), bound(30))
        assert proc.returncode == 0, err.decode()
        import os

        assert out.decode().strip() == f"locked pid {os.getpid()}"
    finally:
        await store.close()


# --------------------------------------------------------------------------- Redis: leases and fencing


@pytest.fixture
async def shared(redis_url: str) -> AsyncIterator[Callable[..., RedisSessionStore]]:
    """Makes worker stores on one fresh namespace of the session's server; closes them afterwards."""
    namespace = f"t{uuid.uuid4().hex[:8]}"
    made: list[RedisSessionStore] = []

    def make(owner: str, url: str | None = None, **kwargs: Any) -> RedisSessionStore:
        store = RedisSessionStore(url or redis_url, namespace=namespace, owner_id=owner, **kwargs)
        made.append(store)
        return store

    yield make
    for store in made:
        await store.close()


async def test_creator_owns_and_others_are_fenced_off(shared: Callable[..., RedisSessionStore]) -> None:
    a, b = shared("A"), shared("B")
    try:
        await a.save(record("s1"))  # a new session belongs to its creator
        lease = a.lease("s1")
        assert lease is not None and lease.owner == "A" and lease.token == 1
        assert await b.claimable() == []
        assert await b.claim("s1") is None
        with pytest.raises(LeaseLost) as caught:
            await b.save(record("s1", "/b"))
        assert caught.value.reason == "taken" and caught.value.holder == "A"
        with pytest.raises(LeaseLost):
            await b.delete("s1")
        assert await b.load_owned() == []
        assert [r.cwd for r in await b.load_all()] == ["/w"]  # untouched
        again = await a.claim("s1")  # idempotent for the holder: same token, extended
        assert again is not None and again.token == lease.token
    finally:
        await a.close()
        await b.close()


async def test_expired_lease_is_adopted_and_the_stale_owner_rejected(
    shared: Callable[..., RedisSessionStore],
) -> None:
    a = shared("A", lease_ttl=0.3, release_on_close=False)
    b = shared("B", lease_ttl=5.0)
    try:
        await a.save(record("s1", "/a"))
        await a.save(record("s2", "/a"))
        stale = a.lease("s1")
        assert stale is not None

        async def free() -> bool:
            return sorted(await b.claimable()) == ["s1", "s2"]

        await eventually(free, bound(5), "A's leases expire")
        assert stale.expired()  # the local deadline passed no later than the server's TTL
        adopted = await b.load_owned(want=lambda sid: sid == "s1")  # sticky routing: B wants s1 only
        assert [r.session_id for r in adopted] == ["s1"]
        new = b.lease("s1")
        assert new is not None and new.token > stale.token
        await b.save(record("s1", "/b"))
        with pytest.raises(LeaseLost) as caught:  # the stale owner's write is rejected ...
            await a.save(record("s1", "/stale"))
        assert caught.value.holder == "B" and caught.value.reason == "taken"
        with pytest.raises(LeaseLost):
            await a.delete("s1")
        assert {r.session_id: r.cwd for r in await b.load_all()} == {"s1": "/b", "s2": "/a"}  # ... and lost
        renewal = await a.renew_all()
        assert "s1" not in renewal.renewed and not renewal.store_reset
        # s2 expired but nobody took it: A may claim it again with a new token
        assert await a.claim("s2") is not None
    finally:
        await a.close()
        await b.close()


async def test_stale_token_is_rejected(shared: Callable[..., RedisSessionStore], redis_url: str) -> None:
    a = shared("A")
    raw = raw_redis(redis_url)
    try:
        await a.save(record("s1"))
        # the record says a newer owner wrote it (as after a lost fence counter): A's token is stale
        await raw.hset(session_key(a.namespace, "rec", "s1"), "token", 99)
        with pytest.raises(LeaseLost) as caught:
            await a.save(record("s1", "/x"))
        assert caught.value.reason == "stale" and caught.value.token == 1
    finally:
        await a.close()
        await raw.aclose()


async def test_renewal_keeps_leases_and_release_hands_over(shared: Callable[..., RedisSessionStore]) -> None:
    ttl = bound(2.0)  # short enough to run out three times in the test, long enough for the first saves and
    # a renewal round trip to a cluster of three server processes on a busy 2-core machine (0.8 s was not)
    a = shared("A", lease_ttl=ttl)
    b = shared("B")
    try:
        for i in range(5):
            await a.save(record(f"s{i}"))
        loop = asyncio.get_running_loop()
        until = loop.time() + 3 * ttl  # without renewal every lease would be gone
        while loop.time() < until:
            renewal = await a.renew_all()
            assert renewal.renewed == {f"s{i}" for i in range(5)} and not renewal.lost
            assert await b.claimable() == []
            await asyncio.sleep(ttl / 4)  # the renewal cadence under test
        assert await a.release("s0") is True
        assert await a.release("s0") is False
        assert await b.claim("s0") is not None  # at once, no TTL to wait out
        await a.close()  # release_on_close: the rest is claimable at once too
        assert sorted(await b.claimable()) == [f"s{i}" for i in range(1, 5)]
    finally:
        await a.close()
        await b.close()


async def test_round_trips_do_not_grow_with_sessions(shared: Callable[..., RedisSessionStore]) -> None:
    writer = shared("W", batch_size=250)
    reader = shared("R", batch_size=250)
    try:
        n = 1000
        assert await writer.reclaim([record(f"s{i:04}") for i in range(n)]) == []
        await writer.close()
        before = reader.round_trips
        owned = await reader.load_owned()
        assert len(owned) == n
        scans = math.ceil(n / 250) + 1
        # epoch + SSCAN pages + one pipeline of bulk claim scripts (scripts loaded once, on the first use)
        assert reader.round_trips - before <= 1 + scans + 1 + 1
        before = reader.round_trips
        renewal = await reader.renew_all()
        assert len(renewal.renewed) == n
        assert reader.round_trips - before == 1  # one pipeline of bulk renewals
    finally:
        await writer.close()
        await reader.close()


async def test_repr_and_errors_never_show_the_password() -> None:
    store = RedisSessionStore("redis://user:s3cret@127.0.0.1:1/0", retry_for=0.2, socket_timeout=0.2)
    try:
        assert "s3cret" not in repr(store)
        with pytest.raises(StoreUnavailable) as caught:
            await store.save(record("s1"))
        assert "s3cret" not in str(caught.value) and caught.value.operation == "claim"
    finally:
        await store.close()


async def test_a_given_client_is_used_and_left_open(redis_server: RedisServer) -> None:
    raw = raw_redis(redis_server.url)
    store = RedisSessionStore(raw, namespace=f"t{uuid.uuid4().hex[:8]}")
    try:
        assert not store.cluster
        await store.save(record("s1"))
        assert [r.session_id for r in await store.load_all()] == ["s1"]
        await store.close()
        assert await raw.ping() is True  # the application's client: the store does not close it
    finally:
        await raw.aclose()


# --------------------------------------------------------------------------- a store that fails


@pytest.fixture
async def private_server(redis_server: RedisServer) -> AsyncIterator[RedisServer]:
    """A server of the same flavour that this test may kill and restart."""
    async with RedisServer(redis_server.flavour) as server:
        yield server


async def test_server_killed_mid_write_fails_typed_and_bounded(private_server: RedisServer) -> None:
    store = RedisSessionStore(private_server.url, retry_for=0.5, socket_timeout=0.5)
    try:
        await store.save(record("warm"))
        writes = [asyncio.ensure_future(store.save(record(f"s{i}"))) for i in range(200)]
        await asyncio.sleep(0)  # the writes are on their way
        await asyncio.to_thread(private_server.kill)
        async with asyncio.timeout(bound(10)):
            results = await asyncio.gather(*writes, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(e, StoreUnavailable) for e in errors), {type(e).__name__ for e in errors}
        with pytest.raises(StoreUnavailable):
            await store.renew_all()
    finally:
        await store.close()  # never raises for an unreachable server


async def test_data_lost_is_reported_and_records_reclaimed(private_server: RedisServer) -> None:
    a = RedisSessionStore(private_server.url, owner_id="A")
    b = RedisSessionStore(private_server.url, owner_id="B")
    try:
        for i in range(3):
            await a.save(record(f"a{i}"))
        await b.save(record("b0"))
        await asyncio.to_thread(private_server.restart)  # same port, no persistence: every key is gone
        assert await b.load_all() == []
        renewal = await a.renew_all()
        assert renewal.store_reset and renewal.lost == {"a0", "a1", "a2"} and not renewal.renewed
        assert a.leases() == {}
        # B has not renewed yet: its first fenced write after the loss says so
        with pytest.raises(LeaseLost) as caught:
            await b.save(record("b0", "/again"))
        assert caught.value.reason == "reset"
        # the workers still know their sessions in memory and write them back
        assert await a.reclaim([record(f"a{i}") for i in range(3)]) == []
        assert await b.reclaim([record("b0")]) == []
        assert sorted(r.session_id for r in await b.load_all()) == ["a0", "a1", "a2", "b0"]
        assert (await a.renew_all()).renewed == {"a0", "a1", "a2"}
        assert await b.claim("a0") is None
    finally:
        await a.close()
        await b.close()


async def test_partition_lease_expires_stale_write_rejected_then_resumes(redis_server: RedisServer) -> None:
    async with FaultProxy("127.0.0.1", redis_server.port) as proxy:
        ns = f"t{uuid.uuid4().hex[:8]}"
        cut = RedisSessionStore(
            f"redis://127.0.0.1:{proxy.port}/0", namespace=ns, owner_id="cut", lease_ttl=0.5, retry_for=0.3,
            socket_timeout=0.2,
        )  # fmt: skip
        other = RedisSessionStore(redis_server.url, namespace=ns, owner_id="other", lease_ttl=5.0)
        try:
            await cut.save(record("s1", "/cut"))
            await cut.save(record("s2", "/cut"))
            proxy.blackhole_all()  # half-open: nothing forwarded, no FIN, no RST
            with pytest.raises(StoreUnavailable):
                await cut.renew_all()
            with pytest.raises(StoreUnavailable):
                await cut.save(record("s1", "/cut-while-partitioned"))
            lease = cut.lease("s1")
            assert lease is not None

            async def adopted() -> bool:
                return len(await other.load_owned(want=lambda sid: sid == "s1")) == 1

            await eventually(adopted, bound(5), "the cut-off worker's lease expires and is adopted")
            assert lease.expired()  # the cut-off worker knows by its own clock that it must stop
            await other.save(record("s1", "/other"))
            await proxy.reset_all()
            proxy.restore()
            with pytest.raises(LeaseLost) as caught:  # fenced: the stale write is rejected
                await cut.save(record("s1", "/stale"))
            assert caught.value.holder == "other"
            renewal = await cut.renew_all()  # the link is back: s2 (not taken) is claimed again below
            assert "s1" not in renewal.renewed
            assert await cut.claim("s2") is not None
            await cut.save(record("s2", "/cut-again"))
            assert {r.session_id: r.cwd for r in await other.load_all()} == {"s1": "/other", "s2": "/cut-again"}
        finally:
            await cut.close()
            await other.close()


# --------------------------------------------------------------------------- Redis: key layout 1


async def test_records_of_layout_1_are_migrated_once(redis_server: RedisServer) -> None:
    ns = f"t{uuid.uuid4().hex[:8]}"
    raw = raw_redis(redis_server.url)
    # what a worker of an older release left behind: ns:epoch, ns:index, ns:rec:<id>, ns:lease:<id>, ns:fence:<id>
    await raw.set(f"{ns}:epoch", "old")
    for i in range(3):
        old = {"record": record(f"s{i}", f"/old{i}").to_json(), "token": 4, "owner": "w"}
        await raw.hset(f"{ns}:rec:s{i}", mapping=old)
        await raw.sadd(f"{ns}:index", f"s{i}")
        await raw.set(f"{ns}:fence:s{i}", 4)
    await raw.set(f"{ns}:lease:s0", "4|w", px=60_000)  # a stopped worker's lease that has not run out yet
    await raw.hset(f"{ns}:rec:bad", "record", "{not json")
    await raw.sadd(f"{ns}:index", "bad")
    store = RedisSessionStore(redis_server.url, namespace=ns, owner_id="new")
    try:
        with capture_logs() as logs:
            await store.save(record("s2", "/new"))  # already in the new layout: kept as it is
        assert [e["event"] for e in logs].count("acp.store_layout_1_found") == 1  # the operator is told
        assert [r.cwd for r in await store.load_all()] == ["/new"]  # the new layout does not read the old keys
        assert await store.migrate_layout_1() == 2
        assert {r.session_id: r.cwd for r in await store.load_all()} == {"s0": "/old0", "s1": "/old1", "s2": "/new"}
        assert sorted(await store.claimable()) == ["s0", "s1"]  # moved records are free for any worker
        assert store.lease("s2") is not None  # what this store held before, it still holds
        assert await raw.keys(f"{ns}:[^{{]*") == []  # every key of layout 1 is gone
        assert await store.migrate_layout_1() == 0
    finally:
        await store.close()
        await raw.aclose()

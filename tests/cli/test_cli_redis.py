"""``acp-client sessions --redis URL``: a RedisSessionStore's sessions by owner, with lease age and state, read
from a real server (Valkey 8, Redis 6.2, the 3-primary cluster) while its workers hold them; read-only; a bad
or unreachable URL is a clear error that never shows the password."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from acp_client.cli import main
from acp_client.sessions import RedisSessionStore, SessionRecord
from tests.conftest import raw_redis


async def test_sessions_lists_a_shared_store_by_owner(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    namespace = f"cli{uuid.uuid4().hex[:8]}"
    a = RedisSessionStore(redis_url, namespace=namespace, owner_id="worker-a", lease_ttl=30)
    b = RedisSessionStore(redis_url, namespace=namespace, owner_id="worker-b", lease_ttl=30)
    try:
        await a.save(SessionRecord("sess_a1", "/w/a", last_state="idle"))
        await a.save(SessionRecord("sess_a2", "/w/a"))
        await b.save(SessionRecord("sess_b1", "/w/b", last_state="running"))
        await b.save(SessionRecord("sess_free", "/w/f"))
        assert await b.release("sess_free")
        argv = ["sessions", "--redis", redis_url, "--namespace", namespace, "--lease-ttl", "30"]
        capsys.readouterr()  # the test's own log lines so far
        code = await asyncio.to_thread(main, argv)
        out = capsys.readouterr().out.splitlines()
        assert code == 0, out
        assert out[0].split() == ["owner", "session", "lease", "age", "expires", "in", "token", "state", "cwd"]
        rows = [line.split() for line in out[1:5]]
        assert [(r[0], r[1]) for r in rows] == [
            ("worker-a", "sess_a1"),
            ("worker-a", "sess_a2"),
            ("worker-b", "sess_b1"),
            ("(free)", "sess_free"),
        ]
        assert [r[5] for r in rows[:3]] == ["idle", "-", "running"] and rows[3][2:4] == ["-", "-"]
        for row in rows[:3]:
            age, left = float(row[2].rstrip("s")), float(row[3].rstrip("s"))
            assert 0 <= age <= 30 and 0 < left <= 30 and row[4] == "1"
        assert out[5] == "worker-a: 2, worker-b: 1, (free): 1"
        # read-only: nothing was claimed; the workers still hold their leases, the free one stays free
        assert await a.claim("sess_free") is not None
        assert (await a.renew_all()).lost == frozenset()
    finally:
        await a.close()
        await b.close()


async def test_listing_an_unused_namespace_writes_nothing(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    namespace = f"cli{uuid.uuid4().hex[:8]}"
    code = await asyncio.to_thread(main, ["sessions", "--redis", redis_url, "--namespace", namespace])
    assert code == 0
    assert capsys.readouterr().out.startswith(f"no sessions in namespace '{namespace}'")
    raw = raw_redis(redis_url)
    try:
        assert [key async for key in raw.scan_iter(match=f"{namespace}*")] == []
    finally:
        await raw.aclose()


@pytest.mark.parametrize("url", ["http://user:s3cret@127.0.0.1:6379/0", "s3cret", "mysql://u:s3cret@h/db"])
def test_a_bad_redis_url_is_a_usage_error_without_the_password(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "--redis", url]) == 2
    err = capsys.readouterr().err
    assert "bad Redis URL" in err and "redis://" in err


def test_an_unreachable_server_fails_clearly_without_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    url = "redis://user:s3cret@127.0.0.1:1/0"
    assert main(["sessions", "--redis", url, "--timeout", "0.3"]) == 1
    err = capsys.readouterr().err
    assert "unavailable" in err and "127.0.0.1:1" in err and "s3cret" not in err


def test_store_and_redis_are_one_or_the_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["sessions", "--store", "x.db", "--redis", "redis://127.0.0.1:1"])
    assert exited.value.code == 2
    with pytest.raises(SystemExit):
        main(["sessions"])

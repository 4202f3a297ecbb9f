"""A wrong store URL fails the start, saying which store and what to check (issue 34 §5).

Before: ``async with ReconnectingClient(url, store=RedisSessionStore(wrong))`` started anyway, every
``new_session`` waited ``retry_for`` and its record was silently not stored. Now the start raises a
:class:`StoreUnavailable` naming the URL with its password redacted; ``valkey://`` (and ``valkeys://``) is
taken as ``redis://`` (``rediss://``), and a scheme redis-py does not speak is a ``UsageError`` at once.
Real servers only: the session's Valkey 8 and Redis 6.2 (``acp_client.testing.RedisServer``), a server of
our own with a password, and a loopback port nothing listens on.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from acp_client import ReconnectingClient, RedisSessionStore, UsageError
from acp_client.exceptions import StoreUnavailable
from acp_client.testing import ReferenceAgent
from acp_client.testing.redis_server import RedisServer
from tests.conftest import RedisServers, bound, raw_redis
from tests.sessions._layout import session_key

SECRET = "s3cret-pw"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def agent() -> AsyncIterator[ReferenceAgent]:
    async with ReferenceAgent(protocol_version=2) as served:
        yield served


def _store(url: str) -> RedisSessionStore:
    return RedisSessionStore(url, retry_for=bound(0.5), socket_timeout=bound(0.5), owner_id="worker-a")


async def test_a_closed_port_fails_the_start_naming_the_store(agent: ReferenceAgent) -> None:
    port = _closed_port()
    client = ReconnectingClient(agent.url, store=_store(f"redis://:{SECRET}@127.0.0.1:{port}/0"))
    with pytest.raises(StoreUnavailable) as caught:
        async with asyncio.timeout(bound(20)), client:
            pass
    text = str(caught.value)
    assert f"the session store at redis://<redacted>@127.0.0.1:{port}/0 is unavailable" in text, text
    assert "the client did not start: check the store's URL" in text and "retry_for" in text
    assert SECRET not in text and SECRET not in repr(caught.value.cause)
    assert caught.value.where == f"redis://<redacted>@127.0.0.1:{port}/0"


async def test_a_wrong_password_fails_the_start_without_showing_it(agent: ReferenceAgent) -> None:
    async with RedisServer("valkey", options=("--requirepass", "the-right-one")) as server:
        url = f"redis://:{SECRET}@127.0.0.1:{server.port}/0"
        client = ReconnectingClient(agent.url, store=_store(url))
        with pytest.raises(StoreUnavailable) as caught:
            async with asyncio.timeout(bound(20)), client:
                pass
    text = str(caught.value)
    assert f"redis://<redacted>@127.0.0.1:{server.port}/0" in text and SECRET not in text, text


@pytest.mark.parametrize("flavour", ["valkey", "redis"])
async def test_a_valkey_url_is_a_redis_url(agent: ReferenceAgent, redis_servers: RedisServers, flavour: str) -> None:
    server = redis_servers.get(flavour)
    url = server.url.replace("redis://", "valkey://", 1)
    namespace = f"valkey-url-{flavour}"
    store = RedisSessionStore(url, namespace=namespace, retry_for=bound(2), owner_id="worker-v")
    async with asyncio.timeout(bound(30)), ReconnectingClient(agent.url, store=store) as client:
        session = await client.new_session("/work")
    raw = raw_redis(server.url)
    try:
        stored = await raw.exists(session_key(namespace, "rec", session.id))
    finally:
        await raw.aclose()
    assert stored == 1


@pytest.mark.parametrize("scheme", ["http", "valkey+tcp", "redis+sentinel"])
def test_an_unknown_scheme_is_refused_when_given(scheme: str) -> None:
    with pytest.raises(UsageError) as caught:
        RedisSessionStore(f"{scheme}://:{SECRET}@127.0.0.1:6379/0")
    text = str(caught.value)
    assert "RedisSessionStore url must use one of redis://, rediss://, unix://, valkey://, valkeys://" in text, text
    assert SECRET not in text and "<redacted>@127.0.0.1:6379" in text


def test_valkeys_is_rediss_and_a_cluster_scheme_is_known() -> None:
    from acp_client.sessions.redis._link import _plain_url

    assert _plain_url("valkeys://h:1/0") == ("rediss://h:1/0", False)
    assert _plain_url("valkey+cluster://h:1") == ("redis://h:1", True)

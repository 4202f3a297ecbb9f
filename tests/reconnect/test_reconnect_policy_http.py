"""The reconnect policy suite of ``tests/reconnect/test_reconnect_policy.py``, re-run over Streamable HTTP (HTTP/1.1).

Every test of that module is collected here too, with the fixture of ``test_failure_modes_http.py``:
``ReferenceAgent.url`` and ``FaultProxy.url`` name the Streamable HTTP endpoint, keepalives every 0.1 s.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from tests._over_http import point_at_http
from tests.reconnect.test_reconnect import FAST_POLICY
from tests.reconnect.test_reconnect_policy import *  # noqa: F403  (the suite re-run here)
from tests.reconnect.test_reconnect_policy import ReferenceAgent as _Agent
from tests.reconnect.test_reconnect_policy import SessionRecovered as _Recovered
from tests.reconnect.test_reconnect_policy import started as _started

#: tests of WebSocket specifics, with the reason they do not apply to Streamable HTTP
_WEBSOCKET_ONLY: dict[str, str] = {
    "test_recovery_concurrency_is_bounded": (
        "asserts the limit is reached exactly; over HTTP each resume first opens its session stream, so the "
        "agent may hold fewer than the limit at once: test_recovery_concurrency_is_bounded_over_http below"
    ),
}


@pytest.fixture(autouse=True)
def over_http(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``agent.url`` and ``proxy.url()`` name the http:// endpoint; the agent's keepalive is 0.1 s."""
    point_at_http(request, monkeypatch, _WEBSOCKET_ONLY, h2c=False)
    yield


async def test_recovery_concurrency_is_bounded_over_http() -> None:
    async with _Agent(2) as agent:
        client, rec = await _started(agent, policy=replace(FAST_POLICY, concurrency=4))
        try:
            sessions = [await client.new_session("/w") for _ in range(24)]
            agent.set_capacity(1000, 0.005)
            await agent.drop_all_connections()
            await rec.ready_count(2, timeout=10)
            assert len(rec.of(_Recovered)) == len(sessions)
            assert 1 <= agent.max_outstanding <= 4  # never more recovery requests in flight than the limit
        finally:
            await rec.close()
            await client.aclose()

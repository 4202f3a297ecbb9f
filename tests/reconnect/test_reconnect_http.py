"""The reconnect manager suite of ``tests/reconnect/test_reconnect.py``, re-run over Streamable HTTP (HTTP/1.1).

Every test of that module is collected here too, with the fixture of ``test_failure_modes_http.py``:
``ReferenceAgent.url`` and ``FaultProxy.url`` name the Streamable HTTP endpoint, keepalives every 0.1 s.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._over_http import point_at_http
from tests.reconnect.test_reconnect import *  # noqa: F403  (the suite re-run here)

#: tests of WebSocket specifics, with the reason they do not apply to Streamable HTTP
_WEBSOCKET_ONLY: dict[str, str] = {}


@pytest.fixture(autouse=True)
def over_http(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``agent.url`` and ``proxy.url()`` name the http:// endpoint; the agent's keepalive is 0.1 s."""
    point_at_http(request, monkeypatch, _WEBSOCKET_ONLY, h2c=False)
    yield

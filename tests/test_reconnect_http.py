"""The reconnect manager suite of ``tests/test_reconnect.py``, re-run over Streamable HTTP (HTTP/1.1).

Every test of that module is collected here too, with the fixture of ``test_failure_modes_http.py``:
``ReferenceAgent.url`` and ``FaultProxy.url`` name the Streamable HTTP endpoint, keepalives every 0.1 s.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from acp_client.testing import FaultProxy, ReferenceAgent
from acp_client.testing._agent_http import HttpEndpoint
from tests.test_reconnect import *  # noqa: F403  (the suite re-run here)

#: tests of WebSocket specifics, with the reason they do not apply to Streamable HTTP
_WEBSOCKET_ONLY: dict[str, str] = {}


@pytest.fixture(autouse=True)
def over_http(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``agent.url`` and ``proxy.url()`` name the http:// endpoint; the agent's keepalive is 0.1 s."""
    name = request.node.originalname
    if name in _WEBSOCKET_ONLY:
        pytest.skip(_WEBSOCKET_ONLY[name])
    monkeypatch.setattr(ReferenceAgent, "url", property(lambda self: self.http_url))
    original = FaultProxy.url

    def http_url(self: FaultProxy, path: str = "/acp", scheme: str = "http") -> str:
        return original(self, path, "http" if scheme == "ws" else scheme)

    monkeypatch.setattr(FaultProxy, "url", http_url)
    monkeypatch.setattr(HttpEndpoint, "keepalive_interval", 0.1)
    yield

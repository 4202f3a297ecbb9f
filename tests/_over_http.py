"""Re-running a WebSocket test suite over Streamable HTTP: what the ``over_http`` fixtures of
``test_*_http.py`` share. ``ReferenceAgent.url`` and ``FaultProxy.url`` name the http:// endpoint (same
port and path as the WebSocket), the agent's SSE keepalive comes every 0.1 s (a stream's read-idle
watchdog fires after ``ping_interval + ping_timeout`` without a byte), and ``h2c`` speaks HTTP/2 with
prior knowledge."""

from __future__ import annotations

import pytest

from acp_client.testing import FaultProxy, ReferenceAgent
from acp_client.testing.agent._http import HttpEndpoint
from acp_client.transports import http as http_transport
from acp_client.transports.options import TransportOptions


def point_at_http(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, websocket_only: dict[str, str], *, h2c: bool
) -> None:
    """Skip a test named in ``websocket_only`` (with its reason), else point the suite at the HTTP endpoint."""
    name = request.node.originalname
    if name in websocket_only:
        pytest.skip(websocket_only[name])
    monkeypatch.setattr(ReferenceAgent, "url", property(lambda self: self.http_url))
    original = FaultProxy.url

    def http_url(self: FaultProxy, path: str = "/acp", scheme: str = "http") -> str:
        return original(self, path, "http" if scheme == "ws" else scheme)

    monkeypatch.setattr(FaultProxy, "url", http_url)
    monkeypatch.setattr(HttpEndpoint, "keepalive_interval", 0.1)
    if h2c:

        def prior_knowledge(options: TransportOptions) -> tuple[bool, bool]:
            return False, True

        monkeypatch.setattr(http_transport, "_http_versions", prior_knowledge)

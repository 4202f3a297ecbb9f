"""The typed-client suite of ``tests/client/test_client.py``, re-run over Streamable HTTP: HTTP/1.1 and h2c.

Every test of that module is collected here too; an autouse fixture points ``ReferenceAgent.url`` at the
agent's Streamable HTTP endpoint (the same port and path) and selects the HTTP version.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from acp_client.testing import ReferenceAgent
from acp_client.transports import http as http_transport
from acp_client.transports.options import TransportOptions
from tests.client.test_client import *  # noqa: F403  (the suite re-run here)

#: tests about WebSocket specifics (close codes, frames, upgrade headers): not applicable over HTTP
_WEBSOCKET_ONLY: dict[str, str] = {}


@pytest.fixture(autouse=True, params=["h1", "h2c"])
def over_http(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every ``agent.url`` is the http:// endpoint; ``h2c`` speaks HTTP/2 with prior knowledge."""
    name = request.node.originalname
    if name in _WEBSOCKET_ONLY:
        pytest.skip(_WEBSOCKET_ONLY[name])
    monkeypatch.setattr(ReferenceAgent, "url", property(lambda self: self.http_url))
    if request.param == "h2c":

        def h2c(options: TransportOptions) -> tuple[bool, bool]:
            return False, True

        monkeypatch.setattr(http_transport, "_http_versions", h2c)
    yield str(request.param)

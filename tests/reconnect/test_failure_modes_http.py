"""The twelve failure modes of ``tests/reconnect/test_failure_modes.py``, re-run over Streamable HTTP (HTTP/1.1, h2c).

Every test of that module is collected here too; an autouse fixture points ``ReferenceAgent.url`` and
``FaultProxy.url`` at the Streamable HTTP endpoint (same port and path as the WebSocket) and makes the
agent's SSE keepalive frequent enough for the tests' short liveness settings (the read-idle watchdog of a
stream fires after ``ping_interval + ping_timeout`` without a byte); ``h2c`` speaks HTTP/2 with prior
knowledge.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._over_http import point_at_http
from tests.reconnect.test_failure_modes import *  # noqa: F403  (the suite re-run here)

#: tests of WebSocket specifics, with the reason they do not apply to Streamable HTTP
_WEBSOCKET_ONLY: dict[str, str] = {
    "test_fm02_fatal_close_codes_stop_reconnecting": "WebSocket close codes; HTTP statuses: test_transport_http.py",
    "test_fm08_blackholed_connection_is_replaced_and_its_late_frames_ignored": (
        "needs the one TCP link of a WebSocket; the HTTP variant is in test_transport_http.py"
    ),
}


@pytest.fixture(autouse=True, params=["h1", "h2c"])
def over_http(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``agent.url`` and ``proxy.url()`` name the http:// endpoint; the agent's keepalive is 0.1 s."""
    point_at_http(request, monkeypatch, _WEBSOCKET_ONLY, h2c=request.param == "h2c")
    yield

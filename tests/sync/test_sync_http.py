"""The blocking facade's suite of ``tests/sync/test_sync.py``, re-run over Streamable HTTP (HTTP/1.1).

Every test of that module is collected here too; an autouse fixture points ``ReferenceAgent.url`` at the
agent's Streamable HTTP endpoint (same port and path as its WebSocket).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from acp_client.testing import ReferenceAgent
from tests.sync.test_sync import *  # noqa: F403  (the suite re-run here)


@pytest.fixture(autouse=True)
def over_http(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every ``agent.url`` is the http:// endpoint."""
    monkeypatch.setattr(ReferenceAgent, "url", property(lambda self: self.http_url))
    yield

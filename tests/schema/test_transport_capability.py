"""The durable transport capability (PR 2208) as the client reads it and the reference agent advertises it."""

from __future__ import annotations

from typing import Any

import pytest

from acp_client.schema import ResumableTransport
from acp_client.testing import ReferenceAgent, Resumable
from acp_client.testing.agent._capabilities import initialize_result


@pytest.mark.parametrize("version", [1, 2])
def test_advertised_capability_reads_back(version: int) -> None:
    caps = {name: True for name in ReferenceAgent().capability_flags}
    result = initialize_result(version, caps, False, Resumable(retention_messages=7, keepalive_seconds=2).capability())
    read = ResumableTransport.from_initialize(result)
    assert read is not None
    assert (read.retention_messages, read.retention_seconds, read.keepalive_seconds) == (7, 300.0, 2.0)


@pytest.mark.parametrize(
    "result",
    [
        {"capabilities": {}},
        {"capabilities": {"transport": {}}},
        {"capabilities": {"transport": {"resumable": False}}},
        {"capabilities": {"transport": {"resumable": None}}},
        {"agentCapabilities": {"transport": "yes"}},
        None,
    ],
)
def test_absent_or_malformed_capability_is_none(result: Any) -> None:
    assert ResumableTransport.from_initialize(result) is None


def test_malformed_fields_read_as_unknown_and_raw_is_kept() -> None:
    read = ResumableTransport.from_initialize(
        {"capabilities": {"transport": {"resumable": {"retentionMessages": "many", "retentionSeconds": -1, "x": 1}}}}
    )
    assert read is not None
    assert read.retention_messages is None and read.retention_seconds is None
    assert read.raw == {"retentionMessages": "many", "retentionSeconds": -1, "x": 1}


def test_without_the_option_nothing_is_advertised() -> None:
    caps = {name: True for name in ReferenceAgent().capability_flags}
    assert ResumableTransport.from_initialize(initialize_result(2, caps, False)) is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"retention_messages": 0}, "retention_messages"),
        ({"retention_seconds": 0}, "retention_seconds"),
        ({"keepalive_seconds": float("nan")}, "keepalive_seconds"),
        ({"retention_messages": True}, "retention_messages"),
    ],
)
def test_bad_resumable_values_are_refused(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Resumable(**kwargs)

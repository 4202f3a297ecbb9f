"""session/status and the v2 foreground-state snapshot (hand-written models, protocol.md §7, rfd texts)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_client.exceptions import ProtocolError
from acp_client.schema import (
    SessionStatusRequest,
    StateSnapshot,
    capability_present,
    parse_initialize_response,
    parse_session_update,
    parse_state_update,
    parse_status_response,
    status_supported,
    supports_status,
    v1,
    v2,
)


@pytest.mark.parametrize("status", ["active", "inactive", "hibernating", "open", "saved", "_custom", ""])
@pytest.mark.parametrize("version", [1, 2])
def test_status_is_an_open_set_kept_raw(status: str, version: int) -> None:
    resp = parse_status_response({"status": status}, version)
    assert resp.status == status
    assert resp.is_known_status == (status in ("active", "inactive"))
    assert resp.is_active == (status in ("active", "open"))  # "open": the TypeScript SDK's v2 word for active
    assert resp.to_wire() == {"status": status}


@pytest.mark.parametrize("result", [{}, {"status": None}, {"status": 1}, {"status": ["active"]}, None, "active", []])
@pytest.mark.parametrize("version", [1, 2])
def test_missing_or_non_string_status_is_a_protocol_error(result: Any, version: int) -> None:
    with pytest.raises(ProtocolError):
        parse_status_response(result, version)


@pytest.mark.parametrize(
    "result",
    [
        pytest.param({"status": "active"}, id="missing"),
        pytest.param({"status": "active", "state": None}, id="null"),
        pytest.param({"status": "active", "state": 42}, id="number"),
        pytest.param({"status": "active", "state": "idle"}, id="bare-string"),
        pytest.param({"status": "active", "state": {"state": 42}}, id="state-42"),
        pytest.param({"status": "active", "state": {}}, id="empty-object"),
        pytest.param({"status": "active", "state": {"stopReason": "end_turn"}}, id="no-state-key"),
    ],
)
def test_unreported_state_is_none_never_idle(result: dict[str, Any]) -> None:
    resp = parse_status_response(result, 2)
    assert resp.state is None
    assert resp.status == "active"


def test_v2_state_snapshot_is_typed() -> None:
    resp = parse_status_response(
        {"status": "active", "state": {"state": "idle", "stopReason": "end_turn", "_meta": {"k": 1}}}, 2
    )
    assert resp.state is not None
    assert resp.state.is_idle and resp.state.stop_reason == "end_turn"
    assert resp.state.field_meta == {"k": 1}
    odd = parse_status_response({"status": "active", "state": {"state": "_dreaming", "stopReason": 5}}, 2)
    assert odd.state is not None and odd.state.state == "_dreaming" and not odd.state.is_known
    assert odd.state.stop_reason is None  # default-on-error inside the snapshot


def test_v1_ignores_state_but_keeps_it_raw() -> None:
    result = {"status": "active", "state": {"state": "running"}}
    resp = parse_status_response(result, 1)
    assert resp.state is None
    assert resp.model_extra == {"state": {"state": "running"}}
    assert resp.to_wire() == result
    assert result == {"status": "active", "state": {"state": "running"}}  # input not mutated


def test_status_request_model() -> None:
    req = SessionStatusRequest(session_id="sess_abc123")
    assert req.to_wire() == {"sessionId": "sess_abc123"}
    assert SessionStatusRequest.model_validate({"sessionId": "s", "_meta": 5}).to_wire() == {"sessionId": "s"}


# --------------------------------------------------------------------------- state_update


def test_parse_state_update_flattened_shape() -> None:
    snap = parse_state_update({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"})
    assert isinstance(snap, StateSnapshot)
    assert snap.state == "idle" and snap.stop_reason == "end_turn"
    assert snap.to_wire() == {"state": "idle", "stopReason": "end_turn"}
    running = parse_state_update({"sessionUpdate": "state_update", "state": "running"})
    assert running is not None and running.is_running and running.stop_reason is None


@pytest.mark.parametrize(
    "update",
    [None, 42, "idle", [], {"sessionUpdate": "state_update"}, {"sessionUpdate": "state_update", "state": 42}],
)
def test_parse_state_update_malformed_is_none(update: Any) -> None:
    assert parse_state_update(update) is None


def test_parse_state_update_accepts_the_parsed_model_and_the_params() -> None:
    event = parse_session_update(
        {"sessionId": "s", "update": {"sessionUpdate": "state_update", "state": "requires_action"}}, 2
    )
    snap = parse_state_update(event.update)
    assert snap is not None and snap.requires_action
    from_params = parse_state_update(event.raw)
    assert from_params is not None and from_params.requires_action
    assert parse_state_update({"sessionId": "s", "update": {"sessionUpdate": "state_update", "state": 4}}) is None


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)
    )
)
def test_any_state_value_never_becomes_idle_unless_it_says_idle(state: Any) -> None:
    resp = parse_status_response({"status": "active", "state": state}, 2)
    if resp.state is not None:
        assert isinstance(state, dict) and state.get("state") == resp.state.state
    is_idle_report = isinstance(state, dict) and state.get("state") == "idle"
    assert (resp.state is not None and resp.state.is_idle) == is_idle_report


# --------------------------------------------------------------------------- capability


@pytest.mark.parametrize(
    ("raw", "path", "expected"),
    [
        ({"loadSession": True}, ("loadSession",), True),
        ({"loadSession": False}, ("loadSession",), False),
        ({"loadSession": "true"}, ("loadSession",), False),
        ({}, ("loadSession",), False),
        ({"sessionCapabilities": {"status": {}}}, ("sessionCapabilities", "status"), True),
        ({"sessionCapabilities": {"status": {"_meta": {}}}}, ("sessionCapabilities", "status"), True),
        ({"sessionCapabilities": {"status": None}}, ("sessionCapabilities", "status"), False),
        ({"sessionCapabilities": {"status": 1}}, ("sessionCapabilities", "status"), False),
        ({"sessionCapabilities": None}, ("sessionCapabilities", "status"), False),
        ({"sessionCapabilities": []}, ("sessionCapabilities", "status"), False),
        ({"session": {}}, ("session",), True),
        ({"session": None}, ("session", "status"), False),
        (None, ("session",), False),
    ],
)
def test_capability_presence_rule(raw: Any, path: tuple[str, ...], expected: bool) -> None:
    assert capability_present(raw, path) is expected


def test_status_supported_per_version() -> None:
    assert status_supported({"sessionCapabilities": {"status": {}}}, 1)
    assert not status_supported({"session": {"status": {}}}, 1)
    assert status_supported({"session": {"status": {}}}, 2)
    assert not status_supported({"session": {}}, 2)
    assert not status_supported({}, 2)


def test_typed_capabilities_expose_status() -> None:
    r1 = parse_initialize_response(
        {"protocolVersion": 1, "agentCapabilities": {"sessionCapabilities": {"status": {}}}}, 1
    )
    assert isinstance(r1, v1.InitializeResponse)
    assert r1.agent_capabilities is not None and r1.agent_capabilities.session_capabilities is not None
    assert isinstance(r1.agent_capabilities.session_capabilities.status, v1.SessionStatusCapabilities)
    assert supports_status(r1.agent_capabilities)
    r2 = parse_initialize_response(
        {"protocolVersion": 2, "info": {"name": "a", "version": "1"}, "capabilities": {"session": {"status": {}}}}, 2
    )
    assert isinstance(r2, v2.InitializeResponse)
    assert supports_status(r2.capabilities)
    bare = parse_initialize_response({"protocolVersion": 2, "info": {"name": "a", "version": "1"}}, 2)
    assert not supports_status(bare.capabilities)
    assert not supports_status(v1.AgentCapabilities())
    assert supports_status({"session": {"status": {}}})


def test_initialize_response_errors() -> None:
    with pytest.raises(ProtocolError):
        parse_initialize_response({"protocolVersion": 2}, 2)  # v2 needs `info`
    with pytest.raises(ProtocolError):
        parse_initialize_response(None, 1)

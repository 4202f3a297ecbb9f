"""Forward-compatibility semantics of the models, shown on real schema fields."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from acp_client.exceptions import ProtocolError, UsageError
from acp_client.schema import (
    OMITTED,
    UnknownUpdate,
    parse_params,
    parse_result,
    parse_session_update,
    patch_state,
    patch_value,
    v1,
    v2,
)


def _update(update: dict[str, Any], session_id: str = "sess_1") -> dict[str, Any]:
    return {"sessionId": session_id, "update": update}


# --------------------------------------------------------------------------- unknown fields


def test_unknown_fields_are_kept_and_dumped_at_every_level() -> None:
    params = _update(
        {
            "sessionUpdate": "agent_message_chunk",
            "messageId": "m1",
            "content": {"type": "text", "text": "hi", "futureKey": {"nested": [1, 2]}},
            "brandNew": True,
        }
    )
    params["_meta"] = {"trace": "x"}
    params["topLevelExtra"] = 1
    model = v2.UpdateSessionNotification.model_validate(params)
    assert model.to_wire() == params
    event = parse_session_update(params, 2)
    assert event.update.model_extra == {"brandNew": True}
    assert event.update.content.model_extra == {"futureKey": {"nested": [1, 2]}}


def test_models_accept_attribute_names_and_write_wire_names() -> None:
    req = v1.NewSessionRequest(cwd="/p", mcp_servers=[])
    assert req.to_wire() == {"cwd": "/p", "mcpServers": []}
    block = v2.ContentBlockText(text="hi")  # the tag defaults and is always written
    assert block.to_wire() == {"type": "text", "text": "hi"}
    assert v1.ContentBlockText.model_validate({"type": "text", "text": "x"}).text == "x"


def test_types_are_strict_like_serde() -> None:
    # a string is not coerced into an integer protocol version
    with pytest.raises(ProtocolError):
        parse_result("initialize", {"protocolVersion": "1"}, 1)
    with pytest.raises(ProtocolError):
        parse_result("initialize", {"protocolVersion": 70000}, 1)


# --------------------------------------------------------------------------- open enums


@pytest.mark.parametrize("version", [1, 2])
def test_unknown_tool_kind_and_status_are_kept_raw(version: int) -> None:
    kind = "tool_call" if version == 1 else "tool_call_update"
    update = {"sessionUpdate": kind, "toolCallId": "c1", "title": "t", "kind": "teleport", "status": "_paused"}
    event = parse_session_update(_update(update), version)
    assert event.update.kind == "teleport"
    assert event.update.status == "_paused"
    assert event.update.to_wire() == update
    known = parse_session_update(_update({**update, "kind": "execute"}), version)
    assert known.update.kind == v1.ToolKind.EXECUTE == "execute"


def test_unknown_stop_reason_and_permission_kind_are_kept_raw() -> None:
    assert parse_result("session/prompt", {"stopReason": "_out_of_coffee"}, 1).stop_reason == "_out_of_coffee"
    params = {
        "sessionId": "s",
        "toolCall": {"toolCallId": "c"},
        "options": [{"optionId": "o", "name": "Maybe", "kind": "allow_on_tuesdays"}],
    }
    req = parse_params("session/request_permission", params, 1)
    assert isinstance(req, v1.RequestPermissionRequest)
    assert req.options[0].kind == "allow_on_tuesdays"
    assert req.to_wire() == params


# --------------------------------------------------------------------------- DefaultOnError


def test_default_on_error_degrades_malformed_optional_fields_to_unset() -> None:
    # v1 AgentCapabilities: loadSession, sessionCapabilities.resume and promptCapabilities are default-on-error
    resp = parse_result(
        "initialize",
        {
            "protocolVersion": 1,
            "agentCapabilities": {
                "loadSession": "yes",
                "sessionCapabilities": {"resume": 5, "close": {}},
                "promptCapabilities": [],
            },
        },
        1,
    )
    assert isinstance(resp, v1.InitializeResponse)
    caps = resp.agent_capabilities
    assert caps is not None
    assert caps.load_session is False  # the schema default, since the malformed value became "absent"
    assert "load_session" not in caps.model_fields_set
    assert caps.session_capabilities is not None
    assert caps.session_capabilities.resume is None
    assert caps.session_capabilities.close is not None
    assert resp.to_wire() == {"protocolVersion": 1, "agentCapabilities": {"sessionCapabilities": {"close": {}}}}


def test_default_on_error_in_a_session_update() -> None:
    # v2 IdleStateUpdate.stopReason and ToolCallUpdate.title/_meta are default-on-error
    event = parse_session_update(_update({"sessionUpdate": "state_update", "state": "idle", "stopReason": 42}), 2)
    assert event.update.state == "idle"
    assert event.update.stop_reason is None
    event = parse_session_update(
        _update({"sessionUpdate": "tool_call_update", "toolCallId": "c", "title": ["x"], "_meta": 3}), 2
    )
    assert patch_state(event.update, "title") == "omitted"  # malformed = leave unchanged, never "clear"
    assert event.update.field_meta is None


def test_required_fields_are_not_default_on_error() -> None:
    with pytest.raises(ProtocolError, match="toolCallId"):
        parse_session_update(_update({"sessionUpdate": "tool_call_update", "title": "x"}), 2)


def test_required_default_on_error_list_degrades_to_empty() -> None:
    # v1 ListSessionsResponse.sessions is required *and* default-on-error: malformed -> []
    resp = parse_result("session/list", {"sessions": "garbage"}, 1)
    assert isinstance(resp, v1.ListSessionsResponse)
    assert resp.sessions == []
    with pytest.raises(ProtocolError, match="sessions"):
        parse_result("session/list", {}, 1)  # but missing is still an error


# --------------------------------------------------------------------------- skip-invalid-items


def test_skip_invalid_items_drops_only_the_bad_items() -> None:
    result = {
        "sessions": [
            {"sessionId": "a", "cwd": "/a"},
            {"sessionId": "b"},  # no cwd: malformed
            {"sessionId": 3, "cwd": "/c"},  # wrong type: malformed
            {"sessionId": "d", "cwd": "/d", "futureField": 1},
        ]
    }
    resp = parse_result("session/list", result, 1)
    assert isinstance(resp, v1.ListSessionsResponse)
    assert [s.session_id for s in resp.sessions] == ["a", "d"]
    assert resp.sessions[1].model_extra == {"futureField": 1}


def test_skip_invalid_items_on_v2_message_content() -> None:
    update = {
        "sessionUpdate": "user_message",
        "messageId": "m",
        "content": [
            {"type": "text", "text": "kept"},
            {"type": "text"},  # known type, missing text: dropped
            {"type": "_hologram", "depth": 3},  # unknown type: kept raw
        ],
    }
    event = parse_session_update(_update(update), 2)
    content = event.update.content
    assert [type(c).__name__ for c in content] == ["ContentBlockText", "ContentBlockOther"]
    assert content[1].to_wire() == {"type": "_hologram", "depth": 3}


# --------------------------------------------------------------------------- tagged unions


@pytest.mark.parametrize("version", [1, 2])
def test_unknown_session_update_kind_is_kept_raw(version: int) -> None:
    update = {"sessionUpdate": "teleport_update", "destination": "mars"}
    event = parse_session_update(_update(update), version)
    assert event.kind == "teleport_update"
    assert isinstance(event.update, UnknownUpdate)
    assert event.update.raw is update
    assert event.update.to_wire() == update
    assert not event.is_known


def test_v2_only_kind_is_unknown_on_v1() -> None:
    event = parse_session_update(_update({"sessionUpdate": "state_update", "state": "idle"}), 1)
    assert isinstance(event.update, UnknownUpdate)


def test_unknown_tags_inside_known_updates_are_kept() -> None:
    # v1 ContentBlock is a closed oneOf in the schema; we still keep an unknown type raw
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "video", "url": "u"}}
    event = parse_session_update(_update(update), 1)
    assert type(event.update.content).__name__ == "ContentBlockOther"
    assert event.update.to_wire() == update
    # v2 foreground state: an unknown state is kept
    update2 = {"sessionUpdate": "state_update", "state": "_thinking_hard", "x": 1}
    event2 = parse_session_update(_update(update2), 2)
    assert event2.update.state == "_thinking_hard"
    assert event2.update.to_wire() == update2


@pytest.mark.parametrize(
    ("version", "update", "needle"),
    [
        (1, {"sessionUpdate": "agent_message_chunk"}, "content"),
        (2, {"sessionUpdate": "agent_message_chunk", "messageId": "m", "content": {"type": "text"}}, "text"),
        (1, {"sessionUpdate": "usage_update", "used": "many", "size": 10}, "used"),
        (2, {"sessionUpdate": "tool_call_content_chunk", "toolCallId": "c"}, "content"),
    ],
)
def test_malformed_known_kind_raises_protocol_error(version: int, update: dict[str, Any], needle: str) -> None:
    with pytest.raises(ProtocolError, match=needle) as info:
        parse_session_update(_update(update), version)
    assert update["sessionUpdate"] in str(info.value)
    assert not isinstance(info.value, ValueError)  # pydantic's ValidationError is a ValueError: it must not leak


@pytest.mark.parametrize(
    "params",
    [None, [], {"update": {"sessionUpdate": "plan"}}, {"sessionId": "s"}, {"sessionId": "s", "update": {}}],
)
def test_malformed_envelope_raises_protocol_error(params: Any) -> None:
    with pytest.raises(ProtocolError):
        parse_session_update(params, 1)


def test_unknown_version_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        parse_session_update(_update({"sessionUpdate": "plan"}), 3)


def test_default_variant_without_tag() -> None:
    # v1 McpServer: stdio has no "type"; AuthMethod: no "type" means "agent"
    adapter = TypeAdapter(v1.McpServer)
    stdio = {"name": "fs", "command": "/bin/mcp", "args": [], "env": []}
    assert type(adapter.validate_python(stdio)).__name__ == "McpServerStdio"
    assert adapter.validate_python(stdio).to_wire() == stdio
    http = adapter.validate_python({"type": "http", "name": "h", "url": "u", "headers": []})
    assert isinstance(http, v1.McpServerHttpVariant)  # <Union><Tag>, "Variant" added as McpServerHttp exists
    assert isinstance(http, v1.McpServerHttp)
    auth = TypeAdapter(v1.AuthMethod).validate_python({"id": "a", "name": "Agent"})
    assert type(auth).__name__ == "AuthMethodAgent"


# --------------------------------------------------------------------------- patch tri-state


@pytest.mark.parametrize(
    ("update", "attr", "state", "value"),
    [
        ({"sessionUpdate": "tool_call_update", "toolCallId": "c"}, "title", "omitted", OMITTED),
        ({"sessionUpdate": "tool_call_update", "toolCallId": "c", "title": None}, "title", "null", None),
        ({"sessionUpdate": "tool_call_update", "toolCallId": "c", "title": "T"}, "title", "value", "T"),
        ({"sessionUpdate": "tool_call_update", "toolCallId": "c", "content": None}, "content", "null", None),
        ({"sessionUpdate": "tool_call_update", "toolCallId": "c", "content": []}, "content", "value", []),
        ({"sessionUpdate": "user_message", "messageId": "m"}, "content", "omitted", OMITTED),
        ({"sessionUpdate": "agent_message", "messageId": "m", "content": None}, "content", "null", None),
        ({"sessionUpdate": "session_info_update"}, "title", "omitted", OMITTED),
        ({"sessionUpdate": "session_info_update", "title": None}, "title", "null", None),
        ({"sessionUpdate": "session_info_update", "title": "New"}, "title", "value", "New"),
    ],
)
def test_patch_fields_keep_omitted_null_and_value_apart(
    update: dict[str, Any], attr: str, state: str, value: Any
) -> None:
    event = parse_session_update(_update(update), 2)
    assert patch_state(event.update, attr) == state
    got = patch_value(event.update, attr)
    assert got is OMITTED if value is OMITTED else got == value
    assert event.update.to_wire() == update  # null stays null, omitted stays omitted


def test_patch_state_rejects_unknown_attribute() -> None:
    event = parse_session_update(_update({"sessionUpdate": "session_info_update"}), 2)
    with pytest.raises(AttributeError):
        patch_state(event.update, "nope")


# --------------------------------------------------------------------------- property-based

_json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
_json = st.recursive(
    _json_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3)
)
_extra_keys = st.dictionaries(
    st.text(min_size=1, max_size=8).filter(lambda k: k not in {"sessionUpdate", "content", "messageId", "_meta"}),
    _json,
    max_size=4,
)


@given(extra=_extra_keys, text=st.text(), version=st.sampled_from([1, 2]))
def test_chunk_with_random_extras_round_trips(extra: dict[str, Any], text: str, version: int) -> None:
    update = {"sessionUpdate": "agent_message_chunk", "messageId": "m", "content": {"type": "text", "text": text}}
    update.update(extra)
    event = parse_session_update(_update(update), version)
    assert event.update.to_wire() == update


@given(kind=st.text(min_size=1, max_size=12), version=st.sampled_from([1, 2]))
def test_any_tool_kind_string_is_kept(kind: str, version: int) -> None:
    name = "tool_call" if version == 1 else "tool_call_update"
    update = {"sessionUpdate": name, "toolCallId": "c", "title": "t", "kind": kind}
    assert parse_session_update(_update(update), version).update.kind == kind


def test_wire_parsing_is_by_alias_only() -> None:
    # a wire key spelled like the Python attribute is an unknown field, not the field itself
    update = {"sessionUpdate": "session_info_update", "title": "T", "updated_at": "not-the-field"}
    event = parse_session_update(_update(update), 2)
    assert event.update.updated_at is None
    assert event.update.model_extra == {"updated_at": "not-the-field"}
    assert event.update.to_wire() == update
    assert patch_state(event.update, "updated_at") == "omitted"

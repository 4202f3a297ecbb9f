"""The sans-I/O JSON-RPC core, fed with strings only (docs: protocol.md §1.1, §1.3, §6)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acp_client.jsonrpc import (
    DEFAULT_MAX_FRAME_CHARS,
    ErrorResponse,
    Invalid,
    JsonRpcCore,
    Notification,
    Pending,
    Request,
    Response,
    encode,
)
from tests.conftest import bound

EVENT_TYPES = (Request, Notification, Response, ErrorResponse, Invalid)
INVALID_KINDS = {"parse_error", "invalid_request", "empty_batch", "unknown_id", "oversize"}


def frame(**members: Any) -> str:
    """A JSON-RPC 2.0 frame with the given members (``id_`` stands for ``id``)."""
    if "id_" in members:
        members["id"] = members.pop("id_")
    return json.dumps({"jsonrpc": "2.0", **members})


def only(events: list[Any]) -> Any:
    assert len(events) == 1, events
    return events[0]


def reply_of(event: Invalid) -> dict[str, Any]:
    assert event.reply is not None
    parsed: dict[str, Any] = json.loads(event.reply)
    return parsed


def assert_error_reply(event: object, code: int, id_: Any = None) -> None:
    assert isinstance(event, Invalid), event
    reply = reply_of(event)
    assert reply["jsonrpc"] == "2.0"
    assert reply["id"] == id_
    assert reply["error"]["code"] == code
    assert isinstance(reply["error"]["message"], str)
    assert "result" not in reply


# --------------------------------------------------------------------------- outbound frames


def test_request_frame_and_id_allocation() -> None:
    core = JsonRpcCore()
    id0, f0 = core.request("initialize", {"protocolVersion": 1})
    id1, f1 = core.request("session/list")
    assert (id0, id1) == (0, 1)
    assert json.loads(f0) == {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    assert json.loads(f1) == {"jsonrpc": "2.0", "id": 1, "method": "session/list"}  # params None: omitted
    assert core.pending == {0: Pending(0, "initialize"), 1: Pending(1, "session/list")}
    assert "\n" not in f0 and "\n" not in f1


def test_frames_are_single_line_even_with_newlines_in_values() -> None:
    core = JsonRpcCore()
    _, f = core.request("session/prompt", {"prompt": [{"type": "text", "text": "a\nb\r\nc\u2028"}]})
    assert "\n" not in f and "\r" not in f
    assert json.loads(f)["params"]["prompt"][0]["text"] == "a\nb\r\nc\u2028"


def test_notification_and_response_frames() -> None:
    core = JsonRpcCore()
    assert json.loads(core.notification("session/cancel", {"sessionId": "s"})) == {
        "jsonrpc": "2.0",
        "method": "session/cancel",
        "params": {"sessionId": "s"},
    }
    assert json.loads(core.notification("x")) == {"jsonrpc": "2.0", "method": "x"}
    assert json.loads(core.respond("abc", None)) == {"jsonrpc": "2.0", "id": "abc", "result": None}
    assert json.loads(core.respond_error(7, -32601, "Method not found")) == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32601, "message": "Method not found"},
    }
    assert json.loads(core.respond_error(None, -32002, "Resource not found", {"sessionId": "s"})) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32002, "message": "Resource not found", "data": {"sessionId": "s"}},
    }
    # answering the peer does not touch our pending table
    assert core.pending == {}


def test_encode_is_compact_and_refuses_nan() -> None:
    assert encode({"a": [1, "é"]}) == '{"a":[1,"é"]}'
    with pytest.raises(ValueError):
        encode({"a": float("nan")})


# --------------------------------------------------------------------------- interleaved traffic


def test_interleaved_requests_notifications_responses_and_errors() -> None:
    core = JsonRpcCore()
    new_id, _ = core.request("session/new", {"cwd": "/", "mcpServers": []})
    prompt_id, _ = core.request("session/prompt", {"sessionId": "s", "prompt": []})
    list_id, _ = core.request("session/list")

    inbound = [
        frame(method="session/update", params={"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk"}}),
        frame(id_=new_id, result={"sessionId": "s"}),
        # the agent asks us something, reusing an id we also use: the two id spaces are apart
        frame(id_=prompt_id, method="fs/read_text_file", params={"sessionId": "s", "path": "/a"}),
        frame(id_="perm-1", method="session/request_permission", params={"sessionId": "s"}),
        frame(method="session/update", params={"sessionId": "s", "update": {"sessionUpdate": "plan"}}),
        frame(id_=list_id, error={"code": -32601, "message": "Method not found", "data": {"method": "session/list"}}),
        frame(id_=prompt_id, result={"stopReason": "end_turn"}),
    ]
    events = [only(core.receive(text)) for text in inbound]

    assert isinstance(events[0], Notification) and events[0].method == "session/update"
    assert events[1] == Response(new_id, {"sessionId": "s"}, Pending(new_id, "session/new"))
    assert events[2] == Request(prompt_id, "fs/read_text_file", {"sessionId": "s", "path": "/a"})
    assert events[3] == Request("perm-1", "session/request_permission", {"sessionId": "s"})
    assert isinstance(events[4], Notification) and events[4].params["update"]["sessionUpdate"] == "plan"
    assert events[5] == ErrorResponse(
        list_id, -32601, "Method not found", {"method": "session/list"}, Pending(list_id, "session/list")
    )
    assert events[6] == Response(prompt_id, {"stopReason": "end_turn"}, Pending(prompt_id, "session/prompt"))
    assert core.pending == {}


def test_peer_request_with_our_pending_id_does_not_settle_it() -> None:
    core = JsonRpcCore()
    id_, _ = core.request("session/prompt")
    event = only(core.receive(frame(id_=id_, method="terminal/create", params={})))
    assert isinstance(event, Request)
    assert core.pending == {id_: Pending(id_, "session/prompt")}


def test_notification_params_may_be_absent_null_or_array() -> None:
    core = JsonRpcCore()
    assert only(core.receive(frame(method="a"))) == Notification("a", None)
    assert only(core.receive(frame(method="a", params=None))) == Notification("a", None)
    assert only(core.receive(frame(method="a", params=[1, 2]))) == Notification("a", [1, 2])


def test_result_null_is_a_response() -> None:
    core = JsonRpcCore()
    id_, _ = core.request("session/set_mode")
    event = only(core.receive(frame(id_=id_, result=None)))
    assert event == Response(id_, None, Pending(id_, "session/set_mode"))


# --------------------------------------------------------------------------- the pending table


def test_a_response_settles_once_and_a_late_duplicate_is_unknown_id() -> None:
    core = JsonRpcCore()
    id_, _ = core.request("session/load")
    assert isinstance(only(core.receive(frame(id_=id_, result={}))), Response)
    late = only(core.receive(frame(id_=id_, result={})))
    assert isinstance(late, Invalid)
    assert late.kind == "unknown_id"
    assert late.id == id_
    assert late.reply is None  # never answered


def test_an_error_settles_once_and_a_late_error_is_unknown_id() -> None:
    core = JsonRpcCore()
    id_, _ = core.request("session/resume")
    first = only(core.receive(frame(id_=id_, error={"code": -32002, "message": "Resource not found"})))
    assert isinstance(first, ErrorResponse) and first.request == Pending(id_, "session/resume")
    second = only(core.receive(frame(id_=id_, error={"code": -32002, "message": "Resource not found"})))
    assert isinstance(second, Invalid) and second.kind == "unknown_id" and second.reply is None
    # a success after an error for the same id is just as unknown
    third = only(core.receive(frame(id_=id_, result={})))
    assert isinstance(third, Invalid) and third.kind == "unknown_id"


@pytest.mark.parametrize("id_", [99, "0", "abc"])
def test_response_to_an_id_we_never_sent_is_unknown_id(id_: int | str) -> None:
    core = JsonRpcCore()
    core.request("x")  # id 0 pending: a string "0" must not settle it
    event = only(core.receive(frame(id_=id_, result=1)))
    assert isinstance(event, Invalid) and event.kind == "unknown_id" and event.reply is None and event.id == id_
    event = only(core.receive(frame(id_=id_, error={"code": 1, "message": "m"})))
    assert isinstance(event, Invalid) and event.kind == "unknown_id" and event.reply is None
    assert list(core.pending) == [0]


def test_forget_turns_a_late_response_into_unknown_id() -> None:
    core = JsonRpcCore()
    id_, _ = core.request("session/prompt")
    assert core.forget(id_) == Pending(id_, "session/prompt")
    assert core.forget(id_) is None
    assert core.forget(12345) is None
    late = only(core.receive(frame(id_=id_, result={"stopReason": "cancelled"})))
    assert isinstance(late, Invalid) and late.kind == "unknown_id"


def test_drop_all_returns_every_pending_request_and_ids_are_never_reused() -> None:
    core = JsonRpcCore()
    ids = [core.request(f"m{i}")[0] for i in range(3)]
    dropped = core.drop_all()
    assert dropped == [Pending(i, f"m{i}") for i in ids]
    assert core.pending == {}
    assert core.drop_all() == []
    for id_ in ids:
        late = only(core.receive(frame(id_=id_, result=None)))
        assert isinstance(late, Invalid) and late.kind == "unknown_id"
    next_id, _ = core.request("after")
    assert next_id == ids[-1] + 1


def test_pending_is_a_copy() -> None:
    core = JsonRpcCore()
    id_, _ = core.request("x")
    snapshot = core.pending
    snapshot.clear()
    assert core.pending == {id_: Pending(id_, "x")}


def test_error_with_id_null_settles_nothing() -> None:
    core = JsonRpcCore()
    id_, _ = core.request("session/prompt")
    event = only(core.receive(frame(id_=None, error={"code": -32700, "message": "Parse error"})))
    assert event == ErrorResponse(None, -32700, "Parse error", None, None)
    assert core.pending == {id_: Pending(id_, "session/prompt")}


def test_error_object_members_are_read_leniently() -> None:
    core = JsonRpcCore()
    id_, _ = core.request("x")
    event = only(core.receive(frame(id_=id_, error={"code": -32603, "data": {"details": "boom"}})))
    assert isinstance(event, ErrorResponse)
    assert (event.code, event.message, event.data) == (-32603, "", {"details": "boom"})
    id_, _ = core.request("x")
    event = only(core.receive(frame(id_=id_, error={"code": -32603, "message": 42})))
    assert isinstance(event, ErrorResponse) and event.message == "42"


@pytest.mark.parametrize(
    "error",
    [
        "boom",
        None,
        [],
        {"message": "no code"},
        {"code": "1", "message": "m"},
        {"code": 1.5, "message": "m"},
        {"code": True, "message": "m"},
    ],
)
def test_malformed_error_object_is_invalid_and_not_answered(error: Any) -> None:
    core = JsonRpcCore()
    id_, _ = core.request("x")
    event = only(core.receive(frame(id_=id_, error=error)))
    assert isinstance(event, Invalid)
    assert event.kind == "invalid_request"
    assert event.reply is None
    assert event.id == id_  # so a driver can fail that caller with a protocol error


# --------------------------------------------------------------------------- batches (v2, §1.3)


def test_batch_with_mixed_entries_yields_one_event_per_entry_in_order() -> None:
    core = JsonRpcCore()
    id_, _ = core.request("session/status")
    batch = json.dumps(
        [
            {"jsonrpc": "2.0", "id": "r1", "method": "fs/read_text_file", "params": {"path": "/x"}},
            {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s"}},
            {"jsonrpc": "2.0", "id": id_, "result": {"status": "active"}},
            42,
            {"foo": "boo"},
            {"jsonrpc": "2.0", "id": 7, "method": 1},
        ]
    )
    events = core.receive(batch)
    assert [type(e) for e in events] == [Request, Notification, Response, Invalid, Invalid, Invalid]
    assert events[0] == Request("r1", "fs/read_text_file", {"path": "/x"})
    assert events[2] == Response(id_, {"status": "active"}, Pending(id_, "session/status"))
    assert_error_reply(events[3], -32600, None)
    assert_error_reply(events[4], -32600, None)  # the JSON-RPC 2.0 spec's own example
    assert_error_reply(events[5], -32600, 7)  # the id could be read, so it is echoed
    assert core.pending == {}


@pytest.mark.parametrize("text", ["[]", " [ ] ", "[\n]"])
def test_empty_batch_is_one_invalid_request_with_id_null(text: str) -> None:
    event = only(JsonRpcCore().receive(text))
    assert isinstance(event, Invalid) and event.kind == "empty_batch"
    assert_error_reply(event, -32600, None)


def test_all_notification_batch_needs_no_reply() -> None:
    core = JsonRpcCore()
    batch = json.dumps([{"jsonrpc": "2.0", "method": f"n{i}", "params": {"i": i}} for i in range(5)])
    events = core.receive(batch)
    assert events == [Notification(f"n{i}", {"i": i}) for i in range(5)]
    # nothing in it asks for a reply: the driver must not send "[]"
    assert not any(isinstance(e, Request | Invalid) for e in events)


@pytest.mark.parametrize(
    "entries",
    [
        [1, 2, 3],
        ["x", None, True, 1.5],
        [[], [1], {}],
        [{"jsonrpc": "2.0"}, {"jsonrpc": "1.0", "method": "m"}, {"jsonrpc": "2.0", "method": "m", "params": "s"}],
    ],
)
def test_invalid_batch_entries_each_get_minus_32600(entries: list[Any]) -> None:
    events = JsonRpcCore().receive(json.dumps(entries))
    assert len(events) == len(entries)
    for event in events:
        assert isinstance(event, Invalid) and event.kind == "invalid_request"
        assert_error_reply(event, -32600, None)


def test_nested_batch_is_not_a_batch_of_batches() -> None:
    events = JsonRpcCore().receive(json.dumps([[{"jsonrpc": "2.0", "method": "m"}]]))
    event = only(events)
    assert isinstance(event, Invalid) and event.kind == "invalid_request"
    assert_error_reply(event, -32600, None)


def test_batches_can_be_refused() -> None:
    core = JsonRpcCore(accept_batches=False)
    for text in ("[]", json.dumps([{"jsonrpc": "2.0", "method": "m"}])):
        event = only(core.receive(text))
        assert isinstance(event, Invalid) and event.kind == "invalid_request"


# --------------------------------------------------------------------------- invalid JSON and envelopes


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "{",
        "}",
        "{'a': 1}",
        '{"jsonrpc":"2.0",}',
        "nul",
        '"unterminated',
        '{"a":1} trailing',
        "\x00",
        "1" * 5000,
    ],
)
def test_invalid_json_is_a_parse_error_answered_with_id_null(text: str) -> None:
    event = only(JsonRpcCore().receive(text))
    assert isinstance(event, Invalid) and event.kind == "parse_error"
    assert_error_reply(event, -32700, None)
    assert len(event.excerpt) <= 201


@pytest.mark.parametrize(
    ("message", "detail_part", "reply_id"),
    [
        ({"id": 1, "method": "m"}, "jsonrpc", 1),
        ({"jsonrpc": "1.0", "id": 1, "method": "m"}, "jsonrpc", 1),
        ({"jsonrpc": 2.0, "id": "a", "method": "m"}, "jsonrpc", "a"),
        ({"jsonrpc": "2.0", "id": True, "method": "m"}, "id", None),
        ({"jsonrpc": "2.0", "id": False, "method": "m"}, "id", None),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "m"}, "id", None),
        ({"jsonrpc": "2.0", "id": 1.0, "method": "m"}, "id", None),
        ({"jsonrpc": "2.0", "id": None, "method": "m"}, "id", None),
        ({"jsonrpc": "2.0", "id": [1], "method": "m"}, "id", None),
        ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "m"}, "id", None),
        ({"jsonrpc": "2.0", "id": 3, "method": "m", "params": "a string"}, "params", 3),
        ({"jsonrpc": "2.0", "id": 3, "method": "m", "params": 5}, "params", 3),
        ({"jsonrpc": "2.0", "id": 3, "method": "m", "params": True}, "params", 3),
        ({"jsonrpc": "2.0", "method": "m", "params": "a string"}, "params", None),
        ({"jsonrpc": "2.0", "id": 3, "method": 5}, "method", 3),
        ({"jsonrpc": "2.0", "method": ["m"]}, "method", None),
        ({"jsonrpc": "2.0"}, "neither", None),
        ({"jsonrpc": "2.0", "params": {}}, "neither", None),
        ({}, "jsonrpc", None),
        ({"foo": "boo"}, "jsonrpc", None),
    ],
)
def test_broken_request_is_invalid_and_answered_with_minus_32600(
    message: dict[str, Any], detail_part: str, reply_id: Any
) -> None:
    core = JsonRpcCore()
    event = only(core.receive(json.dumps(message)))
    assert isinstance(event, Invalid)
    assert event.kind == "invalid_request"
    assert detail_part in event.detail
    assert event.id == reply_id
    assert_error_reply(event, -32600, reply_id)


@pytest.mark.parametrize(
    "message",
    [
        {"id": 0, "result": {}},  # missing jsonrpc
        {"jsonrpc": "1.0", "id": 0, "result": {}},
        {"jsonrpc": "2.0", "id": True, "result": {}},  # bool id
        {"jsonrpc": "2.0", "id": 0.0, "result": {}},  # float id
        {"jsonrpc": "2.0", "id": [0], "result": {}},
        {"jsonrpc": "2.0", "result": {}},  # no id
        {"jsonrpc": "2.0", "error": {"code": 1, "message": "m"}},  # no id
        {"jsonrpc": "2.0", "id": 0, "result": {}, "error": {"code": 1, "message": "m"}},  # both
        {"jsonrpc": "2.0", "id": 0},  # neither
        {"jsonrpc": "2.0", "id": None},
        {"jsonrpc": "2.0", "id": 0, "method": None},  # method null: read as a (broken) response
        {"jsonrpc": "2.0", "id": 0, "error": "oops"},
    ],
)
def test_broken_response_is_invalid_never_answered_and_settles_nothing(message: dict[str, Any]) -> None:
    core = JsonRpcCore()
    core.request("session/new")  # id 0 is pending
    event = only(core.receive(json.dumps(message)))
    assert isinstance(event, Invalid)
    assert event.kind == "invalid_request"
    assert event.reply is None
    assert list(core.pending) == [0]


@pytest.mark.parametrize("value", ["1", "-3.5", '"text"', "true", "null"])
def test_json_that_is_not_an_object_is_an_invalid_request(value: str) -> None:
    event = only(JsonRpcCore().receive(value))
    assert isinstance(event, Invalid) and event.kind == "invalid_request"
    assert_error_reply(event, -32600, None)


def test_extra_members_are_tolerated() -> None:
    core = JsonRpcCore()
    event = only(core.receive(frame(method="m", params={}, extra=1, _meta={"x": 1})))
    assert event == Notification("m", {})


def test_large_integer_ids_and_unicode_methods_survive() -> None:
    core = JsonRpcCore()
    big = 2**70
    assert only(core.receive(frame(id_=big, method="m"))) == Request(big, "m", None)
    assert only(core.receive(frame(id_="ключ", method="_zed.dev/日本"))) == Request("ключ", "_zed.dev/日本", None)


# --------------------------------------------------------------------------- size, depth, surrogates


def test_oversize_frame_is_refused_before_parsing() -> None:
    core = JsonRpcCore(max_frame_chars=100)
    _, ok = core.request("x", {"a": "b"})
    assert len(ok) <= 100
    big = frame(method="session/update", params={"text": "x" * 200})
    event = only(core.receive(big))
    assert isinstance(event, Invalid) and event.kind == "oversize"
    assert_error_reply(event, -32600, None)
    assert len(event.excerpt) <= 201
    # exactly at the bound is fine
    at_bound = frame(method="m", params={"t": ""})
    core = JsonRpcCore(max_frame_chars=len(at_bound))
    assert isinstance(only(core.receive(at_bound)), Notification)
    # oversize garbage is oversize, not a parse error
    assert only(JsonRpcCore(max_frame_chars=10).receive("{" * 11)).kind == "oversize"


def test_default_frame_bound() -> None:
    assert JsonRpcCore().max_frame_chars == DEFAULT_MAX_FRAME_CHARS
    text = "x" * (DEFAULT_MAX_FRAME_CHARS + 1)
    event = only(JsonRpcCore().receive(text))
    assert isinstance(event, Invalid) and event.kind == "oversize"


@pytest.mark.parametrize("depth", [300, 10_000, 200_000])
def test_deep_nesting_is_a_parse_error_not_a_crash(depth: int) -> None:
    core = JsonRpcCore()
    for text in (
        "[" * depth + "]" * depth,
        '{"a":' * depth + "1" + "}" * depth,
        '{"jsonrpc":"2.0","method":"m","params":{"x":' + "[" * depth + "]" * depth + "}}",
        "[" * depth,  # unterminated
    ):
        event = only(core.receive(text))
        assert isinstance(event, Invalid) and event.kind == "parse_error"
        assert_error_reply(event, -32700, None)


def test_moderate_nesting_in_params_is_accepted() -> None:
    params: Any = {"leaf": True}
    for _ in range(50):
        params = {"n": [params]}
    event = only(JsonRpcCore().receive(frame(method="m", params=params)))
    assert event == Notification("m", params)


@pytest.mark.parametrize(
    "text",
    [
        "\ud800",
        "\udfff",
        '{"jsonrpc":"2.0","method":"m","params":{"t":"\udc80"}}',
        '{"jsonrpc":"2.0","method":"m\ud83d"}',
    ],
)
def test_lone_surrogates_in_the_text_are_a_parse_error(text: str) -> None:
    event = only(JsonRpcCore().receive(text))
    assert isinstance(event, Invalid) and event.kind == "parse_error"
    assert_error_reply(event, -32700, None)
    event.excerpt.encode("utf-8")  # safe to log


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "\\ud83d x"])
def test_escaped_lone_surrogates_never_crash(escape: str) -> None:
    text = '{"jsonrpc":"2.0","method":"m","params":{"t":"' + escape + '"}}'
    events = JsonRpcCore().receive(text)
    event = only(events)
    # either refused as a parse error or accepted: never an exception
    assert isinstance(event, Invalid | Notification)
    if isinstance(event, Invalid):
        assert event.kind == "parse_error"


def test_escaped_surrogate_pair_is_decoded() -> None:
    text = '{"jsonrpc":"2.0","method":"m","params":{"t":"\\ud83d\\ude00"}}'
    assert only(JsonRpcCore().receive(text)) == Notification("m", {"t": "\U0001f600"})


def test_iter_receive_yields_the_same_events_as_receive() -> None:
    core_a, core_b = JsonRpcCore(), JsonRpcCore()
    batch = json.dumps([{"jsonrpc": "2.0", "method": "a"}, 1, {"jsonrpc": "2.0", "id": 1, "method": "b"}])
    assert list(core_a.iter_receive(batch)) == core_b.receive(batch)


# --------------------------------------------------------------------------- property tests

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=25,
)
ids = st.integers() | st.text(max_size=20) | st.none() | st.booleans() | st.floats()
methods = st.sampled_from(["initialize", "session/new", "session/prompt", "session/update", "_x", ""]) | st.text()

envelope_members = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "2.0", "1.0", 2, None]),
        "id": ids,
        "method": methods | json_values,
        "params": json_values,
        "result": json_values,
        "error": json_values
        | st.fixed_dictionaries(
            {"code": st.integers() | json_values},
            optional={"message": json_values, "data": json_values},
        ),
    },
)


@st.composite
def mutated_valid_messages(draw: st.DrawFn) -> str:
    """A valid message with one member dropped, replaced or corrupted at the text level."""
    kind = draw(st.sampled_from(["request", "notification", "result", "error"]))
    message: dict[str, Any] = {"jsonrpc": "2.0"}
    if kind in ("request", "result", "error"):
        message["id"] = draw(st.integers(min_value=0, max_value=5))
    if kind in ("request", "notification"):
        message["method"] = draw(methods)
        message["params"] = draw(json_values)
    if kind == "result":
        message["result"] = draw(json_values)
    if kind == "error":
        message["error"] = {"code": draw(st.integers()), "message": draw(st.text())}
    action = draw(st.sampled_from(["drop", "replace", "truncate", "insert", "none"]))
    if action == "drop":
        message.pop(draw(st.sampled_from(sorted(message))))
    elif action == "replace":
        message[draw(st.sampled_from(sorted(message)))] = draw(json_values)
    text = json.dumps(message, ensure_ascii=draw(st.booleans()))
    if action == "truncate" and text:
        text = text[: draw(st.integers(min_value=0, max_value=len(text) - 1))]
    elif action == "insert":
        at = draw(st.integers(min_value=0, max_value=len(text)))
        text = text[:at] + draw(st.text(max_size=5)) + text[at:]
    return text


adversarial_frames = st.one_of(
    st.text(),
    st.text(alphabet=st.sampled_from('{}[]",:0123456789.-eE truefalsnl\\u'), max_size=60),
    json_values.map(json.dumps),
    envelope_members.map(json.dumps),
    st.lists(envelope_members, max_size=5).map(json.dumps),
    st.lists(json_values, max_size=5).map(json.dumps),
    mutated_valid_messages(),
    st.lists(mutated_valid_messages(), max_size=4).map(lambda parts: "[" + ",".join(parts) + "]"),
    st.integers(min_value=0, max_value=3000).map(lambda n: "[" * n + "]" * n),
    st.integers(min_value=1, max_value=600).map(lambda n: '{"jsonrpc":"2.0","method":"' + "é" * (n * 100) + '"}'),
    st.lists(st.integers(min_value=0xD800, max_value=0xDFFF).map(chr), min_size=1, max_size=3).map(
        lambda chars: '{"jsonrpc":"2.0","method":"m","params":{"t":"' + "".join(chars) + '"}}'
    ),
    st.just("x" * 70_000),
)


def check_events(core: JsonRpcCore, text: str) -> None:
    before = core.pending
    events = core.receive(text)
    assert isinstance(events, list)
    assert events, "every frame yields at least one event"
    for event in events:
        assert isinstance(event, EVENT_TYPES)
        if isinstance(event, Invalid):
            assert event.kind in INVALID_KINDS
            assert len(event.excerpt) <= 201
            if event.reply is not None:
                reply = json.loads(event.reply)
                assert reply["jsonrpc"] == "2.0" and "error" in reply and "result" not in reply
                assert reply["error"]["code"] in (-32700, -32600)
        elif isinstance(event, Response):
            assert event.request.id == event.id and event.id in before
        elif isinstance(event, ErrorResponse) and event.request is not None:
            assert event.request.id in before
    # only responses and errors ever settle pending entries
    settled = {e.request.id for e in events if isinstance(e, Response | ErrorResponse) and e.request is not None}
    assert set(before) - set(core.pending) == settled


@pytest.mark.xdist_group("cpu_heavy")  # one at a time: tracemalloc or thousands of examples, CPU-bound
@pytest.mark.timeout(bound(180))  # 1500 examples of pure CPU work: slow on a loaded machine, never a hang
@settings(
    max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example]
)
@given(frames=st.lists(adversarial_frames, min_size=1, max_size=3))
def test_core_never_raises_on_adversarial_frames(frames: list[str]) -> None:
    core = JsonRpcCore(max_frame_chars=64_000)
    for i in range(6):
        core.request(f"m{i}")
    for text in frames:
        check_events(core, text)


@settings(max_examples=300, deadline=None)
@given(params=st.none() | st.dictionaries(st.text(), json_values, max_size=6) | st.lists(json_values, max_size=6))
def test_request_round_trips_through_a_second_core(params: Any) -> None:
    sender, receiver = JsonRpcCore(), JsonRpcCore()
    method = "session/prompt"
    id_, text = sender.request(method, params)
    assert only(receiver.receive(text)) == Request(id_, method, params)
    # and the answer settles the sender's pending entry with the same value
    answer = receiver.respond(id_, params)
    assert only(sender.receive(answer)) == Response(id_, params, Pending(id_, method))


@settings(max_examples=200, deadline=None)
@given(
    method=st.text(min_size=1),
    params=st.none() | st.dictionaries(st.text(), json_values, max_size=4),
)
def test_notification_round_trips_for_any_method_name(method: str, params: Any) -> None:
    text = JsonRpcCore().notification(method, params)
    assert only(JsonRpcCore().receive(text)) == Notification(method, params)


@settings(max_examples=200, deadline=None)
@given(code=st.integers(min_value=-(2**31), max_value=2**31 - 1), message=st.text(), data=json_values)
def test_error_round_trips(code: int, message: str, data: Any) -> None:
    sender, receiver = JsonRpcCore(), JsonRpcCore()
    id_, text = sender.request("m")
    request = only(receiver.receive(text))
    assert isinstance(request, Request)
    event = only(sender.receive(receiver.respond_error(request.id, code, message, data)))
    assert event == ErrorResponse(id_, code, message, data, Pending(id_, "m"))


@pytest.mark.parametrize(
    "text",
    [
        frame(method="session/update", params={"sessionId": "s", "update": {}}),
        frame(method="n"),
        frame(method="n", params=None),
        frame(method="n", params=[1]),
        frame(method="n", params=3),
        frame(method=5),
        frame(method="r", id_=1),
        frame(id_=1, result={}),
        json.dumps({"method": "no-version"}),
        json.dumps({"jsonrpc": "1.0", "method": "old"}),
        json.dumps([{"jsonrpc": "2.0", "method": "in-a-batch"}]),
        json.dumps("text"),
    ],
)
def test_receive_notification_gives_what_receive_decoded_makes_a_notification_of(text: str) -> None:
    core = JsonRpcCore()
    core.request("pending")  # id 0: a response frame settles it in receive_decoded
    fields = JsonRpcCore().receive_notification(text, json.loads(text))
    event = core.receive_decoded(text, json.loads(text))
    if isinstance(event, Notification):
        assert fields == (event.method, event.params)
    else:
        assert fields is None


def test_receive_notification_leaves_an_oversize_frame_to_receive_decoded() -> None:
    core = JsonRpcCore(max_frame_chars=20)
    text = frame(method="n", params={"padding": "x" * 40})
    assert core.receive_notification(text, json.loads(text)) is None
    assert isinstance(core.receive_decoded(text, json.loads(text)), Invalid)


# --------------------------------------------------------------------------- encode: the fast path agrees with json

any_floats = st.floats()  # NaN and the infinities included
encodable = st.recursive(
    st.none() | st.booleans() | st.integers() | any_floats | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=25,
)


@settings(max_examples=500, deadline=None)
@given(value=encodable)
def test_encode_writes_what_the_standard_encoder_writes_or_fails_as_it_does(value: Any) -> None:
    reference = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    message = {"jsonrpc": "2.0", "id": 1, "method": "m", "params": value}
    try:
        expected = reference.encode(message)
    except ValueError:
        with pytest.raises(ValueError):  # a non-finite float anywhere: refused, as json refuses it
            encode(message)
        return
    text = encode(message)
    assert "\n" not in text  # one line: valid for newline-delimited stdio
    assert json.loads(text) == json.loads(expected)


@pytest.mark.parametrize("word", ["NaN", "Infinity", "-Infinity"])
def test_a_string_holding_a_non_finite_word_is_written_as_a_string(word: str) -> None:
    assert json.loads(encode({"a": word, "b": f"x{word}y"})) == {"a": word, "b": f"x{word}y"}


def test_encode_hands_a_lone_surrogate_to_the_standard_encoder() -> None:
    # pydantic-core cannot write it; json writes it into the str (the transport's UTF-8 encoding refuses it)
    assert encode({"a": "\ud800"}) == '{"a":"\ud800"}'

"""What the re-vendored schemas (``@agentclientprotocol/sdk`` 2.4.0: v1 1.23, v2 alpha.5) add, typed."""

from __future__ import annotations

from typing import Any

import pytest

from acp_client.exceptions import ProtocolError
from acp_client.schema import PromptAnswer, parse_prompt_answer, parse_result, parse_session_update, v1, v2


@pytest.mark.parametrize(
    ("module", "method"),
    [
        (v1, "session/archive"),
        (v1, "auth/status"),
        (v1, "session/status"),
        (v2, "session/archive"),
        (v2, "session/unarchive"),
        (v2, "auth/status"),
        (v2, "auth/status_update"),
        (v2, "tool_call/cancel"),
        (v2, "terminal/cancel"),
        (v2, "proxy/initialize"),
    ],
)
def test_new_upstream_methods_have_typed_params(module: Any, method: str) -> None:
    spec = module.METHODS[method]
    assert spec.params is not None, f"{method} has no params model"


def test_the_v2_prompt_response_is_an_insertion_receipt() -> None:
    fields = v2.PromptResponse.model_fields
    assert fields["message_id"].is_required()
    assert "stop_reason" not in fields


@pytest.mark.parametrize(
    ("result", "message_id", "stop_reason"),
    [
        ({"messageId": "msg_1"}, "msg_1", None),  # v2 alpha.5 receipt
        ({}, None, None),  # v2 alpha.3
        (None, None, None),  # null reads as {}
        ({"stopReason": "end_turn"}, None, "end_turn"),  # v1, or a v2 agent that never moved on
        ({"messageId": 7, "stopReason": ["x"]}, None, None),  # malformed values read as absent
    ],
)
def test_a_prompt_answer_of_any_shape_is_read(result: Any, message_id: str | None, stop_reason: str | None) -> None:
    answer = parse_result("session/prompt", result, 2)
    assert isinstance(answer, PromptAnswer)
    assert (answer.message_id, answer.stop_reason) == (message_id, stop_reason)
    assert answer.is_receipt is (message_id is not None)


def test_a_prompt_answer_keeps_unknown_fields_and_refuses_a_non_object() -> None:
    answer = parse_prompt_answer({"messageId": "m", "future": {"x": 1}})
    assert answer.to_wire() == {"messageId": "m", "future": {"x": 1}}
    with pytest.raises(ProtocolError, match="must be an object"):
        parse_prompt_answer(["m"])


def _idle(**fields: Any) -> Any:
    update = {"sessionUpdate": "state_update", "state": "idle", **fields}
    return parse_session_update({"sessionId": "s", "update": update}, 2).update


def test_an_idle_state_update_with_an_error_is_a_typed_turn_failure() -> None:
    update = _idle(stopReason="error", error={"code": -32603, "message": "model overloaded"})
    assert update.stop_reason == "error"
    assert update.error.code == -32603
    assert update.error.message == "model overloaded"


@pytest.mark.parametrize("stop_reason", [None, 42, ["end_turn"]])
def test_an_idle_stop_reason_that_is_null_or_malformed_reads_as_not_reported(stop_reason: Any) -> None:
    update = _idle(stopReason=stop_reason)
    assert update.state == "idle"
    assert update.stop_reason is None


def test_an_unknown_idle_stop_reason_is_kept_raw() -> None:
    update = _idle(stopReason="_vendor_paused", extra=1)
    assert update.stop_reason == "_vendor_paused"
    assert update.to_wire()["extra"] == 1


def test_the_unknown_foreground_state_is_typed() -> None:
    update = parse_session_update(
        {"sessionId": "s", "update": {"sessionUpdate": "state_update", "state": "unknown"}}, 2
    )
    assert update.update.state == "unknown"

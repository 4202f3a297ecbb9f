"""How an agent's error answer is read as "this session is attached to another connection" (ACP names no
such error, so the reading is by code and wording; the end-to-end hand-over is in test_ownership.py)."""

from __future__ import annotations

from typing import Any

import pytest

from acp_client.exceptions import RPCError, SessionNotFound
from acp_client.reconnect._ownership.control import attached_elsewhere


@pytest.mark.parametrize(
    ("code", "message", "data"),
    [
        (-32602, "Invalid params", {"reason": "session s1 is not attached to this connection"}),  # reference agent
        (-32603, "Session s1 is already attached to a different client", None),
        (-32600, "Invalid request", {"message": "session is attached to another connection"}),
        (-32602, "Invalid params", "attached on some other connection"),
        (-32603, "Internal error", {"reason": "Another client holds this session"}),
    ],
)
def test_dialects_that_mean_attached_elsewhere(code: int, message: str, data: Any) -> None:
    assert attached_elsewhere(RPCError(code, message, data))


@pytest.mark.parametrize(
    ("error"),
    [
        RPCError(-32603, "Internal error", {"reason": "attached file too large"}),  # an attachment, not a link
        RPCError(-32602, "Invalid params", {"reason": "the prompt has an attached image the model cannot read"}),
        RPCError(-32601, "Method not found", {"reason": "not attached"}),  # a code no agent uses for it
        RPCError(-32000, "Authentication required", None),
        RPCError(-32602, "Invalid params", ["not attached"]),  # data of no known shape: the message decides
        SessionNotFound(-32002, "Resource not found", {"reason": "not attached"}),  # unknown, not elsewhere
        ValueError("not attached to this connection"),  # not an agent's answer at all
    ],
)
def test_other_errors_are_not_read_as_attached_elsewhere(error: BaseException) -> None:
    assert not attached_elsewhere(error)

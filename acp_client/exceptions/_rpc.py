"""The agent answered with a JSON-RPC error object (see :mod:`acp_client.exceptions`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from acp_client.exceptions._root import ACPError

__all__ = [
    "AuthRequired",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "MethodNotFound",
    "ParseError",
    "RPCError",
    "RequestCancelled",
    "SessionNotFound",
    "TurnFailed",
    "rpc_error_from_object",
]


class RPCError(ACPError):
    """The agent answered a request with a JSON-RPC error object.

    ``code``, ``message`` and ``data`` are exactly what the agent sent. The text is ``[code] message``,
    followed by ``data.reason`` and ``data.message`` when the agent gave them and they add something (many
    agents put the useful part there: ``[-32602] Invalid params: 'cwd' must be an absolute path``). Use
    :func:`rpc_error_from_object` to get the most specific subclass for a code.
    """

    default_code: ClassVar[int | None] = None

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        self.code = code
        self.message = message
        self.data = data
        detail = _data_detail(message, data)
        super().__init__(f"[{code}] {message}: {detail}" if detail else f"[{code}] {message}")

    def to_object(self) -> dict[str, Any]:
        """The JSON-RPC error object (``code``, ``message`` and ``data`` when present)."""
        obj: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            obj["data"] = self.data
        return obj


class TurnFailed(RPCError):
    """A v2 turn ended ``idle`` with ``stopReason: "error"``: it failed after its prompt was inserted.

    ``code``, ``message`` and ``data`` are the JSON-RPC error object the agent put on that ``state_update``
    (``-32603`` and a generic message when it gave none); ``message_id`` is the inserted user message (from
    the receipt), so the transcript holds the prompt, and resending it is the caller's choice.
    """

    def __init__(self, code: int, message: str, data: Any = None, *, message_id: str | None = None) -> None:
        super().__init__(code, message, data)
        self.message_id = message_id

    @classmethod
    def from_error(cls, error: Any, *, message_id: str | None = None) -> TurnFailed:
        """The failure for the ``error`` an idle ``state_update`` carried (a dict, or ``None``)."""
        if isinstance(error, Mapping):
            code, text = error.get("code"), error.get("message")
            if isinstance(code, int) and not isinstance(code, bool) and isinstance(text, str):
                return cls(code, text, error.get("data"), message_id=message_id)
        return cls(-32603, "the agent reported that the turn failed", None, message_id=message_id)


#: the longest ``data.reason``/``data.message`` text an :class:`RPCError`'s message quotes
_DETAIL_LIMIT = 200


def _data_detail(message: str, data: Any) -> str:
    """The agent's own explanation from ``data.reason`` / ``data.message``, when it adds to ``message``."""
    if not isinstance(data, Mapping):
        return ""
    parts: list[str] = []
    for key in ("reason", "message"):
        value = data.get(key)
        if isinstance(value, str) and value.strip() and value not in message and value not in parts:
            parts.append(" ".join(value.split()))
    text = "; ".join(parts)
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 3] + "..."


class ParseError(RPCError):
    """-32700: the peer could not parse what it received."""

    default_code = -32700


class InvalidRequest(RPCError):
    """-32600: the peer received something that is not a valid JSON-RPC request."""

    default_code = -32600


class MethodNotFound(RPCError):
    """-32601: the agent does not implement the method (even if it advertised it)."""

    default_code = -32601


class InvalidParams(RPCError):
    """-32602: the agent rejected the request's parameters."""

    default_code = -32602


class InternalError(RPCError):
    """-32603: the agent failed internally."""

    default_code = -32603


class AuthRequired(RPCError):
    """-32000: the agent needs ``authenticate`` (v1) or ``auth/login`` (v2) first."""

    default_code = -32000


class SessionNotFound(RPCError):
    """-32002: the agent does not know the resource, here a session.

    ``session_id`` comes from ``data.sessionId`` when the agent sent it, else it is ``None``. Whether a
    ``-32002`` means "forget this session" depends on which method answered it: only ``session/status``,
    ``session/resume`` and ``session/load`` say so (a ``session/prompt`` on a not-yet-attached session may
    answer it too).
    """

    default_code = -32002

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(code, message, data)
        sid = data.get("sessionId") if isinstance(data, dict) else None
        self.session_id: str | None = sid if isinstance(sid, str) else None


class RequestCancelled(RPCError):
    """-32800: the request was cancelled (after ``$/cancel_request`` or an internal cancellation)."""

    default_code = -32800


_BY_CODE: dict[int, type[RPCError]] = {
    cls.default_code: cls
    for cls in (
        ParseError,
        InvalidRequest,
        MethodNotFound,
        InvalidParams,
        InternalError,
        AuthRequired,
        SessionNotFound,
        RequestCancelled,
    )
    if cls.default_code is not None
}


def rpc_error_from_object(code: int, message: str, data: Any = None) -> RPCError:
    """Build the most specific :class:`RPCError` subclass for a JSON-RPC error object."""
    return _BY_CODE.get(code, RPCError)(code, message, data)

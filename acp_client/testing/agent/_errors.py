"""JSON-RPC error codes the reference agent answers with, the exception that carries one, and
:class:`RawAnswer` for a result sent exactly as given (a hostile or broken agent)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "AUTH_REQUIRED",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "REQUEST_CANCELLED",
    "RESOURCE_NOT_FOUND",
    "AgentError",
    "PeerError",
    "PeerGone",
    "RawAnswer",
]

INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
AUTH_REQUIRED = -32000
RESOURCE_NOT_FOUND = -32002

_MESSAGES = {
    INVALID_REQUEST: "Invalid request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params",
    INTERNAL_ERROR: "Internal error",
    REQUEST_CANCELLED: "Request cancelled",
    AUTH_REQUIRED: "Authentication required",
    RESOURCE_NOT_FOUND: "Resource not found",
}


class AgentError(Exception):
    """Raise from a method handler or an ``on_prompt`` hook to answer the request with a JSON-RPC error.

    ``message`` defaults to the standard text for well-known codes (``-32002`` → "Resource not found").
    """

    def __init__(self, code: int, message: str | None = None, data: Any = None) -> None:
        """Build the error; ``data`` is sent as the error's ``data`` member when not ``None``."""
        self.code = code
        self.message = message if message is not None else _MESSAGES.get(code, "Error")
        self.data = data
        super().__init__(f"{self.code} {self.message}")

    @classmethod
    def unknown_session(cls, session_id: str) -> AgentError:
        """The session/status RFD's unknown-session error: ``-32002`` with ``data.sessionId``."""
        return cls(RESOURCE_NOT_FOUND, data={"sessionId": session_id})

    @classmethod
    def invalid_params(cls, reason: str) -> AgentError:
        """``-32602`` with a human ``data.reason``."""
        return cls(INVALID_PARAMS, data={"reason": reason})


class PeerError(Exception):
    """The client answered one of the agent's requests (e.g. a permission request) with an error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        """Keep the error members as sent by the client."""
        self.code = code
        self.message = message
        self.data = data
        super().__init__(f"{code} {message}")


class PeerGone(Exception):
    """The connection a request of the agent was sent on closed before the answer arrived."""


class RawAnswer:
    """A result the reference agent sends exactly as given, however malformed (``None``, ``{}``,
    ``{"status": 5}``, a bare string...): what a broken or hostile agent answers."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        """``value`` is the JSON-RPC ``result`` to send."""
        self.value = value

    def __repr__(self) -> str:
        return f"RawAnswer({self.value!r})"

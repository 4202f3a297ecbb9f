"""Sans-I/O JSON-RPC 2.0 core: no asyncio, no pydantic models, no websockets. Strings in, events out."""

from acp_client.jsonrpc._core import (
    DEFAULT_MAX_FRAME_CHARS,
    ErrorResponse,
    Event,
    Invalid,
    InvalidKind,
    JsonRpcCore,
    Notification,
    Pending,
    Request,
    RequestId,
    Response,
    decode,
    encode,
)

__all__ = [
    "DEFAULT_MAX_FRAME_CHARS",
    "ErrorResponse",
    "Event",
    "Invalid",
    "InvalidKind",
    "JsonRpcCore",
    "Notification",
    "Pending",
    "Request",
    "RequestId",
    "Response",
    "decode",
    "encode",
]

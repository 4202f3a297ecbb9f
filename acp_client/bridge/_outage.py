"""Outage handling: what the editor is told when the remote link is down, dropped, or forgot a session.

Rules (documented in ``examples/editor_bridge.md``):

- An editor request that needs the remote while the link is down waits for the reconnect, at most
  ``outage_timeout`` seconds, then fails with ``-32603`` and ``data["acpClient/bridge"]["reason"] ==
  "outage_timeout"``.
- A request in flight when the link drops (a v1 ``session/prompt`` above all) fails at once with ``-32603``,
  reason ``"connection_lost"`` and ``requestSent`` (whether the agent may have received it). Only a
  request that was never written is sent once more (by the router, on the next connection).
- A session the remote agent forgot answers every later request with ``-32002`` (Resource not found), reason
  ``"session_forgotten"``, and the editor sees a notice in the session when it happens.
- Where updates may have been missed, the editor gets a *gap notice*: an ``agent_message_chunk`` of its own
  message (``messageId`` ``acp-bridge-notice-…``) whose ``_meta`` carries ``{"acpClient/bridge": {"gap":
  true, "reason": ...}}``.
- The agent's own JSON-RPC errors are passed through unchanged (code, message, data).
"""

from __future__ import annotations

import uuid
from typing import Any

from acp_client.exceptions import (
    ACPTimeoutError,
    CapabilityNotSupported,
    ClientClosed,
    ConnectionLost,
    InternalError,
    InvalidParams,
    MethodNotFound,
    NotConnected,
    ReconnectFailed,
    RecoveryFailed,
    RPCError,
    SessionLost,
    SessionNotFound,
    UsageError,
)

__all__ = ["META_KEY", "gap_notice", "lost_notice", "to_rpc_error"]

#: The ``_meta`` key the bridge puts its own information under.
META_KEY = "acpClient/bridge"

_GAP_TEXT = {
    "no_replay": "the agent could not replay what it sent meanwhile",
    "history_unknown": "this session was resumed without a replay, so the bridge cannot tell what is new",
    "history_differs": "the agent's replayed history differs from what was shown here",
    "history_shorter": "the agent replayed less history than was shown here",
    "overflow": "the editor did not keep up and the bridge had to drop updates",
    "state_unknown": "the agent did not say whether the interrupted turn is still running",
}


def _bridge_error(message: str, reason: str, **extra: Any) -> InternalError:
    return InternalError(-32603, message, {META_KEY: {"reason": reason, **extra}})


def to_rpc_error(exc: BaseException, *, method: str, session_id: str | None, outage_timeout: float) -> RPCError:
    """The JSON-RPC error the editor gets for ``exc`` raised while serving ``method``."""
    if isinstance(exc, SessionLost):
        sid = session_id or exc.session_id
        return SessionNotFound(
            -32002,
            f"session {sid} is gone: the remote agent no longer knows it ({exc.reason})",
            {"sessionId": sid, META_KEY: {"reason": "session_forgotten", "detail": exc.reason}},
        )
    if isinstance(exc, RPCError):
        return exc  # the agent's own answer, unchanged
    if isinstance(exc, ConnectionLost):
        sent = exc.request_sent
        maybe = "the agent may have received it and may still be working on it" if sent else "it was not sent"
        return _bridge_error(
            f"{method}: the link to the remote agent dropped while this request was in flight ({maybe}); "
            "the bridge is reconnecting and recovers the session, nothing is re-sent automatically",
            "connection_lost",
            requestSent=sent,
        )
    if isinstance(exc, ACPTimeoutError):
        return _bridge_error(f"{method}: the remote agent did not answer in time ({exc})", "timeout")
    if isinstance(exc, TimeoutError | NotConnected):
        detail = f" ({exc})" if isinstance(exc, NotConnected) else ""
        return _bridge_error(
            f"{method}: the remote agent has been unreachable for {outage_timeout:g} s; try again later{detail}",
            "outage_timeout",
            waited=outage_timeout,
        )
    if isinstance(exc, ReconnectFailed):
        return _bridge_error(
            f"{method}: the bridge cannot reach the remote agent ({exc.reason}); it retries on the next request",
            "remote_failed",
            detail=exc.reason,
        )
    if isinstance(exc, RecoveryFailed):
        return _bridge_error(
            f"{method}: session {session_id} could not be recovered on the new connection yet; try again",
            "recovery_failed",
        )
    if isinstance(exc, CapabilityNotSupported):
        return MethodNotFound(-32601, "Method not found", {"method": method, "reason": str(exc)})
    if isinstance(exc, ClientClosed):
        return _bridge_error(f"{method}: the bridge is shutting down", "closing")
    if isinstance(exc, UsageError | TypeError | ValueError):
        return InvalidParams(-32602, "Invalid params", {"reason": str(exc)})
    return _bridge_error(f"{method}: {type(exc).__name__}: {exc}", "internal")


def _notice(text: str, marker: dict[str, Any]) -> dict[str, Any]:
    return {
        "sessionUpdate": "agent_message_chunk",
        "messageId": f"acp-bridge-notice-{uuid.uuid4().hex[:12]}",
        "content": {"type": "text", "text": text},
        "_meta": {META_KEY: marker},
    }


def gap_notice(reason: str) -> dict[str, Any]:
    """The ``update`` object telling the editor that updates may be missing (``_meta`` marks it)."""
    why = _GAP_TEXT.get(reason, reason)
    text = (
        "\n\n[acp-client bridge] The link to the remote agent was interrupted and restored; "
        f"some output from that time may be missing here ({why}).\n\n"
    )
    return _notice(text, {"gap": True, "reason": reason})


def lost_notice(reason: str) -> dict[str, Any]:
    """The ``update`` object telling the editor that the remote agent forgot the session."""
    text = (
        "\n\n[acp-client bridge] The remote agent no longer knows this session "
        f"({reason}); start a new session to go on.\n\n"
    )
    return _notice(text, {"lost": True, "reason": reason})

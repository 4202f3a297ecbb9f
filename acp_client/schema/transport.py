"""The durable transport draft (agent-client-protocol PR 2208): wire names and the agent's capability.

The draft gives every server→client message of a stream an opaque, monotonic cursor
(``_meta["acp/cursor"]``, and the SSE ``id:`` on Streamable HTTP), lets a client resume a dropped stream from
its last cursor (``Last-Event-ID`` on HTTP, a ``stream/resume`` first frame on WebSocket), and falls back to
``session/resume`` when the server refuses. An agent that keeps a replay buffer says so in ``initialize``::

    {"capabilities": {"transport": {"resumable": {"retentionMessages": 1000, "retentionSeconds": 300}}}}

(v1 agents put it under ``agentCapabilities``). Without it nothing changes: no cursor resume is tried.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CURSOR_META_KEY",
    "STREAM_RESUME",
    "STREAM_RESUME_FAILED",
    "TURN_STATE_META_KEY",
    "ResumableTransport",
]

#: ``_meta`` key of the cursor on every server→client message of a resumable stream.
CURSOR_META_KEY = "acp/cursor"
#: ``_meta`` key of the v1 turn-state hint on the resume acknowledgment (``{"state", "promptRequestId"}``).
TURN_STATE_META_KEY = "acp/turnState"
#: The WebSocket control request a client sends as the first frame of a new connection to resume a stream.
STREAM_RESUME = "stream/resume"
#: The WebSocket control message a server sends when it refuses a ``stream/resume`` (``{"reason": ...}``).
STREAM_RESUME_FAILED = "stream/resume_failed"


def _positive(value: Any) -> float | None:
    """A positive finite number, else ``None`` (an agent's malformed field is read as absent)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


@dataclass(frozen=True, slots=True)
class ResumableTransport:
    """What an agent advertised under ``capabilities.transport.resumable``.

    ``retention_messages`` and ``retention_seconds`` are the server's replay floor (``None`` when it did not say
    or said something malformed); ``keepalive_seconds`` is the interval of its keepalive (``keepaliveSeconds``,
    a field this SDK reads where the draft leaves the interval to negotiation; five silent intervals end a
    link). ``raw`` keeps the whole advertised object, unknown fields included.
    """

    retention_messages: int | None = None
    retention_seconds: float | None = None
    keepalive_seconds: float | None = None
    raw: Mapping[str, Any] | None = None

    @classmethod
    def from_initialize(cls, result: Mapping[str, Any] | None) -> ResumableTransport | None:
        """Read the capability from an ``initialize`` result of either version; ``None`` when absent.

        A ``resumable`` that is ``true`` or an object counts as advertised; ``false``, ``null`` and other shapes
        do not.
        """
        if not isinstance(result, Mapping):
            return None
        caps = result.get("capabilities")
        if not isinstance(caps, Mapping):
            caps = result.get("agentCapabilities")
        if not isinstance(caps, Mapping):
            return None
        transport = caps.get("transport")
        if not isinstance(transport, Mapping):
            return None
        resumable = transport.get("resumable")
        if resumable is True:
            return cls(raw={})
        if not isinstance(resumable, Mapping):
            return None
        messages = _positive(resumable.get("retentionMessages"))
        return cls(
            retention_messages=int(messages) if messages is not None else None,
            retention_seconds=_positive(resumable.get("retentionSeconds")),
            keepalive_seconds=_positive(resumable.get("keepaliveSeconds")),
            raw=dict(resumable),
        )

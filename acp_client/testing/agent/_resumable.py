"""The reference agent's switch for the durable transport draft (PR 2208): ``ReferenceAgent(resumable=...)``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Resumable"]


@dataclass(frozen=True, slots=True)
class Resumable:
    """How the reference agent serves resumable streams (advertised as ``capabilities.transport.resumable``).

    - ``retention_messages``: how many server→client messages each stream keeps for replay (at least 1);
    - ``retention_seconds``: how long a message stays replayable, and how long a connection whose socket or
      stream dropped is kept for a resume (its sessions and running turns go on meanwhile);
    - ``keepalive_seconds``: the keepalive interval the agent advertises (``keepaliveSeconds``) and keeps
      (WebSocket pings, SSE comments); ``None`` advertises none;
    - ``refuse``: answer every resume with a refusal (``409`` / ``stream/resume_failed``) although the
      capability is advertised: a server that lost its buffer.

    A bad value raises ``ValueError`` naming the field.
    """

    retention_messages: int = 1000
    retention_seconds: float = 300.0
    keepalive_seconds: float | None = None
    refuse: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.retention_messages, bool) or not isinstance(self.retention_messages, int):
            raise ValueError(f"retention_messages must be an int, got {self.retention_messages!r}")
        if self.retention_messages < 1:
            raise ValueError(f"retention_messages must be at least 1, got {self.retention_messages}")
        for name in ("retention_seconds", "keepalive_seconds"):
            value = getattr(self, name)
            if value is None and name == "keepalive_seconds":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")

    def capability(self) -> dict[str, Any]:
        """The ``resumable`` object advertised under ``capabilities.transport``."""
        advertised: dict[str, Any] = {
            "retentionMessages": self.retention_messages,
            "retentionSeconds": self.retention_seconds,
        }
        if self.keepalive_seconds is not None:
            advertised["keepaliveSeconds"] = self.keepalive_seconds
        return advertised

"""The answer to ``session/prompt``, read leniently across the shapes agents send.

Upstream's v2 (schema alpha.5, spec PR 2175) made the prompt response an *insertion receipt*: ``{"messageId":
...}``, required and never null, naming the user message the agent inserted; the turn's end is reported only
by ``state_update``. Agents built before that answer ``{}`` (v2 alpha.3) or ``{"stopReason": ...}`` (v1, and
some v2 agents that never moved on). The generated ``v2.PromptResponse`` requires ``messageId``; this model reads
all three shapes, so an older agent keeps working:

* ``message_id`` is the receipt (``None`` when the agent gave none, or gave a value that is not a string);
* ``stop_reason`` is the v1 answer (``None`` when absent or not a string);
* everything else (``usage``, ``_meta``, unknown keys) is kept and dumps again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from acp_client.schema._base import DROP, LenientModel

__all__ = ["PromptAnswer"]


class PromptAnswer(LenientModel):
    """A ``session/prompt`` result of any protocol version: a v2 insertion receipt or a v1 turn end."""

    __acp_lenient__: ClassVar[Mapping[str, Any]] = {
        "messageId": DROP,
        "message_id": DROP,
        "stopReason": DROP,
        "stop_reason": DROP,
        "_meta": DROP,
        "field_meta": DROP,
    }

    message_id: str | None = Field(default=None, alias="messageId")
    """The id of the user message the agent inserted (v2 receipt); ``None`` if the agent gave none."""
    stop_reason: str | None = Field(default=None, alias="stopReason")
    """Why the turn stopped (v1, and older v2 agents); ``None`` if the answer has none."""
    field_meta: dict[str, Any] | None = Field(default=None, alias="_meta")
    """Extension metadata."""

    @property
    def is_receipt(self) -> bool:
        """Whether this is a v2 insertion receipt (it names the inserted message)."""
        return self.message_id is not None

"""Hand-written models for ``session/status`` and the v2 foreground-state snapshot.

The vendored schemas (``@agentclientprotocol/sdk`` 2.4.0) carry upstream's intermediate draft of
``session/status`` (``open`` / ``saved``, behind the unstable flag). The normative text
(``rfd/session-status.txt``, revision 2026-10-26) is newer and wins on conflicts: it says ``active`` /
``inactive``, ``-32002`` for an unknown session and an optional v2 ``state``. These models read both
vocabularies with the same conventions as the generated models (camelCase aliases, unknown fields kept,
default-on-error where the texts say so). The capability marker (``SessionStatusCapabilities`` and
``SessionCapabilities.status``) is generated from the schema.

Rules the models encode:

* ``status`` is an open set: ``"active"``, ``"inactive"`` and any other string, kept as-is (for example the
  TypeScript SDK's older ``"open"``/``"saved"``, or a future ``"hibernating"``). Mapping unknown values to a
  recovery action is the recovery layer's job, never this one's.
* v2 only: ``state`` is a :class:`StateSnapshot`, parsed default-on-error. Missing, ``null`` and malformed all
  read as ``None`` = "the agent is not reporting foreground state" -- never as idle.
* v1 has no foreground state: a ``state`` key in a v1 response is an unknown field, kept raw in
  ``model_extra`` (so it dumps again) and never interpreted; ``.state`` is ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeAlias

from pydantic import ConfigDict, Field, GetCoreSchemaHandler
from pydantic_core import CoreSchema

from acp_client.schema._base import DROP, LenientModel

if TYPE_CHECKING:
    from acp_client.schema._generated.v2 import Usage

    _Usage: TypeAlias = Usage
else:

    class _GeneratedV2Type:
        """A field type resolved from the generated v2 module when the model's schema is built.

        The models below are built on first use (``defer_build``), so importing this module does not import
        the generated v2 models (a few hundred milliseconds); a v1-only program never pays for them.
        """

        def __init__(self, name: str) -> None:
            self.name = name

        def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
            from acp_client.schema._generated import v2

            return handler.generate_schema(getattr(v2, self.name))

    _Usage = Annotated[Any, _GeneratedV2Type("Usage")]

__all__ = [
    "SessionStatus",
    "SessionStatusRequest",
    "SessionStatusResponse",
    "StateSnapshot",
    "StateValue",
]


#: ``session/status`` words that mean "in memory": the RFD's ``active``, and ``open``, which the official
#: TypeScript SDK's draft v2 (2.4.0) answers instead.
ACTIVE_STATUSES = frozenset({"active", "open"})


class SessionStatus(StrEnum):
    """Known ``session/status`` values. Open set: a response may carry any other string, kept raw."""

    ACTIVE = "active"
    """The agent has the session in memory, for some connection (not necessarily this one)."""
    INACTIVE = "inactive"
    """The agent knows the session and can resume it, but it is not in memory."""


class StateValue(StrEnum):
    """Known foreground states (v2 ``StateUpdate.state``). Open set: other strings are kept raw."""

    RUNNING = "running"
    """Foreground work is in progress."""
    IDLE = "idle"
    """No foreground work; the agent is ready for a prompt."""
    REQUIRES_ACTION = "requires_action"
    """Foreground work is blocked on user action (permission, elicitation)."""
    UNKNOWN = "unknown"
    """The agent cannot currently tell (v2 alpha.5): not idle, and not a transition."""


class StateSnapshot(LenientModel):
    """A v2 foreground-state report: the ``state_update`` session update, or the ``state`` of a status result.

    ``state`` is the raw string (``running``, ``idle``, ``requires_action`` or anything else, kept as-is);
    ``stop_reason`` and ``usage`` are optional and default-on-error. A snapshot is a report, not a transition:
    whether it counts as a completion is decided by whoever tracks transitions (see protocol.md §4.3).
    """

    __acp_lenient__: ClassVar[Mapping[str, Any]] = {
        "stopReason": DROP,
        "stop_reason": DROP,
        "usage": DROP,
        "error": DROP,
        "_meta": DROP,
        "field_meta": DROP,
    }

    state: str
    """The foreground state, raw (compare with :class:`StateValue`)."""
    stop_reason: str | None = Field(default=None, alias="stopReason")
    """Why foreground work stopped (idle only; optional). Raw string, e.g. ``"end_turn"``."""
    model_config = ConfigDict(defer_build=True)

    usage: _Usage | None = None
    """**UNSTABLE** token usage for completed foreground work (idle only; optional)."""
    error: dict[str, Any] | None = None
    """With ``stopReason: "error"`` (v2, schema alpha.8): the JSON-RPC error object that ended the turn after its
    prompt was inserted (``code``, ``message``, optional ``data``); ``None`` when not reported or malformed."""
    field_meta: dict[str, Any] | None = Field(default=None, alias="_meta")
    """Extension metadata."""

    @property
    def is_running(self) -> bool:
        """``state == "running"``."""
        return self.state == StateValue.RUNNING

    @property
    def is_idle(self) -> bool:
        """``state == "idle"``."""
        return self.state == StateValue.IDLE

    @property
    def requires_action(self) -> bool:
        """``state == "requires_action"``."""
        return self.state == StateValue.REQUIRES_ACTION

    @property
    def failed(self) -> bool:
        """An idle snapshot whose stop reason is ``error``: the turn failed after its prompt was inserted."""
        return self.state == StateValue.IDLE and self.stop_reason == "error"

    @property
    def is_known(self) -> bool:
        """Whether ``state`` is one of the values this SDK knows."""
        return self.state in _KNOWN_STATES


_KNOWN_STATES = frozenset(s.value for s in StateValue)


class SessionStatusRequest(LenientModel):
    """Params of ``session/status`` (v1 and v2): ``{"sessionId": ..., "_meta"?: ...}``."""

    __acp_lenient__: ClassVar[Mapping[str, Any]] = {"_meta": DROP, "field_meta": DROP}

    session_id: str = Field(alias="sessionId")
    """The session to ask about."""
    field_meta: dict[str, Any] | None = Field(default=None, alias="_meta")
    """Extension metadata."""


class SessionStatusResponse(LenientModel):
    """Result of ``session/status``: ``status`` (open set), ``_meta``, and on v2 an optional ``state``.

    ``state`` is ``None`` when the agent did not report foreground state -- omitted, ``null`` or malformed
    alike -- and always on v1. ``None`` never means idle. Use ``"state" in resp.model_fields_set`` to tell
    an explicit ``null`` from an omitted key if you care (a malformed value counts as omitted).
    """

    __acp_lenient__: ClassVar[Mapping[str, Any]] = {"state": DROP, "_meta": DROP, "field_meta": DROP}
    model_config = ConfigDict(defer_build=True)

    status: str
    """``"active"``, ``"inactive"`` or any other string, raw (compare with :class:`SessionStatus`)."""
    state: StateSnapshot | None = None
    """v2 only: the foreground-state snapshot, or ``None`` = not reported (never "idle")."""
    field_meta: dict[str, Any] | None = Field(default=None, alias="_meta")
    """Extension metadata."""

    @property
    def is_active(self) -> bool:
        """``status`` is ``"active"`` (or ``"open"``, the TypeScript SDK's v2 word): the agent has the session in
        memory (resume it on this connection anyway)."""
        return self.status in ACTIVE_STATUSES

    @property
    def is_inactive(self) -> bool:
        """``status == "inactive"``: known and resumable, not in memory."""
        return self.status == SessionStatus.INACTIVE

    @property
    def is_known_status(self) -> bool:
        """Whether ``status`` is ``active`` or ``inactive`` (anything else is kept raw)."""
        return self.status in _KNOWN_STATUSES


_KNOWN_STATUSES = frozenset(s.value for s in SessionStatus)

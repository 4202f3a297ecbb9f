"""ACP message models for protocol v1 and v2, and the parse functions the client layers call.

* :mod:`v1`, :mod:`v2` -- models generated from the official JSON schemas (``scripts/generate_schema.py``;
  never hand-edited). Classes are named after the schema ``$defs`` (``v1.InitializeResponse``,
  ``v2.UpdateSessionNotification``); union variants are ``<Union><Tag>`` (``v2.SessionUpdateAgentMessageChunk``,
  ``v1.ContentBlockText``); an unknown tag gives ``<Union>Other``.
* :mod:`acp_client.schema.status` -- hand-written ``session/status`` models and the v2 ``StateSnapshot``;
  :mod:`acp_client.schema.prompt` -- ``PromptAnswer``, the ``session/prompt`` result read leniently (v2 receipt
  ``{messageId}``, the older ``{}``, v1 ``stopReason``).
* parse functions -- validate already-decoded JSON once and raise :class:`~acp_client.exceptions.ProtocolError`
  on malformed input.

Conventions of every model: snake_case attributes with camelCase aliases (both accepted on input); unknown
fields kept and dumped again; enum-like fields are plain ``str`` so unknown values survive (compare with the
``StrEnum`` constants, e.g. ``v2.ToolKind.EXECUTE``); default-on-error fields degrade to *unset*; invalid items
of skip-invalid lists are dropped. Write a model back with ``model.to_wire()`` (``model_dump(by_alias=True,
exclude_unset=True, mode="json")``).

Patch fields (v2 ``tool_call_update``, ``user_message``/``agent_message``/``agent_thought`` content,
``session_info_update``, ...): a field the update omitted is *unset*, ``null`` is set to ``None``, a value is set.
Tell them apart with :func:`patch_state` (``"omitted"``/``"null"``/``"value"``) or :func:`patch_value`
(:data:`OMITTED` / ``None`` / value), both reading ``model.model_fields_set``. A malformed value of a
default-on-error patch field reads as omitted (leave unchanged), never as a clear.

The generated modules are imported on first use (``acp_client.schema.v1`` or ``from acp_client.schema import
v2``), so a program pays only for the protocol version it speaks.
"""

from types import ModuleType
from typing import TYPE_CHECKING

from acp_client.schema._base import (
    OMITTED,
    AcpModel,
    MethodSpec,
    PatchState,
    patch_state,
    patch_value,
)
from acp_client.schema._parse import (
    STATUS_CAPABILITY_PATH,
    SessionUpdateEvent,
    UnknownUpdate,
    build_status_models,
    capability_present,
    models_for,
    parse_initialize_response,
    parse_params,
    parse_prompt_answer,
    parse_result,
    parse_session_update,
    parse_state_update,
    parse_status_response,
    session_update_fields,
    status_supported,
    supports_status,
)
from acp_client.schema.prompt import PromptAnswer
from acp_client.schema.status import (
    SessionStatus,
    SessionStatusRequest,
    SessionStatusResponse,
    StateSnapshot,
    StateValue,
)
from acp_client.schema.transport import (
    CURSOR_META_KEY,
    STREAM_RESUME,
    STREAM_RESUME_FAILED,
    TURN_STATE_META_KEY,
    ResumableTransport,
)

if TYPE_CHECKING:
    from acp_client.schema._generated import v1, v2

__all__ = [
    "CURSOR_META_KEY",
    "OMITTED",
    "STATUS_CAPABILITY_PATH",
    "STREAM_RESUME",
    "STREAM_RESUME_FAILED",
    "TURN_STATE_META_KEY",
    "AcpModel",
    "MethodSpec",
    "PatchState",
    "PromptAnswer",
    "ResumableTransport",
    "SessionStatus",
    "SessionStatusRequest",
    "SessionStatusResponse",
    "SessionUpdateEvent",
    "StateSnapshot",
    "StateValue",
    "UnknownUpdate",
    "build_status_models",
    "capability_present",
    "models_for",
    "parse_initialize_response",
    "parse_params",
    "parse_prompt_answer",
    "parse_result",
    "parse_session_update",
    "parse_state_update",
    "parse_status_response",
    "patch_state",
    "patch_value",
    "session_update_fields",
    "status_supported",
    "supports_status",
    "v1",
    "v2",
]


def __getattr__(name: str) -> ModuleType:
    """Import the generated module ``v1`` or ``v2`` when it is first used."""
    if name in ("v1", "v2"):
        module = models_for(int(name[1]))
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

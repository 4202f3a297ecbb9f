"""Typed, version-neutral views of ``session/update`` payloads.

The schema models (``acp_client.schema``) differ per protocol version; these small frozen dataclasses do
not. :func:`typed_update` turns the raw ``update`` object into one of them, so application code can
``match`` on it the same way against a v1 and a v2 agent::

    from acp_client import AgentMessageChunk, StateUpdate, ToolCallUpdate, SessionUpdate

    async for item in session.updates():
        if not isinstance(item, SessionUpdate):
            continue                                  # a recovery marker or an overflow notice
        match item.typed:
            case AgentMessageChunk(text=text):
                print(text, end="")
            case ToolCallUpdate(tool_call_id=call, status=status):
                print(f"[{call}: {status}]")
            case StateUpdate(state="idle", stop_reason=reason):
                print(f"(turn ended: {reason})")

What maps to what: ``user_message_chunk`` / ``agent_message_chunk`` / ``agent_thought_chunk`` (v1, v2) →
:class:`UserMessageChunk` / :class:`AgentMessageChunk` / :class:`AgentThoughtChunk`; the v2 message upserts
``user_message`` / ``agent_message`` / ``agent_thought`` → :class:`MessageUpdate`; v1 ``tool_call`` →
:class:`ToolCall`; ``tool_call_update`` (v1, v2) → :class:`ToolCallUpdate`; v1 ``plan`` and v2
``plan_update`` → :class:`Plan`; v2 ``state_update`` → :class:`StateUpdate`; anything else, and any
payload whose fields have the wrong shape, → :class:`UnknownUpdate` (never an exception: unknown future kinds
are preserved). Every class keeps ``kind`` (the raw ``sessionUpdate`` string) and ``raw`` (the object as
received). Nothing is built until asked for: reading ``item.kind`` or ``item.raw`` costs nothing extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

__all__ = [
    "AgentMessageChunk",
    "AgentThoughtChunk",
    "MessageUpdate",
    "Plan",
    "StateUpdate",
    "ToolCall",
    "ToolCallUpdate",
    "TypedUpdate",
    "UnknownUpdate",
    "UserMessageChunk",
    "content_text",
    "typed_update",
    "update_text",
]


def content_text(content: object) -> str:
    """The text of a content block, or of a list of blocks (joined); ``""`` for non-text content."""
    if isinstance(content, Mapping):
        value = content.get("text") if content.get("type") == "text" else None
        return value if isinstance(value, str) else ""
    if isinstance(content, list | tuple):
        return "".join(content_text(block) for block in content)
    return ""


@dataclass(frozen=True, slots=True)
class _Chunk:
    message_id: str | None
    content: Mapping[str, Any]
    text: str
    kind: str = field(repr=False)
    raw: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class AgentMessageChunk(_Chunk):
    """A piece of the agent's answer: ``text`` (``""`` for non-text ``content``), ``content`` (the block),
    ``message_id`` (chunks with the same id form one message; ``None`` if the v1 agent sent none)."""


@dataclass(frozen=True, slots=True)
class UserMessageChunk(_Chunk):
    """A piece of a user message (the agent echoes prompts, and replays them on load/resume)."""


@dataclass(frozen=True, slots=True)
class AgentThoughtChunk(_Chunk):
    """A piece of the agent's visible reasoning."""


@dataclass(frozen=True, slots=True)
class MessageUpdate:
    """v2: a whole message set at once (``user_message``, ``agent_message``, ``agent_thought``).

    ``role`` is ``"user"``, ``"agent"`` or ``"thought"``. ``content`` is the new list of blocks (it replaces
    the chunks received so far); ``None`` when the field was omitted (unchanged); ``()`` clears it.
    """

    role: str
    message_id: str
    content: tuple[Mapping[str, Any], ...] | None
    text: str
    kind: str = field(repr=False)
    raw: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """v1: the agent started a tool call (later changes arrive as :class:`ToolCallUpdate`)."""

    tool_call_id: str
    title: str
    tool_kind: str | None
    status: str | None
    kind: str = field(repr=False)
    raw: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ToolCallUpdate:
    """A tool call changed (v1 and v2; in v2 the first update for an id creates the call).

    A patch: only the fields named in ``fields`` were sent (``title``, ``status``, ``content``, ...); the
    others are ``None`` here because they did not change, not because they were cleared.
    """

    tool_call_id: str
    title: str | None
    tool_kind: str | None
    status: str | None
    fields: frozenset[str]
    kind: str = field(repr=False)
    raw: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Plan:
    """The agent's plan: ``entries`` (each a mapping with ``content``, ``priority``, ``status``).

    v1 ``plan`` (one plan per session, ``plan_id`` is ``None``) and v2 ``plan_update`` (``plan_id`` names it).
    """

    entries: tuple[Mapping[str, Any], ...]
    plan_id: str | None
    kind: str = field(repr=False)
    raw: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class StateUpdate:
    """v2 foreground state: ``state`` is ``running``, ``idle``, ``requires_action`` or a newer value;
    ``stop_reason`` comes with ``idle``."""

    state: str
    stop_reason: str | None
    kind: str = field(repr=False)
    raw: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class UnknownUpdate:
    """Any other update (available commands, usage, modes, a kind newer than this SDK ...) or one whose
    fields have an unexpected shape; ``raw`` has it all."""

    kind: str
    raw: Mapping[str, Any] = field(repr=False, compare=False)


#: What :func:`typed_update` returns.
TypedUpdate: TypeAlias = (
    AgentMessageChunk
    | UserMessageChunk
    | AgentThoughtChunk
    | MessageUpdate
    | ToolCall
    | ToolCallUpdate
    | Plan
    | StateUpdate
    | UnknownUpdate
)

_CHUNKS: dict[str, type[AgentMessageChunk] | type[UserMessageChunk] | type[AgentThoughtChunk]] = {
    "agent_message_chunk": AgentMessageChunk,
    "user_message_chunk": UserMessageChunk,
    "agent_thought_chunk": AgentThoughtChunk,
}
_MESSAGES = {"user_message": "user", "agent_message": "agent", "agent_thought": "thought"}


def _opt_str(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    return value if isinstance(value, str) else None


def _entries(value: object) -> tuple[Mapping[str, Any], ...] | None:
    if not isinstance(value, list) or not all(isinstance(e, Mapping) for e in value):
        return None
    return tuple(value)


def typed_update(raw: Mapping[str, Any]) -> TypedUpdate:
    """The version-neutral view of one ``update`` object (``{"sessionUpdate": ..., ...}``); never raises."""
    kind = raw.get("sessionUpdate") if isinstance(raw, Mapping) else None
    if not isinstance(kind, str):
        return UnknownUpdate("", raw if isinstance(raw, Mapping) else {})
    chunk = _CHUNKS.get(kind)
    if chunk is not None:
        content = raw.get("content")
        if isinstance(content, Mapping):
            return chunk(_opt_str(raw, "messageId"), content, content_text(content), kind, raw)
    elif kind in _MESSAGES:
        message_id, content = raw.get("messageId"), raw.get("content")
        blocks = () if content is None and "content" in raw else _entries(content)
        if isinstance(message_id, str) and (blocks is not None or "content" not in raw):
            return MessageUpdate(_MESSAGES[kind], message_id, blocks, content_text(list(blocks or ())), kind, raw)
    elif kind in ("tool_call", "tool_call_update"):
        call_id = raw.get("toolCallId")
        if isinstance(call_id, str):
            if kind == "tool_call":
                title = raw.get("title")
                if isinstance(title, str):
                    return ToolCall(call_id, title, _opt_str(raw, "kind"), _opt_str(raw, "status"), kind, raw)
            else:
                sent = frozenset(k for k in raw if k not in ("sessionUpdate", "toolCallId"))
                title_, tool_kind, status = _opt_str(raw, "title"), _opt_str(raw, "kind"), _opt_str(raw, "status")
                return ToolCallUpdate(call_id, title_, tool_kind, status, sent, kind, raw)
    elif kind == "plan":
        entries = _entries(raw.get("entries"))
        if entries is not None:
            return Plan(entries, None, kind, raw)
    elif kind == "plan_update":
        plan = raw.get("plan")
        entries = _entries(plan.get("entries")) if isinstance(plan, Mapping) else None
        if entries is not None and isinstance(plan, Mapping):
            return Plan(entries, _opt_str(plan, "planId"), kind, raw)
    elif kind == "state_update":
        state = raw.get("state")
        if isinstance(state, str):
            return StateUpdate(state, _opt_str(raw, "stopReason"), kind, raw)
    return UnknownUpdate(kind, raw)


def update_text(raw: Mapping[str, Any]) -> str:
    """The text a message or thought update carries (chunk or v2 whole message); ``""`` for anything else.

    Cheaper than :func:`typed_update` when only the text is wanted.
    """
    kind = raw.get("sessionUpdate")
    if kind in _CHUNKS or kind in _MESSAGES:
        return content_text(raw.get("content"))
    return ""

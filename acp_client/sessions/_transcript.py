"""A session's conversation as the client knows it, rebuilt from ``session/update`` notifications.

Works on the wire dictionaries of both protocol versions, so it needs no model validation:

- message chunks append to the message named by ``messageId`` (v1 chunks without an id continue the
  last message of the same role);
- v2 whole-message updates upsert by ``messageId``: ``content`` omitted keeps it, ``null`` or ``[]`` clears
  it, an array replaces everything, accumulated chunks included;
- tool calls are keyed by ``toolCallId``; ``tool_call_update`` patches only the fields it carries;
- a replay (``session/load``, v2 ``replayFrom``) is applied to a fresh transcript that replaces the old
  one when the replay completes, so replayed chunks never duplicate content.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Message", "ToolCall", "Transcript"]

_CHUNK_ROLES = {
    "user_message_chunk": "user",
    "agent_message_chunk": "agent",
    "agent_thought_chunk": "thought",
}
_MESSAGE_ROLES = {"user_message": "user", "agent_message": "agent", "agent_thought": "thought"}


@dataclass(slots=True)
class Message:
    """One message of the conversation: ``role`` is ``user``, ``agent`` or ``thought``."""

    message_id: str | None
    role: str
    content: list[dict[str, Any]] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The concatenated text of the message's text blocks."""
        return "".join(b.get("text", "") for b in self.content if b.get("type") == "text")


@dataclass(slots=True)
class ToolCall:
    """A tool call as last reported; ``fields`` holds every wire field (camelCase) seen so far."""

    tool_call_id: str
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str | None:
        """The tool call's last reported status (open set), if any."""
        value = self.fields.get("status")
        return value if isinstance(value, str) else None


class Transcript:
    """Messages, tool calls, plans and session info, in the order the agent reported them."""

    __slots__ = ("_by_id", "_tool_calls", "messages", "plans", "title")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._by_id: dict[str, Message] = {}
        self._tool_calls: dict[str, ToolCall] = {}
        self.plans: dict[str, list[Any]] = {}
        self.title: str | None = None

    def __repr__(self) -> str:
        return f"<Transcript {len(self.messages)} messages, {len(self._tool_calls)} tool calls>"

    @property
    def tool_calls(self) -> dict[str, ToolCall]:
        """Tool calls by ``toolCallId``."""
        return self._tool_calls

    def text(self) -> str:
        """A plain rendering: one ``role: text`` line per message."""
        return "\n".join(f"{m.role}: {m.text}" for m in self.messages)

    def apply(self, update: dict[str, Any]) -> None:
        """Apply one ``update`` object (the value of ``params.update``); unknown kinds are ignored."""
        kind = update.get("sessionUpdate")
        if not isinstance(kind, str):
            return
        if kind in _CHUNK_ROLES:
            self._chunk(_CHUNK_ROLES[kind], update)
        elif kind in _MESSAGE_ROLES:
            self._upsert(_MESSAGE_ROLES[kind], update)
        elif kind in ("tool_call", "tool_call_update"):
            self._tool_call(kind, update)
        elif kind == "tool_call_content_chunk":
            call = self._call(update.get("toolCallId"))
            if call is not None and isinstance(update.get("content"), dict):
                content = call.fields.get("content")
                call.fields["content"] = (
                    [*content, update["content"]] if isinstance(content, list) else [update["content"]]
                )
        elif kind == "plan":
            entries = update.get("entries")
            self.plans[""] = list(entries) if isinstance(entries, list) else []
        elif kind == "plan_update":
            plan = update.get("plan")
            if isinstance(plan, dict):
                entries = plan.get("entries")
                self.plans[str(plan.get("planId", ""))] = list(entries) if isinstance(entries, list) else []
        elif kind == "plan_removed":
            self.plans.pop(str(update.get("planId", "")), None)
        elif kind == "session_info_update" and "title" in update:
            title = update["title"]
            self.title = title if isinstance(title, str) else None

    def _message(self, role: str, message_id: Any) -> Message:
        if isinstance(message_id, str):
            found = self._by_id.get(message_id)
            if found is None:
                found = Message(message_id, role)
                self._by_id[message_id] = found
                self.messages.append(found)
            return found
        last = self.messages[-1] if self.messages else None
        if last is not None and last.role == role and last.message_id is None:
            return last
        created = Message(None, role)
        self.messages.append(created)
        return created

    def _chunk(self, role: str, update: dict[str, Any]) -> None:
        content = update.get("content")
        message = self._message(role, update.get("messageId"))
        if isinstance(content, dict):
            message.content.append(content)

    def _upsert(self, role: str, update: dict[str, Any]) -> None:
        message = self._message(role, update.get("messageId"))
        if "content" not in update:
            return
        content = update["content"]
        message.content = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []

    def _call(self, tool_call_id: Any) -> ToolCall | None:
        if not isinstance(tool_call_id, str):
            return None
        call = self._tool_calls.get(tool_call_id)
        if call is None:
            call = self._tool_calls[tool_call_id] = ToolCall(tool_call_id)
        return call

    def _tool_call(self, kind: str, update: dict[str, Any]) -> None:
        call = self._call(update.get("toolCallId"))
        if call is None:
            return
        fields = {k: v for k, v in update.items() if k not in ("sessionUpdate", "toolCallId")}
        if kind == "tool_call":
            call.fields = fields
        else:
            call.fields.update(fields)

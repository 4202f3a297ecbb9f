"""A session's conversation as the client knows it, rebuilt from ``session/update`` notifications.

Works on the wire dictionaries of both protocol versions, so it needs no model validation:

- the user's own prompt is recorded as a user message when it is sent (``Session.prompt``); when the agent
  echoes it (a v2 ``user_message``, or ``user_message_chunk`` updates) the echo takes that message's place
  instead of adding a second copy;
- message chunks append to the message named by ``messageId``; chunks without an id continue the last
  message of the same role, but never across a turn boundary (a prompt sent, a turn finished), so two turns
  answered without ids stay two messages;
- consecutive plain text chunks of one message (``{"type": "text", "text": ...}`` and nothing else) are kept as
  one text block whose text grows (a long stream costs about one byte per character, not one dictionary per
  chunk); any other block is kept as received;
- v2 whole-message updates upsert by ``messageId``: ``content`` omitted keeps it, ``null`` or ``[]`` clears
  it, an array replaces everything, accumulated chunks included;
- tool calls are keyed by ``toolCallId``; ``tool_call_update`` patches only the fields it carries;
- a replay (``session/load``, v2 ``replayFrom``) is applied to a fresh transcript that replaces the old
  one when the replay completes, so replayed chunks never duplicate content and the result is what a fresh
  client builds from the same replay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["Message", "ToolCall", "Transcript"]

_CHUNK_ROLES: Final = {
    "user_message_chunk": "user",
    "agent_message_chunk": "agent",
    "agent_thought_chunk": "thought",
}
_MESSAGE_ROLES: Final = {"user_message": "user", "agent_message": "agent", "agent_thought": "thought"}
#: the update kinds :meth:`Transcript.apply` keeps something of (every other kind leaves it unchanged)
KEPT_KINDS: Final = frozenset(
    {
        *_CHUNK_ROLES,
        *_MESSAGE_ROLES,
        "tool_call",
        "tool_call_update",
        "tool_call_content_chunk",
        "plan",
        "plan_update",
        "plan_removed",
        "session_info_update",
    }
)
#: Text parts of a growing block are joined into one string every this many chunks.
_COLLAPSE_EVERY: Final = 256


class Message:
    """One message of the conversation: ``role`` is ``user``, ``agent`` or ``thought``; ``content`` its
    content blocks (wire dictionaries), consecutive plain text chunks merged into one text block."""

    __slots__ = ("_content", "_done", "_parts", "_run", "message_id", "role")

    def __init__(self, message_id: str | None, role: str, content: list[dict[str, Any]] | None = None) -> None:
        self.message_id = message_id
        self.role = role
        self._content: list[dict[str, Any]] = content if content is not None else []
        # the open run of plain text chunks: its block in _content, joined segments, pending parts
        self._run: dict[str, Any] | None = None
        self._done: list[str] = []
        self._parts: list[str] = []

    @property
    def content(self) -> list[dict[str, Any]]:
        """The content blocks, in order."""
        if self._parts:
            self._flush()
        return self._content

    @content.setter
    def content(self, blocks: list[dict[str, Any]]) -> None:
        self._run = None
        self._done, self._parts = [], []
        self._content = blocks

    @property
    def text(self) -> str:
        """The concatenated text of the message's text blocks."""
        return "".join(b.get("text", "") for b in self.content if b.get("type") == "text")

    def _append(self, block: dict[str, Any]) -> None:
        """Append one chunk's content block (a plain text block extends the open text run)."""
        text = block.get("text")
        if type(text) is str and len(block) == 2 and block.get("type") == "text":
            self._append_text(text)
            return
        if self._parts:
            self._flush()
        self._run = None
        self._content.append(block)

    def _append_text(self, text: str) -> None:
        """Append the text of a plain text block (``{"type": "text", "text": text}``): it extends the open
        text run, or starts one."""
        run = self._run
        if run is not None and self._content and self._content[-1] is run:
            parts = self._parts
            parts.append(text)
            if len(parts) >= _COLLAPSE_EVERY:
                self._done.append("".join(parts))
                parts.clear()
            return
        if self._parts:
            self._flush()
        self._run = {"type": "text", "text": text}  # our own dict: the agent's is never mutated
        self._done, self._parts = [text], []
        self._content.append(self._run)

    def _flush(self) -> None:
        run = self._run
        whole = "".join(self._done) + "".join(self._parts)
        self._parts = []
        self._done = [whole]
        if run is not None:
            run["text"] = whole

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self.message_id, self.role, self.content) == (other.message_id, other.role, other.content)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Message(message_id={self.message_id!r}, role={self.role!r}, content={self.content!r})"


@dataclass(slots=True)
class ToolCall:
    """A tool call as last reported; ``fields`` holds every wire field (camelCase) seen so far."""

    tool_call_id: str
    fields: dict[str, Any] = field(default_factory=dict)
    # the list in fields["content"] is ours to append to (a copy made once); a list that came whole from the
    # wire (tool_call / tool_call_update) is copied on the first chunk, so each chunk costs O(1), not O(n)
    _owns_content: bool = field(default=False, init=False, repr=False, compare=False)

    def _report(self, fields: dict[str, Any], *, whole: bool) -> None:
        """A ``tool_call`` (``whole``: replaces every field) or a ``tool_call_update`` (merges them)."""
        if whole:
            self.fields = fields
        else:
            self.fields.update(fields)
        if "content" in fields:
            self._owns_content = False  # the wire's list: copied before a chunk appends to it

    def _append_content(self, block: dict[str, Any]) -> None:
        content = self.fields.get("content")
        if not (self._owns_content and isinstance(content, list)):
            content = list(content) if isinstance(content, list) else []
            self.fields["content"] = content
            self._owns_content = True
        content.append(block)

    @property
    def status(self) -> str | None:
        """The tool call's last reported status (open set), if any."""
        value = self.fields.get("status")
        return value if isinstance(value, str) else None

    @property
    def cancellable(self) -> bool:
        """Whether the tool call currently advertises ``capabilities.cancel`` (v2): a later update that omits
        ``capabilities`` keeps it, ``null`` or an object without ``cancel`` withdraws it."""
        capabilities = self.fields.get("capabilities")
        return isinstance(capabilities, dict) and isinstance(capabilities.get("cancel"), dict)


class Transcript:
    """Messages, tool calls, plans and session info, in the order the agent reported them.

    Two transcripts are equal when their messages, tool calls, plans and title are.
    """

    __slots__ = ("_boundary", "_by_id", "_prompts", "_tool_calls", "messages", "plans", "title")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._by_id: dict[str, Message] = {}
        self._tool_calls: dict[str, ToolCall] = {}
        self.plans: dict[str, list[Any]] = {}
        self.title: str | None = None
        # prompts recorded when sent whose echo from the agent has not arrived yet (oldest first)
        self._prompts: list[Message] = []  # a list, not a deque: an empty deque is ~600 bytes per session
        # a turn began or ended since the last message: a chunk without an id starts a new message
        self._boundary = False

    def __repr__(self) -> str:
        return f"<Transcript {len(self.messages)} messages, {len(self._tool_calls)} tool calls>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Transcript):
            return NotImplemented
        return (self.messages, self._tool_calls, self.plans, self.title) == (
            other.messages,
            other._tool_calls,
            other.plans,
            other.title,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

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
        if type(kind) is str:
            self._apply(kind, update)

    def _apply(self, kind: str, update: dict[str, Any]) -> None:
        """:meth:`apply` of an ``update`` whose ``sessionUpdate`` is ``kind`` (a session read it already)."""
        role = _CHUNK_ROLES.get(kind)
        if role is not None:  # the hot path: one chunk of a streamed message
            content = update.get("content")
            message_id = update.get("messageId")
            message = self._by_id.get(message_id) if type(message_id) is str else None
            if message is None:
                message = self._chunk_message(role, message_id)
            if type(content) is dict:
                message._append(content)
        elif kind in _MESSAGE_ROLES:
            self._upsert(_MESSAGE_ROLES[kind], update)
        elif kind in ("tool_call", "tool_call_update"):
            self._tool_call(kind, update)
        elif kind == "tool_call_content_chunk":
            call = self._call(update.get("toolCallId"))
            if call is not None and isinstance(update.get("content"), dict):
                call._append_content(update["content"])
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

    def _text_chunk(self, kind: str, update: dict[str, Any]) -> None:
        """:meth:`_apply` of a message chunk (``kind``) whose ``content`` is known to be a text block: a
        dictionary with ``"type": "text"`` and a string ``text`` (the session's caller checked it)."""
        message_id = update.get("messageId")
        message = self._by_id.get(message_id) if type(message_id) is str else None
        if message is None:
            message = self._chunk_message(_CHUNK_ROLES[kind], message_id)
        content = update["content"]
        if len(content) == 2:  # nothing but the type and the text: a plain block
            message._append_text(content["text"])
        else:
            message._append(content)

    # ------------------------------------------------------------------ turns (the owning session calls these)

    def _record_prompt(self, blocks: list[dict[str, Any]]) -> Message:
        """The user's prompt is being sent: record it as a user message (a turn boundary)."""
        message = Message(None, "user", [dict(block) for block in blocks])
        self.messages.append(message)
        self._prompts.append(message)
        self._boundary = True
        return message

    def _retract_prompt(self, message: Message) -> None:
        """The prompt recorded as ``message`` was never sent: remove it again."""
        if message in self._prompts:
            self._prompts.remove(message)
            self.messages = [m for m in self.messages if m is not message]

    def _receipt(self, message: Message, message_id: str) -> None:
        """The agent inserted the prompt recorded as ``message`` as user message ``message_id`` (v2 receipt).

        ``message`` takes the id unless it has one (its echo came first and named it); the echo, or a replay
        of it, then merges into it whenever it comes. An id already held by another message is left alone
        (the echo matched that prompt: see :meth:`_echo_target`)."""
        if message.message_id is not None or message_id in self._by_id or message not in self.messages:
            return
        if message in self._prompts:
            self._prompts.remove(message)
        message.message_id = message_id
        self._by_id[message_id] = message

    def _carry_prompts(self, rebuilt: Transcript | None, held: list[Message]) -> Transcript | None:
        """``rebuilt`` (a replay's transcript, ``None`` if it replayed nothing) with the ``held`` prompts that
        are still here and still wait for their echo appended (and waiting there): they were recorded while the
        session was not attached, so they go out after the replay, which cannot hold them."""
        carried = [m for m in held if any(m is p for p in self._prompts)]
        if not carried:
            return rebuilt
        target = rebuilt if rebuilt is not None else Transcript()
        for message in carried:
            target.messages.append(message)
            target._prompts.append(message)
            if message.message_id is not None:
                target._by_id[message.message_id] = message
        target._boundary = True
        return target

    def _end_turn(self) -> None:
        """A turn ended: the next chunk without a message id starts a new message."""
        self._prompts.clear()  # an echo after the turn is not the echo of these prompts
        self._boundary = True

    # ------------------------------------------------------------------ internals

    def _echo_target(self, role: str, message_id: Any) -> Message | None:
        """A prompt recorded locally that this user message (echo or replay of it) should replace."""
        if role != "user" or not self._prompts:
            return None
        if isinstance(message_id, str) and message_id in self._by_id:
            return None
        message = self._prompts.pop(0)  # the oldest prompt not yet echoed: prompts are inserted in order
        if isinstance(message_id, str):
            message.message_id = message_id
            self._by_id[message_id] = message
        return message

    def _chunk_message(self, role: str, message_id: Any) -> Message:
        if type(message_id) is str:
            found = self._by_id.get(message_id)
            if found is not None:
                return found
        echo = self._echo_target(role, message_id)
        if echo is not None:
            echo.content = []  # the agent's echo is authoritative: it replaces the local copy
            return echo
        if type(message_id) is str:
            created = Message(message_id, role)
            self._by_id[message_id] = created
        else:
            last = self.messages[-1] if self.messages else None
            if not self._boundary and last is not None and last.role == role and last.message_id is None:
                return last
            created = Message(None, role)
        self.messages.append(created)
        self._boundary = False
        return created

    def _upsert(self, role: str, update: dict[str, Any]) -> None:
        message_id = update.get("messageId")
        message = self._echo_target(role, message_id) or self._chunk_message(role, message_id)
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
        call._report(fields, whole=kind == "tool_call")

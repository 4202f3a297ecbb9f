"""What the editor has seen of a session, and how a recovery replay is reconciled with it (no I/O).

The dedup rule: a replay the *bridge* asked for while recovering a session is history the editor already
has, so it is never forwarded as it arrived. The bridge keeps, per session, the transcript of everything it
forwarded (:class:`EditorView`); when the replay has arrived it compares the replayed transcript with that
view and forwards only the difference:

- an agent message or thought the replay shows *longer* than the editor saw gets its missing tail, as one
  ``agent_message_chunk`` / ``agent_thought_chunk`` (same ``messageId``); one the editor never saw is sent
  whole, one chunk per content block. Messages are matched by ``messageId``; when the agent sends no ids,
  the text of all its messages of that role is compared as one stream (live and replayed messages may be
  split differently) and the missing end is sent. User messages are never re-sent (the editor has its own
  prompts).
- a tool call the editor never saw is sent (v1 ``tool_call``, v2 ``tool_call_update``); one whose fields
  changed gets a ``tool_call_update`` with the changed fields. Plans and the title are sent when changed.
- state-like updates (available commands, mode, config options, usage, v2 ``state_update``, session info)
  are sent only when they differ from the last one of the same kind the editor saw.

When the replay cannot be accounted for that way (a message the editor saw is missing from the replay or was
rewritten, not just extended), :func:`reconcile` reports a gap and the caller tells the editor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from acp_client.sessions import Transcript

__all__ = ["EditorView", "Reconciled", "reconcile"]

_CHUNK_KIND = {"agent": "agent_message_chunk", "thought": "agent_thought_chunk"}
#: update kinds that describe current state rather than history: only their latest value matters
STATE_KINDS = frozenset(
    {
        "available_commands_update",
        "current_mode_update",
        "config_option_update",
        "usage_update",
        "state_update",
        "session_info_update",
    }
)


class EditorView:
    """The transcript and latest state updates the editor received for one session.

    ``known`` is ``False`` when the editor attached the session without a replay through the bridge (a
    resume): it has a history the bridge never saw, so a later recovery replay cannot be diffed against it.
    """

    __slots__ = ("known", "last_of_kind", "transcript")

    def __init__(self, *, known: bool = True) -> None:
        self.transcript = Transcript()
        self.last_of_kind: dict[str, dict[str, Any]] = {}
        self.known = known

    def __repr__(self) -> str:
        return f"<EditorView known={self.known} {self.transcript!r}>"

    def apply(self, update: dict[str, Any]) -> None:
        """Record one ``update`` object the editor was sent."""
        self.transcript.apply(update)
        kind = update.get("sessionUpdate")
        if isinstance(kind, str) and kind in STATE_KINDS:
            self.last_of_kind[kind] = update

    def add_prompt(self, blocks: list[Any]) -> None:
        """Record the editor's own prompt (v1 agents do not echo it live, but replay it on load)."""
        for block in blocks:
            if isinstance(block, dict):
                self.transcript.apply({"sessionUpdate": "user_message_chunk", "content": block})

    @property
    def last_state(self) -> str | None:
        """The v2 foreground state the editor last saw, if any."""
        state = self.last_of_kind.get("state_update", {}).get("state")
        return state if isinstance(state, str) else None


@dataclass
class Reconciled:
    """What to send the editor after a recovery replay: ``updates`` (``update`` objects, in order) and
    ``gap`` (why the editor may still miss something, or ``None``)."""

    updates: list[dict[str, Any]] = field(default_factory=list)
    gap: str | None = None


def _normalise(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Content blocks with adjacent text blocks merged (chunking differs between live and replay)."""
    out: list[dict[str, Any]] = []
    for block in blocks:
        if block.get("type") == "text" and out and out[-1].get("type") == "text":
            out[-1] = {"type": "text", "text": str(out[-1].get("text", "")) + str(block.get("text", ""))}
        elif block.get("type") == "text":
            out.append({"type": "text", "text": str(block.get("text", ""))})
        else:
            out.append(block)
    return out


def _tail(seen: list[dict[str, Any]], replayed: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The blocks ``replayed`` has beyond ``seen`` (text compared as one string per run), or ``None`` when
    ``seen`` is not a prefix of ``replayed``."""
    old, new = _normalise(seen), _normalise(replayed)
    if len(old) > len(new):
        return None
    tail: list[dict[str, Any]] = []
    for i, block in enumerate(old):
        other = new[i]
        last = i == len(old) - 1
        if block.get("type") == "text" and last:
            if other.get("type") != "text":
                return None
            text, more = str(block["text"]), str(other["text"])
            if not more.startswith(text):
                return None
            if len(more) > len(text):
                tail.append({"type": "text", "text": more[len(text) :]})
        elif block != other:
            return None
    tail.extend(new[len(old) :])
    return tail


def _chunks(role: str, message_id: str | None, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for block in blocks:
        update: dict[str, Any] = {"sessionUpdate": _CHUNK_KIND[role], "content": block}
        if message_id is not None:
            update["messageId"] = message_id
        out.append(update)
    return out


def reconcile(view: EditorView, replayed: list[dict[str, Any]], protocol_version: int) -> Reconciled:
    """Compare a recovery replay (``update`` objects) with what the editor saw; see the module docstring.

    Afterwards ``view`` describes the replayed history plus what was sent (the agent's history is the
    reference from now on).
    """
    replay = Transcript()
    latest: dict[str, dict[str, Any]] = {}
    for update in replayed:
        replay.apply(update)
        kind = update.get("sessionUpdate")
        if isinstance(kind, str) and kind in STATE_KINDS:
            latest[kind] = update
    result = Reconciled()
    if not view.known:
        result.gap = "history_unknown"
    else:
        _messages(view, replay, result)
        _tool_calls(view, replay, result, protocol_version)
        _plans_and_title(view, replay, result, protocol_version)
    for kind, update in latest.items():
        if view.last_of_kind.get(kind) != update:
            result.updates.append(update)
    last_of_kind = view.last_of_kind
    view.transcript, view.known = replay, True
    view.last_of_kind = last_of_kind
    for update in result.updates:
        kind = update.get("sessionUpdate")
        if isinstance(kind, str) and kind in STATE_KINDS:
            view.last_of_kind[kind] = update
    return result


def _messages(view: EditorView, replay: Transcript, result: Reconciled) -> None:
    for role in _CHUNK_KIND:
        seen = [m for m in view.transcript.messages if m.role == role]
        replayed = [m for m in replay.messages if m.role == role]
        # messages with ids: one by one
        by_id = {m.message_id: m for m in seen if m.message_id is not None}
        for message in replayed:
            if message.message_id is None:
                continue
            old = by_id.get(message.message_id)
            tail = message.content if old is None else _tail(old.content, message.content)
            if tail is None:
                result.gap = "history_differs"
            else:
                result.updates.extend(_chunks(role, message.message_id, tail))
        if not set(by_id) <= {m.message_id for m in replayed}:
            result.gap = result.gap or "history_shorter"
        # messages without ids: how an agent splits them differs between live and replay (user messages may
        # be missing from either), so their content is compared as one stream
        old_stream = [block for m in seen if m.message_id is None for block in m.content]
        new_stream = [block for m in replayed if m.message_id is None for block in m.content]
        tail = _tail(old_stream, new_stream)
        if tail is None:
            shorter = _tail(new_stream, old_stream) is not None  # the replay stops before what was shown
            result.gap = result.gap or ("history_shorter" if shorter else "history_differs")
        else:
            result.updates.extend(_chunks(role, None, tail))


def _tool_calls(view: EditorView, replay: Transcript, result: Reconciled, protocol_version: int) -> None:
    for call_id, call in replay.tool_calls.items():
        old = view.transcript.tool_calls.get(call_id)
        if old is None:
            kind = "tool_call" if protocol_version < 2 and "title" in call.fields else "tool_call_update"
            result.updates.append({"sessionUpdate": kind, "toolCallId": call_id, **call.fields})
            continue
        changed = {k: v for k, v in call.fields.items() if old.fields.get(k) != v}
        if changed:
            result.updates.append({"sessionUpdate": "tool_call_update", "toolCallId": call_id, **changed})


def _plans_and_title(view: EditorView, replay: Transcript, result: Reconciled, protocol_version: int) -> None:
    for plan_id, entries in replay.plans.items():
        if view.transcript.plans.get(plan_id) == entries:
            continue
        if protocol_version < 2 and plan_id == "":
            result.updates.append({"sessionUpdate": "plan", "entries": entries})
        else:
            plan = {"type": "items", "planId": plan_id, "entries": entries}
            result.updates.append({"sessionUpdate": "plan_update", "plan": plan})
    if replay.title is not None and replay.title != view.transcript.title:
        result.updates.append({"sessionUpdate": "session_info_update", "title": replay.title})

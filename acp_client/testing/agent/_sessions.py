"""The reference agent's session table: records, transcripts, listing pages and replay updates.

Sessions belong to the agent, not to a connection. A record is *active* while ``in_memory`` (whether or not
its connection is alive) and *inactive* once the agent has "unloaded" it (``session/close``, a restart);
a session missing from the table is unknown (-32002).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from acp_client.testing.agent._connection import AgentConnection
    from acp_client.testing.agent._turns import PromptTurn

__all__ = [
    "MODES",
    "AgentSessionRecord",
    "Role",
    "TranscriptMessage",
    "available_commands",
    "config_options",
    "decode_cursor",
    "encode_cursor",
    "list_page",
    "new_message_id",
    "new_session_id",
    "now_rfc3339",
    "replay_updates",
]

Role = Literal["user", "agent", "thought"]

#: v1 session modes offered by ``session/new``.
MODES: tuple[tuple[str, str], ...] = (("default", "Default"), ("plan", "Plan"))

#: The one select config option: id → (name, allowed values).
_MODEL_VALUES = (("fast", "Fast"), ("smart", "Smart"))


def new_session_id() -> str:
    """A fresh, unique session id (``sess_`` + 16 hex digits)."""
    return f"sess_{uuid.uuid4().hex[:16]}"


def new_message_id(role: Role) -> str:
    """A fresh, unique message id, e.g. ``msg_user_…`` or ``msg_agent_…``."""
    return f"msg_{role}_{uuid.uuid4().hex[:12]}"


def now_rfc3339() -> str:
    """The current UTC time as RFC 3339 with a ``Z`` suffix, second precision."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class TranscriptMessage:
    """One message of a session's conversation, as replayed by ``session/load`` and ``session/resume``."""

    message_id: str
    role: Role
    content: list[dict[str, Any]] = field(default_factory=list)

    def append_text(self, text: str) -> None:
        """Append streamed text, merging into a trailing text block."""
        if self.content and self.content[-1].get("type") == "text":
            last = self.content[-1]
            last["text"] = str(last.get("text", "")) + text
        else:
            self.content.append({"type": "text", "text": text})

    @property
    def text(self) -> str:
        """The concatenated text of the message's text blocks."""
        return "".join(str(b.get("text", "")) for b in self.content if b.get("type") == "text")


@dataclass(eq=False)
class AgentSessionRecord:
    """What the reference agent knows about one session (not :class:`acp_client.SessionRecord`, the client's).

    ``state`` is the v2 foreground state (``idle``/``running``/``requires_action``), tracked in v1 too;
    ``connection`` is the connection the session is attached to (may be dead: updates are then dropped).
    """

    session_id: str
    cwd: str
    mcp_servers: list[Any] = field(default_factory=list)
    additional_directories: list[str] = field(default_factory=list)
    transcript: list[TranscriptMessage] = field(default_factory=list)
    state: str = "idle"
    stop_reason: str | None = None
    in_memory: bool = True
    archived: bool = False
    title: str | None = None
    created_at: str = field(default_factory=now_rfc3339)
    updated_at: str = field(default_factory=now_rfc3339)
    mode_id: str = "default"
    config: dict[str, str] = field(default_factory=lambda: {"model": "fast"})
    connection: AgentConnection | None = field(default=None, repr=False)
    turn: PromptTurn | None = field(default=None, repr=False)
    emit_lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    #: v2 tool calls that advertise ``capabilities.cancel`` now: id -> resolved by ``tool_call/cancel``
    cancellable_tools: dict[str, asyncio.Future[None]] = field(default_factory=dict, repr=False)
    _attach_waiters: list[asyncio.Future[None]] = field(default_factory=list, repr=False)

    @property
    def status(self) -> str:
        """``active`` while in memory, else ``inactive`` (the session/status RFD values)."""
        return "active" if self.in_memory else "inactive"

    @property
    def connection_id(self) -> str | None:
        """The id of the attached connection (possibly dead), or ``None``."""
        return self.connection.id if self.connection is not None else None

    @property
    def attached_live(self) -> bool:
        """Whether the session is attached to a connection that is still open."""
        return self.connection is not None and not self.connection.closed

    def attach(self, connection: AgentConnection) -> None:
        """Load the session (if unloaded) and route its updates to ``connection`` from now on."""
        self.in_memory = True
        self.connection = connection
        self.touch()

    def notify_attached(self) -> None:
        """Wake everything waiting in :meth:`wait_attached` (called once the attach response is out)."""
        waiters, self._attach_waiters = self._attach_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def unload(self) -> None:
        """Make the session inactive: not in memory, attached to nothing."""
        self.in_memory = False
        self.connection = None
        self.state = "idle"

    def reset_config(self) -> None:
        """Back to the default mode and config options (a restart that kept only the conversation)."""
        self.mode_id = "default"
        self.config = {"model": "fast"}

    def wait_attached(self) -> asyncio.Future[None]:
        """A future resolved the next time a connection attaches the session (new/load/resume)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._attach_waiters.append(fut)
        return fut

    def touch(self) -> None:
        """Bump ``updatedAt``."""
        self.updated_at = now_rfc3339()

    def list_entry(self) -> dict[str, Any]:
        """The ``SessionInfo`` object ``session/list`` returns for this session."""
        entry: dict[str, Any] = {"sessionId": self.session_id, "cwd": self.cwd, "updatedAt": self.updated_at}
        if self.title is not None:
            entry["title"] = self.title
        if self.additional_directories:
            entry["additionalDirectories"] = list(self.additional_directories)
        if self.archived:
            entry["archived"] = True
        return entry

    def state_update(self) -> dict[str, Any]:
        """The current foreground state as a flattened ``state_update`` session update (v2)."""
        update: dict[str, Any] = {"sessionUpdate": "state_update", "state": self.state}
        if self.state == "idle" and self.stop_reason is not None:
            update["stopReason"] = self.stop_reason
        return update

    def state_snapshot(self) -> dict[str, Any]:
        """The current foreground state as the nested ``StateUpdate`` of a v2 ``session/status`` result."""
        snapshot = dict(self.state_update())
        del snapshot["sessionUpdate"]
        return snapshot


def available_commands() -> list[dict[str, Any]]:
    """The slash commands the reference agent offers (v2 ``availableCommands``)."""
    return [
        {"name": "echo", "description": "Say the rest of the line back"},
        {"name": "sleep", "description": "Work for a number of seconds", "input": {"hint": "seconds"}},
    ]


def config_options(config: Mapping[str, str]) -> list[dict[str, Any]]:
    """The full ``configOptions`` list for a session's current config values."""
    return [
        {
            "id": "model",
            "name": "Model",
            "type": "select",
            "currentValue": config.get("model", "fast"),
            "options": [{"value": value, "name": name} for value, name in _MODEL_VALUES],
        }
    ]


def config_values(config_id: str) -> tuple[str, ...] | None:
    """Allowed values of a config option, or ``None`` for an unknown option id."""
    if config_id == "model":
        return tuple(value for value, _ in _MODEL_VALUES)
    return None


def modes_state(mode_id: str) -> dict[str, Any]:
    """The v1 ``SessionModeState`` for a session currently in ``mode_id``."""
    return {"currentModeId": mode_id, "availableModes": [{"id": i, "name": n} for i, n in MODES]}


def encode_cursor(offset: int) -> str:
    """An opaque ``nextCursor`` for a listing offset."""
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode("ascii")


def decode_cursor(cursor: str) -> int:
    """The listing offset a cursor stands for; raises ``ValueError`` for anything we did not issue."""
    try:
        raw = base64.urlsafe_b64decode(cursor.encode("ascii")).decode("ascii")
    except (binascii.Error, UnicodeError) as exc:
        raise ValueError("malformed cursor") from exc
    prefix, _, number = raw.partition(":")
    if prefix != "offset" or not number.isdigit():
        raise ValueError("malformed cursor")
    return int(number)


def list_page(
    sessions: Iterable[AgentSessionRecord],
    *,
    cwd: str | None,
    cursor: str | None,
    page_size: int,
    archived: str | None = None,
) -> dict[str, Any]:
    """One ``session/list`` result page (creation order), with ``nextCursor`` when more remain. ``archived``:
    ``exclude`` (the default, also for ``None``), ``include`` or ``only``."""
    matching = [
        s
        for s in sessions
        if (cwd is None or s.cwd == cwd)
        and (archived == "include" or (s.archived if archived == "only" else not s.archived))
    ]
    offset = decode_cursor(cursor) if cursor is not None else 0
    page = matching[offset : offset + page_size]
    result: dict[str, Any] = {"sessions": [s.list_entry() for s in page]}
    if offset + page_size < len(matching):
        result["nextCursor"] = encode_cursor(offset + page_size)
    return result


_WHOLE_KIND = {"user": "user_message", "agent": "agent_message", "thought": "agent_thought"}
_CHUNK_KIND = {"user": "user_message_chunk", "agent": "agent_message_chunk", "thought": "agent_thought_chunk"}


def replay_updates(transcript: Iterable[TranscriptMessage], *, as_chunks: bool) -> list[dict[str, Any]]:
    """The ``session/update`` payloads replaying a transcript: whole messages (v2 ``user_message`` …, content
    arrays) or one chunk per content block (v1 load, or v2 with ``replay_as="chunks"``). Every update carries
    the message's original ``messageId``."""
    updates: list[dict[str, Any]] = []
    for message in transcript:
        if as_chunks:
            for block in message.content:
                updates.append(
                    {
                        "sessionUpdate": _CHUNK_KIND[message.role],
                        "messageId": message.message_id,
                        "content": dict(block),
                    }
                )
        else:
            updates.append(
                {
                    "sessionUpdate": _WHOLE_KIND[message.role],
                    "messageId": message.message_id,
                    "content": [dict(block) for block in message.content],
                }
            )
    return updates


#: The old name, for code written against earlier versions of the test kit.
SessionRecord = AgentSessionRecord

"""Session handles that survive reconnects, their transcripts, and the stores that keep them."""

from acp_client.sessions._lease import Lease, Renewal, SharedSessionStore, StoredSession
from acp_client.sessions._ledger import PROMPT_LEDGER_SIZE, PromptEntry, PromptLedger, PromptState
from acp_client.sessions._registry import SessionRegistry
from acp_client.sessions._session import (
    ABANDONED_TURN_WAIT,
    LINK_TRANSITIONS,
    Attachment,
    PromptReceipt,
    PromptResult,
    Session,
    SessionControl,
    SessionLink,
    SessionOwner,
    text_blocks,
)
from acp_client.sessions._store import MemorySessionStore, SessionRecord, SessionStore, SQLiteSessionStore
from acp_client.sessions._stream import (
    DEFAULT_UPDATES_BUFFER,
    RecoveryMarker,
    SessionUpdate,
    StreamItem,
    UpdatesDropped,
)
from acp_client.sessions._transcript import Message, ToolCall, Transcript
from acp_client.sessions.redis import RedisSessionStore

__all__ = [
    "ABANDONED_TURN_WAIT",
    "DEFAULT_UPDATES_BUFFER",
    "LINK_TRANSITIONS",
    "PROMPT_LEDGER_SIZE",
    "Attachment",
    "Lease",
    "MemorySessionStore",
    "Message",
    "PromptEntry",
    "PromptLedger",
    "PromptReceipt",
    "PromptResult",
    "PromptState",
    "RecoveryMarker",
    "RedisSessionStore",
    "Renewal",
    "SQLiteSessionStore",
    "Session",
    "SessionControl",
    "SessionLink",
    "SessionOwner",
    "SessionRecord",
    "SessionRegistry",
    "SessionStore",
    "SessionUpdate",
    "SharedSessionStore",
    "StoredSession",
    "StreamItem",
    "ToolCall",
    "Transcript",
    "UpdatesDropped",
    "text_blocks",
]

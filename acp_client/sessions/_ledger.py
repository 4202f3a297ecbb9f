"""The prompt ledger: what became of every prompt a session sent, across drops, restores and restarts.

Each :meth:`Session.prompt`/:meth:`Session.send_prompt` call makes one :class:`PromptEntry`. Its state moves
``sent`` (handed to the link; it may be on the wire) → ``inserted`` (the agent made it a user message: a v2
receipt's ``messageId``, an echoed ``user_message`` naming it, or a replay holding it) → ``finished`` (the
turn ended). Other ends: ``not_sent`` (the link says it never left the client), ``refused`` (the agent
answered an error before inserting it) and ``unknown`` (a drop or a crash left no way to tell). After a
recovery the session classifies every entry the drop interrupted (:meth:`PromptLedger.classify`, the table
in ``docs/design.md``); nothing is ever re-sent by the SDK.

The ledger keeps the last :data:`PROMPT_LEDGER_SIZE` entries per session. What a store keeps of an entry
is :meth:`PromptEntry.to_dict`: ids, a digest of the content (never the content itself), state, message
id, times; the content stays in memory only, for :meth:`Session.resend`.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import hashlib
import json
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from acp_client._logging import get_logger

__all__ = [
    "PROMPT_LEDGER_SIZE",
    "ClassifyEvidence",
    "PromptEntry",
    "PromptLedger",
    "PromptState",
    "content_digest",
    "new_prompt_id",
]

log = get_logger("acp_client.sessions")

PROMPT_LEDGER_SIZE = 32
"""How many prompt entries a session keeps (the oldest go first); the store keeps the same ones."""
#: The longest ``messageId`` the ledger takes from an agent (characters); a longer one is discarded, counted.
MAX_MESSAGE_ID = 256


class PromptState(enum.Enum):
    """Where a prompt stands (see the module docstring)."""

    __hash__ = object.__hash__

    SENT = "sent"  #: handed to the link; it may have reached the agent (not classified yet after a drop)
    NOT_SENT = "not_sent"  #: the link says it never left the client
    REFUSED = "refused"  #: the agent answered an error before inserting it
    INSERTED = "inserted"  #: the agent made it a user message (receipt, echo or replay)
    FINISHED = "finished"  #: its turn ended
    UNKNOWN = "unknown"  #: a drop or a crash left no way to tell whether the agent inserted it


#: states that end an entry's classification (nothing later changes them)
_SETTLED = frozenset({PromptState.NOT_SENT, PromptState.REFUSED, PromptState.FINISHED, PromptState.UNKNOWN})
#: states in which ``resend`` is refused: the prompt reached the conversation, or may be on its way
_NOT_RESENDABLE = frozenset({PromptState.INSERTED, PromptState.FINISHED, PromptState.SENT})


def content_digest(blocks: list[dict[str, Any]]) -> str:
    """A stable digest of prompt content (SHA-256, hex, 32 characters): what the store keeps instead of the
    content, and what a replayed user message is matched by when it has no id. Text blocks count by their
    text only (joined), so a replay that splits a message into chunks or adds annotations still matches;
    any other block counts as its canonical JSON."""
    parts: list[str] = []
    for block in blocks:
        text = block.get("text") if block.get("type") == "text" else None
        if isinstance(text, str):
            parts.append(text)
        else:
            parts.append("\x00" + json.dumps(block, sort_keys=True, separators=(",", ":"), default=str))
    return hashlib.sha256("".join(parts).encode("utf-8", "replace")).hexdigest()[:32]


def new_prompt_id() -> str:
    """A fresh prompt id (``p_`` + 16 hex digits), made by the client, never sent to the agent."""
    return f"p_{uuid.uuid4().hex[:16]}"


class PromptEntry:
    """One prompt in a session's ledger. ``prompt_id`` is made by the client (stable, never sent to the
    agent); ``digest`` identifies the content; ``state`` is a :class:`PromptState`; ``message_id`` the user
    message the agent inserted it as (``None`` until known); ``evidence`` what set the state last
    (``"link"``, ``"answer"``, ``"receipt"``, ``"echo"``, ``"replay"``, ``"snapshot"``, ``"turn_end"``,
    ``"no_evidence"``, ``"restart"``); ``stop_reason`` the turn's, when known; ``resent_as`` the id of the
    entry :meth:`Session.resend` made from this one. ``content`` is the prompt itself, held in memory only
    (``None`` for an entry read back from a store)."""

    __slots__ = (
        "_classified",
        "_message",
        "_pending",
        "content",
        "created_at",
        "digest",
        "evidence",
        "message_id",
        "prompt_id",
        "resent_as",
        "state",
        "stop_reason",
        "updated_at",
    )

    def __init__(
        self,
        prompt_id: str,
        digest: str,
        state: PromptState = PromptState.SENT,
        *,
        content: list[dict[str, Any]] | None = None,
        created_at: float | None = None,
    ) -> None:
        self.prompt_id = prompt_id
        self.digest = digest
        self.state = state
        self.message_id: str | None = None
        self.evidence: str | None = None
        self.stop_reason: str | None = None
        self.resent_as: str | None = None
        self.content = content
        self.created_at = self.updated_at = created_at if created_at is not None else time.time()
        self._message: Any = None  # the transcript's record of it (in memory)
        self._pending = False  # a drop interrupted it: classified after the recovery
        self._classified: asyncio.Event | None = None

    def __repr__(self) -> str:
        return f"<PromptEntry {self.prompt_id} {self.state.value} message_id={self.message_id!r}>"

    @property
    def awaiting_classification(self) -> bool:
        """``True`` from a drop that interrupted this prompt until the recovery classified it."""
        return self._pending

    async def wait_classified(self, timeout: float) -> PromptState:
        """Wait (at most ``timeout`` seconds, ``TimeoutError``) until no recovery classification is owed for
        this entry, and return its state."""
        if not self._pending:
            return self.state
        if self._classified is None:
            self._classified = asyncio.Event()
        async with asyncio.timeout(timeout):
            await self._classified.wait()
        return self.state

    def to_dict(self) -> dict[str, Any]:
        """What a store keeps of the entry (no content)."""
        data: dict[str, Any] = {
            "id": self.prompt_id,
            "digest": self.digest,
            "state": self.state.value,
            "created": self.created_at,
            "updated": self.updated_at,
        }
        for key, value in (
            ("messageId", self.message_id),
            ("evidence", self.evidence),
            ("stopReason", self.stop_reason),
            ("resentAs", self.resent_as),
        ):
            if value is not None:
                data[key] = value
        if self._pending:
            data["pending"] = True
        return data

    @classmethod
    def from_dict(cls, data: Any) -> PromptEntry | None:
        """An entry read back from a store (``None`` for a malformed one); a state this version does not
        know reads as ``unknown``."""
        if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not isinstance(data.get("digest"), str):
            return None
        try:
            state = PromptState(data.get("state"))
        except ValueError:
            state = PromptState.UNKNOWN
        created = data.get("created")
        entry = cls(data["id"], data["digest"], state, created_at=created if isinstance(created, int | float) else None)
        updated = data.get("updated")
        if isinstance(updated, int | float):
            entry.updated_at = float(updated)
        for key, attr in (("messageId", "message_id"), ("evidence", "evidence"), ("stopReason", "stop_reason")):
            value = data.get(key)
            if isinstance(value, str):
                setattr(entry, attr, value)
        resent = data.get("resentAs")
        entry.resent_as = resent if isinstance(resent, str) else None
        entry._pending = data.get("pending") is True
        return entry


@dataclass(frozen=True, slots=True)
class ClassifyEvidence:
    """What a recovery showed about a session, for :meth:`PromptLedger.classify`: ``replayed`` (a replay
    rebuilt the transcript), the replayed user messages as ``(message_id, digest)`` pairs, and the v2
    foreground ``state`` learned (``None``: not reported, or v1)."""

    replayed: bool
    user_messages: tuple[tuple[str | None, str], ...]
    state: str | None


class PromptLedger:
    """The prompt entries of one session, newest last, bounded to ``size`` (see the module docstring). The
    session is its one writer."""

    __slots__ = ("_entries", "contradictions", "discarded_ids")

    def __init__(self, size: int = PROMPT_LEDGER_SIZE) -> None:
        self._entries: collections.deque[PromptEntry] = collections.deque(maxlen=size)
        #: message ids from the agent that were not taken (not a string, or longer than MAX_MESSAGE_ID)
        self.discarded_ids = 0
        #: recoveries whose replay contradicted what a receipt had shown (the receipt is kept)
        self.contradictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[PromptEntry]:
        return iter(self._entries)

    def get(self, prompt_id: str) -> PromptEntry | None:
        """The entry ``prompt_id``, or ``None`` (never made here, or pushed out by newer ones)."""
        return next((e for e in self._entries if e.prompt_id == prompt_id), None)

    def begin(self, blocks: list[dict[str, Any]], prompt_id: str | None = None) -> PromptEntry:
        """A new entry for a prompt about to go out (state ``sent``), under ``prompt_id`` or a fresh id."""
        entry = PromptEntry(prompt_id or new_prompt_id(), content_digest(blocks), content=blocks)
        self._entries.append(entry)
        return entry

    def load(self, stored: Iterable[Any]) -> None:
        """Take the entries a store kept (a process restart): one still in flight when the process ended is
        owed a classification."""
        for data in stored:
            entry = PromptEntry.from_dict(data)
            if entry is None:
                continue
            if entry.state in (PromptState.SENT, PromptState.INSERTED):
                entry._pending = True
            self._entries.append(entry)

    def snapshot(self) -> list[dict[str, Any]]:
        """The entries as the store keeps them."""
        return [entry.to_dict() for entry in self._entries]

    def settle_unsent(self, entry: PromptEntry) -> None:
        """The link says ``entry`` never left the client: ``not_sent``, and no classification is owed."""
        self.move(entry, PromptState.NOT_SENT, "link")
        self._done(entry)

    @staticmethod
    def _done(entry: PromptEntry) -> None:
        entry._pending = False
        if entry._classified is not None:
            entry._classified.set()

    def move(self, entry: PromptEntry, state: PromptState, evidence: str, *, message_id: Any = None) -> bool:
        """Move ``entry`` to ``state``; ``False`` when nothing changed. A settled entry never moves again, and
        ``inserted`` never goes back to ``sent``."""
        if entry.state in _SETTLED or entry.state is state:
            if message_id is not None and entry.message_id is None:
                self._take_id(entry, message_id)
            return False
        if state is PromptState.SENT:
            return False
        if message_id is not None:
            self._take_id(entry, message_id)
        entry.state = state
        entry.evidence = evidence
        entry.updated_at = time.time()
        return True

    def _take_id(self, entry: PromptEntry, message_id: Any) -> None:
        if isinstance(message_id, str) and 0 < len(message_id) <= MAX_MESSAGE_ID:
            entry.message_id = message_id
        else:
            self.discarded_ids += 1
            log.warning("prompt_ledger_message_id_discarded", prompt_id=entry.prompt_id, bound=MAX_MESSAGE_ID)

    def interrupted(self) -> list[PromptEntry]:
        """The link dropped: every entry still in flight is owed a classification. Returns them."""
        hit = [e for e in self._entries if e.state in (PromptState.SENT, PromptState.INSERTED)]
        for entry in hit:
            entry._pending = True
        return hit

    def pending(self) -> list[PromptEntry]:
        """The entries owed a classification."""
        return [e for e in self._entries if e._pending]

    def turn_ended(self, stop_reason: str | None, evidence: str) -> list[PromptEntry]:
        """A turn ended live: every ``inserted`` entry is ``finished``. Returns the entries that moved."""
        moved = []
        for entry in self._entries:
            if entry.state is PromptState.INSERTED and self.move(entry, PromptState.FINISHED, evidence):
                entry.stop_reason = stop_reason
                moved.append(entry)
        return moved

    def classify(self, seen: ClassifyEvidence) -> list[PromptEntry]:
        """Classify every entry owed a classification from what the recovery showed (``docs/design.md``,
        "Prompt ledger"). Returns the classified entries, each with its classification done."""
        done = self.pending()
        for entry in done:
            self._classify_one(entry, seen)
            self._done(entry)
        return done

    def _classify_one(self, entry: PromptEntry, seen: ClassifyEvidence) -> None:
        if entry.state in _SETTLED:
            return
        in_replay = self._replay_holds(entry, seen)
        if entry.state is PromptState.SENT:
            if in_replay:
                self.move(entry, PromptState.INSERTED, "replay", message_id=self._replayed_id(entry, seen))
            else:
                why = "replay" if seen.replayed and seen.user_messages else "no_evidence"
                self.move(entry, PromptState.UNKNOWN, why)
                return
        elif seen.replayed and seen.user_messages and not in_replay:
            # a receipt (or an echo) said inserted; the replay does not hold it: the receipt is kept
            self.contradictions += 1
            log.warning("prompt_ledger_replay_contradicts_receipt", prompt_id=entry.prompt_id)
        if seen.state == "idle":
            self.move(entry, PromptState.FINISHED, "snapshot")

    def _replay_holds(self, entry: PromptEntry, seen: ClassifyEvidence) -> bool:
        if not seen.replayed:
            return False
        if entry.message_id is not None:
            return any(mid == entry.message_id for mid, _ in seen.user_messages)
        # no id: match the content. Replayed messages with an id some other entry holds are that entry's;
        # several prompts with the same content are counted (more replayed than settled ones: it is there)
        claimed = {e.message_id for e in self._entries if e.message_id is not None}
        same = sum(1 for mid, digest in seen.user_messages if digest == entry.digest and mid not in claimed)
        earlier = sum(
            1
            for e in self._entries
            if e is not entry
            and e.digest == entry.digest
            and e.message_id is None
            and e.state in (PromptState.INSERTED, PromptState.FINISHED)
        )
        return same > earlier

    def _replayed_id(self, entry: PromptEntry, seen: ClassifyEvidence) -> str | None:
        claimed = {e.message_id for e in self._entries if e.message_id is not None}
        ids = [mid for mid, digest in seen.user_messages if digest == entry.digest and mid is not None]
        free = [mid for mid in ids if mid not in claimed]
        return free[-1] if free else None

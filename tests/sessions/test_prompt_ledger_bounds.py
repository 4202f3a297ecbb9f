"""The prompt ledger's bounds and its place in the stored record (issue 32 §3): at most PROMPT_LEDGER_SIZE
entries, an agent's messageId bounded, the record's JSON unchanged for sessions without prompts (old readers
and old records keep working), and every store keeping the entries (digests, never the content)."""

from __future__ import annotations

import json
from pathlib import Path

from acp_client import PROMPT_LEDGER_SIZE, MemorySessionStore, PromptState, SessionRecord, SQLiteSessionStore
from acp_client.sessions import PromptLedger
from acp_client.sessions._ledger import MAX_MESSAGE_ID, ClassifyEvidence, content_digest


def blocks(text: str) -> list[dict[str, object]]:
    return [{"type": "text", "text": text}]


def test_the_ledger_keeps_the_last_entries_only() -> None:
    ledger = PromptLedger()
    entries = [ledger.begin(blocks(f"p{i}")) for i in range(PROMPT_LEDGER_SIZE + 5)]
    assert len(ledger) == PROMPT_LEDGER_SIZE
    assert list(ledger) == entries[5:]
    assert ledger.get(entries[0].prompt_id) is None


def test_a_huge_or_malformed_message_id_is_discarded_and_counted() -> None:
    ledger = PromptLedger()
    entry = ledger.begin(blocks("x"))
    assert ledger.move(entry, PromptState.INSERTED, "receipt", message_id="m" * (MAX_MESSAGE_ID + 1))
    assert entry.message_id is None and ledger.discarded_ids == 1
    ledger.move(entry, PromptState.FINISHED, "turn_end", message_id=42)
    assert entry.message_id is None and ledger.discarded_ids == 2
    assert not ledger.move(entry, PromptState.INSERTED, "echo")  # finished is final


def test_a_replay_of_repeated_content_must_hold_more_than_the_settled_ones() -> None:
    ledger = PromptLedger()
    done = ledger.begin(blocks("continue"))
    ledger.move(done, PromptState.FINISHED, "answer")
    lost = ledger.begin(blocks("continue"))
    ledger.interrupted()
    once = ClassifyEvidence(True, ((None, content_digest(blocks("continue"))),), None)
    assert ledger.classify(once) == [lost] and lost.state is PromptState.UNKNOWN
    again = ledger.begin(blocks("continue"))
    ledger.interrupted()
    twice = ClassifyEvidence(True, ((None, content_digest(blocks("continue"))),) * 2, "idle")
    ledger.classify(twice)
    assert (again.state, again.evidence) == (PromptState.FINISHED, "snapshot")


def test_a_record_without_prompts_is_written_as_before_and_old_json_reads_back() -> None:
    plain = SessionRecord("s1", "/w", created_at=1.0)
    data = json.loads(plain.to_json())
    assert "prompts" not in data and "desired_config" not in data
    assert SessionRecord.from_json(plain.to_json()) == plain
    newer = json.dumps({**data, "prompts": [{"id": "p_1", "digest": "d", "state": "a_future_state"}], "x": 1})
    record = SessionRecord.from_json(newer)
    ledger = PromptLedger()
    ledger.load(record.prompts)
    (entry,) = ledger
    assert entry.state is PromptState.UNKNOWN and entry.content is None  # an unknown state reads as unknown


async def test_every_store_keeps_the_ledger_as_digests(tmp_path: Path) -> None:
    ledger = PromptLedger()
    entry = ledger.begin(blocks("secret plan"))
    ledger.move(entry, PromptState.INSERTED, "receipt", message_id="msg_1")
    record = SessionRecord("s1", "/w", prompts=ledger.snapshot(), desired_config={"options": {"model": "smart"}})
    sqlite = SQLiteSessionStore(tmp_path / "s.db")
    for store in (MemorySessionStore(), sqlite):
        await store.save(record)
        (back,) = await store.load_all()
        assert back.prompts == record.prompts and back.desired_config == record.desired_config
        assert "secret plan" not in json.dumps(back.prompts)
        await store.close()

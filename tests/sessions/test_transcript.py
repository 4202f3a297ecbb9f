"""The transcript is the conversation (issue 9, item 14) and stays compact on long streams.

Over a real loopback link to the reference agent, v1 and v2: the user's own prompt is a user message as soon
as it is sent (the agent's echo takes its place, never a second copy); two turns answered without message ids
stay two messages; after a replay the transcript equals what a fresh client builds from the same replay.
Directly on :class:`Transcript`: consecutive plain text chunks share one block, whatever else arrives is kept.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from acp_client import connect
from acp_client.sessions import Transcript
from acp_client.testing import ReferenceAgent
from tests.conftest import bound

CWD = "/tmp"


def _conversation(transcript: Transcript) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in transcript.messages]


def _chunk(text: Any, message_id: str | None = None, kind: str = "agent_message_chunk") -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    if message_id is not None:
        update["messageId"] = message_id
    return update


# ---------------------------------------------------------------------------------------------- over the wire


async def test_the_prompt_is_a_user_message_once(agent: ReferenceAgent, version: int) -> None:
    async with asyncio.timeout(bound(20)), connect(agent.url, protocol_version=version) as client:
        session = await client.new_session(CWD)
        await session.prompt("hello")  # not a script: the reference agent echoes it
        await session.prompt("again")
        assert _conversation(session.transcript) == [
            ("user", "hello"),
            ("agent", "hello"),
            ("user", "again"),
            ("agent", "again"),
        ]
        if version >= 2:  # the agent echoed each prompt (user_message): the echo took the local copy's place
            user_ids = [m.message_id for m in session.transcript.messages if m.role == "user"]
            assert all(isinstance(i, str) for i in user_ids) and len(set(user_ids)) == 2


async def test_a_prompt_that_was_never_sent_leaves_no_message(agent: ReferenceAgent, version: int) -> None:
    async with asyncio.timeout(bound(20)):
        client = await connect(agent.url, protocol_version=version)
        session = await client.new_session(CWD)
        await client.aclose()
        with pytest.raises(Exception) as info:
            await session.prompt("lost")
        assert getattr(info.value, "request_sent", False) is False
        assert session.transcript.messages == []


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
async def test_two_turns_without_message_ids_stay_two_messages(version: int) -> None:
    async def answer(turn: Any) -> str:
        # like real v1 agents: chunks without messageId (v2 requires one: each turn its own)
        word = turn.text.split()[-1]
        for part in (word[:2], word[2:]):
            update = _chunk(part, None if version < 2 else f"m-{word}")
            await turn.update(update)
        return "end_turn"

    async with asyncio.timeout(bound(20)), ReferenceAgent(version, on_prompt=answer) as agent:
        client = await connect(agent.url, protocol_version=version)
        try:
            session = await client.new_session(CWD)
            await session.prompt("say hello")
            await session.prompt("say again")
            assert _conversation(session.transcript) == [
                ("user", "say hello"),
                ("agent", "hello"),
                ("user", "say again"),
                ("agent", "again"),
            ]
        finally:
            await client.aclose()


async def test_after_a_replay_the_transcript_is_what_a_fresh_client_builds(version: int) -> None:
    # v2 replays whole messages by default and chunks on request; v1 load replays chunks (user ones included)
    for replay_as in ("messages", "chunks") if version >= 2 else ("chunks",):
        async with (
            asyncio.timeout(bound(30)),
            ReferenceAgent(version, replay_as=replay_as) as agent,
            connect(agent.url, protocol_version=version) as client,
        ):
            session = await client.new_session(CWD)
            await session.prompt("hello")
            await session.prompt("stream 3")
            live = _conversation(session.transcript)
            await _replay(client, session.id, version)
            assert session.transcript is not None
            replayed = copy.deepcopy(_conversation(session.transcript))
            mine = session.transcript
            async with connect(agent.url, protocol_version=version) as fresh:
                other = await _replay(fresh, session.id, version)
                assert mine == other.transcript
            assert replayed == live  # the same conversation, each user message once
            assert [role for role, _ in replayed].count("user") == 2
            assert live == [
                ("user", "hello"),
                ("agent", "hello"),
                ("user", "stream 3"),
                ("agent", "chunk 1 chunk 2 chunk 3 "),
            ]


async def _replay(client: Any, session_id: str, version: int) -> Any:
    if version >= 2:
        return await client.resume_session(session_id, CWD, replay=True)
    return await client.load_session(session_id, CWD)


# ---------------------------------------------------------------------------------------------- Transcript


def test_plain_text_chunks_of_one_message_share_one_block() -> None:
    transcript = Transcript()
    updates = [_chunk(f"c{i} ", "m1") for i in range(1000)]
    originals = copy.deepcopy(updates)
    for update in updates:
        transcript.apply(update)
    [message] = transcript.messages
    assert message.content == [{"type": "text", "text": "".join(f"c{i} " for i in range(1000))}]
    assert updates == originals  # the agent's dictionaries are never mutated
    # reading in the middle of a stream and going on
    transcript.apply(_chunk("more", "m1"))
    assert message.text.endswith("c999 more")
    # any other block ends the run and is kept as received; text after it starts a new block
    image = {"type": "image", "data": "AA==", "mimeType": "image/png"}
    annotated = {"type": "text", "text": "x", "annotations": {"priority": 1}}
    transcript.apply({"sessionUpdate": "agent_message_chunk", "messageId": "m1", "content": image})
    transcript.apply({"sessionUpdate": "agent_message_chunk", "messageId": "m1", "content": annotated})
    transcript.apply(_chunk("tail", "m1"))
    assert message.content[1:] == [image, annotated, {"type": "text", "text": "tail"}]
    assert len(message.content) == 4


def test_a_turn_boundary_separates_chunks_without_ids() -> None:
    transcript = Transcript()
    transcript.apply(_chunk("hel"))
    transcript.apply(_chunk("lo"))
    transcript._end_turn()
    transcript.apply(_chunk("again"))
    assert _conversation(transcript) == [("agent", "hello"), ("agent", "again")]


def test_an_echo_replaces_the_recorded_prompt() -> None:
    transcript = Transcript()
    transcript._record_prompt([{"type": "text", "text": "hi there"}])
    # echoed as chunks: the first chunk replaces the local copy, the next ones extend it
    transcript.apply(_chunk("hi ", "u1", kind="user_message_chunk"))
    transcript.apply(_chunk("there", "u1", kind="user_message_chunk"))
    transcript.apply(_chunk("hello", "a1"))
    assert _conversation(transcript) == [("user", "hi there"), ("agent", "hello")]
    assert transcript.messages[0].message_id == "u1"
    # a v2 whole-message echo
    transcript._record_prompt([{"type": "text", "text": "next"}])
    content = [{"type": "text", "text": "next"}]
    transcript.apply({"sessionUpdate": "user_message", "messageId": "u2", "content": content})
    assert _conversation(transcript)[-1] == ("user", "next")
    assert [m.message_id for m in transcript.messages] == ["u1", "a1", "u2"]


async def test_the_typed_model_of_a_streamed_chunk_is_built_when_read(agent: ReferenceAgent, version: int) -> None:
    from acp_client import SessionUpdate
    from acp_client.schema import models_for

    async with asyncio.timeout(bound(20)), connect(agent.url, protocol_version=version) as client:
        session = await client.new_session(CWD)
        stream = session.updates()
        await session.prompt("stream 2")
        chunks = []
        async for item in stream:
            if isinstance(item, SessionUpdate) and item.kind == "agent_message_chunk":
                chunks.append(item)
                if len(chunks) == 2:
                    break
        model = chunks[0].update
        assert model is chunks[0].update  # built once
        assert isinstance(model, models_for(version).SessionUpdateAgentMessageChunk)
        assert model.content.text == "chunk 1 "
        assert model.to_wire() == chunks[0].raw
        assert chunks[1].text == "chunk 2 "


def test_tool_call_content_chunks_append_in_place_without_touching_the_wire_list() -> None:
    """Each ``tool_call_content_chunk`` is an O(1) append (the list is copied once, not per chunk), and the
    list that came on the wire in a ``tool_call`` is never mutated."""
    transcript = Transcript()
    wire_content = [{"type": "content", "content": {"type": "text", "text": "first"}}]
    transcript.apply({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "t", "content": wire_content})
    chunk = {"sessionUpdate": "tool_call_content_chunk", "toolCallId": "c1"}
    transcript.apply({**chunk, "content": {"type": "text", "text": "1"}})
    owned = transcript.tool_calls["c1"].fields["content"]
    assert owned is not wire_content and len(wire_content) == 1
    for n in range(2, 1001):
        transcript.apply({**chunk, "content": {"type": "text", "text": str(n)}})
    assert transcript.tool_calls["c1"].fields["content"] is owned  # appended in place: no copy per chunk
    assert [block.get("text") for block in owned[1:]] == [str(n) for n in range(1, 1001)]
    # an update that carries content replaces the list; the next chunk copies it once more
    replaced = [{"type": "text", "text": "new"}]
    transcript.apply({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "content": replaced})
    transcript.apply({**chunk, "content": {"type": "text", "text": "after"}})
    assert replaced == [{"type": "text", "text": "new"}]
    assert transcript.tool_calls["c1"].fields["content"][-1] == {"type": "text", "text": "after"}

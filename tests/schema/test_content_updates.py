"""The public, version-neutral content helpers and typed updates: validated blocks, clear errors for wrong
types, and the same dataclasses from a v1 and a v2 agent."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

import acp_client
from acp_client import (
    AgentMessageChunk,
    MessageUpdate,
    Plan,
    SessionUpdate,
    StateUpdate,
    ToolCall,
    ToolCallUpdate,
    UnknownUpdate,
    UsageError,
    UserMessageChunk,
    embedded_resource,
    image,
    resource_link,
    text,
    typed_update,
)
from acp_client.schema.content import prompt_blocks
from acp_client.testing import ReferenceAgent
from tests.conftest import bound

# ---------------------------------------------------------------------- content helpers


def test_helpers_build_the_wire_blocks() -> None:
    assert text("hi") == {"type": "text", "text": "hi"}
    assert image(b"\x89PNG", "image/png") == {
        "type": "image",
        "data": base64.b64encode(b"\x89PNG").decode(),
        "mimeType": "image/png",
    }
    assert resource_link("file:///w/a.py", "a.py", mime_type="text/x-python", size=3) == {
        "type": "resource_link",
        "uri": "file:///w/a.py",
        "name": "a.py",
        "mimeType": "text/x-python",
        "size": 3,
    }
    assert embedded_resource("file:///w/n.md", text="# n") == {
        "type": "resource",
        "resource": {"uri": "file:///w/n.md", "text": "# n"},
    }
    assert embedded_resource("file:///w/b", blob=b"\x00")["resource"]["blob"] == "AA=="
    assert text("x", meta={"k": 1})["_meta"] == {"k": 1}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: text(123), "text(): value must be a str, not int"),  # type: ignore[arg-type]
        (lambda: image("not base64!", "image/png"), "must be base64"),
        (lambda: image(b"x", "text/plain"), "must be a image/* type"),
        (lambda: image(b"x", "png"), "type/subtype"),
        (lambda: image(3, "image/png"), "must be bytes"),  # type: ignore[arg-type]
        (lambda: resource_link("a.py", "a.py"), "absolute URI"),
        (lambda: resource_link("file:///a", ""), "name must not be empty"),
        (lambda: resource_link("file:///a", "a", size=-1), "non-negative int"),
        (lambda: embedded_resource("file:///a"), "exactly one of text= or blob="),
        (lambda: embedded_resource("file:///a", text="x", blob=b"y"), "exactly one of text= or blob="),
        (lambda: prompt_blocks(123), "prompt content must be a str, a content block or a list of them, not int"),  # type: ignore[arg-type]
        (lambda: prompt_blocks(b"hi"), "not bytes"),  # type: ignore[arg-type]
        (lambda: prompt_blocks([]), "must not be empty"),
        (lambda: prompt_blocks([{"text": "no type"}]), "without a 'type'"),
        (lambda: prompt_blocks(["ok", 5]), "prompt item 1 must be a str or a content block"),  # type: ignore[list-item]
    ],
)
def test_wrong_types_raise_usage_errors_that_say_what_to_do(call: Any, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        call()
    assert message in str(caught.value)


def test_prompt_content_forms() -> None:
    assert prompt_blocks("hi") == [text("hi")]
    assert prompt_blocks(text("hi")) == [text("hi")]
    assert prompt_blocks(["a", text("b")]) == [text("a"), text("b")]
    future = {"type": "video", "url": "https://x"}  # a newer block type is passed on untouched
    assert prompt_blocks([future]) == [future]


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
async def test_session_prompt_accepts_blocks_and_refuses_a_number(version: int) -> None:
    async with ReferenceAgent(version) as agent, acp_client.connect(agent.url) as client:
        session = await client.new_session("/work")
        with pytest.raises(UsageError, match="prompt content must be a str"):
            await session.prompt(123)  # type: ignore[arg-type]
        assert agent.count("session/prompt") == 0  # refused before anything was sent
        result = await session.prompt([text("echo: "), resource_link("file:///w/a.py", "a.py")], timeout=bound(10))
        assert result.stop_reason == "end_turn"
        sent = agent.received[-1].params if agent.received[-1].method == "session/prompt" else None
        prompts = [r.params["prompt"] for r in agent.received if r.method == "session/prompt"]
        assert prompts == [[text("echo: "), resource_link("file:///w/a.py", "a.py")]], sent


# ---------------------------------------------------------------------- typed updates


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            {"sessionUpdate": "agent_message_chunk", "messageId": "m1", "content": {"type": "text", "text": "hi"}},
            AgentMessageChunk("m1", {"type": "text", "text": "hi"}, "hi", "agent_message_chunk", {}),
        ),
        (
            {
                "sessionUpdate": "user_message_chunk",
                "content": {"type": "image", "data": "AA==", "mimeType": "image/png"},
            },
            UserMessageChunk(
                None, {"type": "image", "data": "AA==", "mimeType": "image/png"}, "", "user_message_chunk", {}
            ),
        ),
        (
            {"sessionUpdate": "agent_message", "messageId": "m2", "content": [text("a"), text("b")]},
            MessageUpdate("agent", "m2", (text("a"), text("b")), "ab", "agent_message", {}),
        ),
        (
            {"sessionUpdate": "agent_message", "messageId": "m2", "content": None},
            MessageUpdate("agent", "m2", (), "", "agent_message", {}),
        ),
        (
            {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Run", "kind": "execute", "status": "pending"},
            ToolCall("c1", "Run", "execute", "pending", "tool_call", {}),
        ),
        (
            {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"},
            ToolCallUpdate("c1", None, None, "completed", frozenset({"status"}), "tool_call_update", {}),
        ),
        (
            {"sessionUpdate": "plan", "entries": [{"content": "x", "priority": "high", "status": "pending"}]},
            Plan(({"content": "x", "priority": "high", "status": "pending"},), None, "plan", {}),
        ),
        (
            {"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "p", "entries": []}},
            Plan((), "p", "plan_update", {}),
        ),
        (
            {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"},
            StateUpdate("idle", "end_turn", "state_update", {}),
        ),
        ({"sessionUpdate": "usage_update", "used": 1, "size": 2}, UnknownUpdate("usage_update", {})),
        ({"sessionUpdate": "from_the_future", "x": 1}, UnknownUpdate("from_the_future", {})),
        # wrong shapes never raise: they are kept raw
        ({"sessionUpdate": "agent_message_chunk", "content": "not a block"}, UnknownUpdate("agent_message_chunk", {})),
        ({"sessionUpdate": "tool_call", "toolCallId": 5}, UnknownUpdate("tool_call", {})),
        ({"sessionUpdate": "state_update", "state": None}, UnknownUpdate("state_update", {})),
        ({"no": "kind"}, UnknownUpdate("", {})),
    ],
)
def test_typed_update_maps_both_versions_to_one_set_of_classes(raw: dict[str, Any], expected: Any) -> None:
    typed = typed_update(raw)
    assert typed == expected  # ``raw`` is left out of equality
    assert typed.raw is raw or typed.raw == raw


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
async def test_the_stream_reads_the_same_in_v1_and_v2(version: int) -> None:
    async with ReferenceAgent(version) as agent, acp_client.connect(agent.url) as client:
        session = await client.new_session("/work")
        stream = session.updates()
        await session.prompt("echo: hello\necho: world", timeout=bound(10))
        answer: list[str] = []
        async with asyncio.timeout(bound(10)):
            async for item in stream:
                assert isinstance(item, SessionUpdate)
                match item.typed:
                    case AgentMessageChunk(text=piece):
                        answer.append(piece)
                        assert item.text == piece
                if "".join(answer) == "helloworld":
                    break
        await stream.aclose()  # type: ignore[attr-defined]

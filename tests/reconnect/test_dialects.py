"""The dialects of "unknown session" and "live elsewhere" that recovery reads (issue 24 item 2).

Each table row names the agent whose answer it copies, the error, and what recovery must do with it. The
first table reads the answers alone (``SessionDialects.read``); the others replay them through the reference
agent over a real loopback WebSocket, with ``session/status`` not advertised (no agent in the field has
it), so the re-attach itself meets the dialect.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from acp_client import (
    RecoveryPolicy,
    SessionForgotten,
    SessionLink,
    SessionRecovered,
    SessionRecoveryFailed,
)
from acp_client.exceptions import RPCError, SessionNotFound, UsageError, rpc_error_from_object
from acp_client.reconnect._ownership.control import attached_elsewhere
from acp_client.reconnect.dialects import DEFAULT_DIALECTS, SessionDialects
from acp_client.testing import AgentError, ReferenceAgent
from tests.conftest import bound, started

SID = "3f0c2a9e-0000-4000-8000-000000000001"

# ---------------------------------------------------------------- the answers alone

READ_ROWS: list[tuple[str, int, str, Any, str]] = [
    ("kimi-cli", -32602, "Invalid params", {"session_id": "Session not found"}, "unknown"),
    ("qwen-code over HTTP", -32602, f"No session with id {SID}", None, "unknown"),
    ("qwen-code (code other than -32002)", -32603, f"Resource not found: session:{SID}", None, "unknown"),
    ("generic", -32602, "Invalid session identifier", None, "unknown"),
    ("generic", -32603, "Internal error", "Session not found", "unknown"),
    ("generic", -32603, f"session {SID} does not exist", None, "unknown"),
    (
        "qwen-code, live in the same process",
        -32023,
        "Session write ownership could not be verified",
        {"errorKind": "session_writer_unavailable"},
        "elsewhere",
    ),
    ("errorKind alone", -32603, "Internal error", {"errorKind": "session_writer_unavailable"}, "elsewhere"),
    (
        "reference agent",
        -32602,
        "Invalid params",
        {"reason": f"session {SID} is not attached to this connection"},
        "elsewhere",
    ),
    ("claude-agent-acp, a non-UUID id", -32603, "Internal error: Cannot read properties of undefined", None, "other"),
    ("a method the agent lacks", -32601, "Method not found: session/resume", None, "other"),
    ("auth required", -32000, "Authentication required: session not found before login", None, "other"),
    ("an attached file", -32602, "attached file too large", None, "other"),
]


@pytest.mark.parametrize(
    ("agent", "code", "message", "data", "expected"), READ_ROWS, ids=[f"{r[0]}:{r[1]}" for r in READ_ROWS]
)
def test_the_default_dialects_read_each_answer(agent: str, code: int, message: str, data: Any, expected: str) -> None:
    assert DEFAULT_DIALECTS.read(rpc_error_from_object(code, message, data)) == expected


def test_the_ownership_check_reads_the_same_table() -> None:
    qwen = RPCError(-32023, "Session write ownership unverified", {"errorKind": "session_writer_unavailable"})
    assert attached_elsewhere(qwen)
    assert not attached_elsewhere(qwen, SessionDialects(elsewhere_codes=frozenset(), elsewhere_kinds=frozenset()))
    assert not attached_elsewhere(RPCError(-32602, "Invalid params", {"session_id": "Session not found"}))


def test_each_dialect_is_configurable() -> None:
    kimi = RPCError(-32602, "Invalid params", {"session_id": "Session not found"})
    deaf = SessionDialects(unknown_phrases=())
    assert deaf.read(kimi) == "other"
    gone = dataclasses.replace(DEFAULT_DIALECTS, unknown_phrases=(*DEFAULT_DIALECTS.unknown_phrases, r"\bvanished\b"))
    assert gone.read(RPCError(-32603, "the session vanished")) == "unknown"
    assert SessionDialects(phrase_codes=frozenset()).read(kimi) == "other"
    qwen = RPCError(-32023, "Session write ownership could not be verified")
    assert SessionDialects(elsewhere_codes=frozenset()).read(qwen) == "other"
    assert SessionDialects(elsewhere_codes=frozenset({-32099})).read(RPCError(-32099, "busy")) == "elsewhere"
    assert DEFAULT_DIALECTS.read(SessionNotFound(-32002, "Resource not found")) == "other"  # a code, read first
    assert RecoveryPolicy().dialects == DEFAULT_DIALECTS
    with pytest.raises(UsageError, match="unknown_phrases"):
        SessionDialects(unknown_phrases=("(",))
    with pytest.raises(UsageError, match=r"RecoveryPolicy\.dialects"):
        RecoveryPolicy(dialects="kimi")  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_DIALECTS.list_with_cwd = False  # type: ignore[misc]


# ---------------------------------------------------------------- over a real link: an unknown session

UNKNOWN_ROWS: list[tuple[str, Any]] = [
    ("kimi-cli", lambda sid: AgentError(-32602, "Invalid params", {"session_id": "Session not found"})),
    ("qwen-code over HTTP", lambda sid: AgentError(-32602, f"No session with id {sid}")),
    ("qwen-code over stdio", lambda sid: AgentError(-32002, f"Resource not found: session:{sid}")),
    ("claude-agent-acp, a UUID", lambda sid: AgentError(-32002, "Resource not found")),
    ("generic", lambda sid: AgentError(-32603, "Invalid session identifier")),
]
VERSIONS = [(2, "session/resume"), (1, "session/load")]


def _lost_agent(version: int, **options: Any) -> ReferenceAgent:
    return ReferenceAgent(version, capabilities={"status": False}, **options)


@pytest.mark.parametrize(("version", "via"), VERSIONS, ids=["v2", "v1"])
@pytest.mark.parametrize(("agent_name", "answer"), UNKNOWN_ROWS, ids=[r[0] for r in UNKNOWN_ROWS])
async def test_an_unknown_session_in_each_dialect_is_forgotten_once(
    agent_name: str, answer: Any, version: int, via: str
) -> None:
    async with _lost_agent(version) as agent:
        agent.unknown_session_error = answer
        client, rec = await started(agent.url)
        try:
            gone, kept = await client.new_session("/w/gone"), await client.new_session("/w/kept")
            agent.forget_session(gone.id)
            await agent.drop_all_connections()
            await rec.wait(lambda e: isinstance(e, SessionForgotten), timeout=10)
            await rec.wait(_recovered(kept.id), timeout=10)
            assert [(e.session_id, e.reason, e.via) for e in rec.of(SessionForgotten)] == [(gone.id, "unknown", via)]
            assert agent.count(via, gone.id) == 1  # read once, never retried
            assert agent.count("session/list") == 0  # the words were enough
            assert gone.link is SessionLink.LOST and kept.link is SessionLink.ATTACHED
        finally:
            await rec.close()
            await client.aclose()


# ---------------------------------------------------------------- over a real link: a live session


OTHERS_ONLY = {"sessions": [{"sessionId": "sess_someone_else", "cwd": "/w/live"}]}

#: (agent, the error every re-attach answers for a while, how the agent lists, listing expected at all)
LIVE_ROWS: list[tuple[str, AgentError, str, bool]] = [
    (
        "qwen-code, owned by another connection",
        AgentError(
            -32023, "Session write ownership could not be verified", {"errorKind": "session_writer_unavailable"}
        ),
        "others",
        False,
    ),
    (
        "reference agent, attached elsewhere",
        AgentError(-32602, "Invalid params", {"reason": "the session is attached to another connection"}),
        "others",
        False,
    ),
    ("kimi-cli, lists nothing without a cwd", AgentError(-32603, "Internal error: disk busy"), "requires_cwd", True),
    ("claude-agent-acp, lists nothing yet", AgentError(-32603, "Internal error: disk busy"), "empty", True),
]


@pytest.mark.parametrize(("version", "via"), VERSIONS, ids=["v2", "v1"])
@pytest.mark.parametrize(("agent_name", "error", "listing", "listed"), LIVE_ROWS, ids=[r[0] for r in LIVE_ROWS])
async def test_a_live_session_is_never_forgotten_for_a_dialect(
    agent_name: str, error: AgentError, listing: str, listed: bool, version: int, via: str
) -> None:
    async with _lost_agent(version) as agent:
        agent.list_requires_cwd = listing == "requires_cwd"
        if listing == "empty":
            agent.list_answer = lambda params: {"sessions": []}
        elif listing == "others":  # a listing that would "prove" it absent, were it asked
            agent.list_answer = lambda params: OTHERS_ONLY
        client, rec = await started(agent.url)
        try:
            live = await client.new_session("/w/live")
            agent.method_errors[via] = error
            await agent.drop_all_connections()
            await rec.wait(lambda e: isinstance(e, SessionRecoveryFailed) and e.session_id == live.id, timeout=10)
            del agent.method_errors[via]  # the agent recovers its footing: the retry re-attaches
            await client.recover(live.id)
            await rec.wait(_recovered(live.id), timeout=10)
            assert not rec.of(SessionForgotten)
            assert live.link is SessionLink.ATTACHED
            lists = [r.params for r in agent.received if r.method == "session/list"]
            assert bool(lists) is listed  # "live elsewhere" is never checked against a listing
            assert all(params.get("cwd") == "/w/live" for params in lists)  # the check names the session's cwd
        finally:
            await rec.close()
            await client.aclose()


async def test_a_session_missing_from_a_listing_that_names_others_is_forgotten_as_not_listed() -> None:
    # claude-agent-acp answers a non-UUID id with a long -32603: only the listing can tell
    async with _lost_agent(2, list_page_size=1) as agent:
        agent.list_requires_cwd = True
        agent.unknown_session_error = lambda sid: AgentError(-32603, "Internal error: Cannot read properties")
        client, rec = await started(agent.url)
        try:
            gone, kept = await client.new_session("/w"), await client.new_session("/w")
            agent.forget_session(gone.id)
            await agent.drop_all_connections()
            await rec.wait(lambda e: isinstance(e, SessionForgotten), timeout=10)
            assert [(e.session_id, e.reason) for e in rec.of(SessionForgotten)] == [(gone.id, "not_listed")]
            assert kept.link in (SessionLink.ATTACHED, SessionLink.RECOVERING)
        finally:
            await rec.close()
            await client.aclose()


# ---------------------------------------------------------------- a load of an unknown id that succeeds


async def test_a_load_that_succeeds_without_the_history_is_checked_against_the_listing() -> None:
    async with ReferenceAgent(1, capabilities={"status": False}) as agent:
        agent.load_unknown_succeeds = True
        client, rec = await started(agent.url)
        try:
            gone = await client.new_session("/w")
            kept = await client.new_session("/w")
            empty = await client.new_session("/w")
            for session in (gone, kept):
                await asyncio.wait_for(session.prompt("echo: remember me"), bound(5))
            agent.forget_session(gone.id)  # the agent restarted: load of it answers {} and replays nothing
            agent.forget_session(empty.id)  # no history here: nothing to compare, the load is taken as given
            await agent.drop_all_connections()
            await rec.wait(lambda e: isinstance(e, SessionForgotten), timeout=10)
            await rec.wait(_recovered(kept.id), timeout=10)
            await rec.wait(_recovered(empty.id), timeout=10)
            assert [(e.session_id, e.reason, e.via) for e in rec.of(SessionForgotten)] == [
                (gone.id, "not_listed", "session/load")
            ]
            assert kept.transcript.messages  # replayed: that was the session
        finally:
            await rec.close()
            await client.aclose()


def _recovered(session_id: str) -> Any:
    return lambda e: isinstance(e, SessionRecovered) and e.session_id == session_id

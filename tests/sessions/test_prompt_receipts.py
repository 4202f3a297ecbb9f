"""v2 prompt receipts (``{"messageId"}``, schema alpha.5) end to end, and one user message per prompt in the
transcript: after the answer, the echo, a replay, a reconnect, a cancelled turn and a refused prompt."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Literal

import pytest

from acp_client import ReconnectingClient, SessionRecovered, UsageError
from acp_client.exceptions import InvalidRequest
from acp_client.sessions import Session
from acp_client.testing import AgentError, ReferenceAgent
from tests.conftest import Link, bound, over_links, running_client

link = over_links("ws", "http1", "h2c")


def _users(session: Session) -> list[tuple[str | None, str]]:
    return [(m.message_id, m.text) for m in session.transcript.messages if m.role == "user"]


def _agent_user_ids(agent: ReferenceAgent, session: Session) -> list[str]:
    return [m.message_id for m in agent.sessions[session.id].transcript if m.role == "user"]


async def _running(stream: AsyncIterator[Any]) -> None:
    """Wait (bounded) on a session's update stream until its turn reports ``running``; the stream is closed."""
    async with asyncio.timeout(bound(5)):
        async for item in stream:
            if getattr(item, "kind", None) == "state_update" and item.raw.get("state") == "running":
                break
    await stream.aclose()  # type: ignore[attr-defined]


async def test_prompt_returns_the_receipt_and_the_transcript_holds_the_message_once(
    link: Link, agent: ReferenceAgent, version: int
) -> None:
    async with running_client(link.url(agent), **link.options) as (client, _):
        session = await client.new_session("/w")
        result = await session.prompt("echo: one")
        assert result.stop_reason == "end_turn"
        if version >= 2:
            assert result.message_id == _agent_user_ids(agent, session)[0]
            assert result.raw == {"messageId": result.message_id}
        else:
            assert result.message_id is None  # v1: no receipt, and the reference agent echoes nothing live
        assert [text for _, text in _users(session)] == ["echo: one"]
        assert _users(session)[0][0] == result.message_id


async def test_the_user_message_is_held_once_after_a_reconnect_with_replay(link: Link, version: int) -> None:
    async with (
        link.agent(version) as agent,
        running_client(link.url(agent), **link.options) as (client, rec),
    ):
        session = await client.new_session("/w")
        first = await session.prompt("echo: one")
        second = await session.prompt("echo: two")
        before = _users(session)
        await agent.drop_all_connections(abort=True)
        await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, bound(10))
        assert _users(session) == before
        assert [text for _, text in _users(session)] == ["echo: one", "echo: two"]
        if version >= 2:
            assert [mid for mid, _ in before] == [first.message_id, second.message_id]
            assert [mid for mid, _ in _users(session)] == _agent_user_ids(agent, session)
        third = await session.prompt("echo: three")  # live again: still one message per prompt
        assert [text for _, text in _users(session)] == ["echo: one", "echo: two", "echo: three"]
        assert _users(session)[-1][0] == third.message_id


@pytest.mark.parametrize("answer", ["empty", "stop_reason"])
async def test_an_agent_answering_the_old_shape_still_works(
    link: Link, answer: Literal["empty", "stop_reason"]
) -> None:
    async with (
        link.agent(2, prompt_answer=answer) as agent,
        running_client(link.url(agent), **link.options) as (client, _),
    ):
        session = await client.new_session("/w")
        result = await asyncio.wait_for(session.prompt("echo: hi"), bound(5))
        assert result.stop_reason == "end_turn"  # the turn's end still comes from the idle state_update
        # no receipt: the id is the one the agent's echo carried
        assert result.message_id == _agent_user_ids(agent, session)[0]
        assert [text for _, text in _users(session)] == ["echo: hi"]


async def test_send_prompt_returns_the_receipt_while_the_turn_runs(link: Link) -> None:
    release = asyncio.Event()

    async def hook(turn: object) -> str:
        await turn.accept()  # type: ignore[attr-defined]
        await release.wait()
        return "end_turn"

    async with (
        link.agent(2, on_prompt=hook) as agent,
        running_client(link.url(agent), **link.options) as (client, _),
    ):
        session = await client.new_session("/w")
        finished: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        session.on_turn_finished(lambda _s, stop: finished.done() or finished.set_result(stop))
        receipt = await asyncio.wait_for(session.send_prompt("anything"), bound(5))
        assert receipt.message_id == _agent_user_ids(agent, session)[0]
        assert not finished.done()  # the turn runs on
        release.set()
        assert await asyncio.wait_for(finished, bound(5)) == "end_turn"
        assert _users(session) == [(receipt.message_id, "anything")]


async def test_send_prompt_is_refused_in_v1(link: Link) -> None:
    async with (
        link.agent(1) as agent,
        running_client(link.url(agent), **link.options) as (client, _),
    ):
        session = await client.new_session("/w")
        with pytest.raises(UsageError, match="needs protocol v2"):
            await session.send_prompt("hi")
        assert _users(session) == []


async def test_a_refused_v2_prompt_leaves_no_user_message(link: Link) -> None:
    async with (
        link.agent(2) as agent,
        running_client(link.url(agent), **link.options) as (client, _),
    ):
        session = await client.new_session("/w")
        agent.method_errors["session/prompt"] = AgentError(-32600, "not now")
        with pytest.raises(InvalidRequest):
            await session.prompt("echo: refused")
        del agent.method_errors["session/prompt"]
        await session.prompt("echo: taken")
        assert [text for _, text in _users(session)] == ["echo: taken"]


async def test_a_prompt_after_a_cancelled_one_waits_for_that_turn_to_end(link: Link) -> None:
    """Ctrl-C during ``prompt("sleep …")`` (the task cancelled, ``session/cancel`` sent as the sync facade does),
    then the next prompt: it is sent once the cancelled turn ended, and each prompt is held once."""
    async with (
        link.agent(2) as agent,
        running_client(link.url(agent), **link.options) as (client, _),
    ):
        session = await client.new_session("/w")
        running = session.updates()  # subscribed before the prompt goes out
        turn = asyncio.create_task(session.prompt("sleep 10"))
        await _running(running)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        await session.cancel()
        result = await asyncio.wait_for(session.prompt("echo: two"), bound(10))
        assert result.stop_reason == "end_turn"
        assert [text for _, text in _users(session)] == ["sleep 10", "echo: two"]
        assert [mid for mid, _ in _users(session)] == _agent_user_ids(agent, session)
        assert session.transcript.messages[-1].text == "two"


async def test_a_cancelled_turn_that_never_ends_delays_the_next_prompt_only_boundedly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from acp_client.sessions import _session

    monkeypatch.setattr(_session, "ABANDONED_TURN_WAIT", 0.2)
    async with ReferenceAgent(2) as agent:
        client = ReconnectingClient(agent.url)
        async with client:
            session = await client.new_session("/w")
            running = session.updates()
            turn = asyncio.create_task(session.prompt("sleep 30"))
            await _running(running)
            turn.cancel()
            with pytest.raises(asyncio.CancelledError):
                await turn
            # no session/cancel: the turn runs on; the next prompt waits 0.2 s, then goes out and is refused
            with pytest.raises(InvalidRequest, match="already running"):
                await asyncio.wait_for(session.prompt("echo: two"), bound(5))
            assert [text for _, text in _users(session)] == ["sleep 30"]


def _replaying_agent(version: int) -> ReferenceAgent:
    """An agent whose recovery replays history: v2 resume with ``replayFrom``; v1 ``session/load`` (no resume)."""
    if version >= 2:
        return ReferenceAgent(2)
    return ReferenceAgent(1, capabilities={"sessionCapabilities.resume": False})


async def test_a_replay_shorter_than_the_local_transcript_says_updates_may_be_missed(version: int) -> None:
    """An agent that comes back with less history than the client holds (it persisted less than it said):
    the recovery says so, in the event and in the stream's marker, instead of claiming nothing was missed."""
    async with (
        _replaying_agent(version) as agent,
        running_client(agent.url) as (client, rec),
    ):
        session = await client.new_session("/w")
        for text in ("echo: one", "echo: two", "echo: three"):
            await session.prompt(text)
        stream = session.updates()
        del agent.sessions[session.id].transcript[-3:]  # the agent lost its last three messages
        await agent.drop_all_connections(abort=True)
        events = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, bound(10))
        recovered = events[-1]
        assert isinstance(recovered, SessionRecovered)
        assert recovered.replayed is True
        assert recovered.may_have_missed_updates is True
        async with asyncio.timeout(bound(5)):
            async for item in stream:
                if getattr(item, "outcome", None) is not None:
                    assert item.may_have_missed_updates is True  # the marker
                    break
        await stream.aclose()


async def test_a_full_replay_does_not_claim_missed_updates(version: int) -> None:
    async with (
        _replaying_agent(version) as agent,
        running_client(agent.url) as (client, rec),
    ):
        session = await client.new_session("/w")
        await session.prompt("echo: one")
        await agent.drop_all_connections(abort=True)
        events = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, bound(10))
        recovered = events[-1]
        assert isinstance(recovered, SessionRecovered)
        assert (recovered.replayed, recovered.may_have_missed_updates) == (True, False)


async def test_a_v2_turn_that_fails_after_insertion_raises_turn_failed(link: Link) -> None:
    """Schema alpha.8: a turn that fails after its prompt was inserted ends idle with ``stopReason: "error"``
    and the error object; ``prompt()`` raises ``TurnFailed`` with it, and the prompt stays in the transcript."""
    from acp_client import TurnFailed

    async with (
        link.agent(2) as agent,
        running_client(link.url(agent), **link.options) as (client, _),
    ):
        session = await client.new_session("/w")
        stops: list[str | None] = []
        session.on_turn_finished(lambda _s, stop: stops.append(stop))
        with pytest.raises(TurnFailed) as failed:
            await asyncio.wait_for(session.prompt("echo: partial\nfail -32050 model overloaded"), bound(5))
        assert (failed.value.code, failed.value.message) == (-32050, "model overloaded")
        assert failed.value.message_id == _agent_user_ids(agent, session)[0]
        assert _users(session) == [(failed.value.message_id, "echo: partial\nfail -32050 model overloaded")]
        assert stops == ["error"] and session.state == "idle"
        assert (await session.prompt("echo: again")).stop_reason == "end_turn"  # the session goes on


async def test_a_prompt_sent_while_the_link_is_down_survives_the_recoverys_replay(version: int) -> None:
    """A prompt recorded while the session is not attached waits for the re-attachment; the replay that comes
    first cannot hold it, so the rebuilt transcript takes it over: it is neither lost nor doubled, and the
    recovery does not report a gap for it."""
    from acp_client import ConnectionDropped, SessionLink

    async with (
        _replaying_agent(version) as agent,
        running_client(agent.url, wait_for_ready=True) as (client, rec),
    ):
        session = await client.new_session("/w")
        await session.prompt("echo: before")
        await agent.drop_all_connections(abort=True)
        await rec.wait(lambda e: isinstance(e, ConnectionDropped), bound(5))
        assert session.link is not SessionLink.ATTACHED
        result = await asyncio.wait_for(session.prompt("echo: during"), bound(10))
        assert result.stop_reason == "end_turn"
        recovered = [e for e in rec.events if isinstance(e, SessionRecovered) and e.session_id == session.id]
        assert recovered and recovered[-1].replayed and not recovered[-1].may_have_missed_updates
        assert [text for _, text in _users(session)] == ["echo: before", "echo: during"]
        assert [m.text for m in session.transcript.messages if m.role == "agent"] == ["before", "during"]

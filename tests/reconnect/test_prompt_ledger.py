"""Issue 32 §3: the prompt ledger. Every ledger state reached by a scripted fault over a real loopback link
(reference agent behind a FaultProxy, v1 and v2), ``resend`` refused or allowed by what the ledger shows, and
hostile peers and stores: a replay that contradicts the receipt, a store that fails while the ledger is written.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from acp_client import (
    ClientState,
    ConnectionDropped,
    ConnectionLost,
    MemorySessionStore,
    NotConnected,
    PromptClassified,
    PromptEntry,
    PromptNotResendable,
    PromptState,
    ReconnectingClient,
    SessionRecord,
    SessionRecovered,
    SessionStoreFailed,
    SQLiteSessionStore,
    StateChanged,
)
from acp_client.testing import FaultProxy, ReferenceAgent
from acp_client.testing.agent._turns import PromptTurn
from tests.conftest import bound, started


def scripted(release: asyncio.Event) -> Any:
    """The turns the agent plays: "hold" accepts the prompt and works until ``release``; "stall" receives it
    and never inserts it; anything else is echoed."""

    async def hook(turn: PromptTurn) -> str | None:
        if turn.text.startswith("stall"):
            await release.wait()  # received, never inserted (the agent restarts or the test releases it)
            return None
        if turn.text.startswith("hold"):
            await turn.accept()
            await release.wait()
            await turn.say("done")
            return None
        await turn.say(f"echo {turn.text}")
        return None

    return hook


Rig = tuple[ReferenceAgent, FaultProxy, ReconnectingClient, Any, asyncio.Event]


@contextlib.asynccontextmanager
async def behind_proxy(version: int, **client: Any) -> AsyncIterator[Rig]:
    """The agent (playing :func:`scripted` turns), a proxy in front of it, a ready client through the proxy,
    its event recorder, and the event that releases the held turns."""
    release = asyncio.Event()
    async with (
        ReferenceAgent(version, on_prompt=scripted(release)) as agent,
        FaultProxy("127.0.0.1", agent.port) as proxy,
    ):
        rc, rec = await started(proxy.url(), **client)
        try:
            yield agent, proxy, rc, rec, release
        finally:
            release.set()
            await rec.close()
            await rc.aclose()


def classified(session_id: str) -> Any:
    return lambda e: isinstance(e, PromptClassified) and e.session_id == session_id


def user_texts(session: Any) -> list[str]:
    return [m.text for m in session.transcript.messages if m.role == "user"]


async def inserted_prompt(session: Any, text: str) -> asyncio.Task[Any]:
    """Start ``session.prompt(text)`` (v2) and return its task once the agent's echo of it arrived: the
    receipt came first on the same link, so the prompt's entry is ``inserted`` by then."""
    updates = session.updates()
    prompt = asyncio.create_task(session.prompt(text))
    async with asyncio.timeout(bound(5)):
        async for item in updates:
            if getattr(item, "kind", None) in ("user_message", "user_message_chunk") and not item.replay:
                break
    await updates.aclose()
    return prompt


async def agent_holds_user_message(agent: ReferenceAgent, session_id: str, n: int = 1) -> None:
    def inserted() -> bool:
        record = agent.sessions.get(session_id)
        return record is not None and sum(1 for m in record.transcript if m.role == "user") >= n

    await agent.wait_for(inserted, timeout=bound(5))


# ---------------------------------------------------------------- cut before send: never written


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
async def test_cut_before_send_says_not_sent_and_resend_goes_out_once(version: int) -> None:
    async with behind_proxy(version) as (agent, proxy, client, rec, _):
        session = await client.new_session("/w")
        proxy.set_listener("refuse")  # the next connection cannot be made: the client stays in backoff
        await proxy.cut_all()
        await rec.wait(lambda e: isinstance(e, StateChanged) and e.new is ClientState.BACKOFF, timeout=bound(5))
        with pytest.raises(NotConnected):
            await session.prompt("echo: first")
        (entry,) = list(session.prompt_ledger)
        assert entry.state is PromptState.NOT_SENT and entry.evidence == "link"
        assert not entry.awaiting_classification
        assert agent.count("session/prompt") == 0
        assert user_texts(session) == []  # never sent: not in the conversation
        proxy.set_listener("accept")
        client.reconnect_now()
        await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=bound(10))
        result = await asyncio.wait_for(session.resend(entry), bound(10))
        assert result.stop_reason == "end_turn"
        assert agent.count("session/prompt") == 1
        assert user_texts(session) == ["echo: first"]
        assert entry.resent_as is not None and session.prompt_ledger.get(entry.resent_as) is not None
        assert session.prompt_ledger.get(entry.resent_as).state is PromptState.FINISHED  # type: ignore[union-attr]
        with pytest.raises(PromptNotResendable):  # re-sent once already
            await session.resend(entry)
        assert not rec.of(PromptClassified)  # a prompt the link never wrote needs no classification


# ---------------------------------------------------------------- cut after the receipt (v2): inserted


async def test_cut_after_the_receipt_is_inserted_then_finished_and_never_resent() -> None:
    async with behind_proxy(2) as (agent, proxy, client, rec, release):
        session = await client.new_session("/w")
        prompt = await inserted_prompt(session, "hold: work")
        await proxy.cut_all()
        with pytest.raises(ConnectionLost) as info:
            await asyncio.wait_for(prompt, bound(5))
        entry = info.value.prompt_entry
        assert isinstance(entry, PromptEntry)
        assert info.value.request_sent
        assert entry.state is PromptState.INSERTED and entry.evidence in ("receipt", "echo")
        assert entry.message_id is not None
        (event,) = await rec.wait(classified(session.id), timeout=bound(10))
        assert (event.prompt_id, event.state, event.message_id) == (entry.prompt_id, "inserted", entry.message_id)
        assert await entry.wait_classified(bound(5)) is PromptState.INSERTED  # the turn still runs
        with pytest.raises(PromptNotResendable, match="inserted"):
            await session.resend(entry)
        finished = asyncio.get_running_loop().create_future()
        session.on_turn_finished(lambda s, stop: finished.done() or finished.set_result(stop))
        release.set()
        await asyncio.wait_for(finished, bound(5))
        assert entry.state is PromptState.FINISHED
        with pytest.raises(PromptNotResendable, match="inserted"):
            await session.resend(entry)
        assert agent.count("session/prompt") == 1


# ---------------------------------------------------------------- cut after the end: finished, nothing owed


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
async def test_cut_after_the_end_is_finished_and_owes_no_classification(version: int) -> None:
    async with behind_proxy(version) as (agent, proxy, client, rec, _):
        session = await client.new_session("/w")
        result = await asyncio.wait_for(session.prompt("echo: done"), bound(5))
        (entry,) = list(session.prompt_ledger)
        assert entry.state is PromptState.FINISHED and entry.stop_reason == result.stop_reason == "end_turn"
        if version >= 2:
            assert entry.message_id is not None and entry.message_id == result.message_id
        await proxy.cut_all()
        await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=bound(10))
        assert entry.state is PromptState.FINISHED and not entry.awaiting_classification
        assert not rec.of(PromptClassified)
        with pytest.raises(PromptNotResendable):
            await session.resend(entry.prompt_id)
        assert agent.count("session/prompt") == 1


# ---------------------------------------------------------------- agent restart mid-turn: the replay decides


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
async def test_restart_after_insertion_is_classified_from_the_replay_or_snapshot(version: int) -> None:
    async with behind_proxy(version) as (agent, _proxy, client, rec, _):
        session = await client.new_session("/w")
        prompt = asyncio.create_task(session.prompt("hold: long"))
        await agent_holds_user_message(agent, session.id)
        await agent.restart()  # the session comes back inactive: restored with a replay that holds the prompt
        with pytest.raises(ConnectionLost) as info:
            await asyncio.wait_for(prompt, bound(5))
        entry = info.value.prompt_entry
        (event,) = await rec.wait(classified(session.id), timeout=bound(10))
        assert event.prompt_id == entry.prompt_id
        if version >= 2:
            # the receipt said inserted; the restarted agent's snapshot says idle: the turn is over
            assert (event.state, event.evidence) == ("finished", "snapshot")
        else:
            # v1 has no receipt: the replayed user message shows the agent inserted it
            assert (event.state, event.evidence) == ("inserted", "replay")
        assert entry.state.value == event.state
        with pytest.raises(PromptNotResendable):
            await session.resend(entry)
        assert agent.count("session/prompt") == 1
        assert user_texts(session) == ["hold: long"]


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
async def test_restart_before_insertion_is_unknown_and_resend_shows_the_prompt_once(version: int) -> None:
    async with behind_proxy(version) as (agent, _proxy, client, rec, release):
        session = await client.new_session("/w")
        await asyncio.wait_for(session.prompt("echo: warm up"), bound(5))  # a history the replay will show
        prompt = asyncio.create_task(session.prompt("stall: never inserted"))
        await agent.wait_for(lambda: agent.count("session/prompt") == 2, timeout=bound(5))
        await agent.restart()
        with pytest.raises(ConnectionLost) as info:
            await asyncio.wait_for(prompt, bound(5))
        entry = info.value.prompt_entry
        assert entry.state is PromptState.SENT and entry.awaiting_classification
        with pytest.raises(PromptNotResendable, match="not classified yet"):
            await session.resend(entry)
        (event,) = await rec.wait(classified(session.id), timeout=bound(10))
        # v2 resumes with a replay that lacks it, v1 loads one: either way nothing shows it inserted
        assert (event.state, event.evidence) == ("unknown", "replay")
        assert entry.state is PromptState.UNKNOWN
        release.set()

        async def answer(turn: PromptTurn) -> str | None:  # the restarted agent now takes the prompt
            await turn.say("taken")
            return None

        agent.on_prompt = answer
        result = await asyncio.wait_for(session.resend(entry, timeout=bound(10)), bound(10))
        assert result.stop_reason == "end_turn"
        # once: the lost one was taken out of the transcript before the new one went in
        assert user_texts(session) == ["echo: warm up", "stall: never inserted"]
        assert sum(1 for m in agent.sessions[session.id].transcript if m.role == "user") == 2


# ---------------------------------------------------------------- hostile: a replay that lies


async def test_a_replay_that_drops_a_receipted_prompt_does_not_make_it_resendable() -> None:
    async with behind_proxy(2) as (agent, _proxy, client, rec, _):
        session = await client.new_session("/w")
        prompt = asyncio.create_task(session.prompt("hold: receipted"))
        await agent_holds_user_message(agent, session.id)
        record = agent.sessions[session.id]
        await agent.restart()
        with pytest.raises(ConnectionLost) as info:
            await asyncio.wait_for(prompt, bound(5))
        entry = info.value.prompt_entry
        assert entry.message_id is not None
        # the agent's stored history now claims another user message and not the one it receipted
        from acp_client.testing.agent._sessions import TranscriptMessage

        record.transcript[:] = [TranscriptMessage("msg_user_other", "user", [{"type": "text", "text": "other"}])]
        (event,) = await rec.wait(classified(session.id), timeout=bound(10))
        assert event.state == "finished" and event.message_id == entry.message_id  # the receipt is kept
        assert session.prompt_ledger.contradictions == 1
        with pytest.raises(PromptNotResendable):
            await session.resend(entry)


# ---------------------------------------------------------------- hostile: the store fails while writing


class FlakyStore(MemorySessionStore):
    """A memory store whose saves fail while ``failing`` is set (a full disk, a broken custom store)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.refused = 0

    async def save(self, record: SessionRecord) -> None:
        if self.failing:
            self.refused += 1
            raise OSError(28, "No space left on device")
        await super().save(record)


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
async def test_a_failing_store_is_reported_and_the_prompt_still_goes_through(version: int) -> None:
    store = FlakyStore()
    async with behind_proxy(version, store=store) as (agent, _proxy, client, rec, _):
        session = await client.new_session("/w")
        store.failing = True
        result = await asyncio.wait_for(session.prompt("echo: despite the store"), bound(5))
        assert result.stop_reason == "end_turn"
        assert agent.count("session/prompt") == 1
        assert store.refused >= 1
        (failed,) = [e for e in rec.of(SessionStoreFailed) if e.session_id == session.id]
        assert failed.operation == "save"
        assert [e.state for e in session.prompt_ledger] == [PromptState.FINISHED]
        store.failing = False
        await client.save_session(session)
        (stored,) = await store.load_all()
        assert [p["state"] for p in stored.prompts] == ["finished"]
        assert "echo: despite the store" not in str(stored.prompts)  # a digest, never the content


# ---------------------------------------------------------------- a crash: the store's ledger is classified


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
async def test_a_client_restart_classifies_the_prompt_the_store_left_in_flight(version: int, tmp_path: Path) -> None:
    release = asyncio.Event()
    async with ReferenceAgent(version, on_prompt=scripted(release)) as agent:
        first, rec1 = await started(agent.url, store=SQLiteSessionStore(tmp_path / "s.db"))
        try:
            session = await first.new_session("/w")
            if version >= 2:  # the receipt is written to the store before the turn is waited for
                prompt = await inserted_prompt(session, "hold: across a crash")
            else:  # v1: the entry was written as sent before the prompt went out
                prompt = asyncio.create_task(session.prompt("hold: across a crash"))
                await agent_holds_user_message(agent, session.id)
            prompt.cancel()  # the process "dies": nothing more is written for the prompt
            with contextlib.suppress(asyncio.CancelledError):
                await prompt
        finally:
            await rec1.close()
            await first.aclose()
        await agent.restart()
        second, rec2 = await started(agent.url, store=SQLiteSessionStore(tmp_path / "s.db"))
        try:
            (event,) = await rec2.wait(classified(session.id), timeout=bound(10))
            handle = second.sessions[session.id]
            (entry,) = list(handle.prompt_ledger)
            assert entry.content is None  # the store kept a digest, not the prompt
            assert (event.state, entry.state.value) == ("finished" if version >= 2 else "inserted",) * 2
            with pytest.raises(PromptNotResendable):
                await handle.resend(entry, "hold: across a crash")
        finally:
            release.set()
            await rec2.close()
            await second.aclose()


async def test_connection_dropped_is_reported_before_the_classification() -> None:
    async with behind_proxy(2) as (agent, proxy, client, rec, _):
        session = await client.new_session("/w")
        prompt = asyncio.create_task(session.prompt("hold: order"))
        await agent_holds_user_message(agent, session.id)
        await proxy.cut_all()
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(prompt, bound(5))
        await rec.wait(classified(session.id), timeout=bound(10))
        kinds = [type(e) for e in rec.events if isinstance(e, ConnectionDropped | SessionRecovered | PromptClassified)]
        assert kinds.index(ConnectionDropped) < kinds.index(SessionRecovered) < kinds.index(PromptClassified)


async def test_send_prompt_returns_its_entry_inserted_and_the_turn_end_finishes_it() -> None:
    async with behind_proxy(2) as (agent, _proxy, client, _rec, release):
        session = await client.new_session("/w")
        finished = asyncio.get_running_loop().create_future()
        session.on_turn_finished(lambda s, stop: finished.done() or finished.set_result(stop))
        receipt = await asyncio.wait_for(session.send_prompt("hold: streamed"), bound(5))
        entry = receipt.entry
        assert entry is not None and entry.state is PromptState.INSERTED
        assert entry.message_id == receipt.message_id and entry.evidence == "receipt"
        release.set()
        assert await asyncio.wait_for(finished, bound(5)) == "end_turn"
        assert (entry.state, entry.stop_reason) == (PromptState.FINISHED, "end_turn")
        assert agent.count("session/prompt") == 1


async def test_a_forgotten_session_settles_its_prompts_in_flight_as_unknown() -> None:
    async with behind_proxy(2) as (agent, _proxy, client, rec, _):
        session = await client.new_session("/w")
        prompt = asyncio.create_task(session.prompt("stall: then forgotten"))
        await agent.wait_for(lambda: agent.count("session/prompt") == 1, timeout=bound(5))
        await agent.restart(keep_sessions=False)  # the agent answers -32002: the session is forgotten
        with pytest.raises(ConnectionLost) as info:
            await asyncio.wait_for(prompt, bound(5))
        entry = info.value.prompt_entry
        (event,) = await rec.wait(classified(session.id), timeout=bound(10))
        assert (event.prompt_id, event.state) == (entry.prompt_id, "unknown")
        assert await entry.wait_classified(bound(1)) is PromptState.UNKNOWN

"""Issue 32 §4: the mode and config options the application chose survive a cold restore. Over real loopback
WebSockets to the reference agent, v1 and v2: set again after a restore (in the same process, and in a new
process that reads the store), not sent when the agent restored them itself, and a failure is an event plus a
typed error on the next prompt, never silent."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from acp_client import (
    ConfigNotRestored,
    SessionConfigNotRestored,
    SessionRecovered,
    SQLiteSessionStore,
)
from acp_client.testing import AgentError, ReferenceAgent
from tests.conftest import bound, started


def recovered(session_id: str) -> object:
    return lambda e: isinstance(e, SessionRecovered) and e.session_id == session_id


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
async def test_the_chosen_config_is_set_again_after_a_restore(version: int) -> None:
    async with ReferenceAgent(version) as agent:
        client, rec = await started(agent.url)
        try:
            session = await client.new_session("/w")
            options = await session.set_config_option("model", "smart")
            assert options is not None and options[0]["currentValue"] == "smart"
            expected = {"option:model"}
            if version < 2:
                await session.set_mode("plan")
                expected.add("mode")
            assert session.desired_config["options"] == {"model": "smart"}
            await agent.restart(keep_config=False)  # the agent comes back with its defaults
            (event,) = await rec.wait(recovered(session.id), timeout=bound(10))
            assert event.outcome == "restored"
            assert set(event.config_reapplied) == expected and event.config_not_restored == ()
            record = agent.sessions[session.id]
            assert record.config["model"] == "smart"
            assert record.mode_id == ("plan" if version < 2 else "default")
            assert agent.count("session/set_config_option", session.id) == 2
            result = await asyncio.wait_for(session.prompt("echo: in the chosen model"), bound(5))
            assert result.stop_reason == "end_turn"
            assert not rec.of(SessionConfigNotRestored)
        finally:
            await rec.close()
            await client.aclose()


async def test_an_agent_that_restored_the_option_itself_is_not_asked_again() -> None:
    async with ReferenceAgent(2) as agent:
        client, rec = await started(agent.url)
        try:
            session = await client.new_session("/w")
            await session.set_config_option("model", "smart")
            await agent.restart()  # keeps the config: the resume answer's configOptions show "smart"
            (event,) = await rec.wait(recovered(session.id), timeout=bound(10))
            assert event.outcome == "restored" and event.config_reapplied == ()
            assert agent.count("session/set_config_option", session.id) == 1
        finally:
            await rec.close()
            await client.aclose()


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
async def test_a_new_process_sets_the_stored_config_again(version: int, tmp_path: Path) -> None:
    async with ReferenceAgent(version) as agent:
        first, rec1 = await started(agent.url, store=SQLiteSessionStore(tmp_path / "s.db"))
        try:
            session = await first.new_session("/w")
            await session.set_config_option("model", "smart")
            if version < 2:
                await session.set_mode("plan")
        finally:
            await rec1.close()
            await first.aclose()
        await agent.restart(keep_config=False)
        second, rec2 = await started(agent.url, store=SQLiteSessionStore(tmp_path / "s.db"))
        try:
            (event,) = await rec2.wait(recovered(session.id), timeout=bound(10))
            assert "option:model" in event.config_reapplied
            assert second.sessions[session.id].desired_config["options"] == {"model": "smart"}
            assert agent.sessions[session.id].config["model"] == "smart"
            assert agent.sessions[session.id].mode_id == ("plan" if version < 2 else "default")
        finally:
            await rec2.close()
            await second.aclose()


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
async def test_a_failing_reapply_is_an_event_and_the_next_prompt_raises_before_sending(version: int) -> None:
    async with ReferenceAgent(version) as agent:
        client, rec = await started(agent.url)
        try:
            session = await client.new_session("/w")
            await session.set_config_option("model", "smart")
            agent.method_errors["session/set_config_option"] = AgentError(-32603, "config storage is down")
            await agent.restart(keep_config=False)
            (event,) = await rec.wait(recovered(session.id), timeout=bound(10))
            assert event.config_not_restored == ("option:model",)
            (failed,) = rec.of(SessionConfigNotRestored)
            assert failed.session_id == session.id
            assert [key for key, _ in failed.failures] == ["option:model"]
            assert "config storage is down" in failed.failures[0][1]
            with pytest.raises(ConfigNotRestored) as info:
                await asyncio.wait_for(session.prompt("echo: wrong model?"), bound(5))
            assert info.value.failures.keys() == {"option:model"}
            assert agent.count("session/prompt") == 0  # nothing ran in a config the application did not choose
            assert [e.state.value for e in session.prompt_ledger] == []
            result = await asyncio.wait_for(session.prompt("echo: go on anyway"), bound(5))  # raised once
            assert result.stop_reason == "end_turn"
        finally:
            await rec.close()
            await client.aclose()


async def test_bad_arguments_are_refused_before_anything_is_sent() -> None:
    from acp_client import CapabilityNotSupported, UsageError

    async with ReferenceAgent(2) as agent:
        client, rec = await started(agent.url)
        try:
            session = await client.new_session("/w")
            with pytest.raises(UsageError, match="config_id"):
                await session.set_config_option("", "smart")
            with pytest.raises(UsageError, match="value"):
                await session.set_config_option("model", 3)  # type: ignore[arg-type]
            with pytest.raises(CapabilityNotSupported):
                await session.set_mode("plan")  # v2 has config options instead
            assert agent.count("session/set_config_option") == agent.count("session/set_mode") == 0
            assert session.desired_config == {}
        finally:
            await rec.close()
            await client.aclose()

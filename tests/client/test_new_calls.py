"""The calls upstream added in v1 1.23 / v2 alpha.5, typed and gated on what the agent advertises:
``session/archive``/``unarchive`` (with the ``archived`` list filter) and ``auth/status``; over real links."""

from __future__ import annotations

import pytest

from acp_client import CapabilityNotSupported, connect
from acp_client.schema import models_for
from acp_client.testing import ReferenceAgent
from tests.conftest import Link, over_links, running_client

link = over_links("ws", "http1")


async def test_archive_hides_a_session_from_default_listings_until_unarchived(
    link: Link, agent: ReferenceAgent, version: int
) -> None:
    async with running_client(link.url(agent), **link.options) as (client, _):
        kept, archived = await client.new_session("/w"), await client.new_session("/w")
        await client.archive_session(archived.id)
        assert [i.session_id async for i in client.list_sessions()] == [kept.id]
        assert [i.session_id async for i in client.list_sessions(archived="only")] == [archived.id]
        assert {i.session_id async for i in client.list_sessions(archived="include")} == {kept.id, archived.id}
        assert archived.id in client.sessions  # archived is not closed: it is still recovered
        await client.unarchive_session(archived.id)
        assert {i.session_id async for i in client.list_sessions()} == {kept.id, archived.id}


async def test_auth_status_is_typed(link: Link, agent: ReferenceAgent, version: int) -> None:
    async with running_client(link.url(agent), **link.options) as (client, _):
        status = await client.auth_status()
        assert isinstance(status, models_for(version).AuthStatusResponse)
        assert status.state == "not_required"


async def test_auth_status_reports_a_login(version: int) -> None:
    async with ReferenceAgent(version, require_auth=True) as agent, connect(agent.url) as client:
        assert (await client.auth_status()).state == "unauthenticated"
        await client.authenticate("agent-login")
        status = await client.auth_status()
        assert status.state == "authenticated"
        assert [(a.label, a.active) for a in status.accounts] == [("Agent login", True)]


@pytest.mark.parametrize("hidden", ["archive", "authStatus"])
async def test_calls_the_agent_did_not_advertise_are_refused_before_sending(version: int, hidden: str) -> None:
    async with ReferenceAgent(version, capabilities={hidden: False}) as agent, connect(agent.url) as client:
        session = await client.new_session("/w")
        with pytest.raises(CapabilityNotSupported):
            if hidden == "archive":
                await client.archive_session(session.id)
            else:
                await client.auth_status()
        if hidden == "archive":
            with pytest.raises(CapabilityNotSupported):
                client.list_sessions(archived="include")
        assert agent.count("session/archive") + agent.count("auth/status") == 0


async def test_an_archived_session_is_never_forgotten_as_not_listed(version: int) -> None:
    """The recovery's last check (is the session still listed?) asks for archived sessions too: an archived
    session whose resume fails with an ambiguous error is retried, never forgotten as "not listed"."""
    from acp_client import SessionForgotten, SessionRecoveryFailed
    from acp_client.testing import AgentError
    from tests.conftest import bound

    agent = ReferenceAgent(version, capabilities={"status": False})  # straight to resume/load
    async with agent, running_client(agent.url) as (client, rec):
        session = await client.new_session("/w")
        await client.new_session("/w")  # the listing names another session: an absence would be "proven"
        await client.archive_session(session.id)
        for method in ("session/resume", "session/load"):
            agent.method_errors[method] = AgentError(-32603, "internal error")
        await agent.drop_all_connections(abort=True)
        await rec.wait(lambda e: isinstance(e, SessionRecoveryFailed) and e.session_id == session.id, bound(10))
        assert not [e for e in rec.events if isinstance(e, SessionForgotten)]
        assert session.id in client.sessions


async def test_a_tool_call_that_advertises_cancel_can_be_cancelled_alone() -> None:
    """``tool_call/cancel`` (v2): sent only while the tool call advertises ``capabilities.cancel``; the agent
    confirms with the final status, and the turn goes on."""
    import asyncio

    from tests.conftest import bound

    statuses: list[str] = []

    async def hook(turn: object) -> str:
        statuses.append(await turn.cancellable_tool_call())  # type: ignore[attr-defined]
        await turn.say("after the tool")  # type: ignore[attr-defined]
        return "end_turn"

    async with ReferenceAgent(2, on_prompt=hook) as agent, running_client(agent.url) as (client, _):
        session = await client.new_session("/w")
        stream = session.updates()  # subscribed before the prompt goes out
        turn = asyncio.create_task(session.prompt("run the tool"))
        async with asyncio.timeout(bound(5)):
            async for item in stream:  # the transcript has the tool call once its update is delivered
                if getattr(item, "kind", None) == "tool_call_update":
                    break
        await stream.aclose()
        (call,) = session.transcript.tool_calls.values()
        assert call.cancellable
        await session.cancel_tool_call(call.tool_call_id)
        result = await asyncio.wait_for(turn, bound(5))
        assert result.stop_reason == "end_turn"  # only the tool call stopped
        assert statuses == ["cancelled"]
        assert call.status == "cancelled" and not call.cancellable  # the agent withdrew the capability
        with pytest.raises(CapabilityNotSupported, match=r"capabilities\.cancel"):
            await session.cancel_tool_call(call.tool_call_id)  # final now: never sent
        with pytest.raises(CapabilityNotSupported):
            await session.cancel_tool_call("call_unknown")
        assert agent.count("tool_call/cancel") == 1


async def test_cancel_tool_call_does_not_exist_in_v1() -> None:
    async with ReferenceAgent(1) as agent, running_client(agent.url) as (client, _):
        session = await client.new_session("/w")
        with pytest.raises(CapabilityNotSupported, match="does not exist in protocol v1"):
            await session.cancel_tool_call("call_x")


async def test_a_session_knows_its_commands_and_config_options_from_new_resume_and_set(link: Link) -> None:
    """v2 alpha.6/7: ``session/new`` and ``session/resume`` answers carry ``availableCommands`` and
    ``configOptions``; the session keeps what the agent last said (also after a set and a reconnect)."""
    from acp_client import SessionRecovered
    from tests.conftest import bound

    def model(session: object) -> str:
        options = session.config_options  # type: ignore[attr-defined]
        return str(next(o["currentValue"] for o in options if o["id"] == "model"))

    async with (
        link.agent(2) as agent,
        running_client(link.url(agent), **link.options) as (client, rec),
    ):
        session = await client.new_session("/w")
        assert [c["name"] for c in session.available_commands or []] == ["echo", "sleep"]
        assert model(session) == "fast"
        await client.current.set_config_option(session.id, "model", "smart")
        assert model(session) == "smart"
        agent.sessions[session.id].config["model"] = "fast"  # changed on the agent's side while we are away
        await agent.drop_all_connections(abort=True)
        await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, bound(10))
        assert model(session) == "fast"  # what the resume answer said


async def test_a_v1_session_knows_its_config_options_and_ignores_malformed_ones() -> None:
    import asyncio

    from tests.conftest import bound

    async with ReferenceAgent(1) as agent, running_client(agent.url) as (client, _):
        session = await client.new_session("/w")
        assert session.config_options is not None and session.available_commands is None
        stream = session.updates()
        update = {"sessionUpdate": "available_commands_update", "availableCommands": [{"name": "x"}, 7, "y"]}
        assert await agent.send_update(session.id, update)
        async with asyncio.timeout(bound(5)):
            async for item in stream:
                if getattr(item, "kind", None) == "available_commands_update":
                    break
        await stream.aclose()
        assert session.available_commands == [{"name": "x"}]

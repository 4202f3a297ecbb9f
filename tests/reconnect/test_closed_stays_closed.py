"""After ``session/close`` (or ``session/delete``) nothing resumes, loads or probes that session again: across
reconnects, during a recovery, and across a restart with a store (the durable-transport draft's rule)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from acp_client import ReconnectingClient, SessionLink, SessionRecovered, SQLiteSessionStore, UsageError
from acp_client.exceptions import RPCError
from acp_client.testing import AgentError, ReferenceAgent
from tests.conftest import bound, client_options, recorder, running_client

RECOVERY_METHODS = ("session/status", "session/resume", "session/load")


def _touches(agent: ReferenceAgent, session_id: str) -> int:
    return sum(agent.count(method, session_id) for method in RECOVERY_METHODS)


@pytest.mark.parametrize("method", ["close", "delete"])
async def test_a_closed_session_is_never_probed_or_resumed_after_a_reconnect(version: int, method: str) -> None:
    async with (
        ReferenceAgent(version) as agent,
        running_client(agent.url) as (client, rec),
    ):
        closed = await client.new_session("/w")
        kept = await client.new_session("/w")
        before = _touches(agent, closed.id)
        await (client.close_session if method == "close" else client.delete_session)(closed.id)
        assert closed.link is SessionLink.CLOSED
        await agent.drop_all_connections(abort=True)
        await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == kept.id, bound(10))
        assert _touches(agent, closed.id) == before
        assert closed.id not in client.sessions


async def test_closing_during_a_recovery_cancels_it_and_nothing_comes_back(version: int) -> None:
    async with ReferenceAgent(version) as agent:
        client = ReconnectingClient(agent.url, **client_options(protocol_version=version))
        rec = recorder(client)
        try:
            await client.start()
            await client.wait_ready(timeout=bound(5))
            session = await client.new_session("/w")
            agent.hang_status.add(session.id)  # its probe after the cut never answers
            await agent.drop_all_connections(abort=True)
            await agent.wait_for_method("session/status", 1, session_id=session.id, timeout=bound(10))
            await asyncio.wait_for(client.close_session(session.id), bound(10))
            assert session.link is SessionLink.CLOSED
            agent.hang_status.discard(session.id)
            client.reconnect_now()  # another round: the closed session is not in it
            await client.wait_ready(timeout=bound(10))
            assert agent.count("session/resume", session.id) + agent.count("session/load", session.id) == 0
            assert agent.count("session/status", session.id) == 1
        finally:
            await rec.close()
            await client.aclose()


async def _stored(db: Path) -> list[tuple[str, bool]]:
    store = SQLiteSessionStore(db)
    try:
        return [(r.session_id, r.closed) for r in await store.load_all()]
    finally:
        await store.close()


async def test_a_close_that_failed_leaves_a_tombstone_a_restart_honours(tmp_path: Path, version: int) -> None:
    db = tmp_path / "sessions.db"
    async with ReferenceAgent(version) as agent:
        store = SQLiteSessionStore(db)
        async with running_client(agent.url, store=store) as (client, _):
            session = await client.new_session("/w")
            agent.method_errors["session/close"] = AgentError(-32603, "storage offline")
            with pytest.raises(RPCError):
                await client.close_session(session.id)
            assert session.link is SessionLink.CLOSED  # closed here although the agent did not confirm
        await store.close()
        assert await _stored(db) == [(session.id, True)]
        before = _touches(agent, session.id)
        store = SQLiteSessionStore(db)
        async with running_client(agent.url, store=store) as (restarted, _):
            assert session.id not in restarted.sessions
            other = await restarted.new_session("/w")
        await store.close()
        assert _touches(agent, session.id) == before  # the restarted client never asked about it
        assert await _stored(db) == [(other.id, False)]


async def test_close_of_an_agent_without_close_is_refused_before_anything_changes() -> None:
    async with (
        ReferenceAgent(1, capabilities={"close": False}) as agent,  # v2: baseline
        running_client(agent.url) as (client, _),
    ):
        session = await client.new_session("/w")
        with pytest.raises(UsageError, match="session/close"):
            await client.close_session(session.id)
        assert session.link is SessionLink.ATTACHED
        assert session.id in client.sessions

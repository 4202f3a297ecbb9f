"""``session/list`` always ends (issue 18, item 3): a cursor the agent sent before, or more than ``max_pages``
pages, ends the listing with a ``ProtocolError`` naming the bound, in the async client, the blocking facade
and the recovery's "not listed" check (which then keeps the session: nothing proven)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from acp_client import (
    ReconnectingClient,
    RecoveryPolicy,
    SessionForgotten,
    SessionLink,
    SessionRecoveryFailed,
    connect,
    sync,
)
from acp_client.exceptions import ProtocolError
from acp_client.reconnect import Backoff
from acp_client.testing import AgentError, ReferenceAgent
from tests.conftest import bound


def looping(_params: dict[str, Any]) -> dict[str, Any]:
    return {"sessions": [], "nextCursor": "again"}


def endless() -> Any:
    pages = itertools.count(1)
    return lambda _params: {"sessions": [], "nextCursor": f"page-{next(pages)}"}


async def test_a_repeated_cursor_ends_the_listing() -> None:
    async with ReferenceAgent(2) as agent, connect(agent.url) as client:
        agent.list_answer = looping
        with pytest.raises(ProtocolError, match="already sent"):
            async with asyncio.timeout(bound(10)):
                [info async for info in client.list_sessions()]
        assert agent.count("session/list") == 2


async def test_a_listing_past_max_pages_ends_naming_the_bound() -> None:
    async with ReferenceAgent(2) as agent, connect(agent.url) as client:
        agent.list_answer = endless()
        with pytest.raises(ProtocolError, match="max_pages=20"):
            async with asyncio.timeout(bound(10)):
                [info async for info in client.list_sessions(max_pages=20)]
        assert agent.count("session/list") == 20


async def test_the_blocking_facade_ends_too() -> None:
    async with ReferenceAgent(2) as agent:
        agent.list_answer = looping

        def list_all() -> None:
            with sync.connect(agent.url, timeout=bound(10)) as client:
                client.list_sessions()

        with pytest.raises(ProtocolError, match="already sent"):
            await asyncio.wait_for(asyncio.to_thread(list_all), bound(20))


async def test_the_recovery_list_check_keeps_a_session_when_the_listing_loops() -> None:
    async with ReferenceAgent(2) as agent:
        client = ReconnectingClient(
            agent.url,
            policy=RecoveryPolicy(start_jitter=0.0, stable_after=0.0, tries=1),
            backoff=Backoff(base=0.02, cap=0.2),
        )
        events = client.events()
        await client.start()
        try:
            await client.wait_ready(timeout=bound(5))
            session = await client.new_session("/w")
            agent.method_errors["session/resume"] = AgentError(-32603, "storage hiccup")
            agent.list_answer = looping
            await agent.drop_all_connections()
            async with asyncio.timeout(bound(10)):
                async for event in events:
                    assert not isinstance(event, SessionForgotten), event
                    if isinstance(event, SessionRecoveryFailed) and event.session_id == session.id:
                        break
            assert agent.count("session/list") <= 2  # stopped at the repeated cursor
            assert session.id in client.sessions and session.link is not SessionLink.LOST
        finally:
            await client.aclose()


async def test_a_paged_listing_is_walked_to_the_end_and_no_cursor_reaches_the_store(tmp_path: Any) -> None:
    """Cursors are opaque and per listing (the spec: never parse, modify or persist them): a walk follows
    ``nextCursor`` to the last page, and the store file holds none of the cursors the agent issued."""
    from acp_client import SQLiteSessionStore
    from tests.conftest import running_client

    db = tmp_path / "sessions.db"
    store = SQLiteSessionStore(db)
    async with ReferenceAgent(2, list_page_size=2) as agent:
        async with running_client(agent.url, store=store) as (client, _):
            made = {(await client.new_session("/w")).id for _ in range(5)}
            listed = {info.session_id async for info in client.list_sessions()}
            assert listed == made
            cursors = [
                r.params["cursor"]
                for r in agent.received
                if r.method == "session/list" and isinstance(r.params, dict) and r.params.get("cursor")
            ]
            assert len(cursors) == 2  # pages 2 and 3 of 5 sessions, 2 a page
        await store.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert all(cursor.encode() not in stored for cursor in cursors)

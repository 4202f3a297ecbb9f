"""Durable streams on Streamable HTTP (agent-client-protocol PR 2208, issue 32 §1-2), h1 and h2c, v1 and v2,
against the reference agent serving ``resumable``: a stream cut mid-turn is resumed from its cursor and every
message arrives exactly once, in order; a refused resume (``409``: the switch, an evicted cursor) falls back to
the ladder and says why; without the capability and without ids nothing is resumed; a closed session's stream
is never resumed; hostile servers (a replay overlapping what was delivered, oversize cursors, ``409`` every
time) cost a counted discard or a recovery, never a duplicate or a gap. The cut is the agent's own fault
switch (``agent.http.drop_streams()``: a TCP reset of every event stream, the links kept)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from acp_client import ReconnectingClient, SessionRecovered
from acp_client.sessions import SessionUpdate
from acp_client.testing import ReferenceAgent, Resumable
from acp_client.transports.http import MAX_CURSOR_BYTES, RESUME_ATTEMPTS, StreamableHTTPTransport
from acp_client.transports.http._cursors import CursorTrack
from tests.conftest import Link, bound, over_links, running_client

link = over_links("http1", "h2c")

CHUNKS = [f"chunk {i} " for i in range(1, 201)]


def transport_of(client: ReconnectingClient) -> StreamableHTTPTransport:
    transport = client.current.connection.transport  # type: ignore[union-attr]
    assert isinstance(transport, StreamableHTTPTransport)
    return transport


def resumed_gets(agent: ReferenceAgent) -> list[tuple[dict[str, str], int]]:
    """The GETs that carried ``Last-Event-ID`` (headers kept by the agent, status answered)."""
    return [(headers, status) for method, _, headers, status in agent.http.requests if "last-event-id" in headers]


def make_agent(link: Link, version: int, *, plain: bool = False, **resumable: Any) -> ReferenceAgent:
    """A reference agent for ``link`` serving resumable streams (``Resumable(**resumable)``), or none (``plain``)."""
    return link.agent(version, resumable=None if plain else Resumable(**resumable))


async def chunks_until(stream: Any, seen: list[str], count: int, others: list[str] | None = None) -> None:
    """Read agent message chunks from ``stream`` into ``seen`` until it holds ``count`` of them; the kinds of
    the other items (updates, recovery markers) go to ``others``."""
    async with asyncio.timeout(bound(10)):
        async for item in stream:
            if not (isinstance(item, SessionUpdate) and item.kind == "agent_message_chunk"):
                if others is not None:
                    others.append(item.kind if isinstance(item, SessionUpdate) else type(item).__name__)
                continue
            seen.append(item.raw["content"]["text"])
            if len(seen) >= count:
                return


async def cut_mid_stream(
    agent: ReferenceAgent, client: ReconnectingClient, *, cut_at: int = 40, after_cut: list[str] | None = None
) -> list[str]:
    """Prompt ``stream 200``, cut every event stream after ``cut_at`` chunks, and return every chunk the
    session's update stream delivered once the turn ended (the kinds of its other items after the cut go to
    ``after_cut``)."""
    session = await client.new_session("/w")
    stream = session.updates()
    turn = asyncio.create_task(session.prompt("stream 200 every 0.002"))
    seen: list[str] = []
    await chunks_until(stream, seen, cut_at)
    assert agent.http.drop_streams() == 2  # the connection stream and the session stream, mid-turn
    await chunks_until(stream, seen, 200, after_cut)
    result = await asyncio.wait_for(turn, bound(10))
    assert result.stop_reason == "end_turn"
    return seen


async def test_a_cut_mid_stream_delivers_every_chunk_once_in_order(link: Link, version: int) -> None:
    async with (
        make_agent(link, version, keepalive_seconds=0.1) as agent,
        running_client(link.url(agent), **link.options) as (client, rec),
    ):
        after_cut: list[str] = []
        seen = await cut_mid_stream(agent, client, after_cut=after_cut)
        assert seen == CHUNKS
        # v2: the resumed session stream says the session's state before live data (PR 2208); v1 has none
        assert after_cut.count("state_update") == (1 if version == 2 else 0)
        # resumed, not recovered: one initialize, each stream resumed from its cursor and answered 200
        assert agent.count("initialize") == 1 and client.generation == 1
        gets = resumed_gets(agent)
        assert len(gets) == 2 and {status for _, status in gets} == {200}
        assert transport_of(client).stats.streams_resumed == 2
        events = await rec.wait(lambda e: isinstance(e, SessionRecovered))
        assert {e.path for e in events if isinstance(e, SessionRecovered)} == {"stream_resumed"}


async def test_the_cursor_in_meta_is_the_resume_point_when_events_have_no_sse_id(link: Link, version: int) -> None:
    async with make_agent(link, version) as agent:
        agent.http.cursor_ids = False  # cursors only in _meta["acp/cursor"]
        async with running_client(link.url(agent), **link.options) as (client, _rec):
            assert await cut_mid_stream(agent, client) == CHUNKS
            gets = resumed_gets(agent)
            assert len(gets) == 2 and {status for _, status in gets} == {200}
            assert all(headers["last-event-id"].isdigit() for headers, _ in gets)


async def test_a_replay_that_overlaps_what_was_delivered_is_dropped_and_counted(link: Link, version: int) -> None:
    async with make_agent(link, version) as agent:
        agent.http.replay_overlap = 3  # hostile: each resume replays three messages the client already has
        async with running_client(link.url(agent), **link.options) as (client, _rec):
            assert await cut_mid_stream(agent, client) == CHUNKS
            stats = transport_of(client).stats
            assert stats.streams_resumed == 2
            # the session stream had 40+ messages behind its cursor; the connection stream at least one
            assert stats.replayed_duplicates >= 4


async def test_a_refused_resume_falls_back_to_the_ladder_and_says_why(link: Link, version: int) -> None:
    async with (
        make_agent(link, version, refuse=True) as agent,
        running_client(link.url(agent), **link.options) as (client, rec),
    ):
        session = await client.new_session("/w")
        await session.prompt("echo: before")  # both streams carry cursors now
        assert agent.http.drop_streams() == 2
        events = await rec.wait(lambda e: isinstance(e, SessionRecovered))
        recovered = [e for e in events if isinstance(e, SessionRecovered)]
        assert [e.path for e in recovered] == ["ladder"]
        assert "refused: HTTP 409" in (recovered[0].stream_resumption or "")
        assert agent.count("initialize") == 2
        # refused, never gone live: every GET with Last-Event-ID was answered 409
        gets = resumed_gets(agent)
        assert gets and {status for _, status in gets} == {409}
        result = await asyncio.wait_for(session.prompt("echo: after"), bound(5))
        assert result.stop_reason == "end_turn"


async def test_an_evicted_cursor_is_refused_and_recovered(link: Link, version: int) -> None:
    async with (
        make_agent(link, version, retention_messages=5) as agent,
        running_client(link.url(agent), **link.options) as (client, rec),
    ):
        session = await client.new_session("/w")
        await session.prompt("echo: before")
        links = list(agent.http.links.values())
        for held in links:
            held.pause_reading()  # what the agent sends now never reaches the client
        for i in range(10):  # twice the retention: the client's cursor falls out of the buffer
            assert await agent.send_update(session.id, _chunk(f"lost {i}"))
        assert agent.http.drop_streams() == 2
        for held in links:
            held.resume_reading()
        # the connection stream's cursor is still retained (it may be resumed first); the session's is not
        events = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.path == "ladder")
        recovered = [e for e in events if isinstance(e, SessionRecovered) and e.path == "ladder"]
        assert "refused: HTTP 409" in (recovered[0].stream_resumption or "")
        assert agent.count("initialize") == 2
        session_gets = [s for h, s in resumed_gets(agent) if h.get("acp-session-id") == session.id]
        assert session_gets == [409]


async def test_a_409_every_time_costs_one_resume_attempt_per_cut(link: Link, version: int) -> None:
    async with (
        make_agent(link, version, refuse=True) as agent,
        running_client(link.url(agent), **link.options) as (client, rec),
    ):
        session = await client.new_session("/w")
        for cut in (1, 2, 3):
            await session.prompt(f"echo: cut {cut}")
            assert agent.http.drop_streams() == 2
            await rec.wait(lambda e, n=cut: len([x for x in rec.events if isinstance(x, SessionRecovered)]) >= n)
            await client.wait_ready(timeout=bound(5))
            # each cut: at most one resume per stream, each refused, then one new link
            assert len(resumed_gets(agent)) <= 2 * cut
            assert agent.count("initialize") == cut + 1
        assert (await session.prompt("echo: still")).stop_reason == "end_turn"


async def test_without_the_capability_or_ids_nothing_is_resumed(link: Link, version: int) -> None:
    async with (
        make_agent(link, version, plain=True) as agent,
        running_client(link.url(agent), **link.options) as (client, rec),
    ):  # no capability, no ids, no cursors
        session = await client.new_session("/w")
        await session.prompt("echo: before")
        assert transport_of(client).connection_id is not None
        assert agent.http.drop_streams() == 2
        events = await rec.wait(lambda e: isinstance(e, SessionRecovered))
        recovered = [e for e in events if isinstance(e, SessionRecovered)]
        assert [e.path for e in recovered] == ["ladder"]
        assert "carries no event ids" in (recovered[0].stream_resumption or "")
        assert resumed_gets(agent) == []


async def test_a_closed_sessions_stream_is_never_resumed(link: Link, version: int) -> None:
    async with make_agent(link, version) as agent:
        async with running_client(link.url(agent), **link.options) as (client, rec):
            closed = await client.new_session("/w")
            kept = await client.new_session("/w")
            await closed.prompt("echo: a")
            await kept.prompt("echo: b")
            await client.close_session(closed.id)
            # the connection stream and the kept session's (the closed one may linger on the agent)
            assert agent.http.drop_streams() >= 2
            events = await rec.wait(lambda e: len([x for x in rec.events if isinstance(x, SessionRecovered)]) >= 2)
            assert {e.session_id for e in events if isinstance(e, SessionRecovered)} == {kept.id}
            sessions = {headers.get("acp-session-id") for headers, _ in resumed_gets(agent)}
            assert closed.id not in sessions and kept.id in sessions
        # the client closed (DELETE): its link is gone on the agent, nothing is left to cut or resume
        count = len(resumed_gets(agent))
        assert not agent.http.links
        assert agent.http.drop_streams() == 0 and len(resumed_gets(agent)) == count


async def test_a_resume_that_ends_at_once_every_time_is_given_up_after_the_attempt_bound(
    link: Link, version: int
) -> None:
    async with make_agent(link, version) as agent:
        agent.http.end_resumed_streams = True  # hostile: 200, then the stream ends before any message
        async with running_client(link.url(agent), **link.options) as (client, rec):
            session = await client.new_session("/w")
            await session.prompt("echo: before")
            assert agent.http.drop_streams() == 2
            events = await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.path == "ladder")
            ladder = [e for e in events if isinstance(e, SessionRecovered) and e.path == "ladder"]
            assert f"ended again {RESUME_ATTEMPTS} times" in (ladder[0].stream_resumption or "")
            # bounded: at most RESUME_ATTEMPTS resumes of each of the two streams, then one new link
            assert len(resumed_gets(agent)) <= 2 * RESUME_ATTEMPTS
            assert agent.count("initialize") == 2
            assert (await session.prompt("echo: after")).stop_reason == "end_turn"


@pytest.mark.parametrize("cursor_ids", [True, False], ids=["sse-id", "meta-only"])
async def test_an_oversize_cursor_is_never_sent_back(link: Link, version: int, cursor_ids: bool) -> None:
    async with make_agent(link, version) as agent:
        agent.http.cursor_ids = cursor_ids
        agent.http.cursor_prefix = "y" * MAX_CURSOR_BYTES
        async with running_client(link.url(agent), **link.options) as (client, rec):
            session = await client.new_session("/w")
            await session.prompt("echo: before")
            assert agent.http.drop_streams() == 2
            events = await rec.wait(lambda e: isinstance(e, SessionRecovered))
            reason = next(e.stream_resumption for e in events if isinstance(e, SessionRecovered)) or ""
            assert f"over {MAX_CURSOR_BYTES} bytes (MAX_CURSOR_BYTES)" in reason
            assert resumed_gets(agent) == []  # never sent as Last-Event-ID
            assert agent.count("initialize") == 2


async def test_five_silent_keepalive_intervals_end_the_stream_and_it_is_resumed(link: Link, version: int) -> None:
    # the agent advertises a 0.05 s keepalive; the client's own watchdog would wait 60 s: only the advertised
    # interval can notice the silence within the test's bound
    async with make_agent(link, version, keepalive_seconds=0.05) as agent:
        options = link.transport(ping_interval=30.0, ping_timeout=30.0)
        async with running_client(link.url(agent), transport_options=options) as (client, _rec):
            session = await client.new_session("/w")
            # a turn silent for twelve keepalive intervals: the agent's keepalives at the advertised interval
            # keep both streams alive (the client's watchdog fires after five silent ones)
            await session.prompt("sleep 0.6")
            stats = transport_of(client).stats
            assert stats.sse_comments > 0 and stats.streams_resumed == 0
            held = list(agent.http.links.values())
            for paused in held:
                paused.pause_reading()  # silent: no event, no keepalive
            await agent.wait_for(lambda: len(resumed_gets(agent)) >= 1, timeout=bound(5))
            for paused in held:
                paused.resume_reading()
            result = await asyncio.wait_for(session.prompt("echo: after"), bound(5))
            assert result.stop_reason == "end_turn"
            assert agent.count("initialize") == 1


def _chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def test_the_cursor_window_is_bounded_and_an_oversize_cursor_leaves_no_resume_point() -> None:
    track = CursorTrack(window=3)
    assert [track.accept(c) for c in ("a", "b", "a", "c", "d")] == [True, True, False, True, True]
    assert track.last == "d"
    assert track.accept("a")  # fell out of the window of three: memory stays bounded, it is delivered again
    assert not track.accept("d")
    assert track.accept("é" * (MAX_CURSOR_BYTES // 2 + 1))  # delivered, but over the bound in UTF-8 bytes
    assert track.oversize and track.last is None
    assert track.accept("e") and track.last == "e" and not track.oversize  # a later cursor is a resume point again

"""The Streamable HTTP transport: the SSE parser, the wire exchange with the reference agent (HTTP/1.1 and h2c),
the httpx/HTTP/2 pitfalls it is built around, ordering across streams, stream resumption, the failure
answers of servers that are not (quite) ACP endpoints, cookies, ``transport="auto"``.

The client suite, the reconnect manager, its policy, the failure modes and the blocking facade run over HTTP
too: their tests take the ``link`` fixture (tests/conftest.py: ``ws``, ``http1``, ``h2c``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from acp_client import (
    ClientHandlers,
    ConnectionLost,
    HTTPTransportError,
    PermissionRequest,
    ReconnectingClient,
    SessionForgotten,
    SessionRecovered,
    TransportOptions,
    connect,
)
from acp_client.sessions import SessionUpdate
from acp_client.testing import FAST_RETRY, FaultProxy, ProxyMode, ReferenceAgent
from acp_client.transports import CookieJar
from acp_client.transports.http import StreamableHTTPTransport
from acp_client.transports.http._sse import SSEEvent, SSEParser
from acp_client.transports.websocket import WebSocketTransport, parse_retry_after
from tests.conftest import bound, client_options, recorder

HTTP_VERSIONS = {"h1": False, "h2c": "prior_knowledge"}


@pytest.fixture(params=list(HTTP_VERSIONS))
def http2(request: pytest.FixtureRequest) -> Any:
    """The ``http2`` option under test: HTTP/1.1 or HTTP/2 cleartext with prior knowledge."""
    return HTTP_VERSIONS[request.param]


def transport_of(client: Any) -> StreamableHTTPTransport:
    transport = client.connection.transport
    assert isinstance(transport, StreamableHTTPTransport)
    return transport


# ---------------------------------------------------------------------------- the SSE parser


def test_sse_parser_events_comments_ids_and_line_endings() -> None:
    parser = SSEParser()
    events = parser.feed(b': keepalive\n\ndata: {"a":1}\n\nid: 7\nevent: message\ndata: x\ndata: y\r\n\r\n')
    assert events == [SSEEvent('{"a":1}'), SSEEvent("x\ny", "message", "7")]
    assert parser.comments == 1 and parser.last_event_id == "7"
    # CRLF split across chunks, CR alone, a field without a value, retry
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n\r") == [SSEEvent("a", id="7")]
    assert parser.feed(b"event: ping\ndata\n\nretry: 250\nretry: x\n") == [SSEEvent("", "ping", "7")]
    assert parser.retry == 250
    # an id with NUL is ignored; an event without data is not dispatched
    assert parser.feed(b"id: a\x00b\nevent: lonely\n\ndata: z\n\n") == [SSEEvent("z", id="7")]


def test_sse_parser_bom_partial_lines_and_size_bound() -> None:
    parser = SSEParser(max_event_bytes=64)
    assert parser.feed("\ufeffdata: é".encode()[:-1]) == []  # a UTF-8 character split across chunks
    assert parser.feed("é".encode()[-1:] + b"\n\n") == [SSEEvent("é")]
    with pytest.raises(ValueError):
        parser.feed(b"data: " + b"x" * 100)


def test_sse_parser_messages_only_and_whole_events_split_anywhere() -> None:
    """feed_messages gives the data of the message events alone and counts the others; the fast path of
    whole events gives what the line-by-line rules give, wherever the chunks are cut."""
    stream = (
        b'data: {"a":1}\n\n: note\nevent: ping\ndata: p\n\n\n\nid: 4\ndata: x\ndata: y\n\n'
        b"data:no-space\n\nevent: message\ndata: m\n\ndata: \xff\n\n"
    )
    expected = [SSEEvent('{"a":1}'), SSEEvent("p", "ping"), SSEEvent("x\ny", id="4"), SSEEvent("no-space", id="4")]
    expected += [SSEEvent("m", id="4"), SSEEvent("\ufffd", id="4")]
    for cut in range(len(stream) + 1):
        for step in (1, 7, len(stream)):
            events: list[SSEEvent] = []
            messages: list[str] = []
            parser, texts = SSEParser(), SSEParser()
            for part in (stream[:cut], stream[cut:]):
                for i in range(0, len(part), step):
                    events += parser.feed(part[i : i + step])
                    messages += texts.feed_messages(part[i : i + step])
            assert events == expected
            assert messages == [e.data for e in expected if e.event == "message"]
            assert texts.skipped == 1 and texts.last_skipped == "ping" and texts.comments == 1


# ---------------------------------------------------------------------------- the wire exchange


async def test_lifecycle_headers_streams_and_delete(http2: Any) -> None:
    async with ReferenceAgent(2) as agent:
        async with connect(agent.http_url, transport_options=TransportOptions(http2=http2)) as client:
            transport = transport_of(client)
            assert transport.connection_id == "conn-1" and transport.protocol_version == 2
            assert transport.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
            session = await client.new_session("/w")
            assert transport.session_streams == [session.id]
            result = await asyncio.wait_for(session.prompt("stream 3"), bound(5))
            assert result.stop_reason == "end_turn"
            assert session.transcript.messages[-1].text == "chunk 1 chunk 2 chunk 3 "
        requests = agent.http.requests
        assert requests[0][:2] == ("POST", "/acp") and requests[0][3] == 200  # initialize, no connection id
        assert "acp-connection-id" not in requests[0][2]
        for _method, _path, headers, _status in requests[1:]:
            assert headers["acp-connection-id"] == "conn-1"
            assert headers["acp-protocol-version"] == "2"
        # the prompt POST named its session; the session stream was opened before the prompt
        gets = [r for r in requests if r[0] == "GET"]
        assert [g[2].get("acp-session-id") for g in gets] == [None, session.id]
        assert requests[-1][0] == "DELETE" and requests[-1][3] == 202
        assert agent.http.versions == {("HTTP/2" if http2 else "HTTP/1.1"): len(requests)}
        assert agent.connections == 0


async def test_a_notification_naming_a_detached_session_carries_its_header() -> None:
    """The binding's rule: every message whose params name a session carries ``Acp-Session-Id``, a
    ``session/cancel`` of a session not attached on this connection included (no stream is opened for it)."""
    async with ReferenceAgent(1) as agent:
        async with connect(agent.http_url) as first:
            session_id = (await first.new_session("/w")).id
        before = len(agent.http.requests)

        def cancels() -> list[tuple[str | None, int]]:
            posts = [r for r in agent.http.requests[before:] if r[0] == "POST" and "acp-connection-id" in r[2]]
            return [(r[2].get("acp-session-id"), r[3]) for r in posts]

        async with connect(agent.http_url) as client:
            await client.cancel(session_id)
            await agent.wait_for(lambda: bool(cancels()), bound(5))
            assert transport_of(client).session_streams == []
        assert cancels() == [(session_id, 202)]


async def test_a_cancel_sent_just_before_close_reaches_the_agent_before_the_delete(http2: Any) -> None:
    """``send`` returns once a POST is queued (as a WebSocket send returns once the frame is buffered), so a
    ``session/cancel`` followed at once by ``aclose()`` must still go out, and before the ``DELETE``."""
    async with ReferenceAgent(2) as agent:
        async with connect(agent.http_url, transport_options=TransportOptions(http2=http2)) as client:
            session = await client.new_session("/w")
            turn = asyncio.create_task(session.prompt("sleep 30"))
            await agent.wait_for_method("session/prompt", timeout=bound(5))
            await session.cancel()
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(turn, bound(5))
        await agent.wait_for(lambda: agent.connections == 0, bound(5))
        assert agent.count("session/cancel", session.id) == 1
        requests = agent.http.requests
        assert requests[-1][0] == "DELETE" and requests[-1][3] == 202
        assert [r[3] for r in requests if r[0] == "POST"] == [200] + [202] * (len(requests) - 4)  # none after


class Approver(ClientHandlers):
    def __init__(self) -> None:
        self.requests: list[PermissionRequest] = []

    async def request_permission(self, request: PermissionRequest) -> str | None:
        self.requests.append(request)
        option = request.option("allow_once", "allow_always")
        return option.option_id if option else None


async def test_permission_request_on_the_session_stream(http2: Any) -> None:
    handlers = Approver()
    async with (
        ReferenceAgent(1) as agent,
        connect(agent.http_url, transport_options=TransportOptions(http2=http2), handlers=handlers) as client,
    ):
        session = await client.new_session("/w")
        result = await asyncio.wait_for(session.prompt("permission"), bound(5))
        assert result.stop_reason == "end_turn" and len(handlers.requests) == 1
        # the answer to the agent's request went back naming the session it came from
        answers = [r for r in agent.http.requests if r[0] == "POST" and r[2].get("acp-session-id") == session.id]
        assert len(answers) == 2  # the prompt and the permission answer


async def test_cancel_reaches_the_agent(http2: Any) -> None:
    async with (
        ReferenceAgent(2) as agent,
        connect(agent.http_url, transport_options=TransportOptions(http2=http2)) as client,
    ):
        session = await client.new_session("/w")
        turn = asyncio.create_task(session.prompt("sleep 30"))
        await agent.wait_for_method("session/prompt", timeout=bound(5))
        await session.cancel()
        result = await asyncio.wait_for(turn, bound(5))
        assert result.stop_reason == "cancelled"


async def test_reconnecting_client_recovers_after_a_drop(http2: Any) -> None:
    async with ReferenceAgent(2) as agent:
        client = ReconnectingClient(agent.http_url, **client_options(http2=http2))
        rec = recorder(client)
        try:
            await client.start()
            await client.wait_ready(timeout=bound(5))
            session = await client.new_session("/w")
            await session.prompt("echo: before")
            start = len(agent.http.requests)
            await agent.drop_all_connections()
            await rec.wait(lambda e: isinstance(e, SessionRecovered))
            # the session stream was opened on the new link before the resume was POSTed
            after = agent.http.requests[start:]
            get = next(i for i, r in enumerate(after) if r[0] == "GET" and r[2].get("acp-session-id") == session.id)
            resume = [i for i, r in enumerate(after) if r[0] == "POST" and r[2].get("acp-session-id") == session.id]
            assert get < resume[0]
            await session.prompt("echo: after")
            texts = [m.text for m in session.transcript.messages if m.role == "agent"]
            assert texts == ["before", "after"]
        finally:
            await rec.close()
            await client.aclose()


async def test_replay_result_waits_for_the_delayed_session_stream() -> None:
    # the resume result (connection stream) overtakes the replay (session stream, held back by the server):
    # the transport hands the result over only after the replay, so nothing is misread as live
    async with ReferenceAgent(2) as agent:
        client = ReconnectingClient(agent.http_url, **FAST_RETRY)
        rec = recorder(client)
        try:
            await client.start()
            await client.wait_ready(timeout=bound(5))
            session = await client.new_session("/w")
            for word in ("one", "two"):
                await session.prompt(f"echo: {word}")
            agent.http.session_stream_delay = 0.1
            await agent.drop_all_connections()
            (event,) = await rec.wait(lambda e: isinstance(e, SessionRecovered), timeout=10)
            assert event.replayed
            assert [m.text for m in session.transcript.messages if m.role == "agent"] == ["one", "two"]
            assert session.state == "idle"  # the snapshot applied as current state
            agent.http.session_stream_delay = 0.0
            await session.prompt("echo: three")
            assert [m.text for m in session.transcript.messages if m.role == "agent"] == ["one", "two", "three"]
        finally:
            await rec.close()
            await client.aclose()


async def test_v1_load_result_waits_for_its_replay_on_a_loaded_loop() -> None:
    # a v1 load has no end-of-replay marker: the transport makes one (a request answered on the session
    # stream behind the replay). The session stream's TCP link lags 300 ms (the load result, on the
    # connection stream, does not) and the loop is blocked 60 ms at a time: both past the 50 ms quiet
    # window this replaced, neither lets the result overtake its replay
    async with ReferenceAgent(1) as agent, FaultProxy("127.0.0.1", agent.port) as proxy:
        url = proxy.url(scheme="http")
        async with connect(url) as first:
            session = await first.new_session("/w")
            for word in ("one", "two", "three"):
                await session.prompt(f"echo: {word}")

        async def hog() -> None:
            while True:
                time.sleep(0.06)  # noqa: ASYNC251  (the point: a loaded, blocked event loop)
                await asyncio.sleep(0.005)

        async with connect(url) as client:
            proxy.set_mode(ProxyMode.delay(0.3), "s2c")  # new links (the session stream's) lag...
            for link in proxy.links:
                proxy.release("s2c", link)  # ...the connection stream's and the POSTs' do not
            hogging = asyncio.create_task(hog())
            try:
                loaded = await asyncio.wait_for(client.load_session(session.id, "/w"), bound(20))
                # the moment load_session returns, the whole replay is in (none of it arrives as live)
                assert [m.text for m in loaded.transcript.messages if m.role == "agent"] == ["one", "two", "three"]
            finally:
                hogging.cancel()
                await asyncio.wait({hogging})


async def test_refused_session_stream_ends_the_session_with_a_reason() -> None:
    # like the official Python server: a session stream on a new link is refused (404), the agent would
    # resume it but its updates could never be routed here; the session is forgotten, not retried forever
    async with ReferenceAgent(1) as agent:
        client = ReconnectingClient(agent.http_url, **FAST_RETRY)
        rec = recorder(client)
        try:
            await client.start()
            await client.wait_ready(timeout=bound(5))
            session = await client.new_session("/w")
            agent.http.refuse_session_streams = 404
            await agent.drop_all_connections()
            (forgotten,) = await rec.wait(lambda e: isinstance(e, SessionForgotten), timeout=10)
            assert forgotten.session_id == session.id
            assert session.id not in client.sessions
            attaches = agent.count("session/load") + agent.count("session/resume")
            await rec.ready_count(2)
            assert agent.count("session/load") + agent.count("session/resume") == attaches  # no retry loop
            transport = transport_of(client.current)
            assert transport.stats.session_streams_refused >= 1
        finally:
            await rec.close()
            await client.aclose()


async def test_stream_resumed_with_last_event_id_without_reinitializing() -> None:
    async with ReferenceAgent(2) as agent:
        agent.http.event_ids = True
        async with connect(agent.http_url) as client:
            transport = transport_of(client)
            session = await client.new_session("/w")
            turn = asyncio.create_task(session.prompt("stream 20 every 0.02"))
            stream = session.updates()
            seen = 0
            async with asyncio.timeout(bound(5)):
                async for item in stream:
                    if isinstance(item, SessionUpdate) and item.kind == "agent_message_chunk":
                        seen += 1
                        if seen == 3:
                            break
            assert agent.http.drop_streams() == 2  # both streams' TCP connections reset mid-turn
            result = await asyncio.wait_for(turn, bound(5))
            assert result.stop_reason == "end_turn"
            assert session.transcript.messages[-1].text == "".join(f"chunk {i} " for i in range(1, 21))
            # the prompt is held once, under its receipt's id, although the streams were resumed mid-turn
            users = [(m.message_id, m.text) for m in session.transcript.messages if m.role == "user"]
            assert result.message_id is not None and users == [(result.message_id, "stream 20 every 0.02")]
            assert transport.stats.streams_resumed == 2
            assert agent.count("initialize") == 1 and not transport.closed
            resumed = [r for r in agent.http.requests if "last-event-id" in r[2]]
            assert len(resumed) == 2


async def test_resumed_streams_are_reported_as_recoveries_by_their_path() -> None:
    # both streams dropped mid-turn and resumed with Last-Event-ID: the ReconnectingClient reports a
    # SessionRecovered with path="stream_resumed" (session stream, then the connection stream for every
    # attached session) and a marker in the session's stream; nothing was re-initialized or dropped
    from acp_client import ConnectionDropped
    from acp_client.sessions import RecoveryMarker

    async with ReferenceAgent(2) as agent:
        agent.http.event_ids = True
        client = ReconnectingClient(agent.http_url, **FAST_RETRY)
        rec = recorder(client)
        try:
            await client.start()
            await client.wait_ready(timeout=bound(5))
            session = await client.new_session("/w")
            stream = session.updates()
            turn = asyncio.create_task(session.prompt("stream 20 every 0.02"))
            seen = 0
            async with asyncio.timeout(bound(5)):
                async for item in stream:
                    if isinstance(item, SessionUpdate) and item.kind == "agent_message_chunk":
                        seen += 1
                        if seen == 3:
                            break
            assert agent.http.drop_streams() == 2
            resumed = await rec.wait(
                lambda e: isinstance(e, SessionRecovered) and e.path == "stream_resumed"
                and len([x for x in rec.events if isinstance(x, SessionRecovered)]) >= 2
            )
            assert len(resumed) == 2
            for event in resumed:
                assert isinstance(event, SessionRecovered)
                assert (event.session_id, event.outcome, event.mode) == (session.id, "reattached", "resume")
                assert not event.replayed and not event.may_have_missed_updates
                assert event.generation == 1
            result = await asyncio.wait_for(turn, bound(5))
            assert result.stop_reason == "end_turn"
            assert session.transcript.messages[-1].text == "".join(f"chunk {i} " for i in range(1, 21))
            markers: list[RecoveryMarker] = []
            async with asyncio.timeout(bound(5)):
                async for item in stream:
                    if isinstance(item, RecoveryMarker):
                        markers.append(item)
                        if len(markers) == 2:
                            break
            kinds = {(m.outcome, m.mode, m.may_have_missed_updates, m.path) for m in markers}
            assert kinds == {("reattached", "resume", False, "stream_resumed")}
            assert agent.count("initialize") == 1 and client.generation == 1
            assert not [e for e in rec.events if isinstance(e, ConnectionDropped)]
            assert all(e.path == "stream_resumed" for e in rec.events if isinstance(e, SessionRecovered))
            resumed = [e for e in rec.events if isinstance(e, SessionRecovered)]
            assert {e.stream_resumption for e in resumed} == {"resumed with Last-Event-ID"}
        finally:
            await rec.close()
            await client.aclose()


async def test_the_applications_on_stream_resumed_is_kept_and_called() -> None:
    # the client adds its own hook (SessionRecovered(path="stream_resumed")); the one the application passed
    # in TransportOptions is still called, once for each resumed stream
    async with ReferenceAgent(2) as agent:
        agent.http.event_ids = True
        both = asyncio.get_running_loop().create_future()
        calls: list[str | None] = []

        def mine(session_id: str | None) -> None:
            calls.append(session_id)
            if len(calls) == 2 and not both.done():
                both.set_result(None)

        options = TransportOptions(on_stream_resumed=mine)
        client = ReconnectingClient(agent.http_url, transport_options=options, **FAST_RETRY)
        rec = recorder(client)
        try:
            await client.start()
            await client.wait_ready(timeout=bound(5))
            session = await client.new_session("/w")
            stream = session.updates()
            turn = asyncio.create_task(session.prompt("stream 20 every 0.02"))
            seen = 0
            async with asyncio.timeout(bound(5)):
                async for item in stream:
                    if isinstance(item, SessionUpdate) and item.kind == "agent_message_chunk":
                        seen += 1
                        if seen == 3:
                            break
            assert agent.http.drop_streams() == 2
            await asyncio.wait_for(both, bound(5))
            assert sorted(calls, key=str) == sorted([session.id, None], key=str)
            # and the client's own report still happened for both streams
            await rec.wait(lambda e: len([x for x in rec.events if isinstance(x, SessionRecovered)]) >= 2)
            assert (await asyncio.wait_for(turn, bound(5))).stop_reason == "end_turn"
        finally:
            await rec.close()
            await client.aclose()


async def test_half_open_stream_is_detected_by_the_read_idle_watchdog() -> None:
    async with ReferenceAgent(2) as agent, FaultProxy("127.0.0.1", agent.port) as proxy:
        agent.http.keepalive_interval = 0.05
        async with connect(
            proxy.url(scheme="http"), transport_options=TransportOptions(ping_interval=0.2, ping_timeout=0.2)
        ) as client:
            session = await client.new_session("/w")
            turn = asyncio.create_task(session.prompt("sleep 30"))
            await agent.wait_for_method("session/prompt", timeout=bound(5))
            proxy.set_mode(ProxyMode.blackhole(), "s2c")  # nothing reaches the client, keepalives neither
            with pytest.raises(ConnectionLost) as info:
                await asyncio.wait_for(turn, bound(5))
            # the stream's watchdog, the POST-path liveness check or the prompt POST's own read timeout: all
            # within ping_interval + ping_timeout of the cut
            assert any(why in str(info.value) for why in ("no data or keepalive", "liveness check", "ReadTimeout"))


async def test_blackholed_link_is_replaced_and_its_late_frames_ignored() -> None:
    # failure mode 8 over HTTP: every TCP link of connection A (POSTs and streams) holds the agent's frames and
    # swallows the client's; the client notices, connects B, re-attaches; A's frames released later reach nothing
    from acp_client import ClientState, ConnectionDropped

    async with ReferenceAgent(2) as agent, FaultProxy("127.0.0.1", agent.port) as proxy:
        agent.http.keepalive_interval = 0.05
        client = ReconnectingClient(proxy.url(scheme="http"), **client_options(ping_interval=0.2, ping_timeout=0.2))
        rec = recorder(client)
        try:
            await client.start()
            await client.wait_ready(timeout=bound(5))
            session = await client.new_session("/w")
            old_links = proxy.links
            assert len(old_links) >= 3  # POSTs, the connection stream, the session stream
            for link in old_links:
                link.set_mode(ProxyMode.hold(), "s2c")
                link.set_mode(ProxyMode.blackhole(), "c2s")
            await rec.wait(lambda e: isinstance(e, ConnectionDropped), timeout=5)
            (event,) = await rec.wait(lambda e: isinstance(e, SessionRecovered), timeout=5)
            assert event.status == "active"  # the agent still had it: re-attached on B
            result = await asyncio.wait_for(session.prompt("echo: on B"), bound(5))
            assert result.stop_reason == "end_turn"
            for link in old_links:
                link.set_mode(ProxyMode.passthrough(), "both")  # A's late frames are released
            for link in old_links:
                await link.wait_closed(timeout=bound(5))
            assert len(rec.of(ConnectionDropped)) == 1 and client.state is ClientState.READY
            assert [m.text for m in session.transcript.messages if m.role == "agent"] == ["on B"]
        finally:
            await rec.close()
            await client.aclose()


async def test_liveness_ping_checks_the_request_path() -> None:
    async with (
        ReferenceAgent(2) as agent,
        FaultProxy("127.0.0.1", agent.port) as proxy,
        connect(
            proxy.url(scheme="http"), transport_options=TransportOptions(ping_interval=60.0, ping_timeout=0.3)
        ) as client,
    ):
        transport = transport_of(client)
        assert await transport.ping() >= 0.0
        proxy.blackhole_all()
        with pytest.raises(ConnectionLost, match="liveness check"):
            await transport.ping()
        assert transport.closed


async def test_cookies_are_stored_and_returned_across_reconnects() -> None:
    async with ReferenceAgent(2, set_cookie="lb=backend-7; Path=/") as agent:
        client = ReconnectingClient(agent.http_url, **FAST_RETRY)
        rec = recorder(client)
        try:
            await client.start()
            await client.wait_ready(timeout=bound(5))
            await client.new_session("/w")
            await agent.drop_all_connections()
            await rec.ready_count(2)
            cookies = [r[2].get("cookie") for r in agent.http.requests]
            assert cookies[0] is None  # the first initialize had none yet
            assert all(c == "lb=backend-7" for c in cookies[1:])
            assert client.transport_options.cookies.get("127.0.0.1", "lb") == "backend-7"
        finally:
            await rec.close()
            await client.aclose()


async def test_auto_prefers_websocket_and_falls_back_to_http() -> None:
    async with ReferenceAgent(2) as agent:
        async with connect(agent.http_url, transport_options=TransportOptions(transport="auto")) as client:
            assert isinstance(client.connection.transport, WebSocketTransport)
        agent.http.serve_websocket = False  # the upgrade is answered 406
        async with connect(agent.http_url, transport_options=TransportOptions(transport="auto")) as client:
            assert isinstance(client.connection.transport, StreamableHTTPTransport)
            await client.new_session("/w")
        agent.http.serve_websocket = True
        async with connect(
            agent.http_url, transport_options=TransportOptions(transport="websocket")
        ) as client:  # an http URL, forced WebSocket
            assert isinstance(client.connection.transport, WebSocketTransport)


# ---------------------------------------------------------------------------- HTTP/2 pitfalls


async def test_pitfall_a_exists_one_stream_until_settings_name_a_maximum() -> None:
    # control: httpx/httpcore on ONE HTTP/2 connection against a server whose SETTINGS name no maximum
    # (as Node's): with an SSE stream open, a POST waits for a second stream forever
    async with (
        ReferenceAgent(2) as agent,
        connect(agent.http_url, transport_options=TransportOptions(http2="prior_knowledge")) as client,
    ):
        agent.http.h2_max_concurrent_streams = None
        cid = transport_of(client).connection_id
        assert cid is not None
        async with httpx.AsyncClient(http1=False, http2=True) as shared:
            headers = {"Acp-Connection-Id": cid, "Accept": "text/event-stream"}
            async with shared.stream("GET", agent.http_url, headers=headers) as stream:
                assert stream.status_code == 200
                post = shared.post(agent.http_url, json={"jsonrpc": "2.0", "method": "x/y"}, headers=headers)
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await post


async def test_pitfalls_avoided_no_max_streams_and_keepalive_far_away() -> None:
    # the transport under the conditions of both pitfalls: no SETTINGS_MAX_CONCURRENT_STREAMS (a POST next
    # to an open stream would hang) and keepalives 60 s apart (a POST stalled behind another stream's read
    # lock would wait for one). Two sessions = three streams; 30 round trips must all complete.
    async with ReferenceAgent(2) as agent:
        agent.http.h2_max_concurrent_streams = None
        agent.http.keepalive_interval = 60.0
        async with connect(agent.http_url, transport_options=TransportOptions(http2="prior_knowledge")) as client:
            sessions = [await client.new_session("/w") for _ in range(2)]
            async with asyncio.timeout(bound(10)):
                for i in range(15):
                    for session in sessions:
                        status = await client.session_status(session.id)
                        assert status.status == "active", i
                result = await sessions[1].prompt("stream 5")
            assert result.stop_reason == "end_turn"
            assert agent.http.versions == {"HTTP/2": len(agent.http.requests)}


# ---------------------------------------------------------------------------- servers that are not ACP endpoints


Handler = Callable[[str, str, dict[str, str], bytes], Awaitable[tuple[int, list[tuple[str, str]], bytes]]]


@asynccontextmanager
async def canned_server(handler: Handler) -> AsyncIterator[str]:
    """A tiny HTTP/1.1 server on loopback answering every request with ``handler``'s canned response; an
    event stream is sent chunked and then held open until the server stops."""
    writers: set[asyncio.StreamWriter] = set()
    stop = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                status, extra, payload = await handler(method, target, headers, body)
                if ("content-type", "text/event-stream") in extra:
                    out = [f"HTTP/1.1 {status} X", "transfer-encoding: chunked", *(f"{k}: {v}" for k, v in extra)]
                    chunk = f"{len(payload):x}\r\n".encode() + payload + b"\r\n"
                    writer.write(("\r\n".join(out) + "\r\n\r\n").encode() + chunk)
                    await writer.drain()
                    await stop.wait()
                    return
                out = [f"HTTP/1.1 {status} X", f"content-length: {len(payload)}", *(f"{k}: {v}" for k, v in extra)]
                writer.write(("\r\n".join(out) + "\r\n\r\n").encode() + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writers.discard(writer)
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/acp"
    finally:
        stop.set()
        server.close()
        for writer in list(writers):
            writer.close()
        await server.wait_closed()


def initialize_answer(body: bytes) -> bytes:
    request = json.loads(body)
    return json.dumps(
        {"jsonrpc": "2.0", "id": request["id"], "result": {"protocolVersion": 1, "agentCapabilities": {}}}
    ).encode()


@pytest.mark.parametrize(
    ("status", "content_type", "payload", "match"),
    [
        (200, "text/html", b"<html><body>Welcome to nginx!</body></html>", "not a JSON-RPC response"),
        (415, "application/json", b'{"error": "Content-Type must be application/json"}', "HTTP 415"),
        (400, "application/json", b'{"error": "Missing connection id"}', "HTTP 400"),
        (406, "text/plain", b"not acceptable", "HTTP 406"),
        (501, "application/json", b'{"error": "Batch requests are not supported"}', "HTTP 501"),
    ],
)
async def test_unusable_initialize_answers_are_typed(
    status: int, content_type: str, payload: bytes, match: str
) -> None:
    async def handler(method: str, target: str, headers: dict[str, str], body: bytes) -> Any:
        return status, [("content-type", content_type)], payload

    async with canned_server(handler) as url:
        with pytest.raises(HTTPTransportError, match=match) as info:
            await connect(url, protocol_version=1)
        assert info.value.status_code == status
        assert info.value.body_excerpt == payload.decode()[:300]
        assert info.value.content_type == content_type


async def test_missing_connection_id_is_a_clear_error_not_a_hang() -> None:
    async def handler(method: str, target: str, headers: dict[str, str], body: bytes) -> Any:
        return 200, [("content-type", "application/json")], initialize_answer(body)

    async with canned_server(handler) as url:
        with pytest.raises(HTTPTransportError, match="without an Acp-Connection-Id"):
            await asyncio.wait_for(connect(url, protocol_version=1), bound(5))


async def test_404_for_the_connection_is_a_lost_link_and_bad_events_are_counted() -> None:
    async def handler(method: str, target: str, headers: dict[str, str], body: bytes) -> Any:
        if method == "POST" and "acp-connection-id" not in headers:
            return 200, [("content-type", "application/json"), ("acp-connection-id", "c1")], initialize_answer(body)
        if method == "GET":
            events = b'data: not json\n\nevent: custom\ndata: {"x": 1}\n\n: comment\n\n'
            # notifications: decoded once, by the stream reader, and handed on decoded
            events += b'data: {"jsonrpc":"2.0","method":"x/a"}\n\n'
            events += b'data: {"jsonrpc":"2.0","method":"x/b","params":{}}\n\n'
            return 200, [("content-type", "text/event-stream")], events
        message = json.loads(body) if method == "POST" else {}
        if message.get("method") == "x/rejected":
            return 415, [("content-type", "application/json")], b'{"error": "unsupported"}'
        if message.get("method") == "x/html":  # a proxy's login page instead of an ACP answer
            return 200, [("content-type", "text/html")], b"<html><body>Please sign in</body></html>"
        if message.get("method") == "x/inline":  # the answer as an event-stream body of the POST itself
            answer = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"inline": True}})
            return 200, [("content-type", "text/event-stream; charset=utf-8")], f"data: {answer}\n\n".encode()
        return 404, [("content-type", "application/json")], b'{"error": "Unknown connection id"}'

    async with canned_server(handler) as url:
        client = await connect(url, protocol_version=1, transport_options=TransportOptions(ping_interval=None))
        try:
            transport = transport_of(client)
            with pytest.raises(Exception, match="HTTP 415") as rejected:
                await client.request("x/rejected", {})
            assert getattr(rejected.value, "data", {})["httpStatus"] == 415
            with pytest.raises(Exception, match="HTTP 200") as html:
                await client.request("x/html", {})
            assert getattr(html.value, "data", {})["bodyExcerpt"].startswith("<html>")
            assert await client.request("x/inline", {}) == {"inline": True}
            with pytest.raises(ConnectionLost, match="no longer knows connection c1"):
                await client.request("x/anything", {})
            assert transport.stats.sse_discarded == 2 and transport.stats.sse_comments >= 1
            assert transport.stats.posts_rejected == 2
            assert client.connection.stats["notifications_ignored"] == 2
        finally:
            await client.aclose()


async def test_a_broken_message_after_notifications_is_reported_by_the_connection() -> None:
    """The stream reader decodes each event once: the notifications go on decoded, and a broken message
    reaches the connection as text, which reports it (a counted parse error, answered -32700)."""
    replied = asyncio.Event()

    async def handler(method: str, target: str, headers: dict[str, str], body: bytes) -> Any:
        if method == "POST" and "acp-connection-id" not in headers:
            return 200, [("content-type", "application/json"), ("acp-connection-id", "c1")], initialize_answer(body)
        if method == "GET":
            events = b'data: {"jsonrpc":"2.0","method":"x/a"}\n\n'
            events += b'data: {"jsonrpc":"2.0","method":"x/b","params":{}}\n\ndata: {"jsonrpc": }\n\n'
            return 200, [("content-type", "text/event-stream")], events
        if method == "POST" and json.loads(body).get("error", {}).get("code") == -32700:
            replied.set()
        return 202, [], b""

    async with canned_server(handler) as url:
        client = await connect(url, protocol_version=1, transport_options=TransportOptions(ping_interval=None))
        try:
            await asyncio.wait_for(replied.wait(), bound(5))
            assert client.connection.stats["notifications_ignored"] == 2
            assert client.connection.stats["invalid_parse_error"] == 1
            assert client.connection.last_discarded == ("parse_error", '{"jsonrpc": }')
            assert transport_of(client).stats.sse_discarded == 0
        finally:
            await client.aclose()


def answering_inline(extra: dict[str, list[tuple[str, str]]]) -> Handler:
    """A Streamable HTTP endpoint that answers each request in its POST response (``{"ok": true}``), with the
    response headers ``extra`` names for its method; its event streams carry only a comment."""

    async def handler(method: str, target: str, headers: dict[str, str], body: bytes) -> Any:
        if method == "POST" and "acp-connection-id" not in headers:
            return 200, [("content-type", "application/json"), ("acp-connection-id", "c1")], initialize_answer(body)
        if method == "GET":
            return 200, [("content-type", "text/event-stream")], b": quiet\n\n"
        message = json.loads(body) if method == "POST" else {}
        if "id" not in message or "method" not in message:
            return 202, [], b""
        answer = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"ok": True}}).encode()
        return 200, [("content-type", "application/json"), *extra.get(message["method"], [])], answer

    return handler


async def test_a_post_answer_with_a_header_value_that_is_not_ascii_is_read_not_left_waiting() -> None:
    # issue 33: `X-Note: café` raised UnicodeEncodeError in the POST exchange; the request waited forever
    async with canned_server(answering_inline({"x/note": [("x-note", "café")]})) as url:
        client = await connect(url, protocol_version=1, transport_options=TransportOptions(ping_interval=None))
        try:
            assert await asyncio.wait_for(client.request("x/note", {}), bound(5)) == {"ok": True}
            assert await asyncio.wait_for(client.request("x/plain", {}), bound(5)) == {"ok": True}
        finally:
            await client.aclose()


class BrokenJar(CookieJar):
    """A user's cookie jar that fails on one cookie: an exception the transport does not expect."""

    def store(self, host: str, set_cookie_values: Iterable[str]) -> None:
        values = list(set_cookie_values)
        if any(value.startswith("boom=") for value in values):
            raise RuntimeError("the jar broke")
        super().store(host, values)


async def test_an_unexpected_failure_in_a_post_exchange_fails_the_link_with_its_cause() -> None:
    # any exception in the exchange, not only httpx's, must fail the link: the waiting request then fails
    # with the link's typed error at once (it waited for its timeout, forever for session/prompt)
    async with canned_server(answering_inline({"x/boom": [("set-cookie", "boom=1")]})) as url:
        options = TransportOptions(ping_interval=None, cookies=BrokenJar())
        client = await connect(url, protocol_version=1, transport_options=options)
        try:
            with pytest.raises(ConnectionLost, match="RuntimeError: the jar broke") as lost:
                await asyncio.wait_for(client.request("x/boom", {}), bound(5))
            assert lost.value.reason == "post failed"
        finally:
            await client.aclose()


def test_a_peers_huge_number_of_seconds_is_ignored_not_raised() -> None:
    # a Max-Age or Retry-After past a float's range raised OverflowError (past 4300 digits ValueError),
    # outside the handling of the POST answer or the WebSocket handshake that read it
    jar = CookieJar()
    jar.store("h", ["a=1; Max-Age=" + "9" * 400, "b=2; Max-Age=-" + "9" * 400, "c=3; Max-Age=" + "9" * 5000])
    assert (jar.get("h", "a"), jar.get("h", "b"), jar.get("h", "c")) == ("1", None, "3")
    assert parse_retry_after("9" * 400) is None and parse_retry_after("9" * 5000) is None
    assert parse_retry_after("120") == 120.0


# ---------------------------------------------------------------------------- the CLI


def test_demo_over_streamable_http(capsys: pytest.CaptureFixture[str]) -> None:
    from acp_client.cli import main

    assert main(["demo", "--protocol", "1", "--sessions", "2", "--transport", "http"]) == 0
    out = capsys.readouterr().out
    assert "agent listening on http://127.0.0.1:" in out
    assert "restored via session/load, replayed=yes" in out
    assert "1 session(s) restored, 1 forgotten" in out


# ---------------------------------------------------------------------------- the benchmark


@pytest.mark.timeout(180)
def test_http_benchmark_runs_quick_and_prints_its_ratios(tmp_path: Any) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    results = tmp_path / "benchmarks.md"
    proc = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "p10_http.py"), "--quick", "--docs", str(results)],
        capture_output=True,
        text=True,
        timeout=bound(150),
        cwd=str(root),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ratios = [line for line in proc.stdout.splitlines() if line.startswith("RATIO p10 ")]
    assert len(ratios) == 6, proc.stdout
    assert "<!-- p10:start -->" in results.read_text(encoding="utf-8")


async def test_closing_a_session_ends_its_stream() -> None:
    async with ReferenceAgent(2) as agent, connect(agent.http_url) as client:
        transport = transport_of(client)
        keep, gone = await client.new_session("/w"), await client.new_session("/w")
        assert sorted(transport.session_streams) == sorted([keep.id, gone.id])
        await client.close_session(gone.id)
        assert transport.session_streams == [keep.id]
        assert (await asyncio.wait_for(keep.prompt("echo: still here"), bound(5))).stop_reason == "end_turn"

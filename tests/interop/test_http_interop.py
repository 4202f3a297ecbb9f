"""acp-client's Streamable HTTP transport against the official servers (see QUIRKS.md, "Streamable HTTP").

Peers, each a child process on 127.0.0.1 started and stopped by the test:

- ``ts-h1``: the TypeScript SDK's ``AcpServer`` behind its Node HTTP/1.1 handler (``ts_http_agent.mjs h1``);
- ``ts-h2c`` / ``ts-h2c-max``: the same ``AcpServer`` on ``node:http2`` cleartext through a small adapter
  to ``handleRequest``, without and with ``maxConcurrentStreams`` (Node announces no maximum by default:
  the condition of httpcore's one-stream pitfall);
- ``py-uvicorn-h1``: the Python SDK's ASGI app under uvicorn (``official_agent.py``);
- ``py-hypercorn-h2c``: the same app under hypercorn, HTTP/2 with prior knowledge (``official_http_agent.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from acp_client import (
    ClientHandlers,
    ConnectError,
    H2COnlyServer,
    ReconnectFailed,
    ReconnectingClient,
    SessionForgotten,
    SessionNotFound,
    SessionRecovered,
    SessionRecoveryFailed,
    TransportOptions,
    connect,
)
from acp_client.handlers import PermissionRequest
from acp_client.reconnect import classify_error
from acp_client.sessions import SessionUpdate
from acp_client.transports.http import REPLAY_BARRIER_METHOD, StreamableHTTPTransport
from tests.conftest import bound, client_options, recorder
from tests.interop._ts_sdk import ts_sdk_dir  # noqa: F401  (a fixture)

HERE = Path(__file__).parent
E = TypeVar("E")


@dataclass(frozen=True)
class Peer:
    name: str
    http2: Any  # the client's http2 option
    version: str  # the HTTP version the peer must end up speaking

    @property
    def typescript(self) -> bool:
        return self.name.startswith("ts-")

    def command(self, sdk_dir: Path | None) -> list[str]:
        if self.name == "ts-h1":
            return ["node", str(HERE / "ts_http_agent.mjs"), str(sdk_dir), "h1"]
        if self.name == "ts-h2c":
            return ["node", str(HERE / "ts_http_agent.mjs"), str(sdk_dir), "h2c"]
        if self.name == "ts-h2c-max":
            return ["node", str(HERE / "ts_http_agent.mjs"), str(sdk_dir), "h2c", "100"]
        if self.name == "py-uvicorn-h1":
            return [sys.executable, str(HERE / "official_agent.py"), "--ws-port", "0", "--exit-on-stdin-eof"]
        return [sys.executable, str(HERE / "official_http_agent.py")]


PEERS = [
    Peer("ts-h1", False, "HTTP/1.1"),
    Peer("ts-h2c", "prior_knowledge", "HTTP/2"),
    Peer("ts-h2c-max", "prior_knowledge", "HTTP/2"),
    Peer("py-uvicorn-h1", False, "HTTP/1.1"),
    Peer("py-hypercorn-h2c", "prior_knowledge", "HTTP/2"),
]


@asynccontextmanager
async def running(command: list[str]) -> AsyncIterator[str]:
    """Start a peer, wait for ``READY <port>``, yield its URL; stop it (stdin closed, then killed) after."""
    proc = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(bound(30)):
            line = await proc.stdout.readline()
        if not line.startswith(b"READY "):
            stderr = await proc.stderr.read() if proc.stderr is not None else b""
            raise RuntimeError(f"{command[1]} did not start: {line!r} {stderr[-2000:]!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}/acp"
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            async with asyncio.timeout(bound(10)):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                await pipe.read()


@pytest.fixture(params=PEERS, ids=[p.name for p in PEERS])
async def peer(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Peer, str]]:
    """A running peer and its URL."""
    spec: Peer = request.param
    sdk_dir = request.getfixturevalue("ts_sdk_dir") if spec.typescript else None
    async with running(spec.command(sdk_dir)) as url:
        yield spec, url


async def test_lifecycle(peer: tuple[Peer, str]) -> None:
    spec, url = peer
    async with connect(url, transport_options=TransportOptions(http2=spec.http2)) as client:
        transport = client.connection.transport
        assert isinstance(transport, StreamableHTTPTransport)
        assert transport.http_version == spec.version
        assert transport.connection_id
        session = await client.new_session(str(HERE))
        assert transport.session_streams == [session.id]
        for word in ("one", "two"):
            result = await asyncio.wait_for(session.prompt(f"echo: {word}"), bound(10))
            assert result.stop_reason == "end_turn"
            assert word in session.transcript.messages[-1].text
        assert transport.stats.sse_discarded == 0


async def test_cancel_reaches_the_typescript_agent(peer: tuple[Peer, str]) -> None:
    spec, url = peer
    if not spec.typescript:
        pytest.skip("the Python interop agent has no long-running turn to cancel")
    async with connect(url, transport_options=TransportOptions(http2=spec.http2)) as client:
        session = await client.new_session(str(HERE))
        updates = session.updates()
        turn = asyncio.create_task(session.prompt("sleep 30"))
        async with asyncio.timeout(bound(10)):
            async for item in updates:  # the agent says "sleeping " once the turn runs
                if isinstance(item, SessionUpdate) and item.kind == "agent_message_chunk":
                    break
        await session.cancel()
        result = await asyncio.wait_for(turn, bound(10))
        assert result.stop_reason == "cancelled"


async def test_reconnect(peer: tuple[Peer, str]) -> None:
    spec, url = peer
    client = ReconnectingClient(url, **client_options(http2=spec.http2))
    rec = recorder(client)
    try:
        await client.start()
        await client.wait_ready(timeout=bound(10))
        session = await client.new_session(str(HERE))
        await asyncio.wait_for(session.prompt("echo: before"), bound(10))
        client.reconnect_now()  # a new HTTP connection (new Acp-Connection-Id) for the same sessions
        outcome = await rec.wait(lambda e: isinstance(e, SessionRecovered | SessionForgotten), timeout=10)
        await rec.ready_count(2)
        if spec.typescript:
            # AcpServer lets a session stream open before the session is attached, replays on it
            (event,) = outcome
            assert isinstance(event, SessionRecovered) and (event.mode, event.replayed) == ("load", True)
            assert [m.text for m in session.transcript.messages if m.role == "agent"] == ["before"]
            await asyncio.wait_for(session.prompt("echo: after"), bound(10))
            assert [m.text for m in session.transcript.messages if m.role == "agent"] == ["before", "after"]
        else:
            # the Python server registers a session stream only when a result carries the sessionId: a
            # session cannot be attached to a new HTTP connection. It is ended once, with a reason.
            (event,) = outcome
            assert isinstance(event, SessionForgotten) and event.via == "session/load"
            assert session.id not in client.sessions
            assert not rec.of(SessionRecoveryFailed)
            fresh = await client.new_session(str(HERE))  # the new connection itself works
            assert (await asyncio.wait_for(fresh.prompt("echo: new"), bound(10))).stop_reason == "end_turn"
    finally:
        await rec.close()
        await client.aclose()


async def test_http2_over_tls_by_alpn(tmp_path: Path) -> None:
    import ssl

    import trustme

    from acp_client import TLSError

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    certfile, keyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(certfile))
    cert.private_key_pem.write_to_path(str(keyfile))
    command = [
        sys.executable,
        str(HERE / "official_http_agent.py"),
        "--certfile",
        str(certfile),
        "--keyfile",
        str(keyfile),
    ]
    async with running(command) as url:
        https = url.replace("http://", "https://")
        trusted = ssl.create_default_context()
        ca.configure_trust(trusted)
        async with connect(
            https, transport_options=TransportOptions(ssl=trusted)
        ) as client:  # http2=True: offered by ALPN
            transport = client.connection.transport
            assert isinstance(transport, StreamableHTTPTransport)
            assert transport.http_version == "HTTP/2"
            session = await client.new_session(str(HERE))
            result = await asyncio.wait_for(session.prompt("echo: over tls"), bound(10))
            assert result.stop_reason == "end_turn"
        async with connect(https, transport_options=TransportOptions(ssl=trusted, http2=False)) as client:
            assert client.connection.transport.http_version == "HTTP/1.1"  # type: ignore[attr-defined]
        with pytest.raises(TLSError):
            await connect(https)  # the system trust store does not know the test CA


# --------------------------------------------------------------------------- the binding's session-header rule
#
# The TypeScript AcpServer (dist/transports/server.js, determineRoute) answers 400 "Missing Acp-Session-Id" to
# any POST whose params carry a string sessionId without the header, and routes the answer to that
# session's stream. What the server really received is read from its own log (ts_http_agent.mjs --log).
# Each front runs v1 and v2: the SDK 2.4.0 ships a draft v2 agent API (dist/v2/acp.js) and an
# AgentProtocolRouter (dist/protocol-router.js) that AcpServer takes as its agent (ts_http_agent.mjs --v2).

TS_FRONTS = [p for p in PEERS if p.typescript]


class TSServer:
    """The TS agent (``--status``) as a child process that can be restarted on the same port, with its
    sessions in a store file and a log of every POST it received."""

    def __init__(self, spec: Peer, sdk_dir: Path, tmp_path: Path, protocol: int = 1) -> None:
        self.spec = spec
        self.protocol = protocol  # 2: the SDK's draft v2 API beside v1 (--v2), and the client offers 2
        self.store = tmp_path / "ts-sessions.json"
        self.log = tmp_path / "ts-posts.jsonl"
        self._base = spec.command(sdk_dir)
        self._stack: contextlib.AsyncExitStack | None = None
        self.url = ""

    async def start(self) -> None:
        port = [] if not self.url else ["--port", self.url.rsplit(":", 1)[1].split("/")[0]]
        v2 = ["--v2"] if self.protocol == 2 else []
        command = [*self._base, "--status", "--store", str(self.store), "--log", str(self.log), *v2, *port]
        self._stack = contextlib.AsyncExitStack()
        self.url = await self._stack.enter_async_context(running(command))

    async def stop(self) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()

    def posts(self) -> list[dict[str, Any]]:
        """Every POST the server received so far: ``method`` (``None`` for an answer), ``id``,
        ``sessionId`` (from the params), ``header`` (``Acp-Session-Id``), ``replayFrom`` (a v2 resume's
        ``replayFrom.type``) and the HTTP ``status``."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]


TS_SERVERS = [(front, protocol) for front in TS_FRONTS for protocol in (1, 2)]


@asynccontextmanager
async def _ts_running(
    request: pytest.FixtureRequest, tmp_path: Path, front: Peer, protocol: int
) -> AsyncIterator[TSServer]:
    server = TSServer(front, request.getfixturevalue("ts_sdk_dir"), tmp_path, protocol)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture(params=TS_SERVERS, ids=[f"{front.name}-v{protocol}" for front, protocol in TS_SERVERS])
async def ts_server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TSServer]:
    """The TS server on each front, answering v1 and (``--v2``) v2."""
    front, protocol = request.param
    async with _ts_running(request, tmp_path, front, protocol) as server:
        yield server


@pytest.fixture(params=TS_FRONTS, ids=[f"{front.name}-v2" for front in TS_FRONTS])
async def ts_server_v2(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TSServer]:
    """The TS server on each front, answering v2 (for what only v2 has)."""
    async with _ts_running(request, tmp_path, request.param, 2) as server:
        yield server


def _assert_rule_kept(posts: list[dict[str, Any]]) -> None:
    """Every POST naming a session carried its header, and the server accepted every POST (202)."""
    assert posts
    for post in posts:
        if post["sessionId"] is not None:
            assert post["header"] == post["sessionId"], post
        assert post["status"] in (200, 202), post


async def _streams_given_back(transport: StreamableHTTPTransport, expected: list[str]) -> list[str]:
    """The open session streams once they are ``expected`` (a stream lent for an answer that failed is closed
    right after it), or as they stand after ``bound(5)`` s (the caller's assertion then shows them)."""
    for _ in range(int(bound(5) / 0.01)):
        if sorted(transport.session_streams) == sorted(expected):
            break
        await asyncio.sleep(0.01)  # polling: the transport has no event for a stream it closed
    return transport.session_streams


async def test_detached_requests_carry_the_session_header(ts_server: TSServer) -> None:
    options = TransportOptions(http2=ts_server.spec.http2)
    version = ts_server.protocol
    in_memory, saved = ("open", "saved") if version == 2 else ("active", "inactive")  # v2: the SDK's words
    async with connect(ts_server.url, transport_options=options, protocol_version=version) as first:
        assert first.protocol_version == version
        active = await first.new_session(str(HERE))
        closed = await first.new_session(str(HERE))
        await first.close_session(closed.id)  # known to the agent, not in memory: inactive
    async with connect(ts_server.url, transport_options=options, protocol_version=version) as client:
        transport = client.connection.transport  # nothing attached here
        assert isinstance(transport, StreamableHTTPTransport)
        await client.cancel(active.id)  # a notification naming a session not attached here
        probed = await client.session_status(active.id, timeout=bound(10))
        assert probed.status == in_memory
        if version == 2:  # v2 reports the foreground state of a session in memory
            assert probed.state is not None and probed.state.state == "idle"
        assert (await client.session_status(closed.id, timeout=bound(10))).status == saved
        with pytest.raises(SessionNotFound):
            await client.session_status("ts-sess-none", timeout=bound(10))
        listed = [info.session_id async for info in client.list_sessions()]
        assert sorted(listed) == sorted([active.id, closed.id])
        # the probes opened their session's stream first; the unknown session's was given back
        expected = [active.id, closed.id]
        assert sorted(await _streams_given_back(transport, expected)) == sorted(expected)
        await client.close_session(active.id, timeout=bound(10))  # close/delete of sessions not attached here
        await client.delete_session(closed.id, timeout=bound(10))
        assert transport.stats.posts_rejected == 0
        assert await _streams_given_back(transport, []) == []
    posts = ts_server.posts()
    _assert_rule_kept(posts)
    probes = [(p["sessionId"], p["header"]) for p in posts if p["method"] == "session/status"]
    assert probes == [(active.id, active.id), (closed.id, closed.id), ("ts-sess-none", "ts-sess-none")]
    assert [p["header"] for p in posts if p["method"] == "session/list"] == [None]
    assert [(p["sessionId"], p["header"]) for p in posts if p["method"] == "session/cancel"] == [(active.id, active.id)]
    assert [p["sessionId"] for p in posts if p["method"] in ("session/close", "session/delete")] == [
        closed.id,
        active.id,
        closed.id,
    ]


class _Approve(ClientHandlers):
    async def request_permission(self, request: PermissionRequest) -> str | None:
        return request.options[0].option_id


async def test_agent_request_from_a_session_stream_is_answered_with_its_header(ts_server: TSServer) -> None:
    options = TransportOptions(http2=ts_server.spec.http2)
    async with connect(
        ts_server.url, transport_options=options, handlers=_Approve(), protocol_version=ts_server.protocol
    ) as client:
        session = await client.new_session(str(HERE))
        result = await asyncio.wait_for(session.prompt("ask"), bound(10))
        assert result.stop_reason == "end_turn"
        assert session.transcript.messages[-1].text == "chose yes"
    posts = ts_server.posts()
    _assert_rule_kept(posts)
    answers = [p for p in posts if p["method"] is None]
    assert [a["header"] for a in answers] == [session.id]


async def test_v2_turn_and_cancel_against_the_typescript_server(ts_server_v2: TSServer) -> None:
    """A v2 turn (answered at once, ended by an idle ``state_update``) and its cancel, over each TS front
    (v1's: ``test_cancel_reaches_the_typescript_agent``)."""
    ts_server = ts_server_v2
    options = TransportOptions(http2=ts_server.spec.http2)
    async with connect(ts_server.url, transport_options=options, protocol_version=2) as client:
        session = await client.new_session(str(HERE))
        result = await asyncio.wait_for(session.prompt("echo: v2"), bound(10))
        assert result.stop_reason == "end_turn" and session.transcript.messages[-1].text == "v2"
        # the SDK 2.4.0 answers a v2 prompt with its insertion receipt; the echo with that id is merged
        assert result.message_id is not None and result.raw == {"messageId": result.message_id}
        users = [(m.message_id, m.text) for m in session.transcript.messages if m.role == "user"]
        assert users == [(result.message_id, "echo: v2")]
        updates = session.updates()
        turn = asyncio.create_task(session.prompt("sleep 30"))
        async with asyncio.timeout(bound(10)):
            async for item in updates:  # the agent says "sleeping " once the turn runs
                if isinstance(item, SessionUpdate) and item.kind == "agent_message_chunk":
                    break
        await session.cancel()
        result = await asyncio.wait_for(turn, bound(10))
        assert result.stop_reason == "cancelled"
    posts = ts_server.posts()
    _assert_rule_kept(posts)
    assert [p["header"] for p in posts if p["method"] == "session/cancel"] == [session.id]


async def test_the_router_gives_a_v1_client_the_v1_agent(ts_server_v2: TSServer) -> None:
    """The same server that speaks v2 answers a v1 offer with its v1 app (the router selects per connection)."""
    options = TransportOptions(http2=ts_server_v2.spec.http2)
    async with connect(ts_server_v2.url, transport_options=options, protocol_version=1) as old:
        assert old.protocol_version == 1
        v1_session = await old.new_session(str(HERE))
        assert (await asyncio.wait_for(v1_session.prompt("echo: one"), bound(10))).stop_reason == "end_turn"
        async with connect(ts_server_v2.url, transport_options=options) as new:  # "auto": v2 offered
            assert new.protocol_version == 2
            assert (await new.session_status(v1_session.id, timeout=bound(10))).status == "open"
        assert (await old.session_status(v1_session.id, timeout=bound(10))).status == "active"
    _assert_rule_kept(ts_server_v2.posts())


async def _next(rec: Any, kind: type[E], seen: int, timeout: float) -> E:
    """The first event of ``kind`` recorded after the first ``seen`` of that kind."""
    await rec.wait(lambda e: len(rec.of(kind)) > seen, timeout=timeout)
    return rec.of(kind)[seen]


async def test_recovery_ladder_runs_against_the_typescript_server(ts_server: TSServer) -> None:
    """Closing the link (active: resume), a restart (inactive: v1 load, v2 resume, with replay), a restart
    that lost the sessions (-32002: forgotten); every probe really reaches the agent and is answered. In v1
    and in v2 (the SDK's draft v2 API behind its protocol router, which names the statuses open/saved)."""
    v2 = ts_server.protocol == 2
    active, inactive = ("open", "saved") if v2 else ("active", "inactive")  # v2: the SDK's own words
    client = ReconnectingClient(
        ts_server.url, **client_options(http2=ts_server.spec.http2, protocol_version=ts_server.protocol)
    )
    rec = recorder(client)
    try:
        await client.start()
        await client.wait_ready(timeout=bound(10))
        session = await client.new_session(str(HERE))
        assert client.protocol_version == ts_server.protocol
        await asyncio.wait_for(session.prompt("echo: before"), bound(10))

        client.reconnect_now()  # a cut: a new HTTP connection for the same, still active, session
        event = await _next(rec, SessionRecovered, 0, 10)
        # v2 asks for the replay even of an active session (replayFrom start: a consistent transcript)
        assert (event.status, event.mode, event.replayed) == (active, "resume", v2)
        assert [m.text for m in session.transcript.messages if m.role == "agent"] == ["before"]
        await asyncio.wait_for(session.prompt("echo: after cut"), bound(10))

        await ts_server.stop()  # a restart: the session survives in the store, no longer in memory
        await ts_server.start()
        event = await _next(rec, SessionRecovered, 1, 20)
        # v1: session/load; v2 has none: session/resume with replayFrom {"type": "start"}
        assert (event.status, event.mode, event.replayed) == (inactive, "resume" if v2 else "load", True)
        # the replay has no message ids: its chunks make one agent message, as a fresh client builds it
        assert "".join(m.text for m in session.transcript.messages if m.role == "agent") == "beforeafter cut"
        if v2:  # each prompt once, under its receipt's id, after two replays
            users = [m.text for m in session.transcript.messages if m.role == "user"]
            assert users == ["echo: before", "echo: after cut"]
        await asyncio.wait_for(session.prompt("echo: after restart"), bound(10))

        await ts_server.stop()
        ts_server.store.unlink()  # a restart that lost every session
        await ts_server.start()
        forgotten = await _next(rec, SessionForgotten, 0, 20)
        assert (forgotten.reason, forgotten.via) == ("unknown", "session/status")
        assert session.id not in client.sessions
    finally:
        await rec.close()
        await client.aclose()
    posts = ts_server.posts()
    _assert_rule_kept(posts)
    probes = [p for p in posts if p["method"] == "session/status"]
    assert len(probes) == 3 and {p["header"] for p in probes} == {session.id}
    resumes = [p for p in posts if p["method"] == "session/resume"]
    assert len(resumes) == (2 if v2 else 1) and {p["header"] for p in resumes} == {session.id}
    assert [p["replayFrom"] for p in resumes] == (["start", "start"] if v2 else [None])
    if v2:  # no session/load in v2, and so no replay barrier: the replay precedes the resume's answer
        assert not [p for p in posts if p["method"] in ("session/load", REPLAY_BARRIER_METHOD)]
        return
    # the load after the restart: its result waited for the end-of-replay marker, answered on the session stream
    (barrier,) = [p for p in posts if p["method"] == REPLAY_BARRIER_METHOD]
    assert barrier["header"] == session.id


# --------------------------------------------------------------------------- an h2c-only server, default options


@pytest.mark.parametrize("front", ["ts-h2c", "ts-h2c-max"])
async def test_h2c_only_server_with_default_options_says_what_to_use(
    front: str, request: pytest.FixtureRequest
) -> None:
    """Node's http2 server speaks nothing but h2c: HTTP/1.1 (the default for http://) gets a typed, fatal
    error naming http2="prior_knowledge", not a RemoteProtocolError retried for ever."""
    spec = next(p for p in PEERS if p.name == front)
    async with running(spec.command(request.getfixturevalue("ts_sdk_dir"))) as url:
        with pytest.raises(H2COnlyServer, match='http2="prior_knowledge"'):
            await connect(url)
        client = ReconnectingClient(url, **client_options())
        try:
            await client.start()
            with pytest.raises(ReconnectFailed) as failed:
                await client.wait_ready(timeout=bound(10))
            assert failed.value.reason == "h2c_only" and isinstance(failed.value.cause, H2COnlyServer)
        finally:
            await client.aclose()
        async with connect(url, transport_options=TransportOptions(http2="prior_knowledge")) as fine:
            assert fine.connection.transport.http_version == "HTTP/2"  # type: ignore[attr-defined]


async def test_a_garbled_http1_answer_is_not_taken_for_h2c() -> None:
    """A server that answers HTTP/1.1 with bytes that are not HTTP at all, and not HTTP/2 either, gives a
    plain (retried) ConnectError."""

    async def garble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.write(b"\x01\x02 not http\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garble, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(ConnectError) as raised:
            await connect(f"http://127.0.0.1:{port}/acp")
        assert not isinstance(raised.value, H2COnlyServer)
        assert classify_error(raised.value).retry
    finally:
        server.close()
        await server.wait_closed()


async def test_a_server_that_closes_without_answering_is_not_taken_for_h2c() -> None:
    """A dual-stack server (HTTP/1.1 and h2c, as the reference agent's front end) that drops the initialize
    POST unanswered, while it restarts or is overloaded, then answers the HTTP/2 preface: a retried
    ConnectError, never the fatal H2COnlyServer (seen under load in the herd test, which then gave up)."""
    connections = 0

    async def drop_then_speak_h2(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await reader.read(1)
        if connections > 1:  # the preface probe: an empty SETTINGS frame, as an h2c server answers
            writer.write(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(drop_then_speak_h2, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(ConnectError) as raised:
            await connect(f"http://127.0.0.1:{port}/acp")
        assert not isinstance(raised.value, H2COnlyServer)
        assert classify_error(raised.value).retry
    finally:
        server.close()
        await server.wait_closed()

"""The WebSocket transport over real loopback sockets (127.0.0.1, port 0), against websockets' own server
and against raw TCP servers that misbehave (silent after the handshake, never answering it)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import email.utils
import hashlib
import logging
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from http import HTTPStatus
from typing import Any, cast

import pytest
from structlog.testing import capture_logs
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from acp_client.exceptions import ConnectError, ConnectionLost, HandshakeRejected, TLSError, UsageError
from acp_client.transports import CookieJar, Transport
from acp_client.transports.websocket import WebSocketTransport, connect_websocket, parse_retry_after
from tests.conftest import bound

WAIT = bound(5.0)  # upper bound on any wait for something that must happen
FAST: dict[str, Any] = {"ping_interval": 0.2, "ping_timeout": 0.2, "close_timeout": 0.2}
DEAD_WITHIN = bound(0.2 + 0.2 + 0.2 + 0.5)  # ping_interval + ping_timeout + close_timeout + slack


@pytest.fixture(autouse=True)
def no_proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """connect_websocket honours *_proxy variables by default; loopback tests must not go through one."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy", "socks_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


# --------------------------------------------------------------------------- servers


async def scripted(ws: ServerConnection) -> None:
    """Echo text; a few commands make the server misbehave on purpose."""
    async for message in ws:
        assert isinstance(message, str)
        command, _, arg = message.partition(" ")
        if command == "binary":
            await ws.send(b"\x00\x01binary")
            await ws.send("after binary")
        elif command == "close":
            code, _, reason = arg.partition(" ")
            await ws.close(int(code), reason)
        elif command == "big":
            await ws.send("x" * int(arg))
        elif command == "pause":
            # stop reading the socket: no more pongs, no close frame read (a half-open link)
            ws.transport.pause_reading()
            await ws.wait_closed()
        else:
            await ws.send(message)


@contextlib.asynccontextmanager
async def ws_server(
    handler: Callable[[ServerConnection], Awaitable[None]] = scripted, **kwargs: Any
) -> AsyncIterator[tuple[Server, int]]:
    kwargs.setdefault("close_timeout", 0.2)
    server = await serve(handler, "127.0.0.1", 0, **kwargs)
    try:
        yield server, server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await asyncio.wait_for(server.wait_closed(), WAIT)


@contextlib.asynccontextmanager
async def raw_server(answer_handshake: bool) -> AsyncIterator[int]:
    """A TCP server that completes the WebSocket handshake (or not) and then goes silent: it never reads
    or writes again and never closes, like a blackholed link."""
    release = asyncio.Event()
    handlers: list[asyncio.Task[Any]] = []
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.append(task)
        writers.append(writer)
        request = await reader.readuntil(b"\r\n\r\n")
        if answer_handshake:
            key = next(
                line.split(b":", 1)[1].strip()
                for line in request.split(b"\r\n")
                if line.lower().startswith(b"sec-websocket-key:")
            )
            accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
            writer.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Accept: " + accept + b"\r\nAcp-Connection-Id: conn-silent\r\n\r\n"
            )
            await writer.drain()
        cast(asyncio.Transport, writer.transport).pause_reading()
        await release.wait()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        release.set()
        for writer in writers:
            writer.transport.abort()
        if handlers:
            await asyncio.wait_for(asyncio.gather(*handlers, return_exceptions=True), WAIT)
        server.close()
        await asyncio.wait_for(server.wait_closed(), WAIT)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextlib.asynccontextmanager
async def connected(url: str, **kwargs: Any) -> AsyncIterator[WebSocketTransport]:
    transport = await asyncio.wait_for(connect_websocket(url, **kwargs), WAIT)
    try:
        yield transport
    finally:
        await asyncio.wait_for(transport.close(), WAIT)


async def expect_lost(transport: WebSocketTransport, within: float) -> ConnectionLost:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ConnectionLost) as lost:
        await asyncio.wait_for(transport.recv(), WAIT)
    elapsed = loop.time() - started
    assert elapsed < within, f"the dead link was noticed after {elapsed:.2f} s, bound {within:.2f} s"
    return lost.value


# --------------------------------------------------------------------------- frames


async def test_text_round_trip() -> None:
    async with ws_server() as (_, port), connected(f"ws://127.0.0.1:{port}/acp") as transport:
        assert isinstance(transport, Transport)
        for frame in ['{"jsonrpc":"2.0","id":1,"method":"initialize"}', "ünïcødé ✓"]:
            await transport.send(frame)
            assert await asyncio.wait_for(transport.recv(), WAIT) == frame
        assert transport.stats.frames_in == 2 and transport.stats.frames_out == 2
        assert transport.description == f"ws://127.0.0.1:{port}/acp"
        assert transport.connection_id is None
        assert not transport.closed and transport.close_code is None


async def test_binary_frames_are_discarded_and_counted() -> None:
    async with ws_server() as (_, port), connected(f"ws://127.0.0.1:{port}/") as transport:
        await transport.send("binary")
        assert await asyncio.wait_for(transport.recv(), WAIT) == "after binary"
        assert transport.stats.binary_discarded == 1
        assert transport.stats.frames_in == 1


async def test_oversize_frame_is_close_1009() -> None:
    async with ws_server() as (_, port), connected(f"ws://127.0.0.1:{port}/", max_frame_bytes=1024) as transport:
        await transport.send("big 1024")
        assert await asyncio.wait_for(transport.recv(), WAIT) == "x" * 1024
        await transport.send("big 1025")
        lost = await expect_lost(transport, WAIT)
        assert lost.close_code == 1009
        assert lost.reason is not None and "max_frame_bytes (1024 bytes)" in lost.reason
        assert transport.close_code == 1009


async def test_server_close_code_reaches_recv() -> None:
    async with ws_server() as (_, port), connected(f"ws://127.0.0.1:{port}/") as transport:
        await transport.send("close 4001 go away")
        lost = await expect_lost(transport, WAIT)
        assert (lost.close_code, lost.reason) == (4001, "go away")
        assert "4001" in str(lost)
        assert transport.closed and (transport.close_code, transport.close_reason) == (4001, "go away")
        with pytest.raises(ConnectionLost):
            await transport.send("after close")


async def test_close_is_idempotent_concurrent_and_sets_code() -> None:
    async with ws_server() as (_, port):
        transport = await connect_websocket(f"ws://127.0.0.1:{port}/", **FAST)
        await asyncio.wait_for(asyncio.gather(transport.close(), transport.close()), WAIT)
        await transport.close()
        assert transport.closed and transport.close_code == 1000
        with pytest.raises(ConnectionLost) as lost:
            await transport.recv()
        assert lost.value.close_code == 1000


# --------------------------------------------------------------------------- handshake


async def test_custom_headers_reach_the_server_and_are_redacted_in_logs() -> None:
    seen: list[Request] = []

    def record(connection: ServerConnection, request: Request) -> None:
        seen.append(request)

    async with ws_server(process_request=record) as (_, port):
        with capture_logs() as logs:
            async with connected(
                f"ws://127.0.0.1:{port}/acp?token=qs3cret",
                headers={"Authorization": "Bearer s3cret", "X-Editor": "test"},
                **FAST,
            ) as transport:
                assert "s3cret" not in repr(transport) and "s3cret" not in transport.description
    assert seen[0].headers["Authorization"] == "Bearer s3cret"
    assert seen[0].headers["X-Editor"] == "test"
    assert seen[0].headers["User-Agent"].startswith("acp-client/")
    assert seen[0].path == "/acp?token=qs3cret"
    assert logs, "connecting should log"
    assert "s3cret" not in repr(logs)
    connecting = next(e for e in logs if e["event"] == "websocket_connecting")
    assert connecting["headers"]["Authorization"] == "<redacted>"


async def test_websockets_debug_logging_does_not_leak_secrets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url_headers: dict[str, Any] = {"headers": {"Authorization": "Bearer s3cret"}, **FAST}
    async with ws_server() as (_, port), connected(f"ws://127.0.0.1:{port}/", **url_headers) as transport:
        await transport.send("hello s3cret")
        assert await asyncio.wait_for(transport.recv(), WAIT) == "hello s3cret"
    client_records = [r for r in caplog.records if r.name.startswith("websockets.client")]
    assert "s3cret" not in "\n".join(r.getMessage() for r in client_records)
    # the test server (not ours) does dump frames at DEBUG: the check above is not vacuous
    assert any("s3cret" in r.getMessage() for r in caplog.records if r.name.startswith("websockets.server"))


async def test_callable_headers_are_called_on_every_connect() -> None:
    seen: list[str] = []

    def record(connection: ServerConnection, request: Request) -> None:
        seen.append(request.headers["Authorization"])

    tokens = iter(["t1", "t2", "t3", "t4"])

    def sync_provider() -> dict[str, str]:
        return {"Authorization": f"Bearer {next(tokens)}"}

    async def async_provider() -> list[tuple[str, str]]:
        return [("Authorization", f"Bearer {next(tokens)}")]

    async with ws_server(process_request=record) as (_, port):
        for provider in (sync_provider, sync_provider, async_provider):
            async with connected(f"ws://127.0.0.1:{port}/", headers=provider, **FAST):
                pass
    assert seen == ["Bearer t1", "Bearer t2", "Bearer t3"]


async def test_cookie_from_101_is_sent_on_the_next_connect_and_connection_id_is_exposed() -> None:
    seen: list[str | None] = []

    def record(connection: ServerConnection, request: Request) -> None:
        seen.append(request.headers.get("Cookie"))

    def set_cookie(connection: ServerConnection, request: Request, response: Response) -> None:
        response.headers["Set-Cookie"] = "affinity=node-7; Path=/; HttpOnly"
        response.headers["Acp-Connection-Id"] = "conn-42"

    jar = CookieJar()
    async with ws_server(process_request=record, process_response=set_cookie) as (_, port):
        url = f"ws://127.0.0.1:{port}/acp"
        async with connected(url, cookies=jar, headers={"Cookie": "mine=1"}, **FAST) as first:
            assert first.connection_id == "conn-42"
            assert first.response_headers["Acp-Connection-Id"] == "conn-42"
            assert first.response_headers["Set-Cookie"] == "<redacted>"
            assert first.cookies is jar
        async with connected(url, cookies=jar, **FAST):
            pass
    assert seen == ["mine=1", "affinity=node-7"]
    assert jar.get("127.0.0.1", "affinity") == "node-7"


def _reject(status: int, extra: dict[str, str]) -> Callable[[ServerConnection, Request], Response]:
    def process_request(connection: ServerConnection, request: Request) -> Response:
        response = connection.respond(HTTPStatus(status), "no\n")
        for name, value in extra.items():
            response.headers[name] = value
        return response

    return process_request


@pytest.mark.parametrize(
    ("status", "extra", "retry_after"),
    [
        (401, {"WWW-Authenticate": "Bearer"}, None),
        (403, {}, None),
        (404, {}, None),
        (429, {"Retry-After": "3"}, 3.0),
        (503, {"Retry-After": "120", "Set-Cookie": "affinity=node-2"}, 120.0),
    ],
)
async def test_http_status_on_upgrade_is_handshake_rejected(
    status: int, extra: dict[str, str], retry_after: float | None
) -> None:
    jar = CookieJar()
    async with ws_server(process_request=_reject(status, extra)) as (_, port):
        with pytest.raises(HandshakeRejected) as rejected:
            await asyncio.wait_for(connect_websocket(f"ws://127.0.0.1:{port}/", cookies=jar), WAIT)
    assert rejected.value.status_code == status
    assert rejected.value.retry_after == retry_after
    assert "set-cookie" not in {name.lower() for name in rejected.value.headers}
    if status == 401:
        assert rejected.value.headers["WWW-Authenticate"] == "Bearer"
    if status == 503:
        assert jar.get("127.0.0.1", "affinity") == "node-2"  # affinity is kept even from a rejection


async def test_retry_after_as_http_date() -> None:
    when = email.utils.formatdate(time.time() + 60, usegmt=True)
    async with ws_server(process_request=_reject(503, {"Retry-After": when})) as (_, port):
        with pytest.raises(HandshakeRejected) as rejected:
            await asyncio.wait_for(connect_websocket(f"ws://127.0.0.1:{port}/"), WAIT)
    assert rejected.value.retry_after is not None and 55 <= rejected.value.retry_after <= 61


async def test_connection_refused_is_connect_error() -> None:
    with pytest.raises(ConnectError) as error:
        await asyncio.wait_for(connect_websocket(f"ws://127.0.0.1:{free_port()}/"), WAIT)
    assert type(error.value) is ConnectError
    assert isinstance(error.value.__cause__, OSError)


async def test_open_timeout_is_connect_error_caused_by_timeout() -> None:
    async with raw_server(answer_handshake=False) as port:
        with pytest.raises(ConnectError) as error:
            await asyncio.wait_for(connect_websocket(f"ws://127.0.0.1:{port}/", open_timeout=0.2), WAIT)
    assert type(error.value) is ConnectError
    assert isinstance(error.value.__cause__, TimeoutError)


@pytest.mark.parametrize("url", ["http://127.0.0.1/acp", "not a url", "ws://", "ws://host/#frag"])
async def test_malformed_urls_are_usage_errors(url: str) -> None:
    with pytest.raises(UsageError):
        await connect_websocket(url)


async def test_ssl_context_with_plain_ws_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        await connect_websocket("ws://127.0.0.1:1/", ssl=ssl.create_default_context())


async def test_subprotocol_is_negotiated() -> None:
    async with (
        ws_server(subprotocols=["acp.v1"]) as (_, port),
        connected(f"ws://127.0.0.1:{port}/", subprotocols=["acp.v1"], **FAST) as transport,
    ):
        assert transport.subprotocol == "acp.v1"


# --------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    return server_ctx, client_ctx


async def test_wss_self_signed_is_refused_by_default(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server_ctx, _ = tls
    async with ws_server(ssl=server_ctx) as (_, port):
        with pytest.raises(TLSError) as error:
            await asyncio.wait_for(connect_websocket(f"wss://127.0.0.1:{port}/"), WAIT)
    assert isinstance(error.value.__cause__, ssl.SSLCertVerificationError)


async def test_wss_with_the_users_context(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server_ctx, client_ctx = tls
    async with (
        ws_server(ssl=server_ctx) as (_, port),
        connected(f"wss://127.0.0.1:{port}/acp", ssl=client_ctx, **FAST) as transport,
    ):
        assert transport.description == f"wss://127.0.0.1:{port}/acp"
        await transport.send("over tls")
        assert await asyncio.wait_for(transport.recv(), WAIT) == "over tls"


async def test_peer_dropping_mid_tls_handshake_is_a_plain_connect_error() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)  # the ClientHello
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(ConnectError) as error:
            await asyncio.wait_for(connect_websocket(f"wss://127.0.0.1:{port}/"), WAIT)
        assert not isinstance(error.value, TLSError)  # a network failure, worth retrying
    finally:
        server.close()
        await asyncio.wait_for(server.wait_closed(), WAIT)


# --------------------------------------------------------------------------- liveness


async def test_peer_that_stops_reading_is_noticed() -> None:
    async with ws_server() as (_, port), connected(f"ws://127.0.0.1:{port}/", **FAST) as transport:
        await transport.send("pause")
        lost = await expect_lost(transport, DEAD_WITHIN)
        assert (lost.close_code, lost.reason) == (1011, "keepalive ping timeout")
        assert transport.closed and transport.close_code == 1011


async def test_blackholed_link_after_handshake_is_noticed() -> None:
    async with raw_server(answer_handshake=True) as port:
        with capture_logs() as logs:
            async with connected(f"ws://127.0.0.1:{port}/", **FAST) as transport:
                assert transport.connection_id == "conn-silent"
                lost = await expect_lost(transport, DEAD_WITHIN)
                assert lost.close_code == 1011
    assert any(e["event"] == "websocket_keepalive_timeout" and e["log_level"] == "warning" for e in logs)


async def test_blackholed_link_with_a_full_write_buffer_is_noticed() -> None:
    """The peer reads nothing, so sends fill every buffer and block; the keepalive must still fire."""
    async with (
        raw_server(answer_handshake=True) as port,
        connected(f"ws://127.0.0.1:{port}/", **FAST) as transport,
    ):
        chunk = "y" * 2**20

        async def flood() -> None:
            while True:
                await transport.send(chunk)

        flooder = asyncio.create_task(flood())
        lost = await expect_lost(transport, DEAD_WITHIN)
        assert lost.close_code == 1011
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(flooder, WAIT)


async def test_close_against_a_silent_peer_is_bounded() -> None:
    async with raw_server(answer_handshake=True) as port:
        transport = await connect_websocket(f"ws://127.0.0.1:{port}/", ping_interval=None, close_timeout=0.2)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(transport.close(), WAIT)
        assert loop.time() - started < bound(0.2 + 0.5)
        assert transport.closed


async def test_ping_on_demand() -> None:
    async with ws_server() as (_, port), connected(f"ws://127.0.0.1:{port}/", ping_interval=None) as transport:
        latency = await asyncio.wait_for(transport.ping(), WAIT)
        assert latency >= 0.0 and transport.latency == latency
    async with (
        raw_server(answer_handshake=True) as port,
        connected(f"ws://127.0.0.1:{port}/", ping_interval=None, close_timeout=0.2) as transport,
    ):
        with pytest.raises(ConnectionLost) as lost:
            await asyncio.wait_for(transport.ping(timeout=0.1), WAIT)
        assert lost.value.close_code == 1011
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(transport.recv(), WAIT)


async def test_keepalive_leaves_a_healthy_link_alone_and_recv_is_cancel_safe() -> None:
    fast: dict[str, Any] = {"ping_interval": 0.05, "ping_timeout": 0.5, "close_timeout": 0.2}
    async with ws_server() as (_, port), connected(f"ws://127.0.0.1:{port}/", **fast) as transport:
        # several keepalive rounds pass while recv waits (and is then cancelled by the timeout)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(transport.recv(), 0.4)
        assert not transport.closed
        await transport.send("still here")
        assert await asyncio.wait_for(transport.recv(), WAIT) == "still here"


# --------------------------------------------------------------------------- cookie jar, Retry-After


def test_cookie_jar_rules() -> None:
    jar = CookieJar()
    jar.store("Example.COM", ["a=1; Path=/", "b=2; Secure", "c=3; Max-Age=60", "junk", "=nameless"])
    assert jar.header_value("example.com", secure=True) == "a=1; b=2; c=3"
    assert jar.header_value("example.com", secure=False) == "a=1; c=3"  # Secure only over wss
    assert jar.header_value("other.example", secure=True) is None
    jar.store("example.com", ["c=gone; Max-Age=0", "a=again; Expires=Thu, 01 Jan 1970 00:00:00 GMT"])
    assert jar.header_value("example.com", secure=True) == "b=2"
    jar.store("example.com", ["d=4; Expires=Fri, 01 Jan 2100 00:00:00 GMT; Max-Age=-1"])  # Max-Age wins
    assert jar.get("example.com", "d") is None
    assert len(jar) == 1 and "2" not in repr(jar).replace("CookieJar", "")
    jar.clear("example.com")
    assert len(jar) == 0


def test_parse_retry_after() -> None:
    now = 1_000_000.0
    assert parse_retry_after(None) is None
    assert parse_retry_after(" 7 ") == 7.0
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now=now) == 30.0
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now=now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after("-5") is None

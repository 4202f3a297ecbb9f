"""FaultProxy over real loopback sockets: a raw TCP echo upstream for byte-exact checks, and the reference
agent (v2) with a raw websockets client or our own client for the WebSocket-level behaviour."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidMessage

import acp_client
from acp_client import ConnectError, TransportOptions
from acp_client.testing import FaultProxy, LinkMode, ProxyMode, ReferenceAgent
from tests.conftest import bound

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": 2, "capabilities": {}, "info": {"name": "raw", "version": "0"}},
}

# ---------------------------------------------------------------------------- helpers


@pytest.fixture
async def agent() -> AsyncIterator[ReferenceAgent]:
    """A v2 reference agent (this module does not need the v1/v2 matrix of the shared fixture)."""
    async with ReferenceAgent(2) as running:
        yield running


@pytest.fixture
async def proxy(agent: ReferenceAgent) -> AsyncIterator[FaultProxy]:
    """A fault proxy in front of the agent."""
    async with FaultProxy("127.0.0.1", agent.port) as running:
        yield running


class Echo:
    """A plain TCP upstream that echoes; ``close_after`` closes each connection after echoing that many
    bytes (``0``: at once). ``closed`` is set when the server closed a connection itself."""

    def __init__(self, close_after: int | None = None) -> None:
        self.close_after = close_after
        self.closed = asyncio.Event()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        echoed = 0
        try:
            while self.close_after is None or echoed < self.close_after:
                limit = 65536 if self.close_after is None else self.close_after - echoed
                data = await reader.read(limit)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
                echoed += len(data)
        except ConnectionError:
            pass
        finally:
            writer.close()
            self.closed.set()

    async def __aenter__(self) -> Echo:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        for writer in self._writers:
            with suppress(ConnectionError):
                await writer.wait_closed()
        await self._server.wait_closed()


@asynccontextmanager
async def echo_proxy(close_after: int | None = None, **options: Any) -> AsyncIterator[tuple[Echo, FaultProxy]]:
    async with Echo(close_after) as echo, FaultProxy("127.0.0.1", echo.port, **options) as fp:
        yield echo, fp


@asynccontextmanager
async def tcp(port: int) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with suppress(ConnectionError):
            await writer.wait_closed()


async def read_until_eof(reader: asyncio.StreamReader, seconds: float = 2.0) -> bytes:
    async with asyncio.timeout(bound(seconds)):
        return await reader.read()


@asynccontextmanager
async def raw_ws(proxy: FaultProxy, **options: Any) -> AsyncIterator[ClientConnection]:
    async with asyncio.timeout(bound(5)):
        ws = await ws_connect(proxy.url(), **{"close_timeout": 1.0, **options})
    try:
        yield ws
    finally:
        async with asyncio.timeout(bound(5)):
            await ws.close()


async def initialize(ws: ClientConnection) -> dict[str, Any]:
    await ws.send(json.dumps(INITIALIZE))
    async with asyncio.timeout(bound(5)):
        while True:
            message = json.loads(await ws.recv())
            if message.get("id") == 1:
                assert "result" in message, message
                result = message["result"]
                assert isinstance(result, dict)
                return result


async def expect_closed(ws: ClientConnection, seconds: float) -> ConnectionClosed:
    """Wait (bounded) until the client notices the connection is gone; returns the exception."""
    async with asyncio.timeout(bound(seconds)):
        with pytest.raises(ConnectionClosed) as info:
            while True:
                await ws.recv()
    return info.value


KEEPALIVE = {"ping_interval": 0.2, "ping_timeout": 0.2, "close_timeout": 0.2}

# ---------------------------------------------------------------------------- modes over WebSocket


async def test_passthrough_initialize_and_counters(agent: ReferenceAgent, proxy: FaultProxy) -> None:
    async with raw_ws(proxy) as ws:
        result = await initialize(ws)
        assert result["protocolVersion"] == 2
        assert proxy.connections_accepted == 1
        [link] = proxy.links
        assert link.id == 1
        assert link.mode == LinkMode(ProxyMode.passthrough(), ProxyMode.passthrough())
        assert link.bytes_c2s > len(json.dumps(INITIALIZE))
        assert link.bytes_s2c > 0
        assert (proxy.bytes_c2s, proxy.bytes_s2c) == (link.bytes_c2s, link.bytes_s2c)
    await proxy.wait_for_live(0, timeout=bound(2))
    assert agent.count("initialize") == 1


async def test_our_client_initializes_through_the_proxy(proxy: FaultProxy) -> None:
    async with asyncio.timeout(bound(10)):
        async with acp_client.connect(proxy.url(), protocol_version=2) as client:
            assert client.protocol_version == 2
            session = await client.new_session("/tmp")
            assert session is not None


@pytest.mark.parametrize("direction", ["both", "c2s", "s2c"])
async def test_blackhole_is_detected_by_keepalive(agent: ReferenceAgent, proxy: FaultProxy, direction: str) -> None:
    async with raw_ws(proxy, **KEEPALIVE) as ws:
        await initialize(ws)
        proxy.blackhole_all(direction)  # type: ignore[arg-type]
        assert proxy.links[0].mode.s2c.kind == ("pass" if direction == "c2s" else "blackhole")
        await expect_closed(ws, 1.5)
        if direction == "both":
            # half-open: the agent saw no FIN and no RST, and the proxy still holds both sockets
            assert agent.connections == 1
            assert len(proxy.links) == 1
    proxy.restore()
    await proxy.wait_for_live(0, timeout=bound(3))
    assert proxy.default_mode == LinkMode(ProxyMode.passthrough(), ProxyMode.passthrough())


async def test_blackhole_then_restore_delivers_queued_bytes(proxy: FaultProxy) -> None:
    async with raw_ws(proxy) as ws:
        proxy.blackhole_all()
        await ws.send(json.dumps(INITIALIZE))
        proxy.restore()
        async with asyncio.timeout(bound(5)):
            message = json.loads(await ws.recv())
        assert message["id"] == 1


async def test_cut_closes_the_client(agent: ReferenceAgent, proxy: FaultProxy) -> None:
    async with raw_ws(proxy) as ws:
        await initialize(ws)
        assert await proxy.cut_all(timeout=bound(2)) == 1
        exc = await expect_closed(ws, 1)
        assert exc.rcvd is None  # TCP closed without a closing handshake
        assert proxy.links == []
        await agent.wait_for(lambda: agent.connections == 0, timeout=bound(3))


async def test_reset_is_an_abrupt_close(agent: ReferenceAgent, proxy: FaultProxy) -> None:
    async with raw_ws(proxy) as ws:
        await initialize(ws)
        assert await proxy.reset_all(timeout=bound(2)) == 1
        await expect_closed(ws, 1)
        assert ws.close_code == 1006
        await agent.wait_for(lambda: agent.connections == 0, timeout=bound(3))


async def test_limit_bytes_drops_mid_frame(proxy: FaultProxy) -> None:
    async with raw_ws(proxy) as ws:
        await initialize(ws)
        [link] = proxy.links
        before = link.bytes_s2c
        proxy.set_mode(ProxyMode.limit_bytes(5), "s2c", link=link)
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/tmp"}}))
        exc = await expect_closed(ws, 2)
        assert exc.rcvd is None
        assert link.closed
        assert link.bytes_s2c == before + 5


async def test_slice_keeps_frames_whole(proxy: FaultProxy) -> None:
    proxy.set_mode(ProxyMode.slice(7, 0.001))
    async with raw_ws(proxy) as ws:
        result = await initialize(ws)
        assert result["protocolVersion"] == 2
        assert proxy.links[0].mode.c2s == ProxyMode.slice(7, 0.001)


async def test_delay_postpones_delivery(proxy: FaultProxy) -> None:
    async with raw_ws(proxy) as ws:
        proxy.set_mode(ProxyMode.delay(0.2), "s2c")
        loop = asyncio.get_running_loop()
        started = loop.time()
        await initialize(ws)
        assert loop.time() - started >= 0.2


async def test_hold_and_release(agent: ReferenceAgent, proxy: FaultProxy) -> None:
    async with raw_ws(proxy) as ws:
        [link] = proxy.links
        before = link.bytes_s2c  # the 101 response
        proxy.hold("s2c", link=link)
        await ws.send(json.dumps(INITIALIZE))
        await agent.wait_for_method("initialize", timeout=bound(3))
        assert link.bytes_s2c == before
        proxy.release("s2c", link=link)
        async with asyncio.timeout(bound(3)):
            assert json.loads(await ws.recv())["id"] == 1


# ---------------------------------------------------------------------------- listener modes


async def test_refuse_then_accept_on_the_same_port(proxy: FaultProxy) -> None:
    port = proxy.port
    proxy.set_listener("refuse")
    assert proxy.listener_mode == "refuse"
    async with asyncio.timeout(bound(3)):
        with pytest.raises(ConnectionRefusedError):
            await ws_connect(proxy.url())
        with pytest.raises(ConnectError):
            await acp_client.connect(proxy.url(), transport_options=TransportOptions(open_timeout=bound(2)))
    proxy.set_listener("accept")
    assert proxy.port == port
    async with raw_ws(proxy) as ws:
        await initialize(ws)
    assert proxy.connections_accepted == 1


async def test_refuse_keeps_live_links(proxy: FaultProxy) -> None:
    async with raw_ws(proxy) as ws:
        await initialize(ws)
        proxy.set_listener("refuse")
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "session/new", "params": {"cwd": "/tmp"}}))
        async with asyncio.timeout(bound(3)):
            assert json.loads(await ws.recv())["id"] == 7
    proxy.restore()
    assert proxy.listener_mode == "accept"


async def test_accept_then_close() -> None:
    async with echo_proxy() as (_, fp):
        fp.set_listener("accept_then_close")
        async with tcp(fp.port) as (reader, _writer):
            assert await read_until_eof(reader) == b""
        async with asyncio.timeout(bound(3)):
            with pytest.raises((InvalidMessage, ConnectionError)):
                await ws_connect(fp.url())
        assert fp.connections_accepted == 2
        assert fp.connections_refused == 2
        assert fp.links == []


async def test_accept_and_hang_times_out_the_handshake(proxy: FaultProxy) -> None:
    proxy.set_listener("accept_and_hang")
    async with asyncio.timeout(bound(3)):
        with pytest.raises(TimeoutError):
            await ws_connect(proxy.url(), open_timeout=0.3)
    assert proxy.connections_hung == 1
    assert proxy.links == []


# ---------------------------------------------------------------------------- byte-exact behaviour


async def test_limit_bytes_is_exact_per_direction() -> None:
    async with echo_proxy() as (_, fp):
        fp.set_mode(ProxyMode.limit_bytes(5), "s2c")
        async with tcp(fp.port) as (reader, writer):
            writer.write(b"hello world")
            assert await read_until_eof(reader) == b"hello"
        assert (fp.bytes_c2s, fp.bytes_s2c) == (11, 5)
        fp.set_mode(ProxyMode.limit_bytes(0), "c2s")
        async with tcp(fp.port) as (reader, writer):
            writer.write(b"never")
            assert await read_until_eof(reader) == b""
        assert fp.bytes_c2s == 11


async def test_slice_and_delay_with_jitter_preserve_order() -> None:
    payload = bytes(range(256)) * 64
    async with echo_proxy(seed=7) as (_, fp):
        fp.set_mode(ProxyMode.slice(100), "c2s")
        fp.set_mode(ProxyMode.delay(0.001, jitter=0.01), "s2c")
        async with tcp(fp.port) as (reader, writer):
            for start in range(0, len(payload), 1000):
                writer.write(payload[start : start + 1000])
            await writer.drain()
            async with asyncio.timeout(bound(5)):
                assert await reader.readexactly(len(payload)) == payload


async def test_cut_sends_fin_and_reset_sends_rst() -> None:
    async with echo_proxy() as (_, fp):
        async with tcp(fp.port) as (reader, writer):
            writer.write(b"ping")
            async with asyncio.timeout(bound(2)):
                assert await reader.readexactly(4) == b"ping"
            await fp.cut_all(timeout=bound(2))
            assert await read_until_eof(reader) == b""
        async with tcp(fp.port) as (reader, writer):
            writer.write(b"ping")
            async with asyncio.timeout(bound(2)):
                assert await reader.readexactly(4) == b"ping"
            await fp.reset_all(timeout=bound(2))
            with pytest.raises(ConnectionResetError):
                await read_until_eof(reader)


async def test_half_close_is_forwarded() -> None:
    async with echo_proxy() as (_, fp):
        async with tcp(fp.port) as (reader, writer):
            writer.write(b"abc")
            writer.write_eof()
            assert await read_until_eof(reader) == b"abc"
        await fp.wait_for_live(0, timeout=bound(2))


async def test_hold_delivers_late_data_and_late_close() -> None:
    async with echo_proxy(close_after=3) as (echo, fp):
        fp.hold("s2c")
        async with tcp(fp.port) as (reader, writer):
            writer.write(b"xyz")
            async with asyncio.timeout(bound(2)):
                await echo.closed.wait()
            [link] = fp.links
            assert link.bytes_s2c == 0
            fp.release("s2c")
            assert await read_until_eof(reader) == b"xyz"
        await fp.wait_for_live(0, timeout=bound(2))


async def test_slow_close_delays_the_fin() -> None:
    async with echo_proxy(close_after=3) as (_, fp):
        fp.set_mode(ProxyMode.slow_close(0.3), "s2c")
        loop = asyncio.get_running_loop()
        async with tcp(fp.port) as (reader, writer):
            writer.write(b"xyz")
            async with asyncio.timeout(bound(2)):
                assert await reader.readexactly(3) == b"xyz"
            data_at = loop.time()
            assert await read_until_eof(reader) == b""
            assert loop.time() - data_at >= 0.2  # the FIN left the upstream right after the data


async def test_per_link_mode_and_defaults() -> None:
    async with echo_proxy() as (_, fp), tcp(fp.port) as (r1, w1), tcp(fp.port) as (r2, w2):
        await fp.wait_for_live(2, timeout=bound(2))
        first, second = fp.links
        fp.set_mode("hold", "s2c", link=first)
        assert second.mode.s2c.kind == "pass"
        assert fp.default_mode.s2c.kind == "pass"
        w2.write(b"two")
        async with asyncio.timeout(bound(2)):
            assert await r2.readexactly(3) == b"two"
        fp.set_mode("blackhole")
        async with tcp(fp.port) as _third:
            await fp.wait_for_live(3, timeout=bound(2))
            assert fp.links[2].mode == LinkMode(ProxyMode.blackhole(), ProxyMode.blackhole())
        fp.set_mode("pass", link=first)
        w1.write(b"one")
        async with asyncio.timeout(bound(2)):
            assert await r1.readexactly(3) == b"one"
        fp.set_mode("cut", link=second)
        assert await read_until_eof(r2) == b""
        assert first in fp.links and second not in fp.links


async def test_unreachable_upstream_closes_the_client() -> None:
    with socket.socket() as placeholder:  # bound, not listening: connects to it are refused
        placeholder.bind(("127.0.0.1", 0))
        async with FaultProxy("127.0.0.1", placeholder.getsockname()[1]) as fp:
            async with tcp(fp.port) as (reader, _writer):
                assert await read_until_eof(reader) == b""
            await fp.wait_for_live(0, timeout=bound(2))
            assert fp.upstream_failures == 1
            assert fp.connections_accepted == 1


# ---------------------------------------------------------------------------- waiting, lifecycle


async def test_wait_for_connections_and_live(proxy: FaultProxy) -> None:
    with pytest.raises(TimeoutError):
        await proxy.wait_for_connections(1, timeout=0.05)
    async with raw_ws(proxy) as a, raw_ws(proxy) as b, raw_ws(proxy) as c:
        await proxy.wait_for_connections(3, timeout=bound(2))
        await proxy.wait_for_live(3, timeout=bound(2))
        assert [link.id for link in proxy.links] == [1, 2, 3]
        assert await proxy.cut_all(timeout=bound(2)) == 3
        await proxy.wait_for_live(0, timeout=bound(1))
        for ws in (a, b, c):
            await expect_closed(ws, 1)
    assert proxy.connections_accepted == 3


async def test_exit_leaves_no_tasks_and_no_open_sockets() -> None:
    # upstream: a listening socket nobody accepts on, so the kernel completes connections and no task of
    # anyone but the proxy exists; the clients are plain streams (no tasks either)
    with socket.socket() as upstream:
        upstream.bind(("127.0.0.1", 0))
        upstream.listen(16)
        baseline = asyncio.all_tasks()
        clients: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        async with FaultProxy("127.0.0.1", upstream.getsockname()[1]) as fp:
            fp.set_mode(ProxyMode.delay(5), "c2s")
            clients.append(await asyncio.open_connection("127.0.0.1", fp.port))
            clients[-1][1].write(b"delayed")
            fp.set_mode("hold", "c2s")
            clients.append(await asyncio.open_connection("127.0.0.1", fp.port))
            clients[-1][1].write(b"held")
            fp.set_mode("blackhole")
            clients.append(await asyncio.open_connection("127.0.0.1", fp.port))
            await fp.wait_for_upstream(3, timeout=bound(2))
            fp.set_listener("accept_and_hang")
            clients.append(await asyncio.open_connection("127.0.0.1", fp.port))
            await fp.wait_for_connections(4, timeout=bound(2))
            fp.set_listener("accept")
            clients.append(await asyncio.open_connection("127.0.0.1", fp.port))  # possibly still being adopted
            assert {t.get_name() for t in asyncio.all_tasks() - baseline} >= {
                "fault-proxy-link-1-c2s",
                "fault-proxy-link-1-s2c",
            }
        assert asyncio.all_tasks() == baseline
        for reader, writer in clients:
            # closed: FIN, or RST where the proxy had left bytes unread (blackhole) -- never a hang
            with suppress(ConnectionResetError):
                assert await read_until_eof(reader) == b""
            writer.close()
            with suppress(ConnectionError):
                await writer.wait_closed()
    gc.collect()  # an unclosed socket would raise ResourceWarning here (warnings are errors)


async def test_exit_with_agent_links_leaves_no_proxy_task(agent: ReferenceAgent) -> None:
    async with FaultProxy("127.0.0.1", agent.port) as fp:
        ws = await ws_connect(fp.url(), close_timeout=0.2)
        await initialize(ws)
        fp.set_mode(ProxyMode.delay(0.05), "s2c")
        fp.hold("c2s")
        await ws.send(json.dumps(INITIALIZE))
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("fault-proxy")]
    await expect_closed(ws, 2)
    await agent.wait_for(lambda: agent.connections == 0, timeout=bound(3))
    gc.collect()


async def test_closed_proxy_rejects_use_and_modes_validate() -> None:
    fp = FaultProxy("127.0.0.1", 9)
    with pytest.raises(RuntimeError):
        _ = fp.port
    with pytest.raises(ValueError):
        ProxyMode.delay(-1)
    with pytest.raises(ValueError):
        ProxyMode.slice(0)
    with pytest.raises(ValueError):
        ProxyMode.parse("teleport")
    async with fp:
        with pytest.raises(ValueError):
            fp.set_mode("pass", "sideways")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            fp.set_listener("maybe")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        fp.set_listener("accept")
    with pytest.raises(RuntimeError):
        async with fp:
            pass


async def test_an_error_inside_a_link_closes_only_that_link(monkeypatch: pytest.MonkeyPatch) -> None:
    from acp_client.testing.fault_proxy import ProxyLink

    original = ProxyLink._on_data

    def failing(self: ProxyLink, side: Any, data: bytes) -> None:
        if data == b"boom":
            raise RuntimeError("injected")
        original(self, side, data)

    monkeypatch.setattr(ProxyLink, "_on_data", failing)
    async with echo_proxy() as (_, fp):
        async with tcp(fp.port) as (reader, writer):
            writer.write(b"boom")
            with suppress(ConnectionResetError):
                assert await read_until_eof(reader) == b""
        await fp.wait_for_live(0, timeout=bound(2))
        async with tcp(fp.port) as (reader, writer):
            writer.write(b"fine")
            async with asyncio.timeout(bound(2)):
                assert await reader.readexactly(4) == b"fine"


def _nodelay(sock: Any) -> bool:
    return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


async def test_both_sockets_of_a_link_have_nagle_off(agent: ReferenceAgent, proxy: FaultProxy) -> None:
    # asyncio leaves Nagle on for sockets accepted from a listener whose proto is 0 (the proxy's): a delayed
    # answer that follows another small frame would then also wait for a delayed ACK (~40 ms)
    async with raw_ws(proxy) as ws:
        await initialize(ws)
        await proxy.wait_for_upstream(1, timeout=bound(5))
        [link] = proxy.links
        sides = [link._client, link._server]
        assert [side is not None and side.transport is not None for side in sides] == [True, True]
        sockets = [side.transport.get_extra_info("socket") for side in sides if side and side.transport]
        assert [_nodelay(sock) for sock in sockets] == [True, True]

"""Security: certificates verified by default, no secrets in logs or reprs, bounded buffers."""

from __future__ import annotations

import asyncio
import gc
import ssl
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from structlog.testing import capture_logs
from websockets.asyncio.server import ServerConnection, serve

from acp_client import (
    ReconnectFailed,
    ReconnectingClient,
    TLSError,
    TransportOptions,
    UpdatesDropped,
    connect,
)
from acp_client.reconnect import EventsDropped, StateChanged
from acp_client.testing import FAST_RETRY, ReferenceAgent
from tests.conftest import bound, client_options, recorder

SECRET = "s3cr3t-token-value-7f1c"


@pytest.fixture
def tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    return server_ctx, client_ctx


@asynccontextmanager
async def tls_agent(server_ctx: ssl.SSLContext) -> AsyncIterator[int]:
    """A TLS WebSocket endpoint in front of a reference agent (frames relayed both ways)."""
    async with ReferenceAgent(2) as agent:

        async def relay(ws: ServerConnection) -> None:
            from websockets.asyncio.client import connect as ws_connect

            async with ws_connect(agent.url) as upstream:

                async def pump(src: Any, dst: Any) -> None:
                    async for message in src:
                        await dst.send(message)

                tasks = [asyncio.create_task(pump(ws, upstream)), asyncio.create_task(pump(upstream, ws))]
                try:
                    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in tasks:
                        task.cancel()
                    await asyncio.wait(tasks)

        async with serve(relay, "127.0.0.1", 0, ssl=server_ctx) as server:
            yield server.sockets[0].getsockname()[1]


async def test_wss_self_signed_is_refused_by_default_and_is_fatal(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server_ctx, client_ctx = tls
    async with tls_agent(server_ctx) as port:
        url = f"wss://127.0.0.1:{port}/acp"
        with pytest.raises(TLSError):
            await connect(url)
        client = ReconnectingClient(url, **FAST_RETRY)
        with pytest.raises(ReconnectFailed) as info:
            async with client:
                pass
        assert info.value.reason == "tls"  # no reconnect storm against a certificate that will not change
        async with connect(url, transport_options=TransportOptions(ssl=client_ctx)) as ok:
            assert ok.protocol_version == 2
            assert (await ok.new_session("/w")).id


async def test_tokens_never_appear_in_logs_or_reprs() -> None:
    async with ReferenceAgent(2) as agent:
        with capture_logs() as logs:
            client = ReconnectingClient(
                agent.url + f"?token={SECRET}",
                **client_options(headers={"Authorization": f"Bearer {SECRET}", "X-Api-Key": SECRET}),
            )
            rec = recorder(client)
            await client.start()
            try:
                await client.wait_ready(timeout=bound(5))
                session = await client.new_session("/w")
                await agent.drop_all_connections()
                await rec.ready_count(2)
                texts = [
                    repr(client),
                    repr(session),
                    repr(client.current),
                    repr(client.current and client.current.connection),
                ]
                texts.append(repr(client.current.connection.transport))  # type: ignore[union-attr]
            finally:
                await rec.close()
                await client.aclose()
        assert logs, "the scenario logged nothing: the check would be vacuous"
        for entry in logs:
            assert SECRET not in repr(entry), entry
        for text in texts:
            assert SECRET not in text, text
        handshake = {k.lower(): v for k, v in agent.handshakes[-1].headers.items()}
        assert handshake["authorization"] == f"Bearer {SECRET}"  # it was sent, just never shown


@pytest.mark.xdist_group("cpu_heavy")  # one at a time: tracemalloc or thousands of examples, CPU-bound
async def test_slow_consumer_cannot_grow_memory_without_bound() -> None:
    async with ReferenceAgent(2) as agent, connect(agent.url) as client:
        session = await client.new_session("/w")
        stream = session.updates(maxsize=100)  # subscribed, never read during the turn
        tracemalloc.start()
        try:
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            await asyncio.wait_for(session.prompt("stream 20000"), bound(30))
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        first = await asyncio.wait_for(anext(stream), bound(1))
        assert isinstance(first, UpdatesDropped) and first.count > 19000
        # the transcript keeps the chunks (that is its job); the subscription holds at most 100 updates
        assert len(session._subs[0].buffer) <= 100
        per_chunk = grown / 20000
        assert per_chunk < 1500, f"{per_chunk:.0f} bytes retained per streamed chunk"


async def test_event_buffer_is_bounded() -> None:
    async with ReferenceAgent(2) as agent:
        client = ReconnectingClient(agent.url, **client_options(event_buffer=5))
        stale = client.events()
        rec = recorder(client)
        try:
            await client.start()
            first = await asyncio.wait_for(stale.__anext__(), bound(5))  # registered now; then never read
            assert isinstance(first, StateChanged)
            for n in range(2, 5):
                await client.wait_ready(timeout=bound(5))
                await agent.drop_all_connections()
                await rec.ready_count(n)
            assert len(rec.events) > 5 * 2
            dropped = await asyncio.wait_for(stale.__anext__(), bound(5))
            assert isinstance(dropped, EventsDropped) and dropped.count > 0  # never dropped silently
            kept = [await asyncio.wait_for(stale.__anext__(), bound(5)) for _ in range(5)]
            assert kept == rec.events[-5:]  # the newest five were kept
        finally:
            await rec.close()
            await client.aclose()
            await stale.aclose()  # type: ignore[attr-defined]

"""Which compression a WebSocket link offers: ``"auto"`` (the default) offers permessage-deflate except to a
loopback host, where bytes cost nothing and compressing every frame costs both sides CPU. Checked against
websockets' own server on 127.0.0.1 (what the client offered, and what was negotiated)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from acp_client.exceptions import UsageError
from acp_client.transports import TransportOptions
from acp_client.transports.websocket import _compression, connect_websocket
from tests.conftest import bound

WAIT = bound(5.0)


@pytest.fixture(autouse=True)
def no_proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy", "socks_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture
async def offers() -> AsyncIterator[tuple[int, list[str | None]]]:
    """A loopback echo server that records the ``Sec-WebSocket-Extensions`` each client offered."""
    seen: list[str | None] = []

    async def handler(ws: ServerConnection) -> None:
        assert ws.request is not None
        seen.append(ws.request.headers.get("Sec-WebSocket-Extensions"))
        async for message in ws:
            await ws.send(message)

    async with serve(handler, "127.0.0.1", 0) as server:
        yield server.sockets[0].getsockname()[1], seen


@pytest.mark.parametrize(
    ("kwargs", "deflate"),
    [({}, False), ({"compression": "auto"}, False), ({"compression": "deflate"}, True), ({"compression": None}, False)],
)
async def test_a_loopback_link_offers_deflate_only_when_asked(
    offers: tuple[int, list[str | None]], kwargs: dict[str, Any], deflate: bool
) -> None:
    port, seen = offers
    transport = await asyncio.wait_for(connect_websocket(f"ws://127.0.0.1:{port}/", **kwargs), WAIT)
    try:
        await transport.send("x" * 2000)  # compressible: the echo comes back whole either way
        assert await asyncio.wait_for(transport.recv(), WAIT) == "x" * 2000
        frame_bytes_out = transport.stats.bytes_out
    finally:
        await asyncio.wait_for(transport.close(), WAIT)
    (offered,) = seen
    assert (offered is not None and "permessage-deflate" in offered) is deflate
    assert frame_bytes_out == 2000  # the stats count the text, not what went on the wire


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("localhost", True),
        ("LocalHost.", True),
        ("agent.localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.1", False),
        ("192.168.1.20", False),
        ("::ffff:10.0.0.1", False),
        ("agent.example.com", False),
        ("localhost.example.com", False),
        ("2001:db8::1", False),
    ],
)
def test_auto_offers_deflate_except_to_a_loopback_host(host: str, loopback: bool) -> None:
    assert _compression("auto", host) == (None if loopback else "deflate")
    assert _compression("deflate", host) == "deflate"  # an explicit choice stands
    assert _compression(None, host) is None


def test_compression_is_validated() -> None:
    assert TransportOptions().compression == "auto"
    with pytest.raises(UsageError, match="'deflate', 'auto' or None"):
        TransportOptions(compression="gzip")  # type: ignore[arg-type]

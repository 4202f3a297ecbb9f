"""``transport="auto"`` explains its failures (issue 20, item 2): the text names the URL the caller gave and
each attempt made, so the ``ws://`` URL it tried first is never shown unexplained."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from acp_client import TransportOptions, connect
from acp_client.exceptions import ConnectError, HTTPTransportError
from tests.conftest import bound

AUTO = TransportOptions(transport="auto")
PAGE = b"<!doctype html><html><body><h1>Not Found</h1>" + b"x" * 300 + b"</body></html>"


async def _answer_404(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Any request: read its head (and body), answer a 404 HTML page, close."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nConnection: close\r\n"
            + f"Content-Length: {len(PAGE)}\r\n\r\n".encode()
            + PAGE
        )
        await writer.drain()
    finally:
        writer.close()


@pytest.fixture
async def not_acp() -> AsyncIterator[str]:
    server = await asyncio.start_server(_answer_404, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}/acp"


async def test_both_attempts_are_reported(not_acp: str) -> None:
    with pytest.raises(HTTPTransportError) as caught:
        async with asyncio.timeout(bound(10)), connect(not_acp, transport_options=AUTO):
            pass
    text = str(caught.value)
    assert not_acp in text and not_acp.replace("http://", "ws://") in text
    assert "Streamable HTTP second" in text and "tried first, was refused" in text
    assert "not an ACP endpoint" in text and "<html>" not in text
    assert caught.value.status_code == 404


async def test_a_refused_connection_names_the_given_url() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/acp"
    with pytest.raises(ConnectError) as caught:
        async with asyncio.timeout(bound(10)), connect(url, transport_options=AUTO):
            pass
    text = str(caught.value)
    assert text.startswith(f"could not connect to {url} (transport='auto' tries the WebSocket upgrade first")

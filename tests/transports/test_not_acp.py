"""A URL that points at something other than an ACP agent says what answered, at once (issue 34 §5).

Real loopback servers: Python's ``http.server`` (an HTTP/1.0 server, and an HTTP/1.1 one answering 400 or
a page), and a raw asyncio server that greets with another protocol's banner. Over WebSocket and over
Streamable HTTP the error is a :class:`NotAnACPEndpoint` (or, for an HTTP 4xx of Streamable HTTP, an
``HTTPTransportError`` saying the same), naming the status line and the ``Server`` header, and the reconnect
manager stops with ``ReconnectFailed(reason="not_acp")`` instead of retrying until ``Timeouts.ready``.
"""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import AsyncIterator, Iterator

import pytest

from acp_client import ReconnectFailed, ReconnectingClient, Timeouts, TransportOptions
from acp_client.exceptions import ConnectError, HandshakeRejected, HTTPTransportError, NotAnACPEndpoint
from acp_client.reconnect import classify_error
from acp_client.transports.http import open_endpoint
from acp_client.transports.websocket import connect_websocket
from tests.conftest import bound


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class _Answer(_Quiet):
    """HTTP/1.1, answering every request with ``status`` (``Server: test-server/1.0``)."""

    protocol_version = "HTTP/1.1"
    status = 400

    def version_string(self) -> str:
        return "test-server/1.0"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = b"<html><body>hello</body></html>"
        self.send_response(self.status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer


class _Answer405(_Answer):
    status = 405


class _Answer200(_Answer):
    status = 200


class _Answer503(_Answer):
    status = 503


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="not-acp-http", daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def http10() -> Iterator[str]:
    """What ``python -m http.server`` runs: HTTP/1.0, ``Server: SimpleHTTP/...``."""
    yield from _serve(_Quiet)


@pytest.fixture(params=[_Answer, _Answer405, _Answer200], ids=["400", "405", "200"])
def http11(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _serve(request.param)


@pytest.fixture
def http11_503() -> Iterator[str]:
    yield from _serve(_Answer503)


@pytest.fixture
async def banner() -> AsyncIterator[str]:
    """A server of another protocol: it greets first, then reads what comes and closes."""

    async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"SSH-2.0-OpenSSH_9.6 \x1b[31mred\r\n")
        await writer.drain()
        await reader.read(65536)
        writer.close()

    server = await asyncio.start_server(greet, "127.0.0.1", 0)
    async with server:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_websocket_to_an_http10_server_names_it(http10: str) -> None:
    with pytest.raises(NotAnACPEndpoint) as caught:
        async with asyncio.timeout(bound(10)):
            await connect_websocket(f"ws://{http10}/acp")
    error = caught.value
    assert str(error).startswith(f"ws://{http10}/acp is not an ACP endpoint: it answered the WebSocket upgrade with ")
    assert error.status_line.startswith("HTTP/1.0 404") and error.status_code == 404
    assert error.server is not None and error.server.startswith("SimpleHTTP/")
    assert f"(Server: {error.server})" in str(error)
    assert classify_error(error).retry is False and classify_error(error).reason == "not_acp"


async def test_websocket_to_a_definite_http11_answer_names_it(http11: str) -> None:
    with pytest.raises(NotAnACPEndpoint) as caught:
        async with asyncio.timeout(bound(10)):
            await connect_websocket(f"ws://{http11}/acp")
    text = str(caught.value)
    assert "is not an ACP endpoint: it answered the WebSocket upgrade with 'HTTP/1.1 " in text, text
    assert "(Server: test-server/1.0)" in text
    assert isinstance(caught.value, HandshakeRejected) and caught.value.status_code in (200, 400, 405)


async def test_a_5xx_stays_a_retried_rejection(http11_503: str) -> None:
    with pytest.raises(HandshakeRejected) as caught:
        async with asyncio.timeout(bound(10)):
            await connect_websocket(f"ws://{http11_503}/acp")
    assert not isinstance(caught.value, NotAnACPEndpoint) and caught.value.status_code == 503
    assert classify_error(caught.value).retry is True


async def test_websocket_to_a_banner_names_its_first_line_escaped(banner: str) -> None:
    with pytest.raises(NotAnACPEndpoint) as caught:
        async with asyncio.timeout(bound(10)):
            await connect_websocket(f"ws://{banner}/acp")
    error = caught.value
    assert error.status_code == 0 and error.server is None
    assert error.status_line == "SSH-2.0-OpenSSH_9.6 \\x1b[31mred", error.status_line
    assert "\x1b" not in str(error)


async def test_auto_does_not_fall_back_to_http_after_a_banner(banner: str) -> None:
    with pytest.raises(NotAnACPEndpoint) as caught:
        async with asyncio.timeout(bound(10)):
            await open_endpoint(f"http://{banner}/acp", TransportOptions(transport="auto"))
    assert caught.value.status_code == 0


async def test_streamable_http_to_an_http10_server_names_it(http10: str) -> None:
    with pytest.raises(NotAnACPEndpoint) as caught:
        async with asyncio.timeout(bound(10)):
            transport = await open_endpoint(f"http://{http10}/acp", TransportOptions(transport="http"))
            await transport.send('{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}')
    text = str(caught.value)
    assert f"http://{http10}/acp is not an ACP endpoint: it answered the initialize POST with " in text, text
    assert "HTTP/1.0 501" in text and "(Server: SimpleHTTP/" in text


@pytest.mark.parametrize("kind", ["http", "websocket"])
async def test_the_client_stops_at_once_instead_of_retrying(http10: str, kind: str) -> None:
    # ready=None: before the fix the manager retried this forever, and the bound below failed the test
    scheme = "ws" if kind == "websocket" else "http"
    client = ReconnectingClient(f"{scheme}://{http10}/acp", timeouts=Timeouts(ready=None))
    with pytest.raises(ReconnectFailed) as caught:
        async with asyncio.timeout(bound(15)), client:
            pass
    assert caught.value.reason == "not_acp"
    assert isinstance(caught.value.cause, NotAnACPEndpoint)
    assert "is not an ACP endpoint" in str(caught.value) and "SimpleHTTP/" in str(caught.value)


async def test_streamable_http_definite_4xx_says_not_acp() -> None:
    for handler in (_Answer, _Answer405):
        for hostport in _serve(handler):
            with pytest.raises(HTTPTransportError) as caught:
                async with asyncio.timeout(bound(10)):
                    transport = await open_endpoint(f"http://{hostport}/acp", TransportOptions(transport="http"))
                    await transport.send('{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}')
            text = str(caught.value)
            assert f"answered initialize with HTTP {handler.status} ('HTTP/1.1 {handler.status} " in text, text
            assert "Server: test-server/1.0): not an ACP endpoint" in text
            assert classify_error(caught.value).retry is False
            assert not isinstance(caught.value, ConnectError) or caught.value.status_code == handler.status

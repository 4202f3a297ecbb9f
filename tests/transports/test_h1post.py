"""The HTTP/1.1 POST path of the Streamable HTTP transport (``_h1post.H1Poster``) against a scripted loopback
server: framing (length, chunks, end of connection, interim answers), bounds, keep-alive, header checks and
the httpx error types the POST pipeline maps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from acp_client.transports.http._h1post import H1Poster
from tests.conftest import bound

TIMEOUT = httpx.Timeout(5.0)
HEADERS = [("Content-Type", "application/json"), ("Acp-Connection-Id", "c1")]


class Scripted:
    """Answers each request with the next scripted bytes (``None``: close without answering); records the
    requests (head and body) and counts connections."""

    def __init__(self, answers: list[bytes | None]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self.connections = 0
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answers.pop(0)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def server(request: pytest.FixtureRequest) -> AsyncIterator[Scripted]:
    scripted = Scripted(list(request.param))
    srv = await asyncio.start_server(scripted.handle, "127.0.0.1", 0)
    scripted.port = srv.sockets[0].getsockname()[1]
    async with srv:
        yield scripted


def poster(server: Scripted) -> H1Poster:
    return H1Poster(httpx.URL(f"http://127.0.0.1:{server.port}/acp"), None, TIMEOUT)


OK_LENGTH = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
ACCEPTED = b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4;x=1\r\n\":1}\r\n0\r\n\r\n"


@pytest.mark.parametrize("server", [[OK_LENGTH, CHUNKED, b"HTTP/1.1 100 Continue\r\n\r\n" + ACCEPTED]], indirect=True)
async def test_bodies_by_length_chunks_and_after_an_interim_answer_on_one_kept_alive_connection(
    server: Scripted,
) -> None:
    post = poster(server)
    first = await post.send("POST", HEADERS, b"[1]", limit=100)
    second = await post.send("POST", HEADERS, b"[2]", limit=100)
    third = await post.send("POST", HEADERS, b"[3]", limit=100)
    await post.aclose()
    assert (first.status_code, first.body, first.truncated, first.http_version) == (200, b"{}", False, "HTTP/1.1")
    assert first.headers["content-type"] == "application/json"
    assert (second.body, second.truncated) == (b'{"a":1}', False)
    assert third.status_code == 202
    assert server.connections == 1
    head = server.requests[0].decode()
    assert head.startswith(f"POST /acp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n")
    assert "Acp-Connection-Id: c1\r\n" in head and head.endswith("Content-Length: 3\r\n\r\n[1]")


BIG = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 1000
BIG_ERROR = b"HTTP/1.1 500 Oops\r\nContent-Length: 10000\r\n\r\n" + b"e" * 10000
CLOSE_DELIMITED = b"HTTP/1.1 200 OK\r\n\r\n" + b"y" * 50


@pytest.mark.parametrize("server", [[BIG, BIG_ERROR, CLOSE_DELIMITED]], indirect=True)
async def test_a_body_past_its_bound_is_cut_and_its_connection_dropped(server: Scripted) -> None:
    post = poster(server)
    big = await post.send("POST", HEADERS, b"[]", limit=100)
    error = await post.send("POST", HEADERS, b"[]", limit=100)  # error bodies: ERROR_BODY_LIMIT
    ended = await post.send("POST", HEADERS, b"[]", limit=100)
    await post.aclose()
    assert (len(big.body), big.truncated) == (100, True)
    assert (error.status_code, len(error.body), error.truncated) == (500, 4096, True)
    assert (ended.body, ended.truncated) == (b"y" * 50, False)
    assert server.connections == 3


@pytest.mark.parametrize("server", [[ACCEPTED]], indirect=True)
async def test_a_header_that_would_split_the_request_is_refused_before_anything_is_sent(server: Scripted) -> None:
    post = poster(server)
    with pytest.raises(httpx.LocalProtocolError):
        await post.send("POST", [("X-Evil", "a\r\nInjected: 1")], b"[]", limit=100)
    answer = await post.send("POST", HEADERS, b"[]", limit=100)
    await post.aclose()
    assert answer.status_code == 202
    assert len(server.requests) == 1 and b"Injected" not in server.requests[0]


@pytest.mark.parametrize("server", [[None]], indirect=True)
async def test_a_connection_closed_without_an_answer_is_a_remote_protocol_error(server: Scripted) -> None:
    post = poster(server)
    with pytest.raises(httpx.RemoteProtocolError):
        await post.send("POST", HEADERS, b"[]", limit=100)
    await post.aclose()


async def test_nothing_listening_is_a_connect_error() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    post = H1Poster(httpx.URL(f"http://127.0.0.1:{port}/acp"), None, TIMEOUT)
    with pytest.raises(httpx.ConnectError):
        await post.send("POST", HEADERS, b"[]", limit=100)


@pytest.mark.parametrize("server", [[ACCEPTED]], indirect=True)
async def test_the_callers_host_replaces_ours_and_its_framing_headers_are_dropped(server: Scripted) -> None:
    # a proxy in front of a server that checks Host (qwen serve): the caller names the host it expects,
    # as httpx lets it; the body is framed by us alone, so a caller's Content-Length never reaches the wire
    post = poster(server)
    extra = [("Host", "example.test:8080"), ("Content-Length", "999"), ("Transfer-Encoding", "chunked")]
    answer = await post.send("POST", HEADERS + extra, b"[1]", limit=100)
    await post.aclose()
    assert answer.status_code == 202
    head = server.requests[0].split(b"\r\n\r\n")[0].lower().split(b"\r\n")
    assert [line for line in head if line.startswith(b"host:")] == [b"host: example.test:8080"]
    assert [line for line in head if line.startswith(b"content-length:")] == [b"content-length: 3"]
    assert not [line for line in head if line.startswith(b"transfer-encoding:")]


@pytest.mark.parametrize(
    "server",
    [
        [b"HTTP/1.1 100 Continue\r\n\r\n" * 9 + ACCEPTED],
        [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + b"X-T: 1\r\n" * 65 + b"\r\n"],
    ],
    indirect=True,
)
async def test_endless_interim_answers_or_trailers_are_refused_naming_the_bound(server: Scripted) -> None:
    post = poster(server)
    with pytest.raises(httpx.RemoteProtocolError, match=r"INTERIM_MAX=8|TRAILERS_MAX=64"):
        await post.send("POST", HEADERS, b"[1]", limit=100)
    await post.aclose()


# ---------------------------------------------------------------------------- what h11 settles (issue 33)

FORGED = b'HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{"forged":true}'
REAL = b'HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{"real":true}'


@pytest.mark.parametrize(
    "server",
    [
        [ACCEPTED + FORGED, REAL],  # an answer nobody asked for, right behind the first one
        [b"HTTP/1.1 204 No Content\r\nContent-Length: %d\r\n\r\n" % len(FORGED) + FORGED, REAL],  # a 204 "body"
    ],
    indirect=True,
)
async def test_bytes_past_an_answer_never_become_the_next_posts_answer(server: Scripted) -> None:
    post = poster(server)
    first = await post.send("POST", HEADERS, b"[1]", limit=100)
    second = await post.send("POST", HEADERS, b"[2]", limit=100)
    await post.aclose()
    assert first.status_code in (202, 204) and first.body == b""
    assert second.body == b'{"real":true}'
    assert server.connections == 2  # the first connection was not reused


@pytest.mark.parametrize(
    "server",
    [
        [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%s\r\n{}\r\n0\r\n\r\n" % size]
        for size in (b"0x2", b"0_2", b"+2")
    ],
    indirect=True,
)
async def test_a_chunk_size_that_is_not_plain_hex_digits_is_refused(server: Scripted) -> None:
    post = poster(server)
    with pytest.raises(httpx.RemoteProtocolError, match="chunk"):
        await post.send("POST", HEADERS, b"[1]", limit=100)
    await post.aclose()


async def test_bytes_that_came_while_a_connection_sat_idle_never_become_the_next_posts_answer() -> None:
    # the first connection gets an answer nobody asked for while idle; an exchange on a second connection,
    # answered after those bytes were written, makes sure they reached the client before the next POST
    go, sent = asyncio.Event(), asyncio.Event()
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        first = connections == 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(REAL if first and go.is_set() else ACCEPTED)
                await writer.drain()
                if first and not go.is_set():
                    await go.wait()
                    writer.write(FORGED)
                    await writer.drain()
                    sent.set()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = httpx.URL(f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/acp")
    async with srv:
        post, barrier = H1Poster(url, None, TIMEOUT), H1Poster(url, None, TIMEOUT)
        try:
            assert (await post.send("POST", HEADERS, b"[1]", limit=100)).status_code == 202
            go.set()
            await asyncio.wait_for(sent.wait(), bound(5))
            assert (await barrier.send("POST", HEADERS, b"[b]", limit=100)).status_code == 202
            second = await post.send("POST", HEADERS, b"[2]", limit=100)
        finally:
            await post.aclose()
            await barrier.aclose()
    assert (second.status_code, second.body) == (202, b"")  # a fresh connection's answer, not the forged one
    assert connections == 3


BOTH_FRAMINGS = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"


@pytest.mark.parametrize("server", [[BOTH_FRAMINGS, ACCEPTED]], indirect=True)
async def test_an_answer_framed_by_both_length_and_chunks_closes_its_connection(server: Scripted) -> None:
    post = poster(server)
    first = await post.send("POST", HEADERS, b"[1]", limit=100)
    second = await post.send("POST", HEADERS, b"[2]", limit=100)
    await post.aclose()
    assert (first.body, second.status_code) == (b"{}", 202)
    assert server.connections == 2


@pytest.mark.parametrize("server", [[ACCEPTED]], indirect=True)
@pytest.mark.parametrize("value", ["secret\x01", "secret\x0b", "secret\x7f", "secret\x00", "secr\xe9t"])
async def test_a_header_value_with_a_control_character_or_not_ascii_is_refused(server: Scripted, value: str) -> None:
    post = poster(server)
    with pytest.raises(httpx.LocalProtocolError, match="X-Bad") as refused:
        await post.send("POST", [*HEADERS, ("X-Bad", value)], b"[]", limit=100)
    assert "secr" not in str(refused.value)  # the header is named, its value (maybe a token) never shown
    answer = await post.send("POST", HEADERS, b"[]", limit=100)
    await post.aclose()
    assert answer.status_code == 202
    assert len(server.requests) == 1 and b"X-Bad" not in server.requests[0]


NOTE = "HTTP/1.1 200 OK\r\nX-Note: café\r\nContent-Length: 2\r\n\r\n{}".encode()


@pytest.mark.parametrize("server", [[NOTE, ACCEPTED]], indirect=True)
async def test_a_response_header_value_that_is_not_ascii_is_kept_as_bytes(server: Scripted) -> None:
    post = poster(server)
    answer = await post.send("POST", HEADERS, b"[]", limit=100)
    after = await post.send("POST", HEADERS, b"[]", limit=100)
    await post.aclose()
    assert (answer.status_code, answer.body, after.status_code) == (200, b"{}", 202)
    assert answer.headers.raw[0] == (b"x-note", "café".encode())
    assert server.connections == 1

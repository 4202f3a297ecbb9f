"""A WebSocket handshake answered with a redirect (issue 18, item 1): none is followed unless asked, and then
only within the origin. Headers the user gave never reach a server the user did not name, and a cookie is
stored under the host that set it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from acp_client.exceptions import HandshakeRejected, UsageError
from acp_client.transports import CookieJar, TransportOptions
from acp_client.transports.websocket import connect_websocket, open_websocket
from tests.conftest import bound

SECRET_HEADERS = {"X-Api-Key": "k-123", "X-Auth-Token": "t-456", "Authorization": "Bearer b-789"}


@dataclass
class Endpoint:
    """A loopback WebSocket server that redirects some paths and records every handshake it sees."""

    redirects: dict[str, Callable[[str], str]] = field(default_factory=dict)
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    set_cookie: str | None = None
    port: int = 0

    @property
    def base(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        self.seen.append((request.path, dict(request.headers.raw_items())))
        make_target = self.redirects.get(request.path)
        if make_target is None:
            return None
        response = connection.respond(302, "moved\n")
        response.headers["Location"] = make_target(self.base)
        if self.set_cookie is not None:
            response.headers["Set-Cookie"] = self.set_cookie
        return response


@asynccontextmanager
async def running(endpoint: Endpoint) -> AsyncIterator[Endpoint]:
    async def handler(connection: ServerConnection) -> None:
        async for message in connection:
            await connection.send(message)

    async with serve(handler, "127.0.0.1", 0, process_request=endpoint.process_request) as server:
        endpoint.port = server.sockets[0].getsockname()[1]
        yield endpoint


@pytest.mark.parametrize("follow", [False, True], ids=["default", "follow_redirects"])
async def test_a_redirect_to_another_origin_is_never_followed(follow: bool) -> None:
    async with running(Endpoint()) as other, running(Endpoint()) as first:
        first.redirects["/acp"] = lambda _base: f"{other.base}/acp?token=s3cret"
        first.set_cookie = "affinity=a1; Path=/"
        jar = CookieJar()
        with pytest.raises(HandshakeRejected) as caught:
            await connect_websocket(
                f"{first.base}/acp", headers=SECRET_HEADERS, cookies=jar, follow_redirects=follow, open_timeout=bound(5)
            )
        assert caught.value.status_code == 302
        text = str(caught.value)
        assert ("another origin" if follow else "not followed") in text
        assert "s3cret" not in text and "<redacted>" in text
        assert other.seen == []  # the other origin received nothing: no X-Api-Key, no X-Auth-Token
        assert jar.header_value("127.0.0.1", secure=False) == "affinity=a1"  # stored under the host that set it


async def test_redirects_are_refused_by_default_even_within_the_origin() -> None:
    async with running(Endpoint()) as endpoint:
        endpoint.redirects["/old"] = lambda base: f"{base}/acp"
        with pytest.raises(HandshakeRejected, match="not followed"):
            await connect_websocket(f"{endpoint.base}/old", headers=SECRET_HEADERS, open_timeout=bound(5))
        assert [path for path, _ in endpoint.seen] == ["/old"]


async def test_follow_redirects_follows_within_the_origin() -> None:
    async with running(Endpoint()) as endpoint:
        endpoint.redirects["/old"] = lambda base: f"{base}/acp"
        options = TransportOptions(headers=SECRET_HEADERS, follow_redirects=True, open_timeout=bound(5))
        transport = await open_websocket(f"{endpoint.base}/old", options)
        try:
            await transport.send("ping")
            assert await transport.recv() == "ping"
        finally:
            await transport.close()
        assert [path for path, _ in endpoint.seen] == ["/old", "/acp"]
        assert endpoint.seen[1][1]["X-Api-Key"] == "k-123"  # same origin: the user's headers go along


async def test_a_redirect_to_a_plain_http_url_is_refused() -> None:
    async with running(Endpoint()) as endpoint:
        endpoint.redirects["/acp"] = lambda base: base.replace("ws://", "http://") + "/elsewhere"
        with pytest.raises(HandshakeRejected, match="not a WebSocket URL"):
            await connect_websocket(f"{endpoint.base}/acp", follow_redirects=True, open_timeout=bound(5))


def test_follow_redirects_must_be_a_bool() -> None:
    with pytest.raises(UsageError, match="follow_redirects"):
        TransportOptions(follow_redirects="yes")  # type: ignore[arg-type]

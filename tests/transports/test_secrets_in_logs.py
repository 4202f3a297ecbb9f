"""Secrets never leave the process by accident (issue 18, item 2): header values are checked before any I/O
and an error names the header, never its value; log lines show header values only for an allow-list and
show URLs without userinfo or token-like query values, at every level and in both logging routes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import structlog
from structlog.testing import capture_logs
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request

from acp_client import ReconnectingClient, connect
from acp_client._logging import get_logger, loggable_headers, scrub_urls
from acp_client.exceptions import ConnectError, ReconnectFailed, UsageError
from acp_client.testing import ReferenceAgent
from acp_client.transports import TransportOptions
from acp_client.transports.options import resolve_headers
from acp_client.transports.websocket import connect_websocket
from tests.conftest import bound

CUSTOM_AUTH = {"X-Auth-Token": "xat-secret", "Private-Token": "pt-secret", "X-Goog-Api-Key": "gk-secret"}


@asynccontextmanager
async def recording_server() -> AsyncIterator[tuple[int, list[Request]]]:
    seen: list[Request] = []

    def record(_connection: ServerConnection, request: Request) -> None:
        seen.append(request)

    async def echo(connection: ServerConnection) -> None:
        async for message in connection:
            await connection.send(message)

    async with serve(echo, "127.0.0.1", 0, process_request=record) as server:
        yield server.sockets[0].getsockname()[1], seen


@pytest.mark.parametrize("value", ["VAL-SECRET\n", "VAL-SECRET\r\nX-Injected: 1", "VAL\x00SECRET"])
async def test_a_header_value_with_a_line_break_is_refused_before_any_io_without_showing_it(value: str) -> None:
    async with recording_server() as (port, seen):
        with pytest.raises(UsageError) as caught:
            await connect_websocket(f"ws://127.0.0.1:{port}/acp", headers={"X-Token": value}, open_timeout=bound(5))
    assert "X-Token" in str(caught.value)
    assert "VAL" not in str(caught.value) and "SECRET" not in str(caught.value)
    assert seen == []  # nothing was sent


async def test_a_reconnecting_client_with_a_bad_header_fails_once_and_clearly() -> None:
    async with recording_server() as (port, seen):
        options = TransportOptions(headers={"X-Token": "VAL-SECRET\n"})
        client = ReconnectingClient(f"ws://127.0.0.1:{port}/acp", transport_options=options)
        with capture_logs() as logs, pytest.raises(ReconnectFailed, match="header 'X-Token'") as caught:
            async with client:
                pass
        assert "VAL-SECRET" not in str(caught.value) and "VAL-SECRET" not in repr(logs)
        assert seen == []


def test_a_header_name_that_is_not_a_token_is_refused() -> None:
    import asyncio


    with pytest.raises(UsageError, match="not a valid HTTP header name"):
        asyncio.run(resolve_headers({"X Token": "v"}))


async def test_custom_auth_headers_are_redacted_at_debug() -> None:
    async with recording_server() as (port, seen):
        with capture_logs() as logs:
            transport = await connect_websocket(
                f"ws://127.0.0.1:{port}/acp", headers={**CUSTOM_AUTH, "Acp-Trace": "t1"}, open_timeout=bound(5)
            )
            await transport.close()
    assert seen[0].headers["X-Auth-Token"] == "xat-secret"  # sent as given
    assert "secret" not in repr(logs)
    connecting = next(e for e in logs if e["event"] == "websocket_connecting")
    assert connecting["headers"]["X-Auth-Token"] == "<redacted>"
    assert connecting["headers"]["Acp-Trace"] == "t1"  # Acp-* is on the allow-list


def test_loggable_headers_shows_only_the_allow_list() -> None:
    shown = loggable_headers([("Content-Type", "application/json"), ("X-Custom", "v"), ("Acp-Session-Id", "s")])
    assert shown == {"Content-Type": "application/json", "X-Custom": "<redacted>", "Acp-Session-Id": "s"}


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        ("cannot reach wss://u:pw@host/acp: refused", "cannot reach wss://<redacted>@host/acp: refused"),
        ("falling back from ws://h/acp?token=abc to http://h/acp?token=abc",
         "falling back from ws://h/acp?token=<redacted> to http://h/acp?token=<redacted>"),
        ("no url here", "no url here"),
    ],
)
def test_urls_inside_text_are_scrubbed(text: str, clean: str) -> None:
    assert scrub_urls(text) == clean


def test_log_values_holding_urls_are_scrubbed_in_both_routes(caplog: pytest.LogCaptureFixture) -> None:
    log = get_logger("acp_client.test_secrets")
    previous = structlog.get_config()
    structlog.reset_defaults()  # the stdlib route: the application configured nothing but stdlib logging
    try:
        with caplog.at_level(logging.DEBUG, logger="acp_client"):
            log.debug("probe", url="ws://me:pw123@h/acp?api_key=k123", error="failed at http://h/x?sig=s123")
    finally:
        structlog.configure(**previous)
    (record,) = [r for r in caplog.records if r.name == "acp_client.test_secrets"]
    message = record.getMessage()
    assert "pw123" not in message and "k123" not in message and "s123" not in message
    with capture_logs() as logs:
        log.info("probe", url="ws://me:pw123@h/acp?api_key=k123")
    assert "pw123" not in repr(logs) and "k123" not in repr(logs)


async def test_httpx_own_request_log_shows_no_password_or_token(caplog: pytest.LogCaptureFixture) -> None:
    async with ReferenceAgent(2) as agent:
        base = agent.url.replace("ws://", "http://")
        url = base.replace("http://", "http://me:pw-secret@") + "?token=tok-secret"
        caplog.set_level(logging.INFO, logger="httpx")
        async with connect(url) as client:
            await client.new_session("/w")
        lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert lines, "httpx logs every request at INFO"
    assert not any("pw-secret" in line or "tok-secret" in line for line in lines), lines
    assert any("token=<redacted>" in line for line in lines)
    assert not logging.getLogger("httpx").filters  # gone with the last link that needed it


def test_error_texts_never_show_url_credentials_even_from_lower_libraries() -> None:
    error = ConnectError("could not connect to wss://me:pw-secret@h/acp?token=tok-secret: [Errno 111] refused")
    assert str(error) == "could not connect to wss://<redacted>@h/acp?token=<redacted>: [Errno 111] refused"

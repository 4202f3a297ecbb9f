"""The first connect is bounded and explained: with no agent behind the URL, ``async with
ReconnectingClient(url)`` (and the sync facade's ``with``) gives up after ``Timeouts.ready`` with an
``ACPTimeoutError`` naming the last attempt's cause, and every ``BACKOFF`` says why. A server whose answer
says it is no ACP endpoint (a plain HTTP file server) ends the start at once, naming what answered.

The client runs in a subprocess under a hard timeout, so a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from acp_client import ReconnectingClient, Timeouts
from acp_client.reconnect import ClientState, StateChanged

HARD_TIMEOUT = 60.0  # far beyond the bound under test: reaching it means the client hung

_ASYNC_PROBE = """
import asyncio, json, sys
from acp_client import ReconnectingClient, Timeouts

async def main(url, ready):
    timeouts = Timeouts() if ready == "default" else Timeouts(ready=float(ready))
    try:
        async with ReconnectingClient(url, timeouts=timeouts):
            outcome = {"raised": None}
    except BaseException as exc:
        outcome = {"raised": type(exc).__name__, "text": str(exc),
                   "acp": __import__("acp_client").ACPError in type(exc).__mro__,
                   "timeout": isinstance(exc, TimeoutError)}
    print(json.dumps(outcome))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""

_SYNC_PROBE = """
import json, sys
from acp_client import ACPError, sync
try:
    with sync.ReconnectingClient(sys.argv[1], ready_timeout=float(sys.argv[2])):
        outcome = {"raised": None}
except BaseException as exc:
    outcome = {"raised": type(exc).__name__, "text": str(exc), "acp": isinstance(exc, ACPError),
               "timeout": isinstance(exc, TimeoutError)}
print(json.dumps(outcome))
"""


def _run(probe: str, url: str, ready: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", probe, url, ready], capture_output=True, text=True, timeout=HARD_TIMEOUT, check=False
    )
    assert done.returncode == 0, done.stderr
    outcome: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return outcome


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def plain_http_server() -> Iterator[str]:
    """A plain HTTP file server (what ``python -m http.server`` runs) on loopback: not an ACP endpoint."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    thread = threading.Thread(target=server.serve_forever, name="plain-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/acp"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_the_ready_default_is_finite_and_none_still_waits_forever() -> None:
    assert Timeouts().ready == 30.0
    assert Timeouts(ready=None).ready is None


def test_nothing_listening_raises_an_acp_timeout_naming_the_refused_connect() -> None:
    url = f"ws://127.0.0.1:{_closed_port()}/acp"
    outcome = _run(_ASYNC_PROBE, url, "1.5")
    assert outcome["raised"] == "ACPTimeoutError"
    assert outcome["acp"] and outcome["timeout"]
    text = str(outcome["text"])
    assert text.startswith("no ready connection within 1.5 s (backoff, "), text
    assert f"last attempt: could not connect to {url}: " in text, text


def test_a_plain_http_server_fails_at_once_naming_what_answered(plain_http_server: str) -> None:
    # an HTTP/1.0 file server is never an ACP endpoint: the first answer ends the start, long before the
    # default 30 s ready bound (which would raise ACPTimeoutError instead)
    outcome = _run(_ASYNC_PROBE, plain_http_server, "default")
    assert outcome["raised"] == "ReconnectFailed", outcome
    assert outcome["acp"] and not outcome["timeout"]
    text = str(outcome["text"])
    assert text.startswith("reconnecting failed (not_acp): "), text
    assert f"{plain_http_server} is not an ACP endpoint: it answered the initialize POST with" in text, text
    assert "HTTP/1.0 501" in text and "(Server: SimpleHTTP/" in text, text


def test_the_sync_facade_raises_the_same_error(plain_http_server: str) -> None:
    outcome = _run(_SYNC_PROBE, plain_http_server, "30")
    assert outcome["raised"] == "ReconnectFailed", outcome
    assert outcome["acp"] and not outcome["timeout"]
    assert f"{plain_http_server} is not an ACP endpoint" in str(outcome["text"])


async def test_every_backoff_carries_the_cause_of_the_failed_attempt() -> None:
    url = f"ws://127.0.0.1:{_closed_port()}/acp"
    client = ReconnectingClient(url, timeouts=Timeouts(ready=None))
    events = client.events()
    backoffs: list[StateChanged] = []
    try:
        await client.start()
        async with asyncio.timeout(20):
            async for event in events:
                if isinstance(event, StateChanged) and event.new is ClientState.BACKOFF:
                    backoffs.append(event)
                    if len(backoffs) == 2:
                        break
    finally:
        await client.aclose()
    for event in backoffs:
        assert event.reason == "ConnectError"
        assert event.error is not None and event.error.startswith(f"could not connect to {url}: "), event

"""Streamable HTTP bodies are read with bounds (issue 18, item 3): a 200 MB ``initialize`` answer stops at
``max_frame_bytes`` with an error naming it, and a 200 MB HTML error page is read only for its excerpt. The
client runs in a child process whose peak RSS is measured (never a timed assertion)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tests.conftest import bound

BODY_BYTES = 200 * 1024 * 1024
CHUNK = b" " * (1024 * 1024)

CLIENT = r"""
import asyncio, json, resource, sys
from acp_client import Timeouts, TransportOptions, connect
from acp_client.exceptions import ACPError

async def main(url):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        options = TransportOptions(open_timeout=30)
        async with connect(url, timeouts=Timeouts(initialize=60), transport_options=options):
            outcome = "connected"
    except ACPError as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"outcome": outcome, "grew_kib": after - before}))

asyncio.run(main(sys.argv[1]))
"""


@asynccontextmanager
async def huge_body_server(status: int, content_type: str, head: bytes) -> AsyncIterator[str]:
    """Answers every request with ``head`` and then spaces, BODY_BYTES in all, written chunk by chunk."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {BODY_BYTES}\r\n\r\n".encode()
            )
            writer.write(head)
            sent = len(head)
            while sent < BODY_BYTES:
                piece = CHUNK[: BODY_BYTES - sent]
                writer.write(piece)
                sent += len(piece)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client stopped reading at its bound and went away: what the test wants
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/acp"
    finally:
        server.close()
        await server.wait_closed()


async def run_client(url: str) -> dict[str, object]:
    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", CLIENT, url], capture_output=True, text=True, timeout=bound(120), check=False
        )

    done = await asyncio.to_thread(run)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.mark.timeout(180)
async def test_a_huge_initialize_answer_stops_at_max_frame_bytes() -> None:
    head = json.dumps({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 2}}).encode()
    async with huge_body_server(200, "application/json", head) as url:
        result = await run_client(url)
    assert "max_frame_bytes" in str(result["outcome"]), result
    # the 16 MiB bound and its copies, not 200 MB (the peak grew by 783 MB before)
    assert int(str(result["grew_kib"])) < 96 * 1024, result


@pytest.mark.timeout(180)
async def test_a_huge_html_error_page_is_read_for_its_excerpt_only() -> None:
    async with huge_body_server(502, "text/html", b"<html><body>Bad gateway") as url:
        result = await run_client(url)
    outcome = str(result["outcome"])
    assert "HTTP 502" in outcome and "HTML page: not an ACP endpoint" in outcome, result
    assert "<html>" not in outcome  # not pasted into the message
    assert int(str(result["grew_kib"])) < 32 * 1024, result  # a few KiB read, not 200 MB (551 MB more before)


FLOOD_EVENTS = 300_000
EVENT = "data: " + json.dumps({"jsonrpc": "2.0", "method": "_flood", "params": {"blob": "x" * 200}}) + "\n\n"

FLOOD_CLIENT = r"""
import asyncio, json, resource, sys
from acp_client.transports import TransportOptions
from acp_client.transports.http import open_http

async def main(url, count):
    transport = await open_http(url, TransportOptions(ping_interval=None))
    await transport.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}))
    await transport.recv()  # the initialize answer
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for n in range(count):
        json.loads(await transport.recv())  # what a connection's reader does with each frame
        if n % 64 == 0:
            await asyncio.sleep(0)  # and it lets the loop run every 64 frames, as Connection's reader does
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    await transport.close()
    print(json.dumps({"grew_kib": after - before}))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


@asynccontextmanager
async def flooding_sse_server() -> AsyncIterator[str]:
    """initialize answered with a connection id; the connection's event stream then floods FLOOD_EVENTS
    small events as fast as the socket takes them."""
    answer = json.dumps({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 2}}).encode()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            method = head.split(" ", 1)[0]
            length = next((int(line.split(":")[1]) for line in head.split("\r\n") if line.lower().startswith(
                "content-length:")), 0)
            await reader.readexactly(length)
            if method == "POST":
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nAcp-Connection-Id: c1\r\n"
                    + f"Content-Length: {len(answer)}\r\n\r\n".encode() + answer
                )
            elif method == "GET":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
                batch = EVENT.encode() * 1000
                for _ in range(FLOOD_EVENTS // 1000):
                    writer.write(batch)
                    await writer.drain()
                await reader.read()  # hold the stream open until the client goes
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/acp"
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.timeout(180)
async def test_a_flooding_event_stream_is_held_back_not_queued() -> None:
    async with flooding_sse_server() as url:

        def run() -> subprocess.CompletedProcess[str]:
            argv = [sys.executable, "-c", FLOOD_CLIENT, url, str(FLOOD_EVENTS)]
            return subprocess.run(argv, capture_output=True, text=True, timeout=bound(120), check=False)

        done = await asyncio.to_thread(run)
    assert done.returncode == 0, done.stderr
    grew = json.loads(done.stdout)["grew_kib"]
    # 300k events (80 MB) arrive faster than they are read: at most 16 wait in the inbox, the rest in the socket
    assert grew < 16 * 1024, grew  # it grew by ~55 MB when every event read was queued

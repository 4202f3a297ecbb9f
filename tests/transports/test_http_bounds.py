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
from acp_client import connect
from acp_client.exceptions import ACPError

async def main(url):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        async with connect(url, open_timeout=30, initialize_timeout=60):
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

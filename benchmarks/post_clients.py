"""The POST round trip of the Streamable HTTP transport on three client stacks, same run, same agent.

``_stream_agent.py`` serves HTTP/1.1; each client opens a link (``initialize``), then sends the same small
``session/status`` POST one at a time, each answered ``202`` with an empty body (the JSON-RPC answer would go
to an event stream, which is not read here: this is the POST alone). Keep-alive everywhere:

- **httpx** ``AsyncClient`` (what the transport used for every request), ``client.stream`` as the transport
  calls it;
- **aiohttp** ``ClientSession`` (skipped when aiohttp is not installed: it is not a dependency);
- **h11 on asyncio streams**: one ``asyncio.open_connection`` and an ``h11.Connection``;
- **by hand on asyncio streams**: the request bytes written and the response head and body read without an
  HTTP library (what ``acp_client.transports.http._h1post`` did until issue 33);
- **acp_client's H1Poster**: the shipped POST path (``_h1post``: h11 on asyncio streams, with the pool, the
  header checks, the bounds and the reuse checks).

Prints p50/p99 per stack and the ratio to httpx. Not part of ``run_all.py`` (no section in the results file):
it backs the choice written in ``docs/design.md``.

    python benchmarks/post_clients.py [--n 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import _common
import h11
import httpx
from p2_updates import StreamAgentProcess

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 2, "clientCapabilities": {}}}


def _status(id_: int) -> bytes:
    params = {"sessionId": "bench-session"}
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": "session/status", "params": params}).encode()


async def _connection_id(url: str) -> str:
    async with httpx.AsyncClient() as client:
        response = await client.post(url, json=INIT)
        return response.headers["acp-connection-id"]


async def with_httpx(url: str, headers: dict[str, str], n: int) -> list[float]:
    samples = []
    async with httpx.AsyncClient(http1=True, http2=False) as client:
        for i in range(n):
            t0 = time.perf_counter()
            async with client.stream("POST", url, content=_status(i), headers=headers) as response:
                await response.aread()
            samples.append(time.perf_counter() - t0)
            assert response.status_code == 202
    return samples


async def with_aiohttp(url: str, headers: dict[str, str], n: int) -> list[float]:
    import aiohttp

    samples = []
    async with aiohttp.ClientSession() as session:
        for i in range(n):
            t0 = time.perf_counter()
            async with session.post(url, data=_status(i), headers=headers) as response:
                await response.read()
            samples.append(time.perf_counter() - t0)
            assert response.status == 202
    return samples


async def with_h11(url: str, headers: dict[str, str], n: int) -> list[float]:
    target = httpx.URL(url)
    reader, writer = await asyncio.open_connection(target.host, target.port)
    conn = h11.Connection(h11.CLIENT)
    fields = [("Host", f"{target.host}:{target.port}"), *headers.items()]
    samples = []
    try:
        for i in range(n):
            t0 = time.perf_counter()
            body = _status(i)
            length = ("Content-Length", str(len(body)))
            request = h11.Request(method="POST", target=target.raw_path, headers=[*fields, length])
            writer.write(conn.send(request) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
            status = 0
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await reader.read(65536))
                    continue
                if isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.EndOfMessage):
                    break
            conn.start_next_cycle()
            samples.append(time.perf_counter() - t0)
            assert status == 202
    finally:
        writer.close()
    return samples


async def with_asyncio(url: str, headers: dict[str, str], n: int) -> list[float]:
    """The request written and the response read by hand (what ``_h1post`` does): no HTTP library."""
    target = httpx.URL(url)
    reader, writer = await asyncio.open_connection(target.host, target.port)
    head = f"POST {target.raw_path.decode()} HTTP/1.1\r\nHost: {target.host}:{target.port}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    samples = []
    try:
        for i in range(n):
            t0 = time.perf_counter()
            body = _status(i)
            writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
            status = int(lines[0].split(b" ", 2)[1])
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length:
                await reader.readexactly(length)
            samples.append(time.perf_counter() - t0)
            assert status == 202
    finally:
        writer.close()
    return samples


async def with_poster(url: str, headers: dict[str, str], n: int) -> list[float]:
    """The shipped path: ``_h1post.H1Poster`` (h11 on asyncio streams, with its checks and bounds)."""
    from acp_client.transports.http._h1post import H1Poster

    poster = H1Poster(httpx.URL(url), None, httpx.Timeout(5.0))
    fields = list(headers.items())
    samples = []
    try:
        for i in range(n):
            t0 = time.perf_counter()
            response = await poster.send("POST", fields, _status(i), limit=65536)
            samples.append(time.perf_counter() - t0)
            assert response.status_code == 202
    finally:
        await poster.aclose()
    return samples


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    _common.quiet_logging()
    stacks: dict[str, Callable[[str, dict[str, str], int], Awaitable[list[float]]]] = {
        "httpx": with_httpx,
        "h11 on asyncio streams": with_h11,
        "by hand on asyncio streams": with_asyncio,
        "acp_client's H1Poster": with_poster,
    }
    try:
        import aiohttp  # noqa: F401

        stacks["aiohttp"] = with_aiohttp
    except ImportError:
        print("aiohttp is not installed: skipped")
    async with StreamAgentProcess(10) as agent:
        url = "http" + agent.url[2:]
        headers = {"Content-Type": "application/json", "Acp-Connection-Id": await _connection_id(url)}
        samples: dict[str, list[float]] = {name: [] for name in stacks}
        for run in stacks.values():
            await run(url, headers, args.n // 10)  # warm-up
        for _ in range(args.rounds):
            for name, run in stacks.items():
                samples[name] += await run(url, headers, args.n)
    base = _common.percentile(samples["httpx"], 0.5)
    rows: list[list[Any]] = []
    for name, values in samples.items():
        p50, p99 = _common.percentile(values, 0.5), _common.percentile(values, 0.99)
        rows.append([name, _common.us(p50), _common.us(p99), f"{p50 / base:.2f}x"])
    print(_common.table(["POST client (HTTP/1.1, keep-alive)", "p50", "p99", "p50 vs httpx"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""P10: update throughput and ``session/status`` latency over Streamable HTTP next to WebSocket and raw floors.

One agent process, ``_stream_agent.py``, serves WebSocket, HTTP/1.1 and h2c on one port and path. It writes
pre-encoded updates (``BATCH`` per socket write) and prints the CPU it spent per stream: its send rate is
printed here, to show it is not the bottleneck. Six clients, each with its own connection and session:

- **acp_client** over WebSocket (permessage-deflate off), Streamable HTTP over HTTP/1.1, and over h2c (HTTP/2
  with prior knowledge); keepalives off;
- **raw floors**, written here: for each HTTP link the same client library (``httpx``, one client) with a
  minimal SSE parser (split on blank lines, take the ``data:`` lines) and ``json.loads``; for WebSocket
  ``websockets`` and ``json.loads``.

Two measures, rounds alternating between the clients so drift on a noisy machine hits all alike:

- **updates/s**: a prompt ``stream N`` (N ``agent_message_chunk`` updates), timed from before the prompt until
  every update was consumed (acp_client: through ``session.updates()``) and the turn ended;
- **status p50**: ``session/status`` one at a time (over HTTP: a POST answered ``202`` plus the answer on the
  session's event stream).

Targets (issue 19): acp_client's updates/s over HTTP/1.1 and h2c >= 0.8x the floor of the same link, and its
``session/status`` p50 over HTTP/1.1 <= 4x its p50 over WebSocket.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from typing import Any

import _common
import httpx
import websockets
from p2_updates import StreamAgentProcess

from acp_client import TransportOptions, connect
from acp_client.sessions import SessionUpdate

CWD = "/tmp"
LINKS = ("WebSocket", "HTTP/1.1", "h2c")
OPTIONS = {
    "WebSocket": TransportOptions(ping_interval=None, compression=None),
    "HTTP/1.1": TransportOptions(ping_interval=None, http2=False),
    "h2c": TransportOptions(ping_interval=None, http2="prior_knowledge"),
}
STEP_TIMEOUT = 120.0
UPDATES_TARGET = 0.8
STATUS_TARGET = 4.0


def _init(id_: int) -> dict[str, Any]:
    params = {"protocolVersion": 2, "clientCapabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
    return {"jsonrpc": "2.0", "id": id_, "method": "initialize", "params": params}


def _prompt(id_: int, session_id: str, n: int) -> dict[str, Any]:
    params = {"sessionId": session_id, "prompt": [{"type": "text", "text": f"stream {n}"}]}
    return {"jsonrpc": "2.0", "id": id_, "method": "session/prompt", "params": params}


def _is_turn_end(message: dict[str, Any]) -> bool:
    update = message.get("params", {}).get("update", {})
    return bool(update.get("sessionUpdate") == "state_update" and update.get("state") == "idle")


# ---------------------------------------------------------------------------------------------- the floors


class RawWebSocket:
    """``websockets`` + ``json.loads``: one request at a time, updates counted in the receiving loop."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ids = itertools.count(1)
        self.ws: Any = None
        self.session_id = ""

    async def open(self) -> None:
        self.ws = await websockets.connect(self.url, compression=None, ping_interval=None, max_size=None)
        await self.call(_init(next(self.ids)))
        new = {"jsonrpc": "2.0", "id": next(self.ids), "method": "session/new", "params": {"cwd": CWD}}
        self.session_id = (await self.call(new))["result"]["sessionId"]

    async def call(self, request: dict[str, Any]) -> dict[str, Any]:
        await self.ws.send(json.dumps(request))
        while True:
            message: dict[str, Any] = json.loads(await self.ws.recv())
            if message.get("id") == request["id"] and "method" not in message:
                return message

    async def status(self) -> None:
        params = {"sessionId": self.session_id}
        await self.call({"jsonrpc": "2.0", "id": next(self.ids), "method": "session/status", "params": params})

    async def stream(self, n: int) -> int:
        await self.ws.send(json.dumps(_prompt(next(self.ids), self.session_id, n)))
        seen = 0
        while True:
            message = json.loads(await self.ws.recv())
            if message.get("method") == "session/update":
                if _is_turn_end(message):
                    return seen
                seen += 1

    async def aclose(self) -> None:
        await self.ws.close()


class RawHTTP:
    """``httpx`` (one client) + a minimal SSE parser + ``json.loads``. A reader task per event stream hands
    responses to their waiting future and counts updates; the turn's end wakes the prompt."""

    def __init__(self, url: str, http2: bool) -> None:
        self.url = url
        self.client = httpx.AsyncClient(http1=not http2, http2=http2, timeout=None)
        self.ids = itertools.count(1)
        self.headers: dict[str, str] = {}
        self.session_id = ""
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.readers: list[asyncio.Task[None]] = []
        self.seen = 0
        self.turn_end: asyncio.Future[None] | None = None

    async def open(self) -> None:
        response = await self.client.post(self.url, json=_init(next(self.ids)))
        json.loads(response.content)
        self.headers = {"Acp-Connection-Id": response.headers["acp-connection-id"], "Acp-Protocol-Version": "2"}
        await self._read(self.headers)
        new = {"jsonrpc": "2.0", "id": next(self.ids), "method": "session/new", "params": {"cwd": CWD}}
        self.session_id = (await self.call(new))["result"]["sessionId"]
        await self._read({**self.headers, "Acp-Session-Id": self.session_id})

    async def _read(self, headers: dict[str, str]) -> None:
        opened = asyncio.get_running_loop().create_future()
        self.readers.append(asyncio.create_task(self._reader(headers, opened)))
        await opened

    async def _reader(self, headers: dict[str, str], opened: asyncio.Future[None]) -> None:
        async with self.client.stream("GET", self.url, headers={**headers, "Accept": "text/event-stream"}) as r:
            opened.set_result(None)
            buffer = b""
            async for chunk in r.aiter_raw():
                *events, buffer = (buffer + chunk).split(b"\n\n")
                for event in events:
                    for line in event.split(b"\n"):
                        if line.startswith(b"data:"):
                            self._message(json.loads(line[5:]))

    def _message(self, message: dict[str, Any]) -> None:
        if message.get("method") == "session/update":
            if _is_turn_end(message):
                if self.turn_end is not None:
                    self.turn_end.set_result(None)
            else:
                self.seen += 1
        elif "method" not in message:
            future = self.waiting.pop(message["id"], None)
            if future is not None:
                future.set_result(message)

    async def _post(self, request: dict[str, Any], session: bool) -> None:
        headers = {**self.headers, "Acp-Session-Id": self.session_id} if session else self.headers
        response = await self.client.post(self.url, content=json.dumps(request), headers=headers)
        if response.status_code != 202:
            raise RuntimeError(f"raw POST answered {response.status_code}")

    async def call(self, request: dict[str, Any], session: bool = False) -> dict[str, Any]:
        future = self.waiting[request["id"]] = asyncio.get_running_loop().create_future()
        await self._post(request, session)
        return await future

    async def status(self) -> None:
        params = {"sessionId": self.session_id}
        await self.call({"jsonrpc": "2.0", "id": next(self.ids), "method": "session/status", "params": params}, True)

    async def stream(self, n: int) -> int:
        self.seen = 0
        self.turn_end = asyncio.get_running_loop().create_future()
        await self._post(_prompt(next(self.ids), self.session_id, n), True)
        await self.turn_end
        return self.seen

    async def aclose(self) -> None:
        await self.client.request("DELETE", self.url, headers=self.headers)
        for task in self.readers:
            task.cancel()
        await asyncio.gather(*self.readers, return_exceptions=True)
        await self.client.aclose()


# ---------------------------------------------------------------------------------------------- acp_client


class Ours:
    def __init__(self, url: str, options: TransportOptions) -> None:
        self.url = url
        self.options = options
        self.client: Any = None
        self.session: Any = None

    async def open(self) -> None:
        self.client = await connect(self.url, protocol_version=2, transport_options=self.options)
        self.session = await self.client.new_session(CWD)

    async def status(self) -> None:
        await self.client.session_status(self.session.id)

    async def stream(self, n: int) -> int:
        updates = self.session.updates(maxsize=n + 100)
        seen = 0

        async def consume() -> None:
            nonlocal seen
            async for item in updates:
                if isinstance(item, SessionUpdate) and item.kind == "agent_message_chunk":
                    seen += 1
                    if seen == n:
                        return

        consumer = asyncio.create_task(consume())
        await self.session.prompt(f"stream {n}")
        await asyncio.wait_for(consumer, STEP_TIMEOUT)
        return seen

    async def aclose(self) -> None:
        await self.client.aclose()


# ---------------------------------------------------------------------------------------------- the run


async def status_round(client: Any, n: int) -> list[float]:
    samples = []
    perf = time.perf_counter
    for _ in range(n):
        t0 = perf()
        await client.status()
        samples.append(perf() - t0)
    return samples


async def stream_round(client: Any, n: int, agent: StreamAgentProcess) -> tuple[float, float]:
    """(updates/s of the client, the agent's send rate: updates per second of its CPU)."""
    t0 = time.perf_counter()
    async with asyncio.timeout(STEP_TIMEOUT):
        seen = await client.stream(n)
    elapsed = time.perf_counter() - t0
    if seen != n:
        raise RuntimeError(f"{type(client).__name__}: {seen}/{n} updates")
    sent, _wall, cpu = await agent.sent()
    return n / elapsed, sent / max(cpu, 1e-9)


async def main() -> int:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    _common.quiet_logging()
    status_n, stream_n, rounds = (200, 2000, 1) if args.quick else (1000, 20_000, 5)
    async with StreamAgentProcess(stream_n) as agent:
        http_url = "http" + agent.url[2:]
        clients: dict[tuple[str, str], Any] = {}
        for link in LINKS:
            url = agent.url if link == "WebSocket" else http_url
            clients["raw", link] = RawWebSocket(url) if link == "WebSocket" else RawHTTP(url, link == "h2c")
            clients["acp_client", link] = Ours(url, OPTIONS[link])
        for client in clients.values():
            await client.open()
        latency: dict[tuple[str, str], list[float]] = {key: [] for key in clients}
        rate: dict[tuple[str, str], list[float]] = {key: [] for key in clients}
        agent_rate: list[float] = []
        try:
            for client in clients.values():  # warm-up
                await status_round(client, status_n // 10)
                await stream_round(client, stream_n // 10, agent)
            for _ in range(rounds):
                for key, client in clients.items():
                    latency[key] += await status_round(client, status_n)
                for key, client in clients.items():
                    updates, sent = await stream_round(client, stream_n, agent)
                    rate[key].append(updates)
                    agent_rate.append(sent)
        finally:
            for client in clients.values():
                await client.aclose()

    p50 = {key: _common.percentile(v, 0.5) for key, v in latency.items()}
    p99 = {key: _common.percentile(v, 0.99) for key, v in latency.items()}
    med = {key: _common.median(v) for key, v in rate.items()}
    ws = ("acp_client", "WebSocket")
    rows = []
    for link in LINKS:
        for who in ("raw", "acp_client"):
            key = (who, link)
            rows.append(
                [
                    f"{'raw floor' if who == 'raw' else who} {link}",
                    f"{med[key]:,.0f}/s",
                    f"{med[key] / med['raw', link]:.2f}x",
                    _common.us(p50[key]),
                    _common.us(p99[key]),
                    f"{p50[key] / p50[ws]:.2f}x",
                ]
            )
    header = ["client", "updates/s (median)", "vs its floor", "status p50", "status p99", "p50 vs acp_client WS"]
    table = _common.table(header, rows)
    sending = _common.median(agent_rate)
    lines = [f"the agent's send rate (updates per CPU second, median of {len(agent_rate)} streams): {sending:,.0f}/s"]
    for link in ("HTTP/1.1", "h2c"):
        value = med["acp_client", link] / med["raw", link]
        lines.append(_common.ratio_line(f"p10 updates/s {link} vs its raw floor", value, ">= 0.8", value >= 0.8))
    value = med[ws] / med["raw", "WebSocket"]
    lines.append(f"RATIO p10 updates/s WebSocket vs its raw floor: {value:.2f}x (no target)")
    value = p50["acp_client", "HTTP/1.1"] / p50[ws]
    lines.append(_common.ratio_line("p10 status p50 HTTP/1.1 vs WebSocket", value, "<= 4", value <= STATUS_TARGET))
    value = p50["acp_client", "h2c"] / p50[ws]
    lines.append(f"RATIO p10 status p50 h2c vs WebSocket: {value:.2f}x (no target)")
    value = p50["raw", "HTTP/1.1"] / p50["raw", "WebSocket"]
    lines.append(f"RATIO p10 status p50 raw httpx HTTP/1.1 vs raw WebSocket: {value:.2f}x (no target)")
    print(table)
    for line in lines:
        print(line)
    body = "\n\n".join(
        [
            "`_stream_agent.py` (pre-encoded updates, its own process) serves WebSocket, HTTP/1.1 and h2c on one "
            f"port. Six clients, each with its own connection and session; {rounds} alternating rounds of "
            f"{status_n} `session/status` round trips and one `stream {stream_n}` turn per client, after a "
            "warm-up. Raw floors: httpx (one client) + a minimal SSE parser + `json.loads`; websockets + "
            "`json.loads`. WebSocket without permessage-deflate; keepalives off.",
            table,
            "\n".join(f"- {line}" for line in lines),
        ]
    )
    _common.write_section(_common.docs_target(args), "p10", "P10 — Streamable HTTP against raw floors", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

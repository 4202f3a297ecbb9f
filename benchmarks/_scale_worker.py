"""One worker process of ``p14_scale_out.py``: a ``ReconnectingClient`` per agent, each on a shared
``RedisSessionStore`` (one namespace per agent, so a session lives with the agent that holds it).

``python benchmarks/_scale_worker.py --agents URL,URL --redis URL --owner ID --sessions N --lease-ttl S``
creates N sessions spread over the agents, then writes JSON lines on stdout:

- ``{"ready": true, "created": {agent_index: [ids]}, "rss_idle": KiB}`` once its sessions exist (``rss_idle``:
  the peak RSS once connected, before the first session);
- ``{"e": "r"|"a"|"t"|"f", "s": id, "t": CLOCK_MONOTONIC}`` per ``SessionRecovered`` (``r``), adopted
  session (``a``), ``SessionTakenOver`` (``t``) and ``SessionForgotten`` (``f``); one clock for every process
  of the machine, so the benchmark compares it with its own;
- answers to stdin commands: ``stats`` → ``{"stats": {...}}`` (CPU seconds, peak RSS, store round trips,
  leases held, attached sessions per agent), ``quit`` → closes the clients and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import resource
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import structlog

from acp_client import Backoff, Limits, ReconnectingClient, RecoveryPolicy, SessionLink
from acp_client.reconnect import SessionForgotten, SessionRecovered, SessionsAdopted, SessionTakenOver
from acp_client.sessions import RedisSessionStore


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def rss_peak_kib() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


async def pump(events: AsyncIterator[object]) -> None:
    async for event in events:
        now = time.monotonic()
        if isinstance(event, SessionRecovered):
            emit({"e": "r", "s": event.session_id, "t": now})
        elif isinstance(event, SessionsAdopted):
            for sid in event.session_ids:
                emit({"e": "a", "s": sid, "t": now})
        elif isinstance(event, SessionTakenOver):
            emit({"e": "t", "s": event.session_id, "t": now, "why": event.reason})
        elif isinstance(event, SessionForgotten):
            emit({"e": "f", "s": event.session_id, "t": now, "why": event.reason})


def stats(clients: list[ReconnectingClient], stores: list[RedisSessionStore]) -> dict[str, Any]:
    return {
        "cpu": time.process_time(),
        "rss_peak": rss_peak_kib(),
        "round_trips": sum(s.round_trips for s in stores),
        "leases": sum(len(s.leases()) for s in stores),
        "attached": {
            str(i): sorted(sid for sid, s in c.sessions.items() if s.link is SessionLink.ATTACHED)
            for i, c in enumerate(clients)
        },
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", required=True)
    parser.add_argument("--redis", required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--sessions", type=int, default=250)
    parser.add_argument("--lease-ttl", type=float, default=5.0)
    args = parser.parse_args()
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    agents = args.agents.split(",")
    stores = [
        RedisSessionStore(
            args.redis, namespace=f"p14a{i}", owner_id=f"{args.owner}-a{i}", lease_ttl=args.lease_ttl, retry_for=30.0
        )
        for i in range(len(agents))
    ]
    clients = [
        ReconnectingClient(
            url,
            store=store,
            policy=RecoveryPolicy(start_jitter=0.0),
            limits=Limits(event_buffer=1_000_000),
            backoff=Backoff(base=0.05, cap=0.5),
        )
        for url, store in zip(agents, stores, strict=True)
    ]
    # subscribed here, before any start: no event is emitted before its pump listens
    pumps = [asyncio.create_task(pump(c.events())) for c in clients]
    for client in clients:
        await client.start()
        await client.wait_ready(timeout=60)
    rss_idle = rss_peak_kib()  # connected to the agents and the store, no session yet
    created: dict[str, list[str]] = {str(i): [] for i in range(len(clients))}
    # set-up, not what is measured: session/new requests go out 500 at a time (their claims and saves share
    # the store's batches)
    for n in range(0, args.sessions, 500):
        batch = range(n, min(n + 500, args.sessions))
        made = await asyncio.gather(*(clients[k % len(clients)].new_session(f"/w/{args.owner}") for k in batch))
        for k, session in zip(batch, made, strict=True):
            created[str(k % len(clients))].append(session.id)
    emit({"ready": True, "created": created, "rss_idle": rss_idle})

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while True:
            line = (await reader.readline()).decode().strip()
            if not line or line == "quit":
                return
            if line == "stats":
                emit({"stats": stats(clients, stores)})
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
        for task in pumps:
            task.cancel()
        await asyncio.wait(pumps)


if __name__ == "__main__":
    asyncio.run(main())

"""One worker process of the several-workers tests: a ReconnectingClient on a shared RedisSessionStore.

Run as ``python -m tests.reconnect._worker_proc --agent URL --redis URL --namespace NS --owner ID --sessions N``. It
creates N sessions, then reports on stdout, one JSON object per line:

- ``{"ready": true, "created": [...]}`` once its own sessions exist;
- ``{"event": "SessionRecovered", "session_id": ..., "t": <time.monotonic()>}`` for every recovery
  (``CLOCK_MONOTONIC`` is one clock for every process of the machine, so the test compares it with its own),
  and likewise ``SessionTakenOver`` and ``SessionStoreReset``;
- answers to stdin commands: ``owned`` → ``{"owned": [...]}`` (attached sessions), ``prompt <id> <text>`` →
  ``{"prompted": id, "reply": ...}``, ``quit`` → closes the client and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from typing import Any

import structlog

from acp_client import Backoff, Limits, ReconnectingClient, RecoveryPolicy, SessionLink
from acp_client.reconnect import SessionRecovered, SessionStoreReset, SessionTakenOver
from acp_client.sessions import RedisSessionStore


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent", required=True)
    parser.add_argument("--redis", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--lease-ttl", type=float, default=2.0)
    args = parser.parse_args()
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )

    store = RedisSessionStore(args.redis, namespace=args.namespace, owner_id=args.owner, lease_ttl=args.lease_ttl)
    client = ReconnectingClient(
        args.agent,
        store=store,
        policy=RecoveryPolicy(start_jitter=0.0),
        limits=Limits(event_buffer=100_000),
        backoff=Backoff(base=0.05, cap=0.5),
    )
    events = client.events()

    async def pump() -> None:
        async for event in events:
            if isinstance(event, SessionRecovered | SessionTakenOver):
                emit({"event": type(event).__name__, "session_id": event.session_id, "t": time.monotonic()})
            elif isinstance(event, SessionStoreReset):
                emit({"event": "SessionStoreReset", "reclaimed": event.reclaimed, "taken": event.taken})

    pumping = asyncio.create_task(pump())
    await client.start()
    await client.wait_ready(timeout=30)
    created: list[str] = []
    for start in range(0, args.sessions, 20):
        batch = await asyncio.gather(
            *(client.new_session(f"/w/{args.owner}") for _ in range(min(20, args.sessions - start)))
        )
        created += [s.id for s in batch]
    emit({"ready": True, "created": created})

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while True:
            line = (await reader.readline()).decode().strip()
            if not line or line == "quit":
                return
            if line == "owned":
                emit({"owned": sorted(sid for sid, s in client.sessions.items() if s.link is SessionLink.ATTACHED)})
            elif line.startswith("prompt "):
                _, sid, text = line.split(" ", 2)
                result = await client.sessions[sid].prompt(f"echo: {text}", timeout=10)
                emit(
                    {
                        "prompted": sid,
                        "stop": result.stop_reason,
                        "reply": client.sessions[sid].transcript.messages[-1].text,
                    }
                )
    finally:
        await client.aclose()
        pumping.cancel()
        await asyncio.wait({pumping})


if __name__ == "__main__":
    asyncio.run(main())

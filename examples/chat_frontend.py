"""A chat frontend: many conversations multiplexed on one reconnecting connection.

Twenty sessions share one :class:`acp_client.ReconnectingClient`. The agent (the embedded reference agent)
drops every connection twice; each time the client reconnects and re-attaches every session, which the
frontend observes as ``SessionRecovered`` events. The frontend keeps its own history, so it asks for no
replay (``DefaultStrategy(replay=False)``). Finally every conversation sends one message, concurrently, on
the same session handles it held all along.

Run: ``python examples/chat_frontend.py``
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable

import structlog

from acp_client import (
    Backoff,
    ClientState,
    DefaultStrategy,
    ReconnectingClient,
    SessionRecovered,
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


async def main() -> int:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    started = time.monotonic()
    async with ReferenceAgent(2, host="127.0.0.1", port=0) as agent:
        client = ReconnectingClient(
            agent.url,
            strategy=DefaultStrategy(replay=False),
            backoff=Backoff(base=0.05, cap=0.5),
            recovery_start_jitter=0.0,
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


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""Watching a :class:`~acp_client.ReconnectingClient` from a test: :class:`EventRecorder`, the
:data:`FAST_RETRY` preset and :func:`start_client`.

::

    client, events = await start_client(agent.url)       # FAST_RETRY settings, recording from the start
    try:
        await agent.drop_all_connections()
        await events.ready_count(2)                      # READY a second time: the recovery is over
        assert events.of(SessionRecovered)
    finally:
        await events.close()
        await client.aclose()
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final, TypedDict, TypeVar

from acp_client.reconnect import Backoff, ClientState, Event, ReconnectingClient, RecoveryPolicy, StateChanged

__all__ = ["FAST_RETRY", "EventRecorder", "FastRetry", "start_client"]

E = TypeVar("E", bound=Event)


class FastRetry(TypedDict, total=False):
    """The keywords of :data:`FAST_RETRY` (a subset of :class:`~acp_client.ReconnectingClient`'s)."""

    policy: RecoveryPolicy
    backoff: Backoff


#: ``ReconnectingClient`` keywords for tests: no spread before a recovery round starts, every connection
#: counts as stable at once, and a short backoff (its delays stay random, just small: 20 ms doubling up to
#: 200 ms). Spread it into the constructor: ``ReconnectingClient(url, **FAST_RETRY)``.
FAST_RETRY: Final[FastRetry] = FastRetry(
    policy=RecoveryPolicy(start_jitter=0.0, stable_after=0.0), backoff=Backoff(base=0.02, cap=0.2)
)


class EventRecorder:
    """Every typed event of one client, kept in order from the moment the recorder is made, with bounded waits.

    Make it before the action whose events you want (the client's event stream starts at subscription), and
    :meth:`close` it when done. Each wait fails with :class:`TimeoutError` after ``timeout`` seconds, scaled
    by ``timeout_scale`` (for slow machines), instead of hanging the test.
    """

    def __init__(self, client: ReconnectingClient, *, timeout_scale: float = 1.0) -> None:
        self.events: list[Event] = []
        """Every event received so far, oldest first."""
        self.timeout_scale = timeout_scale
        self._stream: AsyncIterator[Event] = client.events()
        self._changed = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._pump(), name="acp-test-event-recorder")

    async def _pump(self) -> None:
        async for event in self._stream:
            self.events.append(event)
            self._changed.set()

    async def _until(self, done: Callable[[], bool], timeout: float) -> None:
        async with asyncio.timeout(timeout * self.timeout_scale):
            while not done():
                self._changed.clear()
                await self._changed.wait()

    async def wait(self, predicate: Callable[[Event], bool], timeout: float = 5.0) -> list[Event]:
        """The events recorded so far that match ``predicate``, once there is at least one."""
        await self._until(lambda: any(predicate(e) for e in self.events), timeout)
        return [e for e in self.events if predicate(e)]

    async def ready_count(self, n: int, timeout: float = 5.0) -> None:
        """Return once the client has become READY ``n`` times (the first connection counts)."""
        await self._until(lambda: self.count_ready() >= n, timeout)

    def count_ready(self) -> int:
        """How many times the client has become READY so far."""
        return sum(isinstance(e, StateChanged) and e.new is ClientState.READY for e in self.events)

    def of(self, kind: type[E]) -> list[E]:
        """The events of type ``kind`` recorded so far, oldest first."""
        return [e for e in self.events if isinstance(e, kind)]

    async def close(self) -> None:
        """Stop recording (the events stay readable)."""
        self._task.cancel()
        await asyncio.wait({self._task})


async def start_client(
    target: str | Sequence[str], *, timeout: float = 5.0, timeout_scale: float = 1.0, **options: Any
) -> tuple[ReconnectingClient, EventRecorder]:
    """A started :class:`~acp_client.ReconnectingClient` for ``target`` (a URL, or an argv list to spawn over
    stdio) that is READY, and its recorder.

    ``options`` go to the client's constructor on top of :data:`FAST_RETRY`. Waits ``timeout`` seconds
    (scaled by ``timeout_scale``) for READY. Close both afterwards: ``await recorder.close()`` and
    ``await client.aclose()``.
    """
    settings: dict[str, Any] = {**FAST_RETRY, **options}
    client = ReconnectingClient(target, **settings)
    recorder = EventRecorder(client, timeout_scale=timeout_scale)
    try:
        await client.start()
        await client.wait_ready(timeout=timeout * timeout_scale)
    except BaseException:
        await recorder.close()
        await client.aclose()
        raise
    return client, recorder

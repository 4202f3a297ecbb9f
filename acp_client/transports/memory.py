"""An in-process pair of linked transports, for tests and for running an agent in the same event loop.

::

    client_side, agent_side = memory_pair()
    await client_side.send('{"jsonrpc":"2.0","method":"ping"}')
    assert await agent_side.recv() == '{"jsonrpc":"2.0","method":"ping"}'

Each direction has a bounded queue of ``max_queue`` frames. **Overflow policy: ``send`` waits** until the
peer has received a frame (backpressure, like a socket), so a sender that outpaces its reader slows down
instead of growing memory. ``send`` on a closed link raises :class:`~acp_client.exceptions.ConnectionLost`.

Closing one side (``close(code, reason)``) closes the link: frames already queued *towards* the closing side
are dropped, frames the closing side had sent before it closed are still delivered to the peer, and then
the peer's ``recv`` raises ``ConnectionLost`` carrying that ``code`` and ``reason`` (1000 by default), just
as a WebSocket close frame would. Tests use this to emulate close codes without a network.
"""

from __future__ import annotations

import asyncio
import collections
import itertools

from acp_client._logging import get_logger
from acp_client.exceptions import ConnectionLost, UsageError
from acp_client.transports.base import TransportStats

__all__ = ["DEFAULT_MEMORY_QUEUE", "MemoryTransport", "memory_pair"]

#: Default number of frames each direction of a :func:`memory_pair` buffers before ``send`` waits.
DEFAULT_MEMORY_QUEUE = 64

_log = get_logger(__name__)
_pair_ids = itertools.count(1)


class _Channel:
    """One direction of a pair: a bounded FIFO of frames plus the close information."""

    def __init__(self, maxsize: int) -> None:
        self.frames: collections.deque[str] = collections.deque()
        self.maxsize = maxsize
        self.closed = False
        self.close_code: int | None = None
        self.close_reason: str | None = None
        self.cond = asyncio.Condition()

    def lost(self) -> ConnectionLost:
        reason = self.close_reason or ""
        detail = f" ({reason})" if reason else ""
        return ConnectionLost(
            f"the in-memory link was closed with code {self.close_code}{detail}",
            close_code=self.close_code,
            reason=reason,
        )

    async def put(self, frame: str) -> None:
        async with self.cond:
            await self.cond.wait_for(lambda: self.closed or len(self.frames) < self.maxsize)
            if self.closed:
                raise self.lost()
            self.frames.append(frame)
            self.cond.notify_all()

    async def get(self) -> str:
        async with self.cond:
            await self.cond.wait_for(lambda: bool(self.frames) or self.closed)
            if self.frames:
                frame = self.frames.popleft()
                self.cond.notify_all()
                return frame
            raise self.lost()

    async def shut(self, code: int, reason: str, *, drop_queued: bool) -> None:
        async with self.cond:
            if not self.closed:
                self.closed = True
                self.close_code = code
                self.close_reason = reason
            if drop_queued:
                self.frames.clear()
            self.cond.notify_all()


class MemoryTransport:
    """One end of an in-process link made by :func:`memory_pair`. Implements :class:`Transport`."""

    def __init__(self, inbound: _Channel, outbound: _Channel, *, name: str) -> None:
        """Use :func:`memory_pair` instead; this constructor only wires two channels together."""
        self._inbound = inbound
        self._outbound = outbound
        self._name = name
        self._closed_here = False
        self.stats = TransportStats()
        """Live counters of frames moved (see :class:`TransportStats`)."""

    @property
    def description(self) -> str:
        """``memory:<pair id>/<side>``."""
        return self._name

    @property
    def closed(self) -> bool:
        """``True`` once either side closed the link (queued inbound frames may still be received)."""
        return self._inbound.closed or self._outbound.closed

    @property
    def close_code(self) -> int | None:
        """The code the link was closed with (by either side), or ``None`` while open."""
        return self._inbound.close_code if self._inbound.closed else self._outbound.close_code

    @property
    def close_reason(self) -> str | None:
        """The reason the link was closed with (by either side), or ``None`` while open."""
        return self._inbound.close_reason if self._inbound.closed else self._outbound.close_reason

    async def send(self, frame: str) -> None:
        """Queue ``frame`` for the peer; waits while the peer's queue is full. Raises ``ConnectionLost``."""
        await self._outbound.put(frame)
        self.stats.frames_out += 1
        self.stats.bytes_out += len(frame.encode())

    async def recv(self) -> str:
        """Next frame from the peer; raises ``ConnectionLost`` once the link is closed and drained."""
        if self._closed_here:
            raise self._outbound.lost()
        frame = await self._inbound.get()
        self.stats.frames_in += 1
        self.stats.bytes_in += len(frame.encode())
        return frame

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the link from this side with a WebSocket-like ``code`` and ``reason``. Idempotent."""
        if self._closed_here:
            return
        self._closed_here = True
        # what we already sent stays readable by the peer; what was queued for us is dropped
        await self._outbound.shut(code, reason, drop_queued=False)
        await self._inbound.shut(code, reason, drop_queued=True)
        _log.debug("transport_closed", transport=self._name, close_code=code, reason=reason)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<MemoryTransport {self._name} {state}>"


def memory_pair(max_queue: int = DEFAULT_MEMORY_QUEUE) -> tuple[MemoryTransport, MemoryTransport]:
    """Two linked transports: what one sends, the other receives. ``max_queue`` bounds each direction.

    Returns ``(a, b)``; conventionally ``a`` is the client side and ``b`` the agent side.
    """
    if max_queue < 1:
        raise UsageError(f"max_queue must be at least 1, not {max_queue}")
    pair = next(_pair_ids)
    a_to_b = _Channel(max_queue)
    b_to_a = _Channel(max_queue)
    a = MemoryTransport(inbound=b_to_a, outbound=a_to_b, name=f"memory:{pair}/a")
    b = MemoryTransport(inbound=a_to_b, outbound=b_to_a, name=f"memory:{pair}/b")
    return a, b

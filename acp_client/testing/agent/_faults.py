"""The reference agent's fault controls: ``agent.faults`` of a :class:`~acp_client.testing.ReferenceAgent`.

Each control is a switch a test flips to make the agent misbehave on purpose: ``stall`` (sockets stay open,
nothing is answered), ``reject_handshake`` (new connections get an HTTP error, over WebSocket and
Streamable HTTP alike), ``close_after_initialize`` (flapping links), ``set_capacity`` (a slow, bounded
storage behind the recovery methods) and the connection drops (``close_connection``,
``drop_all_connections``; ``ReferenceAgent.restart`` builds on them).

:class:`FaultControls` owns the state of these switches and nothing else. What it needs from the agent is
given to it when it is made: the live connections (a callable), a way to start a task the agent owns, and
the agent's :class:`~acp_client.testing.agent._records.AgentRecords` (to wait, and to log a refused
handshake). The agent, its connections and its listeners consult the switches through
:meth:`~FaultControls.wait_flowing`, :meth:`~FaultControls.refuse_handshake`,
:meth:`~FaultControls.after_initialize` and :meth:`~FaultControls.metered`; the agent offers the switches
tests flip (``stall()``, ``drop_all_connections()`` ...) as thin delegates to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from acp_client.testing.agent._connection import AgentConnection
    from acp_client.testing.agent._records import AgentRecords

__all__ = ["FaultControls", "HandshakeRefusal", "Spawn"]

#: the methods :meth:`FaultControls.set_capacity` limits (what a recovery sends)
_CAPACITY_METHODS = frozenset({"session/status", "session/resume", "session/load"})


class Spawn(Protocol):
    """Starts a task the agent owns (:meth:`~acp_client.testing.ReferenceAgent.spawn`)."""

    def __call__(self, coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> object: ...


@dataclass(frozen=True, slots=True)
class HandshakeRefusal:
    """How to answer a handshake that :meth:`FaultControls.reject_handshake` turns away."""

    status: int
    #: the ``Retry-After`` header value, or ``None`` for no such header
    retry_after: str | None


@dataclass(slots=True)
class _Rejection:
    status: int
    retry_after: float | None
    remaining: int | None


class FaultControls:
    """Fault controls of the reference agent (``agent.faults``)."""

    def __init__(
        self,
        *,
        connections: Callable[[], list[AgentConnection]],
        spawn: Spawn,
        records: AgentRecords,
    ) -> None:
        """No fault in effect. ``connections()`` lists the agent's live connections, ``spawn(coro, name=)``
        starts a task the agent owns, ``records`` are the agent's logs and waits."""
        self._connections = connections
        self._spawn = spawn
        self._records = records
        self._unstall: asyncio.Future[None] | None = None
        self._rejection: _Rejection | None = None
        self._close_after_initialize: tuple[float, int] | None = None
        self._capacity: tuple[asyncio.Semaphore, float] | None = None
        #: handshakes answered with an error status (see :meth:`reject_handshake`)
        self.rejected_handshakes = 0
        #: recovery requests held at once (see :meth:`set_capacity`)
        self.outstanding = 0
        self.max_outstanding = 0

    # ------------------------------------------------------------------ dropping connections

    async def close_connection(
        self, connection: AgentConnection, *, code: int = 1011, reason: str = "", abort: bool = False
    ) -> None:
        """Close one connection: WebSocket close ``code`` (bounded by ``close_timeout``) or a TCP reset."""
        connection.mark_closing()
        if abort:
            connection.channel.abort()
        else:
            await connection.channel.close(code, reason)

    async def drop_all_connections(
        self, code: int = 1011, reason: str = "", *, abort: bool = False, timeout: float = 5.0
    ) -> int:
        """Close every live connection (``abort=True``: TCP reset, no closing handshake) and wait until their
        handlers finished. Sessions stay active. Returns how many connections were dropped."""
        connections = self._connections()
        await asyncio.gather(*(self.close_connection(c, code=code, reason=reason, abort=abort) for c in connections))
        if connections:
            await self._records.wait_for(lambda: all(c.finished.is_set() for c in connections), timeout)
        return len(connections)

    # ------------------------------------------------------------------ stalling

    def stall(self) -> None:
        """Keep sockets open but answer nothing: no frame is processed or sent, and the transports stop
        reading, so WebSocket pings get no pong (a client's keepalive sees a half-open link)."""
        if self._unstall is None:
            self._unstall = asyncio.get_running_loop().create_future()
        for connection in self._connections():
            connection.channel.pause_reading()

    def unstall(self) -> None:
        """Undo :meth:`stall`: buffered input is processed and held output is sent."""
        if self._unstall is None:
            return
        self._unstall.set_result(None)
        self._unstall = None
        for connection in self._connections():
            connection.channel.resume_reading()

    @property
    def stalled(self) -> bool:
        """Whether :meth:`stall` is in effect."""
        return self._unstall is not None

    async def wait_flowing(self, connection: AgentConnection) -> bool:
        """Block while the agent is stalled; ``False`` once ``connection`` is being closed."""
        while self._unstall is not None and not connection.closing:
            await asyncio.wait([self._unstall, connection.closing_future], return_when=asyncio.FIRST_COMPLETED)
        return not connection.closing

    # ------------------------------------------------------------------ refusing and flapping connections

    def reject_handshake(
        self, status: int = 503, *, retry_after: float | None = None, times: int | None = None
    ) -> None:
        """Answer opening handshakes (WebSocket upgrades, Streamable HTTP ``initialize``) with HTTP ``status``
        (e.g. 401, 503), optionally with ``Retry-After``; for the next ``times`` handshakes, or until
        :meth:`accept_handshakes` when ``None``."""
        if not 400 <= status <= 599:
            raise ValueError("status must be an HTTP error status (4xx/5xx)")
        self._rejection = _Rejection(status, retry_after, times)

    def accept_handshakes(self) -> None:
        """Stop rejecting handshakes."""
        self._rejection = None

    def refuse_handshake(self, path: str, headers: dict[str, str]) -> HandshakeRefusal | None:
        """Apply :meth:`reject_handshake` to one opening handshake (a WebSocket upgrade or a Streamable HTTP
        ``initialize``): ``None`` lets it through; a refusal is counted in :attr:`rejected_handshakes` and
        recorded in the handshake log before it is returned for the listener to answer."""
        rejection = self._rejection
        if rejection is None:
            return None
        if rejection.remaining is not None:
            rejection.remaining -= 1
            if rejection.remaining <= 0:
                self._rejection = None
        self.rejected_handshakes += 1
        self._records.record_handshake(path, headers, rejection.status)
        retry_after = None if rejection.retry_after is None else _retry_after(rejection.retry_after)
        return HandshakeRefusal(rejection.status, retry_after)

    def close_after_initialize(self, delay: float | None, code: int = 1011) -> None:
        """Close each connection ``delay`` seconds after answering its ``initialize`` (flapping); ``None``
        turns it off."""
        self._close_after_initialize = None if delay is None else (delay, code)

    def after_initialize(self, connection: AgentConnection) -> None:
        """Arm the ``close_after_initialize`` fault for a connection that just got its initialize answer."""
        if self._close_after_initialize is not None:
            delay, code = self._close_after_initialize
            self._spawn(self._close_later(connection, delay, code), name=f"acp-ref-close-after-init-{connection.id}")

    async def _close_later(self, connection: AgentConnection, delay: float, code: int) -> None:
        await asyncio.sleep(delay)
        await self.close_connection(connection, code=code, reason="close after initialize")

    # ------------------------------------------------------------------ limited capacity

    def set_capacity(self, workers: int | None, service_time: float = 0.0) -> None:
        """Serve ``session/status``, ``session/resume`` and ``session/load`` with a pool of ``workers``, each
        taking ``service_time`` seconds per request (``None``: unlimited). :attr:`max_outstanding` records
        the most such requests the agent held at once (queued or in service)."""
        self._capacity = (asyncio.Semaphore(workers), service_time) if workers is not None else None
        self.outstanding = 0
        self.max_outstanding = 0

    async def metered(self, method: str, handle: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``handle()`` for a request of ``method``; under :meth:`set_capacity`, a recovery method first
        waits for a free worker, which then spends ``service_time`` on it."""
        if self._capacity is None or method not in _CAPACITY_METHODS:
            return await handle()
        workers, service_time = self._capacity
        self.outstanding += 1
        self.max_outstanding = max(self.max_outstanding, self.outstanding)
        try:
            async with workers:
                await asyncio.sleep(service_time)  # a storage lookup: each worker serves one at a time
                return await handle()
        finally:
            self.outstanding -= 1


def _retry_after(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)

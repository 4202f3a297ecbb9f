"""The forwarding machinery of :class:`~acp_client.testing.FaultProxy`: one proxied connection and its pipes.

A :class:`ProxyLink` joins two :class:`Side` protocols (the accepted client socket and the upstream
socket) with two :class:`Pipe` objects, one per direction. A pipe queues what its source side read (bounded
by the proxy's ``max_buffer``: past it, or in ``blackhole``, the source stops being read), and one task per
pipe writes the queue into the sink side as the direction's :class:`~acp_client.testing.ProxyMode`
allows: at once, late, in slices, not at all, or up to a byte limit. Ends of the link (FIN, reset, a lost
socket, a limit reached, a cut) are handled here too.

The link owns its byte counters, pipes and tasks. Everything proxy-wide (the event loop, the task set, the
live-link table, the proxy's counters, the random draws for jitter) stays with the :class:`FaultProxy`; a
link reaches it only through the proxy's methods, never by writing its attributes.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from acp_client._logging import get_logger
from acp_client.testing.fault_proxy._modes import MAX_DELAY, Direction, LinkMode, ProxyMode, directions

if TYPE_CHECKING:
    from acp_client.testing.fault_proxy import FaultProxy

__all__ = ["Pipe", "ProxyLink", "Side", "arm_reset"]

_log = get_logger("acp_client.testing.fault_proxy")  # one logger name for the whole proxy

_LINGER_RESET = struct.pack("ii", 1, 0)


def arm_reset(sock: socket.socket) -> None:
    """Set ``SO_LINGER(1, 0)`` so that closing ``sock`` sends an RST instead of a FIN."""
    with contextlib.suppress(OSError):  # already gone: there is nothing left to reset
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)


@dataclass(slots=True)
class _Chunk:
    data: bytes
    arrival: float
    jitter: float  # a U(0, 1) draw, scaled by the mode's jitter
    not_before: float = 0.0
    eof: bool = False
    reset: bool = False


def _set_nodelay(transport: asyncio.BaseTransport) -> None:
    """Turn Nagle's algorithm off on a link's socket.

    asyncio sets ``TCP_NODELAY`` only on sockets whose ``proto`` is ``IPPROTO_TCP``; a socket returned by
    ``accept()`` on a listener made with ``socket.socket(AF_INET, SOCK_STREAM)`` reports ``proto`` 0, so the
    client-facing side kept Nagle on. With a delay mode that made a small answer written right after another
    small frame wait for the peer's delayed ACK (about 40 ms on Linux): delay experiments then measured the
    proxy, not the client. Both sides are set explicitly.
    """
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):  # a socket that is already gone: the link ends anyway
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Side(asyncio.Protocol):
    """One socket of a link (the accepted client socket or the upstream socket)."""

    def __init__(self, proxy: FaultProxy, role: Literal["client", "server"], link: ProxyLink | None = None) -> None:
        self.proxy = proxy
        self.role = role
        self.link = link
        self.transport: asyncio.Transport | None = None
        self.lost = asyncio.Event()
        self.write_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        _set_nodelay(transport)
        self._guard(lambda: self.proxy._side_made(self))

    def data_received(self, data: bytes) -> None:
        link = self.link
        if link is not None:
            self._guard(lambda: link._on_data(self, data))

    def eof_received(self) -> bool:
        link = self.link
        if link is not None:
            self._guard(lambda: link._on_eof(self, reset=False))
        return True  # keep the socket open for writing: the half-close is forwarded by the pipe

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()
        self.proxy._side_lost(self)
        link = self.link
        if link is not None:
            self._guard(lambda: link._on_lost(self, exc))

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        link = self.link
        if link is not None:
            link._wake_pipe_into(self)

    def alive(self) -> bool:
        return self.transport is not None and not self.lost.is_set() and not self.transport.is_closing()

    def _guard(self, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception:
            _log.warning("fault_proxy_callback_error", role=self.role, exc_info=True)
            link = self.link
            if link is not None:
                link._close("abort")
            elif self.transport is not None:
                self.transport.abort()


class Pipe:
    """One direction of a link: a bounded queue of chunks and the task pumping it into the sink."""

    def __init__(self, link: ProxyLink, direction: Literal["c2s", "s2c"], mode: ProxyMode) -> None:
        self.link = link
        self.direction = direction
        self.mode = mode
        self.remaining: int | None = mode.size if mode.kind == "limit_bytes" else None
        self.queue: deque[_Chunk] = deque()
        self.queued_bytes = 0
        self.source: Side | None = None
        self.sink: Side | None = None
        self.wake = asyncio.Event()
        self.eof_seen = False
        self.done = False
        self.reading = True

    def set_mode(self, mode: ProxyMode) -> None:
        self.mode = mode
        self.remaining = mode.size if mode.kind == "limit_bytes" else None
        for chunk in self.queue:
            chunk.not_before = 0.0
        self.update_reading()
        self.wake.set()

    def feed(self, data: bytes) -> None:
        if self.done or self.eof_seen:
            return
        proxy = self.link.proxy
        self.queue.append(_Chunk(data, proxy._loop().time(), proxy._random()))
        self.queued_bytes += len(data)
        self.update_reading()
        self.wake.set()

    def feed_eof(self, *, reset: bool) -> None:
        if self.done or self.eof_seen:
            return
        self.eof_seen = True
        proxy = self.link.proxy
        self.queue.append(_Chunk(b"", proxy._loop().time(), proxy._random(), eof=True, reset=reset))
        self.wake.set()

    def sink_gone(self) -> None:
        self.done = True
        self.queue.clear()
        self.queued_bytes = 0
        self.wake.set()

    def update_reading(self) -> None:
        source = self.source
        if source is None or source.transport is None or self.eof_seen or not source.alive():
            return
        want = self.mode.kind != "blackhole" and self.queued_bytes < self.link.proxy.max_buffer
        if want and not self.reading:
            source.transport.resume_reading()
            self.reading = True
        elif not want and self.reading:
            source.transport.pause_reading()
            self.reading = False

    def _extra_delay(self, chunk: _Chunk) -> float:
        mode = self.mode
        if mode.kind == "delay":
            return mode.seconds + chunk.jitter * mode.jitter
        if mode.kind == "slow_close" and chunk.eof:
            return mode.seconds
        return 0.0

    async def _wait(self, seconds: float | None) -> None:
        """Sleep until woken (new data, mode change, writable sink) or for ``seconds``."""
        self.wake.clear()
        if seconds is None:
            await self.wake.wait()
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.wake.wait()

    async def run(self) -> None:
        """Pump chunks into the sink according to the current mode until the direction is finished."""
        loop = self.link.proxy._loop()
        while not self.done and not self.link.closed:
            mode = self.mode
            if self.remaining == 0:
                _log.debug("fault_proxy_limit_reached", link=self.link.id, direction=self.direction)
                self.link._close("fin")
                return
            sink = self.sink
            if (
                not self.queue
                or mode.kind in ("blackhole", "hold")
                or sink is None
                or sink.transport is None
                or sink.write_paused
            ):
                await self._wait(None)
                continue
            chunk = self.queue[0]
            wait = max(chunk.not_before, chunk.arrival + self._extra_delay(chunk)) - loop.time()
            if wait > 0:
                await self._wait(min(wait, MAX_DELAY * 2))
                continue
            if chunk.eof:
                self.queue.popleft()
                self.done = True
                self.link._deliver_eof(self, reset=chunk.reset)
                return
            n = len(chunk.data)
            if mode.kind == "slice":
                n = min(n, mode.size)
            if self.remaining is not None:
                n = min(n, self.remaining)
                self.remaining -= n
            piece = chunk.data[:n]
            chunk.data = chunk.data[n:]
            if not chunk.data:
                self.queue.popleft()
            elif mode.kind == "slice":
                chunk.not_before = loop.time() + mode.seconds
            self.queued_bytes -= n
            self.update_reading()
            if sink.alive():
                sink.transport.write(piece)
                self.link._count(self.direction, n)
            if mode.kind == "slice" and self.queue and mode.seconds > 0:
                self.queue[0].not_before = max(self.queue[0].not_before, loop.time() + mode.seconds)


class ProxyLink:
    """One proxied connection: the accepted client socket, the upstream socket and two directed pipes.

    ``id`` numbers links from 1 in accept order; ``bytes_c2s``/``bytes_s2c`` count bytes forwarded;
    ``closed`` turns true once the proxy closed it (cut, reset, limit, or both sides finished).
    """

    def __init__(self, proxy: FaultProxy, link_id: int, client: Side, modes: LinkMode) -> None:
        self.proxy = proxy
        self.id = link_id
        self.bytes_c2s = 0
        self.bytes_s2c = 0
        self.closed = False
        self.client_address: tuple[str, int] | None = None
        self._client = client
        self._server: Side | None = None
        self._c2s = Pipe(self, "c2s", modes.c2s)
        self._s2c = Pipe(self, "s2c", modes.s2c)
        self._c2s.source = client
        self._s2c.sink = client
        self._tasks: list[asyncio.Task[None]] = []

    def __repr__(self) -> str:
        state = "closed" if self.closed else "live"
        c2s, s2c = self.mode
        return f"<ProxyLink {self.id} {state} c2s={c2s.kind}:{self.bytes_c2s} s2c={s2c.kind}:{self.bytes_s2c}>"

    @property
    def mode(self) -> LinkMode:
        """The current mode of each direction."""
        return LinkMode(self._c2s.mode, self._s2c.mode)

    @property
    def upstream_connected(self) -> bool:
        """Whether the upstream socket is open."""
        return self._server is not None and self._server.alive()

    def set_mode(self, mode: ProxyMode | str, direction: Direction = "both") -> None:
        """Set this link's mode for ``direction``; ``"cut"``/``"reset"`` close it (see :meth:`cut`)."""
        if mode in ("cut", "reset"):
            self._close("fin" if mode == "cut" else "reset")
            return
        parsed = ProxyMode.parse(mode)
        for d in directions(direction):
            self._pipe(d).set_mode(parsed)

    async def cut(self, timeout: float = 5.0) -> None:
        """Close both sockets with FIN (queued bytes are dropped) and wait until they are closed."""
        self._close("fin")
        await self.wait_closed(timeout)

    async def reset(self, timeout: float = 5.0) -> None:
        """Reset both sockets (``SO_LINGER(1, 0)``, then close: the peers get an RST) and wait for it."""
        self._close("reset")
        await self.wait_closed(timeout)

    async def wait_closed(self, timeout: float = 5.0) -> None:
        """Wait until both sockets of this link are closed; ``TimeoutError`` after ``timeout`` seconds."""
        async with asyncio.timeout(timeout):
            for side in (self._client, self._server):
                if side is not None and side.transport is not None:
                    await side.lost.wait()

    # ------------------------------------------------------------------ internals

    def _pipe(self, direction: Literal["c2s", "s2c"]) -> Pipe:
        return self._c2s if direction == "c2s" else self._s2c

    def _start(self) -> None:
        self._tasks.append(self.proxy._spawn(self._connect_upstream(), f"fault-proxy-link-{self.id}-connect"))
        self._c2s.update_reading()

    async def _connect_upstream(self) -> None:
        proxy = self.proxy
        try:
            async with asyncio.timeout(proxy.connect_timeout):
                await proxy._loop().create_connection(
                    lambda: Side(proxy, "server", self), proxy.upstream_host, proxy.upstream_port
                )
        except (OSError, TimeoutError) as exc:
            proxy._upstream_failed()
            _log.info("fault_proxy_upstream_failed", link=self.id, error=repr(exc))
            self._close("fin")

    def _attach_server(self, side: Side) -> None:
        if self.closed:
            assert side.transport is not None
            side.transport.abort()
            return
        self._server = side
        self._c2s.sink = side
        self._s2c.source = side
        self._s2c.update_reading()
        for pipe in (self._c2s, self._s2c):
            self._tasks.append(self.proxy._spawn(self._pump(pipe), f"fault-proxy-link-{self.id}-{pipe.direction}"))

    async def _pump(self, pipe: Pipe) -> None:
        try:
            await pipe.run()
        except OSError as exc:  # a socket the faults already broke (ENOTCONN, EPIPE, ...): an ordinary end
            _log.debug("fault_proxy_link_socket_error", link=self.id, direction=pipe.direction, error=repr(exc))
            self._close("abort")
        except Exception:
            _log.warning("fault_proxy_link_error", link=self.id, direction=pipe.direction, exc_info=True)
            self._close("abort")

    def _source_pipe(self, side: Side) -> Pipe:
        return self._c2s if side is self._client else self._s2c

    def _sink_pipe(self, side: Side) -> Pipe:
        return self._s2c if side is self._client else self._c2s

    def _on_data(self, side: Side, data: bytes) -> None:
        self._source_pipe(side).feed(data)

    def _on_eof(self, side: Side, *, reset: bool) -> None:
        self._source_pipe(side).feed_eof(reset=reset)

    def _on_lost(self, side: Side, exc: Exception | None) -> None:
        if self.closed:
            return
        _log.debug("fault_proxy_side_lost", link=self.id, role=side.role, error=None if exc is None else repr(exc))
        self._source_pipe(side).feed_eof(reset=isinstance(exc, ConnectionResetError))
        self._sink_pipe(side).sink_gone()
        self._maybe_finish()

    def _wake_pipe_into(self, side: Side) -> None:
        self._sink_pipe(side).wake.set()

    def _deliver_eof(self, pipe: Pipe, *, reset: bool) -> None:
        if reset:
            self._close("reset")
            return
        sink = pipe.sink
        if sink is not None and sink.transport is not None and sink.alive() and sink.transport.can_write_eof():
            sink.transport.write_eof()
            self._maybe_finish()
        else:
            self._close("fin")

    def _maybe_finish(self) -> None:
        if self._c2s.done and self._s2c.done:
            self._close("fin")

    def _count(self, direction: Literal["c2s", "s2c"], n: int) -> None:
        if direction == "c2s":
            self.bytes_c2s += n
        else:
            self.bytes_s2c += n
        self.proxy._forwarded(direction, n)

    def _close(self, how: Literal["fin", "reset", "abort"]) -> None:
        """Close both sockets now (idempotent, synchronous) and stop the link's tasks."""
        if self.closed:
            return
        self.closed = True
        for pipe in (self._c2s, self._s2c):
            pipe.sink_gone()
        for side in (self._client, self._server):
            if side is None or side.transport is None or side.lost.is_set():
                continue
            if how == "reset":
                sock = side.transport.get_extra_info("socket")
                if sock is not None:
                    arm_reset(sock)
                side.transport.abort()
            elif how == "abort":
                side.transport.abort()
            else:
                side.transport.close()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        _log.debug("fault_proxy_link_closed", link=self.id, how=how, bytes_c2s=self.bytes_c2s, bytes_s2c=self.bytes_s2c)
        self.proxy._link_closed(self)

"""A loopback TCP proxy that injects transport faults between a client and an agent.

``FaultProxy`` listens on ``127.0.0.1`` (a free port) and forwards raw bytes to an upstream ``(host, port)``,
usually a :class:`~acp_client.testing.ReferenceAgent`. It knows nothing about WebSocket or JSON-RPC, so frames
pass through untouched, and it can break the link the way real networks do::

    async with ReferenceAgent() as agent, FaultProxy("127.0.0.1", agent.port) as proxy:
        client = await acp_client.connect(proxy.url(), ping_interval=0.5, ping_timeout=0.5)
        proxy.blackhole_all()             # half-open: nothing forwarded, nothing read, no FIN, no RST
        ...                               # the client's keepalive must notice
        proxy.restore()                   # everything back to pass-through, listener accepting

Each accepted connection is a :class:`ProxyLink` with two directions, ``"c2s"`` (client → upstream) and
``"s2c"``.
Each direction has a :class:`ProxyMode`:

- ``ProxyMode.passthrough()`` (or ``"pass"``): forward as soon as possible; the default.
- ``ProxyMode.delay(s, jitter)``: deliver each chunk ``s`` + U(0, ``jitter``) seconds after it was read;
  chunks keep their order.
- ``ProxyMode.blackhole()`` (``"blackhole"``): forward nothing and stop reading the source
  (``pause_reading``); both sockets stay open, no FIN, no RST: a half-open link. Bytes already queued are
  kept and flow again when the direction is set back to pass.
- ``ProxyMode.hold()`` (``"hold"``): forward nothing but keep reading into the buffer; pass-through (or
  :meth:`FaultProxy.release`) later delivers everything in order, including a close that arrived meanwhile.
- ``ProxyMode.limit_bytes(n)``: forward ``n`` more bytes, then close the whole link with FIN (mid-frame drop).
- ``ProxyMode.slice(size, delay)``: write at most ``size`` bytes at a time, ``delay`` seconds apart.
- ``ProxyMode.slow_close(s)``: data as pass, but a close (FIN, or a reset) from the source side reaches the
  other side ``s`` seconds late (the late close of a superseded connection).

Two one-shot actions act on live links only: ``"cut"`` (close both sides with FIN) and ``"reset"``
(``SO_LINGER(1, 0)`` then close, so the peers get an RST). The listener has its own modes: ``"accept"``,
``"refuse"`` (the listening socket is closed so connects fail with ``ECONNREFUSED``; ``"accept"`` reopens it
on the same port with ``SO_REUSEADDR``), ``"accept_then_close"`` and ``"accept_and_hang"``.

Both sockets of every link (the accepted client-facing one and the upstream one) have ``TCP_NODELAY`` set,
so a delay mode adds exactly its delay and never Nagle's wait for a delayed ACK.

Limits and caveats:

- Reads are at most 256 KiB (asyncio's transport read size); each direction buffers at most ``max_buffer``
  bytes (default 1 MiB) before it stops reading its source, so ``hold`` and ``delay`` exert back-pressure
  instead of growing without bound. Delays are capped at :data:`MAX_DELAY` seconds.
- Closing a socket whose kernel receive buffer still holds unread bytes makes the kernel send an RST
  instead of a FIN; a ``cut`` of a blackholed link (which has stopped reading) can therefore look like a
  reset to the peers.
- ``refuse`` cannot strictly guarantee ``ECONNREFUSED``: while the port is not listening, another process
  may bind it, and on Linux a client whose ephemeral port happens to equal the proxy's port can connect to
  itself (a "simultaneous open"; the chance is about one in 28,000 per connect). Reopening raises
  ``OSError`` when the port was taken meanwhile.
- Attempts made while the listener is in ``refuse`` are rejected by the kernel and cannot be counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, NamedTuple

from acp_client._logging import get_logger
from acp_client.testing._waiting import Waiters

__all__ = ["MAX_DELAY", "Direction", "FaultProxy", "LinkMode", "ListenerMode", "ModeKind", "ProxyLink", "ProxyMode"]

_log = get_logger(__name__)

#: a direction of a link: client → upstream, upstream → client, or both
Direction = Literal["c2s", "s2c", "both"]
#: what the listener does with new connections
ListenerMode = Literal["accept", "refuse", "accept_then_close", "accept_and_hang"]
#: the kinds of per-direction :class:`ProxyMode`
ModeKind = Literal["pass", "delay", "blackhole", "hold", "limit_bytes", "slice", "slow_close"]

#: upper bound, in seconds, of every delay a mode may introduce
MAX_DELAY = 60.0

_LISTENER_MODES: tuple[ListenerMode, ...] = ("accept", "refuse", "accept_then_close", "accept_and_hang")
_ACCEPTS_PER_WAKEUP = 32
_LINGER_RESET = struct.pack("ii", 1, 0)


def _check_seconds(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= MAX_DELAY:
        raise ValueError(f"{name} must be between 0 and {MAX_DELAY:g} seconds, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class ProxyMode:
    """What one direction of a link does with the bytes it reads; build one with the class methods.

    ``seconds`` is the delay of ``delay``/``slice``/``slow_close``, ``jitter`` the extra random delay of
    ``delay``, ``size`` the byte count of ``limit_bytes``/``slice``.
    """

    kind: ModeKind
    seconds: float = 0.0
    jitter: float = 0.0
    size: int = 0

    @classmethod
    def passthrough(cls) -> ProxyMode:
        """Forward every chunk as soon as possible."""
        return cls("pass")

    @classmethod
    def delay(cls, seconds: float, jitter: float = 0.0) -> ProxyMode:
        """Deliver each chunk ``seconds`` + U(0, ``jitter``) after it was read; chunks keep their order."""
        return cls("delay", seconds=_check_seconds("seconds", seconds), jitter=_check_seconds("jitter", jitter))

    @classmethod
    def blackhole(cls) -> ProxyMode:
        """Forward nothing and stop reading the source; both sockets stay open (a half-open link)."""
        return cls("blackhole")

    @classmethod
    def hold(cls) -> ProxyMode:
        """Forward nothing but keep reading (up to ``max_buffer``); pass-through later delivers it in order."""
        return cls("hold")

    @classmethod
    def limit_bytes(cls, n: int) -> ProxyMode:
        """Forward ``n`` more bytes, then close the whole link with FIN (``0``: close at once)."""
        if n < 0:
            raise ValueError("n must be >= 0")
        return cls("limit_bytes", size=int(n))

    @classmethod
    def slice(cls, size: int, delay: float = 0.0) -> ProxyMode:
        """Write at most ``size`` bytes at a time, ``delay`` seconds apart (frames arrive in pieces)."""
        if size < 1:
            raise ValueError("size must be >= 1")
        return cls("slice", seconds=_check_seconds("delay", delay), size=int(size))

    @classmethod
    def slow_close(cls, seconds: float) -> ProxyMode:
        """Forward data, but pass a close from the source side on to the other side ``seconds`` late."""
        return cls("slow_close", seconds=_check_seconds("seconds", seconds))

    @classmethod
    def parse(cls, mode: ProxyMode | str) -> ProxyMode:
        """Accept a :class:`ProxyMode` or the name of a parameterless one (``"pass"``, ``"blackhole"``, ``"hold"``)."""
        if isinstance(mode, ProxyMode):
            return mode
        if mode == "pass":
            return cls.passthrough()
        if mode == "blackhole":
            return cls.blackhole()
        if mode == "hold":
            return cls.hold()
        raise ValueError(
            f"unknown mode {mode!r}; use a ProxyMode (e.g. ProxyMode.delay(0.1)) or 'pass'/'blackhole'/'hold'"
        )


_PASS = ProxyMode.passthrough()


class LinkMode(NamedTuple):
    """The modes of both directions of a link."""

    c2s: ProxyMode
    s2c: ProxyMode


def _directions(direction: Direction) -> tuple[Literal["c2s", "s2c"], ...]:
    if direction == "both":
        return ("c2s", "s2c")
    if direction in ("c2s", "s2c"):
        return (direction,)
    raise ValueError(f"direction must be 'c2s', 's2c' or 'both', got {direction!r}")


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


class _Side(asyncio.Protocol):
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
        self.proxy._sides.discard(self)
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


class _Pipe:
    """One direction of a link: a bounded queue of chunks and the task pumping it into the sink."""

    def __init__(self, link: ProxyLink, direction: Literal["c2s", "s2c"], mode: ProxyMode) -> None:
        self.link = link
        self.direction = direction
        self.mode = mode
        self.remaining: int | None = mode.size if mode.kind == "limit_bytes" else None
        self.queue: deque[_Chunk] = deque()
        self.queued_bytes = 0
        self.source: _Side | None = None
        self.sink: _Side | None = None
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
        self.queue.append(_Chunk(data, proxy._loop().time(), proxy._rng.random()))
        self.queued_bytes += len(data)
        self.update_reading()
        self.wake.set()

    def feed_eof(self, *, reset: bool) -> None:
        if self.done or self.eof_seen:
            return
        self.eof_seen = True
        proxy = self.link.proxy
        self.queue.append(_Chunk(b"", proxy._loop().time(), proxy._rng.random(), eof=True, reset=reset))
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

    def __init__(self, proxy: FaultProxy, link_id: int, client: _Side, modes: LinkMode) -> None:
        self.proxy = proxy
        self.id = link_id
        self.bytes_c2s = 0
        self.bytes_s2c = 0
        self.closed = False
        self.client_address: tuple[str, int] | None = None
        self._client = client
        self._server: _Side | None = None
        self._c2s = _Pipe(self, "c2s", modes.c2s)
        self._s2c = _Pipe(self, "s2c", modes.s2c)
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
        for d in _directions(direction):
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

    def _pipe(self, direction: Literal["c2s", "s2c"]) -> _Pipe:
        return self._c2s if direction == "c2s" else self._s2c

    def _start(self) -> None:
        self._tasks.append(self.proxy._spawn(self._connect_upstream(), f"fault-proxy-link-{self.id}-connect"))
        self._c2s.update_reading()

    async def _connect_upstream(self) -> None:
        proxy = self.proxy
        try:
            async with asyncio.timeout(proxy.connect_timeout):
                await proxy._loop().create_connection(
                    lambda: _Side(proxy, "server", self), proxy.upstream_host, proxy.upstream_port
                )
        except (OSError, TimeoutError) as exc:
            proxy.upstream_failures += 1
            _log.info("fault_proxy_upstream_failed", link=self.id, error=repr(exc))
            self._close("fin")

    def _attach_server(self, side: _Side) -> None:
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

    async def _pump(self, pipe: _Pipe) -> None:
        try:
            await pipe.run()
        except OSError as exc:  # a socket the faults already broke (ENOTCONN, EPIPE, ...): an ordinary end
            _log.debug("fault_proxy_link_socket_error", link=self.id, direction=pipe.direction, error=repr(exc))
            self._close("abort")
        except Exception:
            _log.warning("fault_proxy_link_error", link=self.id, direction=pipe.direction, exc_info=True)
            self._close("abort")

    def _source_pipe(self, side: _Side) -> _Pipe:
        return self._c2s if side is self._client else self._s2c

    def _sink_pipe(self, side: _Side) -> _Pipe:
        return self._s2c if side is self._client else self._c2s

    def _on_data(self, side: _Side, data: bytes) -> None:
        self._source_pipe(side).feed(data)

    def _on_eof(self, side: _Side, *, reset: bool) -> None:
        self._source_pipe(side).feed_eof(reset=reset)

    def _on_lost(self, side: _Side, exc: Exception | None) -> None:
        if self.closed:
            return
        _log.debug("fault_proxy_side_lost", link=self.id, role=side.role, error=None if exc is None else repr(exc))
        self._source_pipe(side).feed_eof(reset=isinstance(exc, ConnectionResetError))
        self._sink_pipe(side).sink_gone()
        self._maybe_finish()

    def _wake_pipe_into(self, side: _Side) -> None:
        self._sink_pipe(side).wake.set()

    def _deliver_eof(self, pipe: _Pipe, *, reset: bool) -> None:
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
            self.proxy.bytes_c2s += n
        else:
            self.bytes_s2c += n
            self.proxy.bytes_s2c += n

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
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
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


class FaultProxy:
    """An in-process TCP proxy on ``127.0.0.1`` that injects faults between a client and ``upstream``.

    ``async with FaultProxy(host, port) as proxy`` starts listening on a free port (``port`` to choose one);
    nothing runs before that. Leaving the block closes the listener and every link and cancels and awaits
    every task the proxy started. See the module docstring for the modes.

    Counters (plain attributes): ``connections_accepted`` (every TCP accept, whatever the listener mode),
    ``connections_refused`` (accepted then closed by ``accept_then_close``), ``connections_hung`` (kept open
    by ``accept_and_hang``), ``upstream_failures`` (the upstream could not be reached: the client socket is
    closed), ``bytes_c2s``/``bytes_s2c`` (bytes forwarded in each direction over all links).

    ``max_buffer`` bounds the bytes queued per direction of a link, ``connect_timeout`` the upstream connect,
    ``seed`` the jitter random generator.
    """

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        port: int = 0,
        max_buffer: int = 1024 * 1024,
        connect_timeout: float = 10.0,
        backlog: int = 128,
        seed: int | None = None,
    ) -> None:
        """Configure the proxy; nothing is bound or started until ``async with``."""
        if max_buffer < 1:
            raise ValueError("max_buffer must be >= 1")
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.max_buffer = max_buffer
        self.connect_timeout = connect_timeout
        self.backlog = backlog
        self.connections_accepted = 0
        self.connections_refused = 0
        self.connections_hung = 0
        self.upstream_failures = 0
        self.bytes_c2s = 0
        self.bytes_s2c = 0
        self._rng = random.Random(seed)
        self._requested_port = port
        self._port: int | None = None
        self._state: Literal["new", "running", "closed"] = "new"
        self._listener_mode: ListenerMode = "accept"
        self._listen_sock: socket.socket | None = None
        self._default = LinkMode(_PASS, _PASS)
        self._links: dict[int, ProxyLink] = {}
        self._link_counter = 0
        self._hung: list[socket.socket] = []
        self._adopting: set[socket.socket] = set()
        self._sides: set[_Side] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiters = Waiters()
        self._event_loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> FaultProxy:
        """Bind ``127.0.0.1`` and start accepting."""
        if self._state != "new":
            raise RuntimeError("a FaultProxy can only be started once; create a new one")
        self._event_loop = asyncio.get_running_loop()
        self._state = "running"
        self._open_listener()
        _log.debug("fault_proxy_listening", port=self._port, upstream_port=self.upstream_port)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close the listener and every link; cancel and await every task the proxy started."""
        await self.aclose()

    async def aclose(self) -> None:
        """Same as leaving ``async with``. Idempotent."""
        if self._state != "running":
            self._state = "closed"
            return
        self._state = "closed"
        self._close_listener()
        self._close_hung()
        for link in list(self._links.values()):
            link._close("abort")
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for conn in list(self._adopting):
            conn.close()
        self._adopting.clear()
        for side in list(self._sides):
            if side.transport is not None and not side.lost.is_set():
                side.transport.abort()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5.0):
                for side in list(self._sides):
                    if side.transport is not None:
                        await side.lost.wait()
        self._sides.clear()
        self._waiters.fail_all(RuntimeError("the FaultProxy was closed"))
        _log.debug("fault_proxy_closed", accepted=self.connections_accepted)

    @property
    def port(self) -> int:
        """The listening port (stable across ``refuse``/``accept``)."""
        if self._port is None:
            raise RuntimeError("the proxy is not started (use 'async with')")
        return self._port

    @property
    def host(self) -> str:
        """Always ``127.0.0.1``: the proxy binds nothing else."""
        return "127.0.0.1"

    def url(self, path: str = "/acp", scheme: str = "ws") -> str:
        """``ws://127.0.0.1:PORT/acp`` (or another ``path``/``scheme``)."""
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    @property
    def links(self) -> list[ProxyLink]:
        """The live links, oldest first (a snapshot)."""
        return list(self._links.values())

    @property
    def listener_mode(self) -> ListenerMode:
        """The current listener mode."""
        return self._listener_mode

    @property
    def default_mode(self) -> LinkMode:
        """The modes new links start with."""
        return self._default

    # ------------------------------------------------------------------ fault controls

    def set_mode(self, mode: ProxyMode | str, direction: Direction = "both", link: ProxyLink | None = None) -> None:
        """Set ``mode`` for ``direction`` on ``link``, or (``link=None``) on every live link and as the default
        for new links. ``"cut"``/``"reset"`` close the targeted live links at once and change no default."""
        if link is not None:
            link.set_mode(mode, direction)
            return
        if mode in ("cut", "reset"):
            for live in self.links:
                live.set_mode(mode)
            return
        parsed = ProxyMode.parse(mode)
        dirs = _directions(direction)
        self._default = LinkMode(
            parsed if "c2s" in dirs else self._default.c2s, parsed if "s2c" in dirs else self._default.s2c
        )
        for live in self.links:
            live.set_mode(parsed, direction)

    def blackhole_all(self, direction: Direction = "both") -> None:
        """Blackhole ``direction`` on every live link and on new ones (``set_mode("blackhole", direction)``)."""
        self.set_mode(ProxyMode.blackhole(), direction)

    def hold(self, direction: Direction = "both", link: ProxyLink | None = None) -> None:
        """Buffer instead of forwarding (``set_mode("hold", ...)``); :meth:`release` delivers the buffer."""
        self.set_mode(ProxyMode.hold(), direction, link)

    def release(self, direction: Direction = "both", link: ProxyLink | None = None) -> None:
        """Back to pass-through for ``direction``: held bytes (and a held close) are delivered in order."""
        self.set_mode(_PASS, direction, link)

    async def cut_all(self, timeout: float = 5.0) -> int:
        """Close every live link with FIN (and every hung connection); wait until their sockets are closed.

        New connections are unaffected. Returns how many links were cut."""
        return await self._close_all("fin", timeout)

    async def reset_all(self, timeout: float = 5.0) -> int:
        """Like :meth:`cut_all`, but with an RST (``SO_LINGER(1, 0)``)."""
        return await self._close_all("reset", timeout)

    def restore(self) -> None:
        """Every live link and the default back to pass-through (releasing holds), the listener to accept."""
        self.set_mode(_PASS)
        self.set_listener("accept")

    def set_listener(self, mode: ListenerMode) -> None:
        """Switch the listener: ``"refuse"`` closes the listening socket (connects get ``ECONNREFUSED``); any
        other mode (re)opens it on the same port. Raises ``OSError`` if the port was taken meanwhile."""
        if mode not in _LISTENER_MODES:
            raise ValueError(f"listener mode must be one of {_LISTENER_MODES}, got {mode!r}")
        if self._state != "running":
            raise RuntimeError("the proxy is not running")
        if mode == "refuse":
            self._close_listener()
        elif self._listen_sock is None:
            self._open_listener()
        self._listener_mode = mode
        _log.debug("fault_proxy_listener", mode=mode, port=self._port)

    # ------------------------------------------------------------------ waiting

    async def wait_for_connections(self, n: int, timeout: float = 5.0) -> None:
        """Wait until ``n`` connections were accepted in total (``TimeoutError`` after ``timeout``)."""
        await self._wait_for(lambda: self.connections_accepted >= n, timeout)

    async def wait_for_live(self, n: int, timeout: float = 5.0) -> None:
        """Wait until exactly ``n`` links are live (``TimeoutError`` after ``timeout``)."""
        await self._wait_for(lambda: len(self._links) == n, timeout)

    async def wait_for_upstream(self, n: int = 1, timeout: float = 5.0) -> None:
        """Wait until ``n`` live links have their upstream socket connected."""
        await self._wait_for(lambda: sum(link.upstream_connected for link in self._links.values()) >= n, timeout)

    async def _wait_for(self, predicate: Callable[[], bool], timeout: float) -> None:
        if predicate():
            return
        if self._state != "running":
            raise RuntimeError("the proxy is not running")
        await self._waiters.wait_until(predicate, timeout)

    def _notify(self) -> None:
        self._waiters.changed()

    # ------------------------------------------------------------------ internals

    def _loop(self) -> asyncio.AbstractEventLoop:
        assert self._event_loop is not None
        return self._event_loop

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = self._loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.warning("fault_proxy_task_failed", task=task.get_name(), exc_info=task.exception())

    def _open_listener(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", self._port if self._port is not None else self._requested_port))
            sock.listen(self.backlog)
            sock.setblocking(False)
            self._loop().add_reader(sock.fileno(), self._on_acceptable)
        except BaseException:
            sock.close()
            raise
        self._listen_sock = sock
        self._port = int(sock.getsockname()[1])

    def _close_listener(self) -> None:
        sock, self._listen_sock = self._listen_sock, None
        if sock is not None:
            self._loop().remove_reader(sock.fileno())
            sock.close()

    def _close_hung(self) -> None:
        hung, self._hung = self._hung, []
        for conn in hung:
            conn.close()

    def _on_acceptable(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKEUP):
            sock = self._listen_sock
            if sock is None:
                return
            try:
                conn, _address = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. EMFILE, ECONNABORTED: keep listening
                _log.warning("fault_proxy_accept_failed", error=repr(exc))
                return
            self._accepted(conn)

    def _accepted(self, conn: socket.socket) -> None:
        self.connections_accepted += 1
        mode = self._listener_mode
        if mode == "accept_then_close":
            self.connections_refused += 1
            conn.close()
        elif mode == "accept_and_hang":
            self.connections_hung += 1
            conn.setblocking(False)
            self._hung.append(conn)
        else:
            conn.setblocking(False)
            self._adopting.add(conn)
            self._spawn(self._adopt(conn), f"fault-proxy-accept-{self.connections_accepted}")
        _log.debug("fault_proxy_accepted", listener=mode, accepted=self.connections_accepted)
        self._notify()

    async def _adopt(self, conn: socket.socket) -> None:
        try:
            await self._loop().connect_accepted_socket(lambda: _Side(self, "client"), conn)
        except OSError as exc:
            _log.info("fault_proxy_adopt_failed", error=repr(exc))
            conn.close()
        finally:
            self._adopting.discard(conn)

    def _side_made(self, side: _Side) -> None:
        assert side.transport is not None
        if self._state != "running":
            side.transport.abort()
            return
        self._sides.add(side)
        if side.role == "server":
            assert side.link is not None
            side.link._attach_server(side)
            self._notify()
            return
        self._link_counter += 1
        link = ProxyLink(self, self._link_counter, side, self._default)
        peer = side.transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            link.client_address = (str(peer[0]), int(peer[1]))
        side.link = link
        self._links[link.id] = link
        link._start()
        _log.debug("fault_proxy_link_open", link=link.id, client=link.client_address)
        self._notify()

    def _link_closed(self, link: ProxyLink) -> None:
        self._links.pop(link.id, None)
        self._notify()

    async def _close_all(self, how: Literal["fin", "reset"], timeout: float) -> int:
        links = self.links
        for link in links:
            link._close(how)
        hung, self._hung = self._hung, []
        for conn in hung:
            if how == "reset":
                with contextlib.suppress(OSError):
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            conn.close()
        async with asyncio.timeout(timeout):
            for link in links:
                await link.wait_closed(timeout)
        return len(links)

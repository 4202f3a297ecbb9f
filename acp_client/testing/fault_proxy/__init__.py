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

The code is split by job: this module holds :class:`FaultProxy` (lifecycle, listener, fault controls, waits
and the proxy-wide counters); :mod:`acp_client.testing.fault_proxy._link` forwards the bytes of each link, and
:mod:`acp_client.testing.fault_proxy._modes` defines the modes. Their public names are re-exported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal

from acp_client._logging import get_logger
from acp_client.testing._waiting import Waiters
from acp_client.testing.fault_proxy._link import ProxyLink, Side, arm_reset
from acp_client.testing.fault_proxy._modes import MAX_DELAY, PASS, Direction, LinkMode, ModeKind, ProxyMode, directions

__all__ = ["MAX_DELAY", "Direction", "FaultProxy", "LinkMode", "ListenerMode", "ModeKind", "ProxyLink", "ProxyMode"]

_log = get_logger(__name__)

#: what the listener does with new connections
ListenerMode = Literal["accept", "refuse", "accept_then_close", "accept_and_hang"]

_LISTENER_MODES: tuple[ListenerMode, ...] = ("accept", "refuse", "accept_then_close", "accept_and_hang")
_ACCEPTS_PER_WAKEUP = 32


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
        self._default = LinkMode(PASS, PASS)
        self._links: dict[int, ProxyLink] = {}
        self._link_counter = 0
        self._hung: list[socket.socket] = []
        self._adopting: set[socket.socket] = set()
        self._sides: set[Side] = set()
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
        dirs = directions(direction)
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
        self.set_mode(PASS, direction, link)

    async def cut_all(self, timeout: float = 5.0) -> int:
        """Close every live link with FIN (and every hung connection); wait until their sockets are closed.

        New connections are unaffected. Returns how many links were cut."""
        return await self._close_all("fin", timeout)

    async def reset_all(self, timeout: float = 5.0) -> int:
        """Like :meth:`cut_all`, but with an RST (``SO_LINGER(1, 0)``)."""
        return await self._close_all("reset", timeout)

    def restore(self) -> None:
        """Every live link and the default back to pass-through (releasing holds), the listener to accept."""
        self.set_mode(PASS)
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

    def _random(self) -> float:
        """A U(0, 1) draw from the seeded generator (a chunk's share of a delay mode's jitter)."""
        return self._rng.random()

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
            await self._loop().connect_accepted_socket(lambda: Side(self, "client"), conn)
        except OSError as exc:
            _log.info("fault_proxy_adopt_failed", error=repr(exc))
            conn.close()
        finally:
            self._adopting.discard(conn)

    def _side_made(self, side: Side) -> None:
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

    def _side_lost(self, side: Side) -> None:
        """A socket of a link is gone (called by the side itself)."""
        self._sides.discard(side)

    def _link_closed(self, link: ProxyLink) -> None:
        self._links.pop(link.id, None)
        self._notify()

    def _upstream_failed(self) -> None:
        """A link could not reach the upstream (called by the link)."""
        self.upstream_failures += 1

    def _forwarded(self, direction: Literal["c2s", "s2c"], n: int) -> None:
        """A link wrote ``n`` bytes in ``direction`` (the link counts its own share)."""
        if direction == "c2s":
            self.bytes_c2s += n
        else:
            self.bytes_s2c += n

    async def _close_all(self, how: Literal["fin", "reset"], timeout: float) -> int:
        links = self.links
        for link in links:
            link._close(how)
        hung, self._hung = self._hung, []
        for conn in hung:
            if how == "reset":
                arm_reset(conn)
            conn.close()
        async with asyncio.timeout(timeout):
            for link in links:
                await link.wait_closed(timeout)
        return len(links)

"""The asyncio driver for one connection: one transport plus one sans-I/O JSON-RPC core.

A :class:`Connection` owns a reader task (started by :meth:`Connection.start`, never in ``__init__``),
matches responses to the requests that wait for them, runs each inbound agent→client request in a task of
its own, and, when the transport dies, fails every pending request at once with
:class:`~acp_client.exceptions.ConnectionLost`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from acp_client import _observe
from acp_client._logging import get_logger
from acp_client.client._answers import Answers
from acp_client.client._inbound import DEFAULT_MAX_INBOUND_REQUESTS, DEFAULT_MAX_QUEUED_INBOUND, InboundRequests
from acp_client.client._reader import CANCEL_METHOD, FrameReader
from acp_client.client._watch import GaveUp, ProgressWatch
from acp_client.client.options import USE_CLIENT_DEFAULT, UseClientDefault
from acp_client.client.wire_log import WireRecorder, tap
from acp_client.exceptions import (
    ACPTimeoutError,
    ClientClosed,
    ConnectionLost,
)
from acp_client.jsonrpc import (
    DEFAULT_MAX_FRAME_CHARS,
    JsonRpcCore,
)
from acp_client.transports.base import Transport

__all__ = [
    "DEFAULT",
    "DEFAULT_MAX_INBOUND_REQUESTS",
    "DEFAULT_MAX_QUEUED_INBOUND",
    "AgentProcess",
    "Connection",
    "NotificationHandler",
    "RequestHandler",
]

log = get_logger("acp_client.connection")  # the logger name users configure; stable across moves

#: A coroutine answering one inbound request: ``(method, params) -> result``; raise ``RPCError`` to answer
#: with an error object.
RequestHandler = Callable[[str, Any], Awaitable[Any]]
#: A plain callable receiving one inbound notification, called in order on the reader task; keep it fast.
NotificationHandler = Callable[[str, Any], None]


@dataclass(frozen=True, slots=True)
class AgentProcess:
    """The agent process behind a stdio connection: its ``pid`` and, once it exited, its ``returncode``
    (negative: killed by that signal; ``None`` while it runs). A snapshot taken when read."""

    pid: int
    returncode: int | None


class _TransportFacts:
    """A connection's facts for an observer when no client supplied richer ones: the transport only."""

    __slots__ = ("_transport",)

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    @property
    def peer(self) -> str:
        return self._transport.description

    @property
    def protocol_version(self) -> int:
        return 0


#: The older name of :data:`~acp_client.client.options.USE_CLIENT_DEFAULT` (the same object).
DEFAULT: Final = USE_CLIENT_DEFAULT

_CANCEL_WRITE_TIMEOUT = 1.0
_ids = itertools.count(1)
_LOCAL_CLOSE = ConnectionLost("the connection was closed by the client", reason="closed locally")


class _Expired(Exception):
    """A request's deadline passed before its answer (set on the answer's future by its timer)."""


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(_Expired())


class Connection:
    """One live JSON-RPC connection to an agent over a :class:`~acp_client.transports.Transport`.

    Use ``await conn.start()`` (or ``async with conn``) before sending. ``request_timeout`` is the default
    per-request timeout in float seconds (``None`` disables it); each :meth:`request` may override it.

    Agent->client requests run in tasks of their own, at most ``max_inbound_requests`` at once; more wait in
    order, up to ``max_queued_inbound``, and past that are answered ``-32603`` with ``data.reason ==
    "client_busy"`` naming the bound (never dropped silently). A request whose id is already in flight is
    answered ``-32600`` (``data.reason == "duplicate_request_id"``) and never run: one id, one handler, and
    every handler ends with its link.

    ``wire`` (a :class:`~acp_client.client.wire_log.WireRecorder`, lent by the client that owns it) gets
    every frame this connection sends or reads, tagged with ``generation``, and a line when it opens and
    when it ends; without it the connection talks to its transport directly.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        request_timeout: float | None = 30.0,
        on_request: RequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
        on_close: Callable[[ConnectionLost], None] | None = None,
        max_frame_chars: int = DEFAULT_MAX_FRAME_CHARS,
        generation: int | None = None,
        max_inbound_requests: int = DEFAULT_MAX_INBOUND_REQUESTS,
        max_queued_inbound: int = DEFAULT_MAX_QUEUED_INBOUND,
        facts: _observe.LinkFacts | None = None,
        wire: WireRecorder | None = None,
    ) -> None:
        self.transport = transport
        # every frame goes through the link: the transport itself, or with a wire log its tap
        self._wire = wire
        self._link = link = tap(transport, wire, generation)
        self.request_timeout = request_timeout
        self.id = next(_ids)
        #: Which reconnect attempt produced this connection (set by the reconnect manager; for logs).
        self.generation = generation
        self._on_close = on_close
        # the instrumentation installed when this connection was made (acp_client.otel), if any
        self._observer = _observe.current()
        self._facts: _observe.LinkFacts = facts if facts is not None else _TransportFacts(transport)
        self._core = JsonRpcCore(max_frame_chars=max_frame_chars)
        self._answers = Answers()  # the futures of the requests waiting for their answers
        self._aux: set[asyncio.Task[None]] = set()
        self._reader: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()
        self._loss: ConnectionLost | None = None
        self._closing = False
        #: Counters of what this connection saw: frames, invalid frames by kind, discarded responses, ...
        self.stats: Counter[str] = Counter()
        self._log = log.bind(connection_id=self.id, generation=generation, peer=transport.description)
        self._inbound = InboundRequests(
            handler=on_request,
            respond=self._core.respond,
            send=link.send,
            gone=lambda: self._loss is not None or self._closing,
            error_frame=self._core.respond_error,
            spawn=self._spawn,
            stats=self.stats,
            log=self._log,
            name=str(self.id),
            max_running=max_inbound_requests,
            max_queued=max_queued_inbound,
        )
        self._frames = FrameReader(
            link,
            core=self._core,
            answers=self._answers,
            inbound=self._inbound,
            on_notification=on_notification,
            stats=lambda: self.stats,
            log=self._log,
        )

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("open" if self._reader else "new")
        return f"<Connection #{self.id} {state} {self.transport.description}>"

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the reader task. Must be called once, from a running event loop."""
        if self._reader is not None:
            raise RuntimeError("connection already started")
        self._reader = asyncio.create_task(self._read_loop(), name=f"acp-reader-{self.id}")
        if self._wire is not None:
            self._wire.event("connection_open", self.generation, connection=self.id, peer=self.transport.description)

    async def __aenter__(self) -> Connection:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        """``True`` once the connection is closed or its transport died."""
        return self._loss is not None

    @property
    def agent_process(self) -> AgentProcess | None:
        """The agent process this connection spawned (stdio), or ``None`` for network transports."""
        pid = getattr(self.transport, "pid", None)
        if not isinstance(pid, int):
            return None
        returncode = getattr(self.transport, "returncode", None)
        return AgentProcess(pid, returncode if isinstance(returncode, int) else None)

    @property
    def facts(self) -> _observe.LinkFacts:
        """What an instrumentation reads about this connection: its peer and protocol version."""
        return self._facts

    @property
    def answered_at(self) -> float:
        """``time.monotonic()`` when an answer (a result or an error) to one of this connection's requests
        was last read. A caller resuming after its answer can tell the round trip from its own wait to run:
        the adaptive recovery limit does, so that a busy client is not read as a congested agent."""
        return self._answers.answered_at

    @property
    def last_discarded(self) -> tuple[str, str] | None:
        """The last frame from the agent that was discarded as unusable: its kind (``"parse_error"`` ...) and
        an excerpt. Error texts quote it (an agent that logs to stdout answers nothing readable)."""
        return self._frames.last_discarded

    @property
    def waiting(self) -> int:
        """How many of this connection's requests wait for an answer."""
        return len(self._answers)

    @property
    def inbound_in_flight(self) -> int:
        """How many agent->client requests this connection serves or holds in its queue right now."""
        return self._inbound.in_flight

    @property
    def loss(self) -> ConnectionLost | None:
        """Why the connection ended (``None`` while it is open)."""
        return self._loss

    async def wait_closed(self) -> ConnectionLost:
        """Wait until the connection ends; return the :class:`ConnectionLost` that describes why."""
        await self._closed.wait()
        assert self._loss is not None
        return self._loss

    async def close(self) -> None:
        """Close the transport, fail what is pending, stop every task this connection started."""
        if self._closing:
            if self._reader is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(self._reader)
            return
        self._closing = True
        try:
            await self.transport.close()
        finally:
            if self._reader is not None and not self._reader.done():
                self._reader.cancel()
                # wait for the reader to run its cleanup; re-raise our own cancellation if we were cancelled
                await asyncio.wait({self._reader})
            else:
                self._finish(_LOCAL_CLOSE)
            aux = list(self._aux)
            for task in aux:
                task.cancel()
            if aux:
                await asyncio.wait(aux)

    # ------------------------------------------------------------------ outbound

    async def request(
        self, method: str, params: Any = None, *, timeout: float | UseClientDefault | None = USE_CLIENT_DEFAULT
    ) -> Any:
        """Send a request and wait for its result, at most ``timeout`` seconds (by default this connection's
        ``request_timeout``; ``None``: no deadline).

        Raises the :class:`~acp_client.exceptions.RPCError` subclass for the agent's error code,
        :class:`~acp_client.exceptions.ConnectionLost` if the link dies first (``request_sent`` tells whether
        the request had been written), or :class:`~acp_client.exceptions.ACPTimeoutError`. If the caller is
        cancelled or times out after the request was written, ``$/cancel_request`` is sent to the agent.
        """
        if self._observer is None:
            return await self._request(method, params, timeout)
        params, scope = self._observer.request(method, params, self._facts)
        try:
            result = await self._request(method, params, timeout)
        except BaseException as exc:
            scope.end(exc)
            raise
        scope.end(None)
        return result

    async def _request(self, method: str, params: Any, timeout: float | UseClientDefault | None) -> Any:
        defaulted = isinstance(timeout, UseClientDefault)
        effective = self.request_timeout if isinstance(timeout, UseClientDefault) else timeout
        id_, fut = await self._send_request(method, params)
        # the deadline is one timer that fails the answer's future: no timeout scope, no cancellation of
        # this task and no extra wake-up per request (a recovery round sends thousands)
        timer = None if effective is None else asyncio.get_running_loop().call_later(effective, _expire, fut)
        try:
            return await fut
        except _Expired:
            self._abandon(id_)
            source = " (the client's request timeout, Timeouts.request)" if defaulted else ""
            raise ACPTimeoutError(f"{method} got no answer within {effective:g} s{source}") from None
        except (asyncio.CancelledError, ACPTimeoutError):
            self._abandon(id_)
            raise
        finally:
            if timer is not None:
                timer.cancel()
            self._answers.forget(id_)
            self._core.forget(id_)

    async def _send_request(self, method: str, params: Any) -> tuple[int, asyncio.Future[Any]]:
        """Register and write one request; returns its id and the future its answer settles. Raises
        ``ClientClosed``/``ConnectionLost(request_sent=False)`` when nothing could be written."""
        if self._loss is not None:
            if self._closing:
                raise ClientClosed(f"{method}: the connection was closed")
            raise self._loss.with_request_sent(False)
        if self._reader is None:
            raise RuntimeError("call start() before sending requests")
        id_, frame = self._core.request(method, params)
        fut = self._answers.expect(id_)
        try:
            await self._link.send(frame)
        except BaseException as exc:
            self._answers.forget(id_)
            self._core.forget(id_)
            if fut.done() and not fut.cancelled():
                fut.exception()  # the link died during the write and settled it: retrieved, never "lost"
            else:
                fut.cancel()
            if isinstance(exc, ConnectionLost):
                raise exc.with_request_sent(False) from None
            raise
        self.stats["requests_out"] += 1
        return id_, fut

    def _abandon(self, id_: int) -> None:
        """The caller gave up on a written request: its late answer is expected, and the agent is told."""
        if self._loss is None:
            self._answers.abandon(id_)
            self._send_cancel_request(id_)

    async def request_watched(
        self,
        method: str,
        params: Any,
        *,
        silence: float,
        progress: Callable[[], object],
        deadline: float | None = None,
        settle: float = 5.0,
        on_give_up: Callable[[], None] | None = None,
        max_progress: int | None = None,
        waiter_first: bool = False,
    ) -> Any:
        """Send a request whose answer may take long while the agent shows progress (a replaying load).

        The request is given up only after ``silence`` seconds with no answer and no change of
        ``progress()`` (e.g. a count of replayed updates), or after ``deadline`` seconds in all. Giving up
        sends ``$/cancel_request`` and then waits up to ``settle`` seconds for the agent's answer to it (a
        result or ``-32800``), so the next attempt never overlaps this one; a result that still arrives is
        returned. ``on_give_up()`` is called when the request is given up, before that wait (a caller can
        free what it reserved for a request in flight). Raises ``ACPTimeoutError`` when given up, otherwise
        like :meth:`request`. With ``max_progress``, more than that much progress (replayed updates) also
        gives it up, checked at every ``silence`` tick: the bound is named in the ``ACPTimeoutError``. With
        ``waiter_first``, the caller runs on with the answer before the connection handles the next frame
        (one more loop turn): what it does with the answer comes before the updates sent right behind it.
        """
        watch = (silence, progress, deadline, settle, on_give_up, max_progress, waiter_first)
        if self._observer is None:
            return await self._request_watched(method, params, *watch)
        params, scope = self._observer.request(method, params, self._facts)
        try:
            result = await self._request_watched(method, params, *watch)
        except BaseException as exc:
            scope.end(exc)
            raise
        scope.end(None)
        return result

    async def _request_watched(
        self,
        method: str,
        params: Any,
        silence: float,
        progress: Callable[[], object],
        deadline: float | None,
        settle: float,
        on_give_up: Callable[[], None] | None,
        max_progress: int | None,
        waiter_first: bool,
    ) -> Any:
        id_, fut = await self._send_request(method, params)

        # a give-up hands the id a new future: an answer that comes after it still settles something
        watch = ProgressWatch(
            fut,
            silence=silence,
            progress=progress,
            deadline=deadline,
            max_progress=max_progress,
            renew=lambda: self._answers.expect(id_),
        )
        if waiter_first:
            # (a resume/load re-attaching a session someone reads) what the caller does with the answer, a
            # recovery marker into the session's stream, comes before the live updates right behind it
            self._answers.waiter_first(id_)
        try:
            try:
                return await fut
            except GaveUp as gave_up:
                why, late = gave_up.why, gave_up.late
            finally:
                watch.stop()
            self._send_cancel_request(id_)
            self.stats["requests_given_up"] += 1
            if on_give_up is not None:
                on_give_up()
            await asyncio.wait({late}, timeout=settle)
            if late.done():
                self.stats["given_up_answers_settled"] += 1
                if late.exception() is None:
                    return late.result()
            else:
                self._answers.abandon(id_)
            raise ACPTimeoutError(f"{method}: {why}")
        except asyncio.CancelledError:
            self._abandon(id_)
            raise
        finally:
            self._answers.forget(id_)
            self._core.forget(id_)

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no response expected)."""
        if self._loss is not None:
            raise self._loss.with_request_sent(False)
        await self._link.send(self._core.notification(method, params))
        self.stats["notifications_out"] += 1

    def _send_cancel_request(self, id_: int) -> None:
        async def send() -> None:
            try:
                async with asyncio.timeout(_CANCEL_WRITE_TIMEOUT):
                    await self._link.send(self._core.notification(CANCEL_METHOD, {"requestId": id_}))
                self.stats["cancel_requests_out"] += 1
            except (ConnectionLost, TimeoutError) as exc:
                self._log.debug("cancel_request_not_sent", request_id=id_, error=str(exc))

        self._spawn(send(), f"acp-cancel-{self.id}-{id_}")

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._aux.add(task)
        task.add_done_callback(self._aux.discard)

    # ------------------------------------------------------------------ inbound

    async def _read_loop(self) -> None:
        loss: ConnectionLost | None = None
        try:
            await self._frames.run()
        except ConnectionLost as exc:
            loss = _LOCAL_CLOSE if self._closing else exc
        except asyncio.CancelledError:
            loss = _LOCAL_CLOSE
            raise
        except Exception as exc:  # a bug here must not leave requests hanging: fail them and drop the link
            self._log.exception("reader_crashed")
            loss = ConnectionLost(f"the connection reader failed: {exc!r}", reason="reader failed")
            self._spawn(self.transport.close(), f"acp-close-{self.id}")
        finally:
            self._finish(loss or ConnectionLost(reason="reader stopped"))

    def _finish(self, loss: ConnectionLost) -> None:
        if self._loss is not None:
            return
        self._loss = loss
        ids = [pending.id for pending in self._core.drop_all()]
        failed = self._answers.fail(ids, lambda: loss.with_request_sent(True))
        self._inbound.stop()  # their ids belong to this dead connection
        self._closed.set()
        if self._wire is not None:
            self._wire.event(
                "connection_closed", self.generation, connection=self.id, reason=loss.reason, close_code=loss.close_code
            )
        if self._on_close is not None:
            try:
                self._on_close(loss)
            except Exception:
                self._log.exception("close_callback_failed")
        self._log.info(
            "connection_closed",
            reason=loss.reason,
            close_code=loss.close_code,
            pending_failed=failed,
        )

"""The connection loop of a :class:`~acp_client.ReconnectingClient` and all of its state.

:class:`ConnectionSupervisor` is the only writer of the client's lifecycle state (:class:`ClientState`),
the connection generation, the current per-connection :class:`~acp_client.ACPClient`, the loop task and
its wake-up, the failure that stopped or suspended it, and the bookkeeping of ``reconnect_now()``. Every
other part reads these through :class:`~acp_client.reconnect._roles.ConnectionView`.

One pass of the loop opens a transport and initializes (a new generation), hands the sessions it should
serve to the recoverer, is ``READY`` until the connection drops, then classifies the loss: ``FAILED`` for
a fatal verdict, ``SUSPENDED`` when the crash-loop breaker trips, else ``BACKOFF`` and again.
``reconnect_now()`` and network hints wake its waits early. Tenacity's ``AsyncRetrying`` drives the
attempts: our ``retry`` classifies, our ``wait`` is the :class:`~acp_client.reconnect.Backoff` (full
jitter, server hints) or the suspension interval, ``before_sleep`` reports the state, and ``sleep`` is a
wait that ``reconnect_now()`` cuts short.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from tenacity import AsyncRetrying, RetryCallState, stop_never

from acp_client import _observe
from acp_client._logging import get_logger
from acp_client.client import ACPClient, ProtocolVersionOption
from acp_client.client._connect import Connector, Target, open_transport
from acp_client.client.options import Timeouts
from acp_client.client.wire_log import WireRecorder
from acp_client.exceptions import ACPError, ACPTimeoutError, ClientClosed, ConnectionLost, ReconnectFailed
from acp_client.handlers import ClientHandlers
from acp_client.reconnect._backoff import Clock
from acp_client.reconnect._connection.background import ChangeSignal
from acp_client.reconnect._connection.planner import Ended, Plan, ReconnectPlanner
from acp_client.reconnect._events import LEGAL_TRANSITIONS, ClientState, ConnectionDropped, Event, StateChanged
from acp_client.reconnect._roles import Recovery, TaskSpawner
from acp_client.sessions import SessionControl, SessionLink, SessionOwner, SessionRegistry
from acp_client.transports import Transport, TransportOptions

__all__ = ["ConnectionSupervisor"]

log = get_logger("acp_client.reconnect")

_PAUSED = (ClientState.BACKOFF, ClientState.SUSPENDED)


class ConnectionSupervisor:
    """Runs the connect/recover/serve loop and owns its state (see the module docstring)."""

    def __init__(
        self,
        target: Target,
        *,
        transport_options: TransportOptions,
        handlers: ClientHandlers,
        protocol_version: ProtocolVersionOption,
        timeouts: Timeouts,
        client_info: Mapping[str, str] | None,
        clock: Clock,
        planner: ReconnectPlanner,
        registry: SessionRegistry,
        authenticate: Callable[[ACPClient], Awaitable[None]] | None = None,
        session_owner: SessionOwner,
        recovery: Recovery,
        serving: Callable[[str], bool],
        emit: Callable[[Event], None],
        tasks: TaskSpawner,
        changes: ChangeSignal,
        wire: WireRecorder | None = None,
    ) -> None:
        # settings (read only)
        self._target = target
        self._options = transport_options
        self._handlers = handlers
        self._protocol_option = protocol_version
        self._timeouts = timeouts
        self._client_info = client_info
        self._clock = clock
        self._authenticate = authenticate
        self._wire = wire  # the client's wire log, lent to every connection
        # collaborators
        self._planner = planner
        self._registry = registry
        self._session_owner = session_owner
        self._sessions = SessionControl()  # reads only: which sessions are attached
        self._recovery = recovery
        self._serving = serving
        self._emit = emit
        self._tasks = tasks
        self._changes = changes
        # the loop's state: written here only
        self._state = ClientState.IDLE
        self._client: ACPClient | None = None
        self._last_version = 2 if protocol_version != 1 else 1
        self._generation = 0
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._failure: ReconnectFailed | None = None
        self._ever_ready = False
        self._skip_pause_of: int | None = None  # reconnect_now() during this attempt: no backoff after it
        self._manual_cut_of: int | None = None  # reconnect_now() dropped this connection: not a crash
        self._plan: Plan | None = None  # what follows the attempt that just ended

    def __repr__(self) -> str:
        return f"<ConnectionSupervisor {self._state.value} generation={self._generation}>"

    # ------------------------------------------------------------------ read-only view

    @property
    def state(self) -> ClientState:
        """The current lifecycle state."""
        return self._state

    @property
    def generation(self) -> int:
        """How many connection attempts were made."""
        return self._generation

    @property
    def failure(self) -> ReconnectFailed | None:
        """Why the loop is ``FAILED`` or ``SUSPENDED`` (``None`` otherwise)."""
        return self._failure if self._state in (ClientState.FAILED, ClientState.SUSPENDED) else None

    @property
    def current(self) -> ACPClient | None:
        """The per-connection client while connected (its connection may have died a moment ago)."""
        return self._client

    @property
    def protocol_version(self) -> int:
        """The protocol version of the current (or last) connection."""
        return self._client.protocol_version if self._client is not None else self._last_version

    @property
    def running(self) -> bool:
        """``True`` while the loop task exists (started and neither failed nor closed)."""
        return self._task is not None

    def live_client(self) -> ACPClient | None:
        """The current per-connection client, unless its connection already died (the loop has not
        noticed yet: a call must wait for the next one rather than go out on a dead link)."""
        client = self._client
        return client if client is not None and not client.connection.closed else None

    def changed(self) -> asyncio.Event:
        """An event set at the next change of state or of a session's link."""
        return self._changes.event()

    def notify_changed(self) -> None:
        """Wake everything waiting on a change of state or of a session's link."""
        self._changes.notify()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the loop task (once; ``ClientClosed`` after :meth:`aclose`)."""
        if self._state is ClientState.CLOSED:
            raise ClientClosed("this ReconnectingClient was closed; create a new one")
        if self._task is not None:
            return
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="acp-reconnect")

    async def stop(self) -> None:
        """Stop the loop task (the first step of closing the client)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    async def aclose(self) -> None:
        """Close the current connection and enter ``CLOSED`` (after :meth:`stop` and the recoveries)."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        self._set_state(ClientState.CLOSED, reason="closed by the application")

    async def wait_ready(self, timeout: float | None = None, *, first: bool = False) -> None:
        """Wait until the state is ``READY``; see :meth:`~acp_client.ReconnectingClient.wait_ready`."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    changed = self.changed()
                    if self._state is ClientState.READY and self.live_client() is not None:
                        return
                    if self._state is ClientState.FAILED and self._failure is not None:
                        raise self._failure
                    if first and self._state is ClientState.SUSPENDED and self._failure and not self._ever_ready:
                        raise self._failure
                    if self._state is ClientState.CLOSED:
                        raise ClientClosed("the client was closed")
                    await changed.wait()
        except TimeoutError as exc:
            if isinstance(exc, ACPError):
                raise
            raise self._not_ready_in(timeout) from self._planner.last_error

    def _not_ready_in(self, timeout: float | None) -> ACPTimeoutError:
        """The error of a ready wait that ran out: how long it waited, the state, and the last attempt's cause."""
        waited = f"no ready connection within {timeout:g} s ({self._state.value}"
        if self._generation:
            waited += f", {self._generation} attempt{'s' if self._generation != 1 else ''}"
        waited += ")"
        last = self._planner.last_error
        if last is None:
            return ACPTimeoutError(waited)
        return ACPTimeoutError(f"{waited}; last attempt: {last}")

    def reconnect_now(self) -> None:
        """Reconnect without waiting; see :meth:`~acp_client.ReconnectingClient.reconnect_now`."""
        if self._state is ClientState.FAILED:
            self._planner.forgive()
            self._failure = None
            self._skip_pause_of = self._generation + 1
            self._task = asyncio.create_task(self._run(), name="acp-reconnect")
        elif self._state in _PAUSED and self._wake is not None:
            if self._state is ClientState.SUSPENDED:
                self._planner.forgive()
            self._wake.set()
        elif self._state in (ClientState.CONNECTING, ClientState.INITIALIZING):
            self._skip_pause_of = self._generation
        elif self._client is not None:
            log.info("acp.reconnect_requested", generation=self._generation)
            self._manual_cut_of = self._generation
            self._tasks.spawn(self._client.connection.close(), "acp-reconnect-now")

    def network_changed(self) -> None:
        """A network hint; see :meth:`~acp_client.ReconnectingClient.notify_network_changed`."""
        if self._state is ClientState.BACKOFF and self._wake is not None:
            self._wake.set()
            return
        client = self._client
        ping = getattr(client.connection.transport, "ping", None) if client is not None else None
        if client is None or ping is None:
            return

        async def check() -> None:
            try:
                await ping()
            except ConnectionLost:
                pass  # the transport failed the link; the reader and the loop take it from here
            except Exception:
                log.exception("acp.liveness_check_failed")
                await client.connection.close()

        self._tasks.spawn(check(), "acp-liveness-check")

    # ------------------------------------------------------------------ the loop

    def _set_state(
        self,
        new: ClientState,
        *,
        reason: str | None = None,
        attempt: int = 0,
        delay: float | None = None,
        error: BaseException | None = None,
    ) -> None:
        old = self._state
        if old is new:
            return
        if new not in LEGAL_TRANSITIONS[old]:
            raise RuntimeError(f"illegal state transition {old.value} -> {new.value}")
        self._state = new
        cause = error.cause if isinstance(error, ReconnectFailed) else error
        self._emit(
            StateChanged(
                old,
                new,
                reason,
                attempt,
                delay,
                self._generation,
                error=str(cause) if cause is not None else None,
                exit_code=getattr(cause, "exit_code", None),
                stderr_tail=tuple(getattr(cause, "stderr_tail", None) or ()),
            )
        )
        self.notify_changed()

    async def _run(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must surface as FAILED, not as a silently dead task
            log.exception("acp.reconnect_loop_crashed")
            self._fail(ReconnectFailed("internal_error", exc))

    async def _loop(self) -> None:
        """Tenacity runs the attempts: :meth:`_attempt` connects and serves until the connection ends,
        :meth:`_decide` classifies the end and plans the pause, ``before_sleep`` enters ``BACKOFF`` or
        ``SUSPENDED``, and :meth:`_wait` sleeps until the pause is over or ``reconnect_now()`` wakes it.
        The loop only returns when a plan says ``FAILED``."""
        self._planner.start()
        retrying = AsyncRetrying(
            sleep=self._wait,
            stop=stop_never,
            wait=self._planned_delay,
            retry=self._decide,
            before_sleep=self._enter_pause,
        )
        await retrying(self._attempt)
        plan = self._plan
        assert plan is not None and plan.failure is not None
        self._fail(plan.failure)

    async def _attempt(self) -> Ended:
        """One connection: open it (a new generation) and serve it until it ends."""
        self._failure = None  # a suspension is over once the next attempt starts
        self._generation += 1
        generation = self._generation
        self._set_state(ClientState.CONNECTING, attempt=self._planner.attempts)
        # one observed attempt (acp_client.otel): open, initialize and recover, until READY or a failure
        with _observe.connection_attempt(generation, self._planner.attempts) as scope:
            try:
                client = await self._open(generation)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                scope.outcome("failed")
                return Ended(exc, None, generation)
            self._planner.opened()
            await self._recover(client, generation)
            scope.outcome("ready" if not client.connection.closed else "dropped")
        loss, lived = await self._serve(client, generation)
        return Ended(loss, lived, generation)

    def _decide(self, retry_state: RetryCallState) -> bool:
        """Tenacity's ``retry``: classify how the attempt ended and plan what follows (``True``: pause and
        try again; ``False``: stop, as ``FAILED``, or re-raise a bug or a cancellation)."""
        outcome = retry_state.outcome
        if outcome is None or outcome.failed:
            return False
        ended = outcome.result()
        assert isinstance(ended, Ended)
        self._plan = plan = self._planner.after(
            ended,
            manual=self._manual_cut_of == ended.generation,  # reconnect_now() dropped it: not a crash of the agent
            skip_pause=self._skip_pause_of == ended.generation,
            ever_ready=self._ever_ready,
        )
        return plan.state is not ClientState.FAILED

    def _planned_delay(self, retry_state: RetryCallState) -> float:
        """Tenacity's ``wait``: the planned pause (full-jitter backoff honouring server hints, or the
        suspension interval)."""
        assert self._plan is not None
        return self._plan.delay

    def _enter_pause(self, retry_state: RetryCallState) -> None:
        """Tenacity's ``before_sleep``: report the pause as ``BACKOFF`` or ``SUSPENDED``."""
        plan = self._plan
        assert plan is not None
        if plan.state is ClientState.SUSPENDED:
            self._failure = plan.failure
            self._set_state(plan.state, reason=plan.reason, delay=plan.delay, error=plan.failure)
        else:
            self._set_state(plan.state, reason=plan.reason, attempt=plan.attempt, delay=plan.delay, error=plan.cause)

    async def _recover(self, client: ACPClient, generation: int) -> None:
        """Take the new connection and recover the known sessions on it (one round)."""
        if self._skip_pause_of == generation:
            self._skip_pause_of = None  # reconnect_now() spared this attempt only, not its later drop
        self._client = client
        self._last_version = client.protocol_version
        self._set_state(ClientState.RECOVERING)
        if self._authenticate is not None:
            await self._authenticate(client)  # an agent that wants it on every connection gets it before recovery
        todo = [
            s
            for s in self._registry
            if s.link not in (SessionLink.LOST, SessionLink.CLOSED)
            and not self._sessions.attached_to(s, client.connection.id)
            and self._serving(s.id)  # never one another worker serves
        ]
        if todo:
            with _observe.recovery_round(generation, len(todo), client.connection.facts) as scope:
                finished = await self._recovery.run_round(client, todo, generation)
                scope.outcome("complete" if not finished.failed else "partial")
            self._emit(finished)

    async def _serve(self, client: ACPClient, generation: int) -> tuple[ConnectionLost, float]:
        """Be ``READY`` on a recovered connection until it drops; returns the loss and how long the
        connection lived after it became ready."""
        ready_at = self._clock.monotonic()
        if not client.connection.closed:
            self._set_state(ClientState.READY)
            self._ever_ready = True
            loss = await client.connection.wait_closed()
        else:
            loss = client.connection.loss or ConnectionLost()
        lived = self._clock.monotonic() - ready_at
        self._client = None
        await self._recovery.stop_all()
        self._recovery.note_cut(loss.stream_resumption)
        await client.aclose()
        self._emit(ConnectionDropped(loss.reason, loss.close_code, generation, lived, loss.closed_by_client))
        return loss, lived

    def _fail(self, error: ReconnectFailed) -> None:
        self._failure = error
        self._task = None
        self._set_state(ClientState.FAILED, reason=error.reason, error=error)

    async def _wait(self, delay: float) -> None:
        """Tenacity's ``sleep``: ``delay`` seconds, or less if ``reconnect_now()`` / a network hint wakes
        the loop."""
        wake = self._wake
        assert wake is not None
        wake.clear()
        sleeper = asyncio.ensure_future(self._clock.sleep(delay))
        waker = asyncio.ensure_future(wake.wait())
        try:
            await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            waker.cancel()
            await asyncio.wait({sleeper, waker})

    async def _open(self, generation: int) -> ACPClient:
        first: list[Transport] = []

        async def factory() -> Transport:
            return first.pop() if first else await open_transport(self._target, self._options)

        first.append(await open_transport(self._target, self._options))
        self._set_state(ClientState.INITIALIZING)
        connector = Connector(
            factory,
            handlers=self._handlers,
            protocol_version=self._protocol_option,
            timeouts=self._timeouts,
            client_info=self._client_info,
            registry=self._registry,
            session_owner=self._session_owner,
            generation=generation,
            wire=self._wire,
        )
        try:
            return await connector
        finally:
            for leftover in first:  # the factory was never called (initialize not reached)
                await leftover.close()

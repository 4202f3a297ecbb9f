"""The connection loop of a :class:`~acp_client.ReconnectingClient`: connect, recover, serve, classify the loss.

A mixin, so ``_client.py`` keeps the constructor, the read-only view and the lifecycle. One pass of the
loop opens a transport and initializes (a new generation), hands the sessions it should serve to the
:class:`~acp_client.reconnect._recoverer.SessionRecoverer`, is ``READY`` until the connection drops, then
classifies the loss: ``FAILED`` for a fatal verdict, ``SUSPENDED`` when the crash-loop breaker trips,
else ``BACKOFF`` and again. ``reconnect_now()`` and network hints wake its waits early.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from acp_client._logging import get_logger
from acp_client.client import ACPClient, ProtocolVersionOption
from acp_client.client._connect import Connector, Target, open_transport
from acp_client.exceptions import ConnectionLost, ReconnectFailed
from acp_client.reconnect._events import ClientState, ConnectionDropped
from acp_client.sessions import SessionLink
from acp_client.transports import Transport

if TYPE_CHECKING:
    from collections.abc import Mapping

    from acp_client.handlers import ClientHandlers
    from acp_client.reconnect._backoff import Backoff, Clock, CrashLoopBreaker
    from acp_client.reconnect._classify import Classifier
    from acp_client.reconnect._events import EventBus
    from acp_client.reconnect._ownership import SessionOwnership
    from acp_client.reconnect._recoverer import SessionRecoverer
    from acp_client.reconnect.options import RecoveryPolicy, Timeouts
    from acp_client.sessions import SessionRegistry
    from acp_client.transports import TransportOptions

__all__ = ["ConnectionLoop"]

log = get_logger("acp_client.reconnect")


class ConnectionLoop:
    """The connect/recover loop and its pauses (see the module docstring)."""

    # provided by ReconnectingClient
    _target: Target
    _handlers: ClientHandlers
    _protocol_option: ProtocolVersionOption
    _options: TransportOptions
    _timeouts: Timeouts
    _policy: RecoveryPolicy
    _client_info: Mapping[str, str] | None
    _clock: Clock
    _backoff: Backoff
    _breaker: CrashLoopBreaker
    _classify: Classifier
    _registry: SessionRegistry
    _bus: EventBus
    _ownership: SessionOwnership | None
    _recoverer: SessionRecoverer
    _client: ACPClient | None
    _last_version: int
    _generation: int
    _task: asyncio.Task[None] | None
    _wake: asyncio.Event | None
    _failure: ReconnectFailed | None
    _ever_ready: bool
    _skip_pause_of: int | None
    _manual_cut_of: int | None

    if TYPE_CHECKING:  # provided by ReconnectingClient

        def _set_state(self, new: ClientState, *, reason: str | None = None, attempt: int = 0,
                       delay: float | None = None, error: BaseException | None = None) -> None: ...

    async def _run(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must surface as FAILED, not as a silently dead task
            log.exception("acp.reconnect_loop_crashed")
            self._fail(ReconnectFailed("internal_error", exc))

    async def _loop(self) -> None:
        attempt = 0
        auth_retry_used = False
        while True:
            self._generation += 1
            generation = self._generation
            self._set_state(ClientState.CONNECTING, attempt=attempt)
            try:
                client = await self._open(generation)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                verdict = self._classify(exc)
                retry = verdict.retry
                if not retry and verdict.auth and self._options.refreshes_headers and not auth_retry_used:
                    auth_retry_used, retry = True, True  # the header provider gets one chance to refresh
                log.warning("acp.connect_failed", error=str(exc), reason=verdict.reason, generation=generation)
                if not retry:
                    self._fail(ReconnectFailed(verdict.reason, exc))
                    return
                # an agent that dies before initialize completes is a crash, not a slow network
                if isinstance(exc, ConnectionLost) and self._breaker.record(0.0):
                    if not await self._suspend(ReconnectFailed("agent_keeps_dying", exc)):
                        return
                    attempt = 0
                    continue
                attempt += 1
                delay = self._backoff.delay(attempt, verdict.retry_after)
                await self._pause(delay, verdict.reason, attempt, generation)
                continue
            auth_retry_used = False
            if self._skip_pause_of == generation:
                self._skip_pause_of = None  # reconnect_now() spared this attempt only, not its later drop
            self._client = client
            self._last_version = client.protocol_version
            self._set_state(ClientState.RECOVERING)
            todo = [
                s for s in self._registry
                if s.link not in (SessionLink.LOST, SessionLink.CLOSED) and not s._attached_to(client.connection.id)
                and (self._ownership is None or self._ownership.serving(s.id))  # never one another worker serves
            ]
            if todo:
                self._bus.emit(await self._recoverer.run_round(client, todo, generation))
            ready_at = self._clock.monotonic()
            if not client.connection.closed:
                self._set_state(ClientState.READY)
                self._ever_ready = True
                loss = await client.connection.wait_closed()
            else:
                loss = client.connection.loss or ConnectionLost()
            lived = self._clock.monotonic() - ready_at
            self._client = None
            await self._recoverer.stop_all()
            await client.aclose()
            self._bus.emit(ConnectionDropped(loss.reason, loss.close_code, generation, lived, loss.closed_by_client))
            manual = self._manual_cut_of == generation  # reconnect_now() dropped it: not a crash of the agent
            verdict = self._classify(loss)
            if not verdict.retry and not manual:
                self._fail(ReconnectFailed(verdict.reason, loss))
                return
            if not manual and self._breaker.record(lived):
                if not await self._suspend(ReconnectFailed("flapping", loss)):
                    return
                attempt = 0
                continue
            if lived >= self._policy.stable_after:
                attempt = 0
            attempt += 1
            await self._pause(self._backoff.delay(attempt, verdict.retry_after), verdict.reason, attempt, generation)

    def _fail(self, error: ReconnectFailed) -> None:
        self._failure = error
        self._task = None
        self._set_state(ClientState.FAILED, reason=error.reason, error=error)

    async def _suspend(self, error: ReconnectFailed) -> bool:
        """The breaker tripped: ``FAILED`` if never ready (``async with`` raises it), else ``SUSPENDED``
        with a slow retry. Returns ``False`` when the loop must stop."""
        if not self._ever_ready:
            self._fail(error)
            return False
        self._failure = error
        self._set_state(ClientState.SUSPENDED, reason=error.reason, delay=self._policy.suspended_interval, error=error)
        await self._wait(self._policy.suspended_interval)
        self._failure = None
        return True

    async def _pause(self, delay: float, reason: str, attempt: int, generation: int) -> None:
        if self._skip_pause_of == generation:
            delay = 0.0
        self._set_state(ClientState.BACKOFF, reason=reason, attempt=attempt, delay=delay)
        await self._wait(delay)

    async def _wait(self, delay: float) -> None:
        """Sleep ``delay`` seconds, or less if ``reconnect_now()`` / a network hint wakes the loop."""
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
            session_owner=self,
            generation=generation,
        )
        try:
            return await connector
        finally:
            for leftover in first:  # the factory was never called (initialize not reached)
                await leftover.close()

"""Builds the parts of a :class:`~acp_client.ReconnectingClient` and wires them to each other.

:func:`assemble` is the one place that knows which part needs which: it takes the client's settings (already
checked) and returns :class:`ClientParts`, each part owning its own state. The client keeps the parts and
drives them; nothing here holds state after it returns.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from acp_client import _observe
from acp_client._logging import scrub_urls
from acp_client.client._connect import Target
from acp_client.client.wire_log import WireRecorder, as_wire_log
from acp_client.reconnect._backoff import Backoff, CrashLoopBreaker
from acp_client.reconnect._calls.gate import ClientGate
from acp_client.reconnect._calls.recovery_control import RecoveryControl
from acp_client.reconnect._calls.session_calls import SessionCalls
from acp_client.reconnect._connection.auth import Reauthentication
from acp_client.reconnect._connection.background import BackgroundTasks, ChangeSignal
from acp_client.reconnect._connection.planner import ReconnectPlanner
from acp_client.reconnect._connection.supervisor import ConnectionSupervisor
from acp_client.reconnect._events import Event, EventBus, event_name
from acp_client.reconnect._gauges import ClientGauges
from acp_client.reconnect._ownership.control import ClientHost, OwnershipControl
from acp_client.reconnect._ownership.leases import FencedWrites, SessionOwnership
from acp_client.reconnect._recovery.recoverer import SessionRecoverer
from acp_client.reconnect._sessions.keeper import SessionKeeper
from acp_client.reconnect._sessions.links import SessionLinks
from acp_client.reconnect._sessions.store_writer import StoreWriter
from acp_client.reconnect._settings import ClientSettings
from acp_client.sessions import SessionOwner, SessionRegistry, SessionStore, SharedSessionStore
from acp_client.transports import TransportOptions

__all__ = ["ClientParts", "assemble"]


def _serves_all(session_id: str) -> bool:
    return True


@dataclass(frozen=True)
class ClientParts:
    """The parts of one :class:`~acp_client.ReconnectingClient` (see its module docstring for each role)."""

    options: TransportOptions  # the one object every transport of the client reads
    bus: EventBus
    tasks: BackgroundTasks
    ownership: SessionOwnership | None
    writer: StoreWriter
    keeper: SessionKeeper
    auth: Reauthentication
    recoverer: SessionRecoverer
    supervisor: ConnectionSupervisor
    gate: ClientGate
    control: RecoveryControl
    calls: SessionCalls
    owners: OwnershipControl
    host: ClientHost
    wire: WireRecorder | None  # the wire log, lent to every connection; the client closes it


def assemble(target: Target, settings: ClientSettings, *, owner: SessionOwner) -> ClientParts:
    """Build the parts of a client whose sessions are owned by ``owner`` (the client itself)."""

    def generation() -> int:
        return supervisor.generation  # bound late: the supervisor is built below

    users_hook = settings.transport_options.on_stream_resumed

    def stream_resumed(session_id: str | None) -> None:
        """The transport resumed an event stream (see :meth:`SessionKeeper.stream_resumed`); the
        application's own ``on_stream_resumed``, if it gave one, is called after the client's."""
        current = supervisor.current
        how = getattr(current.connection.transport, "stream_resumption", None) if current is not None else None
        keeper.stream_resumed(current, session_id, supervisor.generation, how if isinstance(how, str) else None)
        if users_hook is not None:
            users_hook(session_id)  # a failing hook is logged by the transport that called this one

    options = settings.transport_options.replace(on_stream_resumed=stream_resumed)
    bus, tasks, changes = EventBus(buffer=settings.limits.event_buffer), BackgroundTasks(), ChangeSignal()
    wire_log = as_wire_log("wire_log", settings.wire_log)
    wire = WireRecorder(wire_log) if wire_log is not None else None
    if wire is not None:
        bus.observe(_wire_sink(wire))  # the lifecycle lines: state changes, drops, recoveries
    registry = SessionRegistry()
    backoff = settings.backoff or Backoff(rng=settings.rng)
    ownership, writer = _store(settings, backoff, emit=bus.emit, generation=generation)
    links = SessionLinks(emit=bus.emit, changed=changes.notify)
    keeper = SessionKeeper(
        registry, writer=writer, links=links, strategy=settings.strategy, owner=owner, handlers=settings.handlers
    )
    auth = Reauthentication(settings.on_auth_required, timeout=settings.timeouts.request)
    recoverer = _recoverer(settings, keeper, auth, backoff)
    supervisor = ConnectionSupervisor(
        target,
        transport_options=options,
        handlers=settings.handlers,
        protocol_version=settings.protocol_version,
        timeouts=settings.timeouts,
        client_info=settings.client_info,
        clock=settings.clock,
        planner=_planner(settings, backoff, refreshes_headers=options.refreshes_headers),
        authenticate=auth.on_new_connection,
        registry=registry,
        session_owner=owner,
        recovery=recoverer,
        serving=ownership.serving if ownership is not None else _serves_all,
        emit=bus.emit,
        tasks=tasks,
        changes=changes,
        wire=wire,
    )
    observer = _observe.current()  # an instrumentation installed before this client was made
    if observer is not None:
        bus.observe(observer.watch(ClientGauges(registry, recoverer.limit, supervisor, ownership)))
    return _drivers(settings, options, bus, tasks, ownership, writer, links, keeper, auth, recoverer, supervisor, wire)


def _wire_sink(wire: WireRecorder) -> _observe.EventSink:
    """The bus's events as lifecycle lines of the wire log (``event`` is the event's log name)."""
    def sink(event: object) -> None:
        values: dict[str, Any] = {}
        for spec in fields(event):  # type: ignore[arg-type]  # the bus's events are dataclasses
            value = getattr(event, spec.name)
            if isinstance(value, enum.Enum):
                value = value.value
            elif isinstance(value, str):
                value = scrub_urls(value)
            elif isinstance(value, tuple):  # a stdio agent's stderr tail
                value = [scrub_urls(item) if isinstance(item, str) else item for item in value]
            values[spec.name] = value
        generation = values.pop("generation", None)
        wire.event(event_name(event).removeprefix("acp."), generation, **values)

    return sink


def _store(
    settings: ClientSettings, backoff: Backoff, *, emit: Callable[[Event], None], generation: Callable[[], int]
) -> tuple[SessionOwnership | None, StoreWriter]:
    """The store's writer, and with a store shared by several workers the leases, adoption and hand-over
    (see _ownership.py) that fence its writes."""
    writes: SessionStore = settings.store
    ownership: SessionOwnership | None = None
    if isinstance(writes, SharedSessionStore):
        ownership = SessionOwnership(
            writes,
            should_own=settings.should_own,
            adopt_rate=settings.limits.adopt_per_second,
            adopt_jitter=settings.policy.adopt_jitter,
            rng=settings.rng,
            generation=generation,
        )
        writes = FencedWrites(writes, ownership)
    writer = StoreWriter(
        writes,
        emit=emit,
        generation=generation,
        backoff=backoff,
        clock=settings.clock,
        keep_mcp_secrets=settings.mcp_secrets is None,
    )
    return ownership, writer


def _recoverer(
    settings: ClientSettings, keeper: SessionKeeper, auth: Reauthentication, backoff: Backoff
) -> SessionRecoverer:
    return SessionRecoverer.build(
        keeper,
        policy=settings.policy,
        timeouts=settings.timeouts,
        max_replay=settings.limits.replay_updates,
        mcp_secrets=settings.mcp_secrets,
        backoff=backoff,
        clock=settings.clock,
        rng=settings.rng,
        on_auth_required=auth.hook_once if settings.on_auth_required is not None else None,
    )


def _planner(settings: ClientSettings, backoff: Backoff, *, refreshes_headers: bool) -> ReconnectPlanner:
    policy = settings.policy
    return ReconnectPlanner(
        classifier=settings.classifier,
        backoff=backoff,
        breaker=settings.breaker or CrashLoopBreaker(clock=settings.clock.monotonic),
        stable_after=policy.stable_after,
        suspended_interval=policy.suspended_interval,
        startup_refusals=policy.startup_refusals,
        refreshes_headers=refreshes_headers,
    )


def _drivers(
    settings: ClientSettings,
    options: TransportOptions,
    bus: EventBus,
    tasks: BackgroundTasks,
    ownership: SessionOwnership | None,
    writer: StoreWriter,
    links: SessionLinks,
    keeper: SessionKeeper,
    auth: Reauthentication,
    recoverer: SessionRecoverer,
    supervisor: ConnectionSupervisor,
    wire: WireRecorder | None,
) -> ClientParts:
    """The parts the client calls through, on top of the connection and the recovery built above."""
    session_wait = settings.timeouts.session_wait
    gate = ClientGate(
        supervisor,
        recovery=recoverer,
        ownership=ownership,
        wait_for_ready=settings.wait_for_ready,
        session_wait_timeout=session_wait,
    )
    control = RecoveryControl(
        keeper, recovery=recoverer, connection=supervisor, gate=gate, session_wait_timeout=session_wait
    )
    calls = SessionCalls(
        gate, links=links, ownership=ownership, recover=control.recover, tasks=tasks, dialects=settings.policy.dialects
    )
    host = ClientHost(
        keeper,
        control=control,
        recovery=recoverer,
        connection=supervisor,
        links=links,
        emit=bus.emit,
        tasks=tasks,
        probe_timeout=settings.timeouts.probe,
        probe_concurrency=settings.limits.probe_concurrency,
    )
    return ClientParts(
        options=options,
        bus=bus,
        tasks=tasks,
        ownership=ownership,
        writer=writer,
        keeper=keeper,
        auth=auth,
        recoverer=recoverer,
        supervisor=supervisor,
        gate=gate,
        control=control,
        calls=calls,
        owners=OwnershipControl(ownership, keeper=keeper, recover=control.recover),
        host=host,
        wire=wire,
    )

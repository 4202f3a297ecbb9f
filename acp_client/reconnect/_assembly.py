"""Builds the parts of a :class:`~acp_client.ReconnectingClient` and wires them to each other.

:func:`assemble` is the one place that knows which part needs which: it takes the client's settings (already
checked) and returns :class:`ClientParts`, each part owning its own state. The client keeps the parts and
drives them; nothing here holds state after it returns.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from acp_client import _observe
from acp_client.client import ACPClient, ProtocolVersionOption
from acp_client.client._connect import Target
from acp_client.exceptions import UsageError
from acp_client.handlers import ClientHandlers
from acp_client.reconnect._auth import Reauthentication
from acp_client.reconnect._background import BackgroundTasks, ChangeSignal
from acp_client.reconnect._backoff import Backoff, Clock, CrashLoopBreaker
from acp_client.reconnect._classify import Classifier
from acp_client.reconnect._control import RecoveryControl, SessionKeeper
from acp_client.reconnect._events import EventBus
from acp_client.reconnect._gate import ClientGate
from acp_client.reconnect._gauges import ClientGauges
from acp_client.reconnect._links import SessionLinks
from acp_client.reconnect._ownership import FencedWrites, SessionOwnership
from acp_client.reconnect._ownership_client import ClientHost, OwnershipControl
from acp_client.reconnect._planner import ReconnectPlanner
from acp_client.reconnect._recoverer import SessionRecoverer
from acp_client.reconnect._session_api import SessionCalls
from acp_client.reconnect._store_writer import StoreWriter
from acp_client.reconnect._supervisor import ConnectionSupervisor
from acp_client.reconnect.options import Limits, McpSecrets, RecoveryPolicy, Timeouts
from acp_client.reconnect.strategy import RecoveryStrategy
from acp_client.sessions import MemorySessionStore, SessionOwner, SessionRegistry, SessionStore, SharedSessionStore
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


def assemble(
    target: Target,
    *,
    owner: SessionOwner,
    handlers: ClientHandlers,
    protocol_version: ProtocolVersionOption,
    client_info: Mapping[str, str] | None,
    store: SessionStore | None,
    strategy: RecoveryStrategy,
    should_own: Callable[[str], bool] | None,
    mcp_secrets: McpSecrets | None,
    timeouts: Timeouts,
    policy: RecoveryPolicy,
    limits: Limits,
    transport_options: TransportOptions,
    backoff: Backoff,
    breaker: CrashLoopBreaker | None,
    classifier: Classifier,
    on_auth_required: Callable[[ACPClient], Awaitable[None]] | None,
    wait_for_ready: bool,
    clock: Clock,
    rng: random.Random,
) -> ClientParts:
    """Build the parts of a client whose sessions are owned by ``owner`` (the client itself)."""

    def generation() -> int:
        return supervisor.generation  # bound late: the supervisor is built below

    users_hook = transport_options.on_stream_resumed

    def stream_resumed(session_id: str | None) -> None:
        """The transport resumed an event stream (see :meth:`SessionKeeper.stream_resumed`); the
        application's own ``on_stream_resumed``, if it gave one, is called after the client's."""
        keeper.stream_resumed(supervisor.current, session_id, supervisor.generation)
        if users_hook is not None:
            users_hook(session_id)  # a failing hook is logged by the transport that called this one

    options = transport_options.replace(on_stream_resumed=stream_resumed)
    bus = EventBus(buffer=limits.event_buffer)
    tasks = BackgroundTasks()
    changes = ChangeSignal()
    registry = SessionRegistry()
    # several workers on one shared store: leases, adoption and hand-over (see _ownership.py)
    writes: SessionStore = store if store is not None else MemorySessionStore()
    ownership: SessionOwnership | None = None
    if isinstance(writes, SharedSessionStore):
        ownership = SessionOwnership(writes, should_own=should_own, generation=generation)
        writes = FencedWrites(writes, ownership)
    elif should_own is not None:
        raise UsageError("should_own needs a store shared by several workers (RedisSessionStore)")
    writer = StoreWriter(
        writes,
        emit=bus.emit,
        generation=generation,
        backoff=backoff,
        clock=clock,
        keep_mcp_secrets=mcp_secrets is None,
    )
    links = SessionLinks(emit=bus.emit, changed=changes.notify)
    keeper = SessionKeeper(registry, writer=writer, links=links, strategy=strategy, owner=owner, handlers=handlers)
    auth = Reauthentication(on_auth_required, timeout=timeouts.request)
    recoverer = SessionRecoverer.build(
        keeper,
        policy=policy,
        timeouts=timeouts,
        max_replay=limits.replay_updates,
        mcp_secrets=mcp_secrets,
        backoff=backoff,
        clock=clock,
        rng=rng,
        on_auth_required=auth.hook_once if on_auth_required is not None else None,
    )
    supervisor = ConnectionSupervisor(
        target,
        transport_options=options,
        handlers=handlers,
        protocol_version=protocol_version,
        timeouts=timeouts,
        client_info=client_info,
        clock=clock,
        planner=ReconnectPlanner(
            classifier=classifier,
            backoff=backoff,
            breaker=breaker or CrashLoopBreaker(clock=clock.monotonic),
            stable_after=policy.stable_after,
            suspended_interval=policy.suspended_interval,
            startup_refusals=policy.startup_refusals,
            refreshes_headers=options.refreshes_headers,
        ),
        authenticate=auth.on_new_connection,
        registry=registry,
        session_owner=owner,
        recovery=recoverer,
        serving=ownership.serving if ownership is not None else _serves_all,
        emit=bus.emit,
        tasks=tasks,
        changes=changes,
    )
    gate = ClientGate(
        supervisor,
        recovery=recoverer,
        ownership=ownership,
        wait_for_ready=wait_for_ready,
        session_wait_timeout=timeouts.session_wait,
    )
    control = RecoveryControl(
        keeper, recovery=recoverer, connection=supervisor, gate=gate, session_wait_timeout=timeouts.session_wait
    )
    calls = SessionCalls(
        gate, links=links, ownership=ownership, recover=control.recover, tasks=tasks, dialects=policy.dialects
    )
    host = ClientHost(
        keeper,
        control=control,
        recovery=recoverer,
        connection=supervisor,
        links=links,
        emit=bus.emit,
        tasks=tasks,
        probe_timeout=timeouts.probe,
        probe_concurrency=limits.probe_concurrency,
    )
    observer = _observe.current()  # an instrumentation installed before this client was made
    if observer is not None:
        bus.observe(observer.watch(ClientGauges(registry, recoverer.limit, supervisor)))
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
    )

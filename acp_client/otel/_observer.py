"""The OpenTelemetry observer: spans, metrics and trace context for the hook points of ``acp_client._observe``.

Stable names (documented in docs/topics/observability.md): the span names, the metric names and their
attribute keys below. Semantic-convention names are used where they exist (``rpc.*``, ``jsonrpc.*``,
``server.*``, ``network.transport``, ``error.type``); ours start with ``acp.``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
import weakref
from collections.abc import Generator, Iterable, Mapping
from typing import Final
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.metrics import CallbackOptions, Histogram, MeterProvider, Observation, get_meter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.util.types import AttributeValue

from acp_client import _observe
from acp_client._version import __version__
from acp_client.exceptions import ACPTimeoutError, ConnectionLost, RPCError
from acp_client.reconnect import (
    ClientState,
    ConnectionDropped,
    SessionDetached,
    SessionForgotten,
    SessionRecovered,
    SessionRecoveryFailed,
    SessionTakenOver,
    StateChanged,
)

__all__ = ["OpenTelemetryObserver"]

SCOPE_NAME: Final = "acp_client"

# span names
SPAN_CONNECT: Final = "acp.connect"
SPAN_RECOVERY_ROUND: Final = "acp.recovery_round"
SPAN_SESSION_RECOVERY: Final = "acp.session.recover"

# metric names
M_REQUEST_DURATION: Final = "rpc.client.call.duration"
M_RECONNECTS: Final = "acp.client.reconnects"
M_RECOVERIES: Final = "acp.client.session.recoveries"
M_FORGOTTEN: Final = "acp.client.sessions.forgotten"
M_DROPPED: Final = "acp.client.dropped"
M_RECOVERY_DURATION: Final = "acp.client.session.recovery.duration"
M_ROUND_DURATION: Final = "acp.client.recovery_round.duration"
M_READY_DURATION: Final = "acp.client.ready.duration"
M_SESSIONS: Final = "acp.client.sessions"
M_QUEUE: Final = "acp.client.recovery.queue_depth"
M_INBOUND: Final = "acp.client.inbound.in_flight"

#: ended requests are recorded (spans ended, durations measured) once this many are queued ...
FINISH_BATCH: Final = 64
#: ... or this many seconds after the first one was (see _Finisher)
FINISH_DELAY: Final = 0.05

_PAUSES = (ClientState.BACKOFF, ClientState.SUSPENDED, ClientState.FAILED)


class _Peer:
    """The attributes of one peer description (a URL, or an agent's command line), computed once."""

    __slots__ = ("attributes", "span_attributes", "transport")

    def __init__(self, peer: str) -> None:
        parts = urlsplit(peer) if "://" in peer else None
        attributes: dict[str, AttributeValue] = {}
        if parts is not None and parts.scheme in ("ws", "wss", "http", "https"):
            self.transport = "websocket" if parts.scheme in ("ws", "wss") else "http"
            if parts.hostname:
                attributes["server.address"] = parts.hostname
            if parts.port is not None:
                attributes["server.port"] = parts.port
        elif peer.startswith("memory:"):
            self.transport = "memory"
        else:
            self.transport = "stdio"
        #: on metrics: the fewest that tell series apart (each one costs on every record)
        self.attributes: dict[str, AttributeValue] = {"rpc.system.name": "jsonrpc", **attributes}
        attributes["acp.transport"] = self.transport
        #: on spans
        self.span_attributes: dict[str, AttributeValue] = {"rpc.system.name": "jsonrpc", **attributes}


def _error_type(error: BaseException) -> str:
    """``error.type``: the JSON-RPC error code for an error answer (as MCP's conventions do), else the
    exception's class name."""
    if isinstance(error, RPCError):
        return str(error.code)
    return type(error).__qualname__


def _outcome(error: BaseException | None) -> str:
    if error is None:
        return "ok"
    if isinstance(error, RPCError):
        return "error"
    if isinstance(error, ACPTimeoutError):
        return "timeout"
    if isinstance(error, ConnectionLost):
        return "connection_lost"
    if isinstance(error, BaseException) and not isinstance(error, Exception):
        return "cancelled"
    return "failed"


class _RequestKind:
    """What every request of one method on one link shares, computed once: the span's attributes (without
    the session id), the duration histogram's attributes, and whether the span must be the current one
    while the request is written (an HTTP POST reads it for its headers; nothing else does)."""

    __slots__ = ("attach", "duration", "metric_attributes", "ok_span_attributes", "span_attributes")

    def __init__(self, method: str, peer: _Peer, protocol_version: int, duration: Histogram) -> None:
        self.duration = duration
        self.span_attributes: dict[str, AttributeValue] = {"rpc.method": method, **peer.span_attributes}
        if protocol_version:
            self.span_attributes["acp.protocol.version"] = protocol_version
        #: an answered request's: never changed (one with a session id sets a copy)
        self.ok_span_attributes: dict[str, AttributeValue] = {**self.span_attributes, "acp.outcome": "ok"}
        #: shared by every request of this kind: never changed (a failure records a copy)
        self.metric_attributes: dict[str, AttributeValue] = {"rpc.method": method, **peer.attributes}
        self.attach = peer.transport == "http"


class _RequestScope:
    """One request in flight. Its span was started before the frame was written (the frame carries the
    span's ``traceparent``); everything else (the span's attributes, outcome, status and end, and the
    duration measurement) is recorded after the caller got its answer, by :class:`_Finisher`."""

    __slots__ = ("_context", "_finisher", "_kind", "_session_id", "_span", "_started", "_token")

    def __init__(
        self,
        finisher: _Finisher,
        kind: _RequestKind,
        span: Span | None,
        session_id: object,
        token: object,
        context: otel_context.Context,
    ) -> None:
        self._finisher = finisher
        self._context = context  # the caller's: the measurement's (an exemplar links to the caller's trace)
        self._kind = kind
        self._span = span
        self._session_id = session_id
        self._token = token
        self._started = time.perf_counter()

    def end(self, error: BaseException | None) -> None:
        elapsed = time.perf_counter() - self._started
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
        self._finisher.defer(self, error, time.time_ns(), elapsed)

    def finish(self, error: BaseException | None, end_ns: int, elapsed: float) -> None:
        """Record what :meth:`end` noted: the span's attributes and end, and the duration measurement."""
        kind = self._kind
        span = self._span
        if error is None:
            metric_attributes = kind.metric_attributes
        else:
            metric_attributes = {**kind.metric_attributes, "error.type": _error_type(error)}
        if span is not None:
            if error is None:
                attributes = kind.ok_span_attributes
            else:
                code = metric_attributes["error.type"]
                attributes = {**kind.span_attributes, "acp.outcome": _outcome(error), "error.type": code}
                if isinstance(error, RPCError):
                    attributes["rpc.response.status_code"] = code
                span.set_status(Status(StatusCode.ERROR, str(error)[:200]))
            if isinstance(self._session_id, str):
                attributes = {**attributes, "acp.session.id": self._session_id}
            span.set_attributes(attributes)
            span.end(end_time=end_ns)
        kind.duration.record(elapsed, metric_attributes, context=self._context)


class _Finisher:
    """Records ended requests off their latency path, in batches.

    :meth:`_RequestScope.end` runs in the caller's task between the answer and the caller's next step; it
    only notes the end time and queues the scope here. The queue is drained on the loop where requests end,
    :data:`FINISH_DELAY` seconds after the first one queued (in the loop's idle time when requests are few)
    or as soon as the loop is free once :data:`FINISH_BATCH` are queued (when they come fast), and by
    :meth:`flush`. Recording many in a row is what makes it cheaper, not only later: the SDK's code and data
    stay in the CPU caches, where one span and one measurement recorded between two round trips ran several
    times slower than in a tight loop (P3 measured ~20 µs less client CPU per request, and a ~50 µs lower
    p50; a drain after every request, by ``call_soon``, gained nothing). The queue is shared by every loop
    (a ``deque`` is safe to append to and pop from several threads)."""

    def __init__(self, batch: int, delay: float) -> None:
        self._batch = batch
        self._delay = delay
        self._queue: collections.deque[tuple[_RequestScope, BaseException | None, int, float]] = (
            collections.deque()
        )
        #: the loops with a drain scheduled: ``True`` when it is an immediate one
        self._armed: dict[asyncio.AbstractEventLoop, bool] = {}

    def defer(self, scope: _RequestScope, error: BaseException | None, end_ns: int, elapsed: float) -> None:
        queue = self._queue
        queue.append((scope, error, end_ns, elapsed))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on a loop: nothing would drain it later
            self.flush()
            return
        armed = self._armed.get(loop)
        if armed is None:
            self._armed[loop] = False
            loop.call_later(self._delay, self._drain, loop)
        elif not armed and len(queue) >= self._batch:
            self._armed[loop] = True
            loop.call_soon(self._drain, loop)

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._armed.pop(loop, None) is not None:  # the other of a timed and an immediate drain is moot
            self.flush()

    def flush(self) -> None:
        """Record every ended request still queued, now."""
        for loop in [loop for loop in self._armed if loop.is_closed()]:  # a drain that will never run
            self._armed.pop(loop, None)
        queue = self._queue
        while queue:
            try:
                scope, error, end_ns, elapsed = queue.popleft()
            except IndexError:  # another thread drained it
                return
            scope.finish(error, end_ns, elapsed)


class _Scope:
    __slots__ = ("_span", "value")

    def __init__(self, span: Span) -> None:
        self._span = span
        self.value: str | None = None

    def outcome(self, value: str) -> None:
        self.value = value
        self._span.set_attribute("acp.outcome", value)


class _ClientSink:
    """One client's event sink and gauges (weakly held by the observer, strongly by the client's bus)."""

    def __init__(self, observer: OpenTelemetryObserver, gauges: _observe.ClientGauges) -> None:
        self._observer = observer
        self.gauges = gauges
        self.closed = False
        self._pause_reason: str | None = None
        self._not_ready_since: float | None = None
        self._ever_ready = False

    def __call__(self, event: object) -> None:
        obs = self._observer
        if isinstance(event, StateChanged):
            new = event.new
            if new is ClientState.CONNECTING:
                if self._not_ready_since is None:
                    self._not_ready_since = time.monotonic()
                if event.old in _PAUSES or event.old is ClientState.READY:
                    reason = self._pause_reason or "unknown"
                    obs._reconnects.add(1, {"acp.reconnect.reason": reason})
            elif new in _PAUSES:
                self._pause_reason = event.reason or "unknown"
                if self._not_ready_since is None:
                    self._not_ready_since = time.monotonic()
            elif new is ClientState.READY:
                if self._not_ready_since is not None:
                    first = not self._ever_ready
                    obs._ready_duration.record(time.monotonic() - self._not_ready_since, {"acp.ready.first": first})
                self._not_ready_since = None
                self._ever_ready = True
            elif new is ClientState.CLOSED:
                self.closed = True
        elif isinstance(event, ConnectionDropped):
            if not event.closed_by_client and self._not_ready_since is None:
                self._not_ready_since = time.monotonic()
            self._pause_reason = event.reason or "connection_lost"
        elif isinstance(event, SessionRecovered):
            obs._recoveries.add(1, {"acp.recovery.outcome": event.outcome, "acp.recovery.path": event.path})
        elif isinstance(event, SessionRecoveryFailed):
            obs._recoveries.add(1, {"acp.recovery.outcome": "failed", "acp.recovery.path": "ladder"})
        elif isinstance(event, SessionDetached):
            obs._recoveries.add(1, {"acp.recovery.outcome": "kept", "acp.recovery.path": "ladder"})
        elif isinstance(event, SessionTakenOver):
            obs._recoveries.add(1, {"acp.recovery.outcome": "taken_over", "acp.recovery.path": event.reason})
        elif isinstance(event, SessionForgotten):
            obs._forgotten.add(1, {"acp.forget.reason": event.reason})


class OpenTelemetryObserver:
    """The :class:`acp_client._observe.Observer` that reports to OpenTelemetry (see the module docstring)."""

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        propagate_context: bool = True,
    ) -> None:
        self.propagate_context = propagate_context
        self._tracer = trace.get_tracer(SCOPE_NAME, __version__, tracer_provider=tracer_provider)
        meter = get_meter(SCOPE_NAME, __version__, meter_provider=meter_provider)
        self._clients: weakref.WeakSet[_ClientSink] = weakref.WeakSet()
        self._peers: dict[str, _Peer] = {}
        self._kinds: dict[tuple[str, int, str], _RequestKind] = {}
        self._finisher = _Finisher(FINISH_BATCH, FINISH_DELAY)
        self._request_duration = meter.create_histogram(
            M_REQUEST_DURATION, unit="s", description="Duration of a client->agent request, by method"
        )
        self._reconnects = meter.create_counter(
            M_RECONNECTS, unit="{reconnect}", description="Connection attempts after a drop or failure, by reason"
        )
        self._recoveries = meter.create_counter(
            M_RECOVERIES, unit="{session}", description="Session recovery outcomes"
        )
        self._forgotten = meter.create_counter(
            M_FORGOTTEN, unit="{session}", description="Sessions forgotten for good, by reason"
        )
        self._dropped = meter.create_counter(
            M_DROPPED, unit="{item}", description="Events or updates a slow reader lost"
        )
        self._recovery_duration = meter.create_histogram(
            M_RECOVERY_DURATION, unit="s", description="One attempt at recovering one session"
        )
        self._round_duration = meter.create_histogram(
            M_ROUND_DURATION, unit="s", description="One recovery round over the sessions of a new connection"
        )
        self._ready_duration = meter.create_histogram(
            M_READY_DURATION, unit="s", description="From a start or a drop to READY"
        )
        meter.create_observable_up_down_counter(
            M_SESSIONS, [self._sessions], unit="{session}", description="Known sessions, by link state"
        )
        meter.create_observable_up_down_counter(
            M_QUEUE, [self._queue], unit="{request}", description="Recovery requests waiting for a slot"
        )
        meter.create_observable_up_down_counter(
            M_INBOUND, [self._inbound], unit="{request}", description="Agent->client requests in flight"
        )

    # ------------------------------------------------------------------ requests

    def _peer(self, peer: str) -> _Peer:
        found = self._peers.get(peer)
        if found is None:
            if len(self._peers) > 1024:
                self._peers.clear()
            found = self._peers[peer] = _Peer(peer)
        return found

    def request(self, method: str, params: object, link: _observe.LinkFacts) -> tuple[object, _RequestScope]:
        """Start the request's span (a child of the current context; made current itself only on HTTP links,
        whose POST headers read it), and put its trace context into ``params._meta``.

        Only what the frame needs is done here: the span is started bare and its ``traceparent`` formatted;
        its attributes are set when it is recorded, after the answer (see :class:`_Finisher`), so a sampler
        sees its name (the method) and kind only. A span the sampler dropped costs nothing more."""
        key = (link.peer, link.protocol_version, method)
        kind = self._kinds.get(key)
        if kind is None:
            kind = self._kind(key)
        caller = otel_context.get_current()
        span = self._tracer.start_span(method, kind=SpanKind.CLIENT, context=caller)
        token = otel_context.attach(trace.set_span_in_context(span, caller)) if kind.attach else None
        if self.propagate_context and (params is None or isinstance(params, Mapping)):
            params = _with_trace_meta(params, span)
        if not span.is_recording():  # the sampler dropped it: only the duration is measured
            return params, _RequestScope(self._finisher, kind, None, None, token, caller)
        if isinstance(params, dict):  # every request the library makes; any other Mapping takes the slow path
            session_id = params.get("sessionId")
        else:
            session_id = params.get("sessionId") if isinstance(params, Mapping) else None
        return params, _RequestScope(self._finisher, kind, span, session_id, token, caller)

    def _kind(self, key: tuple[str, int, str]) -> _RequestKind:
        if len(self._kinds) > 4096:
            self._kinds.clear()
        peer, version, method = key
        kind = self._kinds[key] = _RequestKind(method, self._peer(peer), version, self._request_duration)
        return kind

    def outgoing_headers(self) -> list[tuple[str, str]]:
        """``traceparent``/``tracestate`` (and whatever the global propagator writes) of the current context."""
        if not self.propagate_context:
            return []
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return list(carrier.items())

    def flush(self) -> None:
        """End the spans and record the durations of requests that ended but are not recorded yet."""
        self._finisher.flush()

    # ------------------------------------------------------------------ scopes

    @contextlib.contextmanager
    def _scope(
        self, name: str, attributes: Mapping[str, AttributeValue], histogram: Histogram | None
    ) -> Generator[_observe.Scope]:
        started = time.perf_counter()
        scope: _Scope | None = None
        error: BaseException | None = None
        with self._tracer.start_as_current_span(
            name, attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as span:
            scope = _Scope(span)
            try:
                yield scope
            except BaseException as exc:
                error = exc
                kind = _error_type(exc)
                span.set_attribute("error.type", kind)
                if scope.value is None:
                    scope.outcome(_outcome(exc))
                if isinstance(exc, Exception):
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
                raise
            finally:
                if histogram is not None:
                    labels: dict[str, AttributeValue] = {"acp.outcome": scope.value or "unknown"}
                    if error is not None:
                        labels["error.type"] = _error_type(error)
                    histogram.record(time.perf_counter() - started, labels)

    def connection_attempt(self, generation: int, attempt: int) -> contextlib.AbstractContextManager[_observe.Scope]:
        """The span of one connection attempt (open, initialize, recover)."""
        return self._scope(SPAN_CONNECT, {"acp.generation": generation, "acp.attempt": attempt}, None)

    def recovery_round(
        self, generation: int, sessions: int, link: _observe.LinkFacts
    ) -> contextlib.AbstractContextManager[_observe.Scope]:
        """The span of one recovery round."""
        attributes: dict[str, AttributeValue] = {
            "acp.generation": generation,
            "acp.sessions": sessions,
            "acp.protocol.version": link.protocol_version,
            **self._peer(link.peer).span_attributes,
        }
        return self._scope(SPAN_RECOVERY_ROUND, attributes, self._round_duration)

    def session_recovery(
        self, session_id: str, attempt: int, generation: int, link: _observe.LinkFacts
    ) -> contextlib.AbstractContextManager[_observe.Scope]:
        """The span of one attempt at recovering one session."""
        attributes: dict[str, AttributeValue] = {
            "acp.session.id": session_id,
            "acp.recovery.attempt": attempt,
            "acp.generation": generation,
            "acp.protocol.version": link.protocol_version,
            **self._peer(link.peer).span_attributes,
        }
        return self._scope(SPAN_SESSION_RECOVERY, attributes, self._recovery_duration)

    # ------------------------------------------------------------------ events and gauges

    def watch(self, client: _observe.ClientGauges) -> _observe.EventSink:
        """A new client: its events feed the counters, its gauges the up-down counters."""
        sink = _ClientSink(self, client)
        self._clients.add(sink)
        return sink

    def dropped(self, kind: str, count: int) -> None:
        """A slow reader lost ``count`` events or updates."""
        self._dropped.add(count, {"acp.dropped.kind": kind})

    def _live(self) -> list[_ClientSink]:
        return [sink for sink in list(self._clients) if not sink.closed]

    def _sessions(self, options: CallbackOptions) -> Iterable[Observation]:
        totals: dict[str, int] = {}
        for sink in self._live():
            for link, count in sink.gauges.sessions_by_link().items():
                totals[link] = totals.get(link, 0) + count
        return [Observation(count, {"acp.session.link": link}) for link, count in totals.items()]

    def _queue(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(sum(sink.gauges.recovery_queue_depth() for sink in self._live()))]

    def _inbound(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(sum(sink.gauges.inbound_in_flight() for sink in self._live()))]


def _with_trace_meta(params: Mapping[str, object] | None, span: Span) -> Mapping[str, object] | None:
    """A copy of ``params`` whose ``_meta`` also holds ``span``'s W3C trace context (``traceparent``, and
    ``tracestate`` when there is one: MCP's carrier); the caller's objects are not changed. Formatted here
    rather than by the global propagator: the conventions name exactly these two keys, and it is the
    request path's hottest step."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return params
    traceparent = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
    if params is None:
        out: dict[str, object] = {}
        meta = None
    else:
        out = dict(params)
        meta = out.get("_meta")
    if meta is None and not ctx.trace_state:  # the usual case: nothing to merge
        out["_meta"] = {"traceparent": traceparent}
        return out
    merged = dict(meta) if isinstance(meta, Mapping) else {}
    merged["traceparent"] = traceparent
    if ctx.trace_state:
        merged["tracestate"] = ctx.trace_state.to_header()
    out["_meta"] = merged
    return out

"""The OpenTelemetry observer: spans, metrics and trace context for the hook points of ``acp_client._observe``.

Stable names (documented in docs/topics/observability.md): the span names, the metric names and their
attribute keys below. Semantic-convention names are used where they exist (``rpc.*``, ``jsonrpc.*``,
``server.*``, ``network.transport``, ``error.type``); ours start with ``acp.``.
"""

from __future__ import annotations

import contextlib
import re
import time
import weakref
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import Final

from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.metrics import CallbackOptions, Histogram, Meter, MeterProvider, Observation, get_meter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.util.types import AttributeValue

from acp_client import _observe
from acp_client._version import __version__
from acp_client.otel._requests import (
    FINISH_BATCH,
    FINISH_DELAY,
    Finisher,
    Peer,
    RequestKind,
    RequestScope,
    TimedScope,
    error_type,
    outcome_of,
)
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
M_OWNED: Final = "acp.client.ownership.sessions"
M_RENEWED: Final = "acp.client.ownership.leases_renewed"
M_LOST: Final = "acp.client.ownership.leases_lost"
M_HANDOVERS: Final = "acp.client.ownership.handovers"
M_RENEW_FAILURES: Final = "acp.client.ownership.renewal_failures"
#: the attribute naming the worker (its ``owner_id`` in the shared store) on the ownership metrics
A_OWNER: Final = "acp.owner.id"

_PAUSES = (ClientState.BACKOFF, ClientState.SUSPENDED, ClientState.FAILED)
#: What a reason must look like to become a metric attribute: a name (``close_4500``, ``http_503``,
#: ``flapping``, an exception class), never text. Anything else is counted as ``other``: one series, and
#: no text from the agent (a close reason) or personal data in a label.
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,47}")


def _label(reason: str | None, default: str) -> str:
    """``reason`` as a metric attribute value: a name, ``default`` when absent, ``other`` when not a name."""
    if not reason:
        return default
    return reason if _NAME.fullmatch(reason) else "other"


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
                    obs._reconnects.add(1, {"acp.reconnect.reason": self._pause_reason or "unknown"})
            elif new in _PAUSES:
                self._pause_reason = _label(event.reason, "unknown")
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
            # the close code, never the close reason: that is the agent's own text
            self._pause_reason = "connection_lost" if event.close_code is None else f"close_{event.close_code}"
        elif isinstance(event, SessionRecovered):
            obs._recoveries.add(1, {"acp.recovery.outcome": event.outcome, "acp.recovery.path": event.path})
        elif isinstance(event, SessionRecoveryFailed):
            obs._recoveries.add(1, {"acp.recovery.outcome": "failed", "acp.recovery.path": "ladder"})
        elif isinstance(event, SessionDetached):
            obs._recoveries.add(1, {"acp.recovery.outcome": "kept", "acp.recovery.path": "ladder"})
        elif isinstance(event, SessionTakenOver):
            path = _label(event.reason, "unknown")
            obs._recoveries.add(1, {"acp.recovery.outcome": "taken_over", "acp.recovery.path": path})
        elif isinstance(event, SessionForgotten):
            obs._forgotten.add(1, {"acp.forget.reason": _label(event.reason, "unknown")})


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
        self._peers: dict[str, Peer] = {}
        self._kinds: dict[tuple[str, int, str], RequestKind] = {}
        self._finisher = Finisher(FINISH_BATCH, FINISH_DELAY)
        self._request_duration = meter.create_histogram(
            M_REQUEST_DURATION, unit="s", description="Duration of a client->agent request, by method"
        )
        self._reconnects = meter.create_counter(
            M_RECONNECTS, unit="{reconnect}", description="Connection attempts after a drop or failure, by reason"
        )
        self._recoveries = meter.create_counter(M_RECOVERIES, unit="{session}", description="Session recovery outcomes")
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
        self._ownership_metrics(meter)

    def _ownership_metrics(self, meter: Meter) -> None:
        """The per-worker gauges of a client on a store shared by several workers (``acp.owner.id``)."""
        meter.create_observable_up_down_counter(
            M_OWNED, [self._owned("owned")], unit="{session}", description="Sessions this worker holds a lease on"
        )
        for name, key, unit, description in (
            (M_RENEWED, "renewed", "{lease}", "Lease renewals that succeeded"),
            (M_LOST, "lost", "{lease}", "Leases a renewal found lost (taken, expired, or the store's data lost)"),
            (M_HANDOVERS, "adopted", "{session}", "Sessions taken over from another worker (dead or releasing)"),
            (M_RENEW_FAILURES, "renew_failures", "{round}", "Renewal rounds that failed or ran past their deadline"),
        ):
            meter.create_observable_counter(name, [self._owned(key)], unit=unit, description=description)

    # ------------------------------------------------------------------ requests

    def _peer(self, peer: str) -> Peer:
        found = self._peers.get(peer)
        if found is None:
            if len(self._peers) > 1024:
                self._peers.clear()
            found = self._peers[peer] = Peer(peer)
        return found

    def request(
        self, method: str, params: object, link: _observe.LinkFacts
    ) -> tuple[object, RequestScope | TimedScope]:
        """Start the request's span (a child of the current context; made current itself only on HTTP links,
        whose POST headers read it), and put its trace context into ``params._meta``.

        Only what the frame needs is done here: the span is started bare and its ``traceparent`` formatted;
        its attributes are set when it is recorded, after the answer (see :class:`Finisher`), so a sampler
        sees its name (the method) and kind only. A span the sampler dropped costs nothing more.

        A dropped span that would start a trace (the caller is in none) carries no trace context: there is
        no trace to continue, and the 55 characters of ``_meta`` cost the round trip more than the rest of a
        dropped span (P3: a parent-based 1 % sampler cost 1.15x the p50 with them, 1.09x without). The
        agent's own sampler decides for its side then. Inside the application's trace, sampled or not, the
        context always goes along, and with it the application's decision."""
        key = (link.peer, link.protocol_version, method)
        kind = self._kinds.get(key)
        if kind is None:
            kind = self._kind(key)
        caller = otel_context.get_current()
        span = self._tracer.start_span(method, kind=SpanKind.CLIENT, context=caller)
        if not span.is_recording():  # the sampler dropped it: only the duration is measured
            if not trace.get_current_span(caller).get_span_context().is_valid:  # a trace that never was
                return params, TimedScope(self._finisher, kind)
            token = otel_context.attach(trace.set_span_in_context(span, caller)) if kind.attach else None
            if self.propagate_context and (params is None or isinstance(params, Mapping)):
                params = _with_trace_meta(params, span, caller)
            return params, RequestScope(self._finisher, kind, None, None, token, caller)
        token = otel_context.attach(trace.set_span_in_context(span, caller)) if kind.attach else None
        if self.propagate_context and (params is None or isinstance(params, Mapping)):
            params = _with_trace_meta(params, span, caller)
        if isinstance(params, dict):  # every request the library makes; any other Mapping takes the slow path
            session_id = params.get("sessionId")
        else:
            session_id = params.get("sessionId") if isinstance(params, Mapping) else None
        return params, RequestScope(self._finisher, kind, span, session_id, token, caller)

    def _kind(self, key: tuple[str, int, str]) -> RequestKind:
        if len(self._kinds) > 4096:
            self._kinds.clear()
        peer, version, method = key
        kind = self._kinds[key] = RequestKind(method, self._peer(peer), version, self._request_duration)
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
                kind = error_type(exc)
                span.set_attribute("error.type", kind)
                if scope.value is None:
                    scope.outcome(outcome_of(exc))
                if isinstance(exc, Exception):
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
                raise
            finally:
                if histogram is not None:
                    labels: dict[str, AttributeValue] = {"acp.outcome": scope.value or "unknown"}
                    if error is not None:
                        labels["error.type"] = error_type(error)
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

    def _owned(self, key: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        """The callback reading figure ``key`` of every live client's ownership, by worker."""

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            totals: dict[str, int] = {}
            for sink in self._live():
                figures = sink.gauges.ownership()
                if figures is not None:
                    owner = str(figures["owner"])
                    totals[owner] = totals.get(owner, 0) + int(figures[key])
            return [Observation(value, {A_OWNER: owner}) for owner, value in totals.items()]

        return observe


_BAGGAGE: Final = W3CBaggagePropagator()


def _baggage_header(caller: otel_context.Context) -> str | None:
    """The W3C ``baggage`` header of the application's context, ``None`` when it carries no baggage."""
    if not baggage.get_all(caller):
        return None
    carrier: dict[str, str] = {}
    _BAGGAGE.inject(carrier, context=caller)
    return carrier.get("baggage") or None


def _with_trace_meta(
    params: Mapping[str, object] | None, span: Span, caller: otel_context.Context | None = None
) -> Mapping[str, object] | None:
    """A copy of ``params`` whose ``_meta`` also holds ``span``'s W3C trace context (``traceparent``, and
    ``tracestate`` when there is one: MCP's carrier) and the application's ``baggage`` when ``caller`` (its
    context) has some (ACP reserves all three root keys of ``_meta``); the caller's objects are not changed.
    Formatted here rather than by the global propagator: the conventions name exactly these keys, and it is
    the request path's hottest step."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return params
    traceparent = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
    carried = _baggage_header(caller) if caller is not None else None
    if params is None:
        out: dict[str, object] = {}
        meta = None
    else:
        out = dict(params)
        meta = out.get("_meta")
    if meta is None and not ctx.trace_state and carried is None:  # the usual case: nothing to merge
        out["_meta"] = {"traceparent": traceparent}
        return out
    merged = dict(meta) if isinstance(meta, Mapping) else {}
    merged["traceparent"] = traceparent
    if ctx.trace_state:
        merged["tracestate"] = ctx.trace_state.to_header()
    if carried is not None:
        merged["baggage"] = carried
    out["_meta"] = merged
    return out

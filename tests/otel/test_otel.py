"""The otel extra over real loopback links to the reference agent: spans and their parent/child links,
trace context as the agent received it (``params._meta`` and the HTTP/WebSocket headers), and metric values
after a scripted scenario. Without the extra, ``import acp_client`` imports no OpenTelemetry."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceFlags,
    TraceState,
    format_span_id,
    format_trace_id,
)

import acp_client.otel
from acp_client import (
    Limits,
    ReconnectingClient,
    RecoveryPolicy,
    SessionNotFound,
    SessionRecovered,
    connect,
    sync,
)
from acp_client.exceptions import RPCError
from acp_client.otel._requests import FINISH_BATCH
from acp_client.reconnect import Verdict
from acp_client.schema import models_for
from acp_client.sessions import RedisSessionStore
from acp_client.testing import AgentThread, ReferenceAgent
from tests.conftest import Link, RedisServers, bound, over_links, started

link = over_links("ws", "http1", "h2c")

# Both versions' generated models, imported now rather than on the loop in the middle of a test: a v1 client's
# first session/status answer builds the status model, which imports the v2 models (about 0.3 s of CPU, 10 to
# 16 s on a loaded 2-core machine with four workers). In a fresh worker that stall outlasted the probe's own
# 10 s bound (an extra 'timeout' recovery span) or the wait for READY; these tests are about spans, not that.
models_for(1), models_for(2)


@dataclass
class Telemetry:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider
    instrumentation: acp_client.otel.Instrumentation

    def finished(self, name: str) -> list[ReadableSpan]:
        self.instrumentation.flush()  # request spans are recorded in batches, after their answers
        return [s for s in self.spans.get_finished_spans() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.finished(name)
        assert len(found) == 1, [s.name for s in self.spans.get_finished_spans()]
        return found[0]

    def by(self, metric: str, key: str) -> dict[Any, Any]:
        """A sum metric's values by one attribute."""
        return {dict(p.attributes)[key]: p.value for p in self.points(metric)}

    def points(self, metric: str) -> list[Any]:
        self.instrumentation.flush()
        data = self.metrics.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for m in scope.metrics
            if m.name == metric
            for point in m.data.data_points
        ]


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    instrumentation = acp_client.otel.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        yield Telemetry(spans, reader, tracer_provider, instrumentation)
    finally:
        instrumentation.uninstrument()
        meter_provider.shutdown()
        tracer_provider.shutdown()


def traceparent_of(span: ReadableSpan) -> str:
    """``traceparent`` without its flags (``version-trace_id-parent_id``)."""
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{format_trace_id(ctx.trace_id)}-{format_span_id(ctx.span_id)}"


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    ctx = span.get_span_context()
    assert ctx is not None
    return ctx.span_id


async def test_prompt_span_is_a_child_of_the_callers_span_and_reaches_the_agent_in_both_carriers(
    telemetry: Telemetry, link: Link, agent: ReferenceAgent, version: int
) -> None:
    tracer = telemetry.tracer_provider.get_tracer("app")
    client, rec = await started(link.url(agent), **link.options)
    try:
        session = await client.new_session("/w")
        with tracer.start_as_current_span("user turn") as turn:
            result = await asyncio.wait_for(session.prompt("echo: traced"), bound(5))
        assert result.stop_reason == "end_turn"
    finally:
        await rec.close()
        await client.aclose()

    prompt = telemetry.one("session/prompt")
    assert prompt.kind is SpanKind.CLIENT
    assert parent_id(prompt) == turn.get_span_context().span_id
    attributes = dict(prompt.attributes or {})
    assert attributes["rpc.system.name"] == "jsonrpc"
    assert attributes["rpc.method"] == "session/prompt"
    assert attributes["acp.session.id"] == session.id
    assert attributes["acp.protocol.version"] == version
    assert attributes["acp.transport"] == ("http" if link.http else "websocket")
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["acp.outcome"] == "ok"
    assert "error.type" not in attributes

    # the agent received the prompt span's context in params._meta, and over HTTP in the POST's headers
    expected = traceparent_of(prompt)
    carried = {
        (t.carrier, t.traceparent.rsplit("-", 1)[0]) for t in agent.trace_contexts if t.method == "session/prompt"
    }
    assert ("meta", expected) in carried
    if link.http:
        assert ("http", expected) in carried
    else:
        # the WebSocket handshake carried the connection attempt's context
        connect_span = telemetry.one("acp.connect")
        handshakes = [t.traceparent.rsplit("-", 1)[0] for t in agent.trace_contexts if t.carrier == "websocket"]
        assert handshakes == [traceparent_of(connect_span)]
        # and the initialize request is a child of that attempt
        assert parent_id(telemetry.one("initialize")) == span_id(connect_span)


async def test_cut_and_recovery_spans_nest_attempt_round_session_and_requests(
    telemetry: Telemetry, link: Link, agent: ReferenceAgent, version: int
) -> None:
    client, rec = await started(link.url(agent), **link.options)
    try:
        sessions = [await client.new_session(f"/w/{i}") for i in range(2)]
        await agent.drop_all_connections()
        await rec.ready_count(2, timeout=20)  # READY again once the round is over (a loaded machine is slow)
        assert {e.session_id for e in rec.of(SessionRecovered)} == {s.id for s in sessions}
    finally:
        await rec.close()
        await client.aclose()

    attempts = telemetry.finished("acp.connect")
    assert [dict(s.attributes or {})["acp.outcome"] for s in attempts] == ["ready", "ready"]
    assert [dict(s.attributes or {})["acp.generation"] for s in attempts] == [1, 2]
    second = attempts[1]
    round_ = telemetry.one("acp.recovery_round")
    assert parent_id(round_) == span_id(second)
    assert dict(round_.attributes or {})["acp.sessions"] == 2
    assert dict(round_.attributes or {})["acp.outcome"] == "complete"
    recoveries = telemetry.finished("acp.session.recover")
    assert {dict(s.attributes or {})["acp.session.id"] for s in recoveries} == {s.id for s in sessions}
    for recovery in recoveries:
        attributes = dict(recovery.attributes or {})
        assert parent_id(recovery) == span_id(round_)
        assert attributes["acp.outcome"] == "reattached"
        assert attributes["acp.protocol.version"] == version
        assert attributes["acp.transport"] == ("http" if link.http else "websocket")
        children = {
            s.name
            for s in telemetry.spans.get_finished_spans()
            if parent_id(s) == span_id(recovery)
        }
        assert children == {"session/status", "session/resume"}
    # both initialize requests belong to their attempts
    assert sorted(parent_id(s) for s in telemetry.finished("initialize")) == sorted(span_id(a) for a in attempts)


async def test_a_failed_request_span_names_the_error(telemetry: Telemetry, link: Link, agent: ReferenceAgent) -> None:
    async with connect(link.url(agent), **link.options) as client:
        with pytest.raises(SessionNotFound):
            await client.request("session/status", {"sessionId": "nope"})
    status = telemetry.one("session/status")
    attributes = dict(status.attributes or {})
    assert attributes["error.type"] == "-32002"
    assert attributes["rpc.response.status_code"] == "-32002"
    assert attributes["acp.outcome"] == "error"
    assert status.status.is_ok is False


async def test_metric_values_after_a_scripted_scenario(telemetry: Telemetry, link: Link, agent: ReferenceAgent) -> None:
    client, rec = await started(link.url(agent), **link.options, limits=Limits(event_buffer=1))
    try:
        behind = client.events()  # a reader that never keeps up: it loses events
        kept, gone = [await client.new_session(f"/w/{i}") for i in range(2)]
        slow = kept.updates(maxsize=2)  # a reader that never keeps up: it loses updates
        await asyncio.wait_for(kept.prompt("stream 10"), bound(5))
        assert type(await anext(slow)).__name__ == "UpdatesDropped"
        await agent.drop_all_connections()
        await rec.ready_count(2, timeout=20)
        await client.forget(gone.id)
        assert type(await anext(behind)).__name__ == "EventsDropped"
        assert telemetry.by("acp.client.sessions", "acp.session.link").get("attached") == 1
        assert sum(p.value for p in telemetry.points("acp.client.recovery.queue_depth")) == 0
        assert sum(p.value for p in telemetry.points("acp.client.inbound.in_flight")) == 0
    finally:
        await rec.close()
        await client.aclose()

    reconnects = telemetry.points("acp.client.reconnects")
    assert sum(p.value for p in reconnects) == 1
    assert all(dict(p.attributes)["acp.reconnect.reason"] for p in reconnects)
    assert telemetry.by("acp.client.session.recoveries", "acp.recovery.outcome") == {"reattached": 2}
    assert telemetry.by("acp.client.sessions.forgotten", "acp.forget.reason") == {"application": 1}
    dropped = telemetry.by("acp.client.dropped", "acp.dropped.kind")
    assert dropped.get("events", 0) >= 1
    assert dropped.get("updates", 0) >= 8
    ready = telemetry.points("acp.client.ready.duration")
    assert sorted(dict(p.attributes)["acp.ready.first"] for p in ready) == [False, True]
    assert all(p.count == 1 for p in ready)
    assert sum(p.count for p in telemetry.points("acp.client.session.recovery.duration")) == 2
    assert sum(p.count for p in telemetry.points("acp.client.recovery_round.duration")) == 1
    by_method = {
        dict(p.attributes)["rpc.method"]: p.count
        for p in telemetry.points("rpc.client.call.duration")
        if "error.type" not in dict(p.attributes)
    }
    assert by_method["session/new"] == 2
    assert by_method["session/resume"] == 2
    assert by_method["initialize"] == 2


async def test_the_callers_tracestate_reaches_the_agent_with_its_trace(
    telemetry: Telemetry, link: Link, agent: ReferenceAgent
) -> None:
    remote = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("frontend", "t61rcWkgMzE")]),
    )
    async with connect(link.url(agent), **link.options) as client:
        with trace.use_span(NonRecordingSpan(remote)):
            await client.new_session("/w")
    new = telemetry.one("session/new")
    assert new.parent is not None and new.parent.span_id == remote.span_id
    seen = [t for t in agent.trace_contexts if t.method == "session/new"]
    assert {t.carrier for t in seen} == ({"meta", "http"} if link.http else {"meta"})
    for t in seen:
        assert t.traceparent.split("-")[1] == "0af7651916cd43dd8448eb211c80319c"
        assert t.traceparent.split("-")[2] == f"{span_id(new):016x}"
        assert t.tracestate == "frontend=t61rcWkgMzE"


async def test_the_applications_baggage_reaches_the_agent_in_meta(
    telemetry: Telemetry, link: Link, agent: ReferenceAgent
) -> None:
    """ACP reserves ``baggage`` beside ``traceparent``/``tracestate`` in ``_meta``: the application's baggage goes
    along when it has some, and nothing is added when it has none."""
    from opentelemetry import baggage
    from opentelemetry import context as otel_context

    async with connect(link.url(agent), **link.options) as client:
        await client.new_session("/w")
        token = otel_context.attach(baggage.set_baggage("tenant", "acme", baggage.set_baggage("user.tier", "gold")))
        try:
            await client.new_session("/w")
        finally:
            otel_context.detach(token)
    metas = [r.params.get("_meta") for r in agent.received if r.method == "session/new"]
    assert "baggage" not in metas[0]
    assert sorted(metas[1]["baggage"].split(",")) == ["tenant=acme", "user.tier=gold"]
    assert metas[1]["traceparent"].startswith("00-")


async def test_propagation_can_be_turned_off(link: Link, agent: ReferenceAgent) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    instrumentation = acp_client.otel.instrument(tracer_provider=provider, propagate=False)
    try:
        assert not instrumentation.propagates
        async with connect(link.url(agent), **link.options) as client:
            await client.new_session("/w")
    finally:
        instrumentation.uninstrument()
    assert not instrumentation.installed
    assert {s.name for s in spans.get_finished_spans()} >= {"initialize", "session/new"}
    assert agent.trace_contexts == []
    assert all("_meta" not in (r.params or {}) for r in agent.received)


async def test_clients_made_after_uninstrument_report_nothing(
    telemetry: Telemetry, link: Link, agent: ReferenceAgent
) -> None:
    telemetry.instrumentation.uninstrument()
    async with connect(link.url(agent), **link.options) as client:
        await client.new_session("/w")
    assert telemetry.spans.get_finished_spans() == ()
    assert agent.trace_contexts == []


def test_import_acp_client_imports_no_opentelemetry() -> None:
    code = (
        "import sys, acp_client, acp_client.reconnect, acp_client.transports.http, acp_client.transports.websocket\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'opentelemetry')\n"
        "assert not loaded, loaded\n"
        "assert 'acp_client.otel' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=bound(60))


def test_a_blocking_call_carries_the_callers_span(telemetry: Telemetry) -> None:
    """The sync facade runs the call on its own loop thread; the request span is still a child of the span
    current in the calling thread (the submission copies the caller's context), and the agent receives that
    trace."""
    tracer = telemetry.tracer_provider.get_tracer("app")
    with (
        AgentThread(2, timeout=bound(15)) as host,
        sync.connect(host.agent.url, timeout=bound(10)) as client,
        tracer.start_as_current_span("user turn") as turn,
    ):
        session = client.new_session("/w")
    new = telemetry.one("session/new")
    assert parent_id(new) == turn.get_span_context().span_id
    seen = [t.traceparent for t in host.agent.trace_contexts if t.method == "session/new"]
    assert seen and all(t.split("-")[1] == f"{turn.get_span_context().trace_id:032x}" for t in seen)
    assert session.id


async def test_request_spans_are_recorded_in_batches_after_their_answers(
    telemetry: Telemetry, link: Link, agent: ReferenceAgent
) -> None:
    """A request's span and duration are recorded off its latency path: queued when the answer arrives and
    recorded in a batch once FINISH_BATCH are queued (or FINISH_DELAY later), with the answer's time as the
    span's end; ``flush()`` records the rest now."""
    async with connect(link.url(agent), **link.options) as client:
        session = await client.new_session("/w")
        ends = []
        for _ in range(2 * FINISH_BATCH):
            await client.session_status(session.id)
            ends.append(time.time_ns())
        # never more than a batch waits: FINISH_BATCH queued are drained while the next request waits
        recorded = [s for s in telemetry.spans.get_finished_spans() if s.name == "session/status"]
        assert len(recorded) >= FINISH_BATCH
    statuses = telemetry.finished("session/status")  # flushes the rest
    assert len(statuses) == 2 * FINISH_BATCH
    for span, returned in zip(sorted(statuses, key=lambda s: s.end_time or 0), ends, strict=True):
        assert span.end_time is not None and span.end_time <= returned
        assert dict(span.attributes or {})["acp.session.id"] == session.id
    points = telemetry.points("rpc.client.call.duration")
    counts = [p.count for p in points if dict(p.attributes)["rpc.method"] == "session/status"]
    assert counts == [2 * FINISH_BATCH]


async def test_a_close_reason_the_agent_chose_never_becomes_a_metric_attribute(telemetry: Telemetry) -> None:
    # a hostile agent closes each connection with a new reason carrying personal data: every one of them would
    # be a new time series of acp.client.reconnects, with the text in a label
    reasons = [f"user alice{i}@example.com asked to stop" for i in range(4)]  # the crash-loop breaker trips at 5
    async with ReferenceAgent(1) as agent:
        client, rec = await started(agent.url)
        try:
            for count, reason in enumerate(reasons, start=2):
                await agent.drop_all_connections(4500, reason)
                await rec.ready_count(count, timeout=bound(20))
        finally:
            await rec.close()
            await client.aclose()
    reconnects = telemetry.points("acp.client.reconnects")
    assert sum(p.value for p in reconnects) == len(reasons)
    labels = {value for p in reconnects for value in dict(p.attributes).values()}
    assert not any("alice" in str(value) for value in labels), labels
    assert labels == {"close_4500"}  # a fixed name made of the close code, one series for all of them


async def test_a_classifier_that_quotes_the_error_never_puts_the_agents_text_in_a_label(telemetry: Telemetry) -> None:
    # Verdict.reason should be a name; an application that puts the error's text there (which quotes the
    # agent's close reason) still gets no text, and one series, in acp.client.reconnects
    def quoting(error: BaseException) -> Verdict:
        return Verdict(True, str(error))

    async with ReferenceAgent(1) as agent:
        client, rec = await started(agent.url, classifier=quoting)
        try:
            for count, reason in enumerate(["alice@example.com", "bob@example.com"], start=2):
                await agent.drop_all_connections(4500, reason)
                await rec.ready_count(count, timeout=bound(20))
        finally:
            await rec.close()
            await client.aclose()
    reconnects = telemetry.points("acp.client.reconnects")
    assert sum(p.value for p in reconnects) == 2
    assert [dict(p.attributes) for p in reconnects] == [{"acp.reconnect.reason": "other"}]


async def test_a_dropped_root_span_carries_no_context_and_a_dropped_child_does(
    link: Link, agent: ReferenceAgent
) -> None:
    """With a parent-based sampler that drops roots, a request outside any trace sends no trace context (it
    would start a trace nobody records: the agent's sampler decides for its side); inside the application's
    trace, even an unsampled one, the context goes along with the application's decision (flags ``00``)."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    instrumentation = acp_client.otel.instrument(tracer_provider=provider)
    unsampled = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.DEFAULT),
    )
    try:
        async with connect(link.url(agent), **link.options) as client:
            await client.new_session("/w")
            with trace.use_span(NonRecordingSpan(unsampled)):
                await client.new_session("/w")
    finally:
        instrumentation.uninstrument()
    metas = [r.params.get("_meta") for r in agent.received if r.method == "session/new"]
    assert metas[0] is None or "traceparent" not in metas[0], metas
    assert metas[1]["traceparent"].startswith("00-0af7651916cd43dd8448eb211c80319c-")
    assert metas[1]["traceparent"].endswith("-00")
    posts = [t for t in agent.trace_contexts if t.method == "session/new" and t.carrier == "http"]
    assert len(posts) == (1 if link.http else 0)  # the header carrier too: only the request inside the trace


async def test_a_request_whose_root_span_is_dropped_is_still_measured(link: Link, agent: ReferenceAgent) -> None:
    """Under a sampler that drops every root (the 99 requests in 100 of a 1 % ratio sampler), no span is
    recorded, yet each request's duration is: answered ones with the kind's attributes, failed ones with
    the agent's error code as ``error.type``."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    instrumentation = acp_client.otel.instrument(
        tracer_provider=provider, meter_provider=MeterProvider(metric_readers=[reader])
    )
    try:
        async with connect(link.url(agent), **link.options) as client:
            session = await client.new_session("/w")
            await client.session_status(session.id)
            await client.session_status(session.id)
            with pytest.raises(RPCError) as failed:
                await client.session_status("no-such-session")
    finally:
        instrumentation.flush()
        instrumentation.uninstrument()
    data = reader.get_metrics_data()
    assert data is not None
    points = [
        dict(p.attributes) | {"count": p.count}
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for m in scope.metrics
        if m.name == "rpc.client.call.duration"
        for p in m.data.data_points
        if dict(p.attributes)["rpc.method"] == "session/status"
    ]
    assert {p.get("error.type") for p in points} == {None, str(failed.value.code)}
    assert sorted(p["count"] for p in points) == [1, 2]
    assert spans.get_finished_spans() == ()


async def test_each_worker_on_a_shared_store_reports_its_ownership_gauges(
    telemetry: Telemetry, agent: ReferenceAgent, redis_servers: RedisServers
) -> None:
    namespace = f"otel{uuid.uuid4().hex[:8]}"
    url = redis_servers.url("valkey")

    def worker(owner: str) -> ReconnectingClient:
        store = RedisSessionStore(url, namespace=namespace, owner_id=owner, lease_ttl=bound(2.0))
        return ReconnectingClient(agent.url, store=store, policy=RecoveryPolicy(start_jitter=0.0, adopt_jitter=0.0))

    a, b = worker("W-A"), worker("W-B")
    try:
        for client in (a, b):
            await client.start()
            await client.wait_ready(timeout=bound(10))
        mine = [await a.new_session(f"/w/{i}") for i in range(3)]
        await b.new_session("/w/b")
        ownership = a._ownership
        assert ownership is not None
        await asyncio.wait_for(ownership.next_renewal(), bound(5))
        assert telemetry.by("acp.client.ownership.sessions", "acp.owner.id") == {"W-A": 3, "W-B": 1}
        assert telemetry.by("acp.client.ownership.leases_renewed", "acp.owner.id")["W-A"] >= 3
        assert telemetry.by("acp.client.ownership.handovers", "acp.owner.id") == {"W-A": 0, "W-B": 0}
        assert telemetry.by("acp.client.ownership.leases_lost", "acp.owner.id") == {"W-A": 0, "W-B": 0}
        # A hands one over on purpose: B adopts it; A's gauge drops, B's hand-overs count it
        changed = asyncio.Event()
        events = b.events()

        async def watch() -> None:
            async for event in events:
                if isinstance(event, SessionRecovered) and event.session_id == mine[0].id:
                    changed.set()

        watcher = asyncio.create_task(watch())
        assert await a.release(mine[0].id)
        await asyncio.wait_for(changed.wait(), bound(15))
        watcher.cancel()
        assert telemetry.by("acp.client.ownership.sessions", "acp.owner.id") == {"W-A": 2, "W-B": 2}
        assert telemetry.by("acp.client.ownership.handovers", "acp.owner.id") == {"W-A": 0, "W-B": 1}
    finally:
        await a.aclose()
        await b.aclose()
    # closed clients report nothing more
    assert telemetry.points("acp.client.ownership.sessions") == []

"""OpenTelemetry traces, metrics and trace-context propagation for acp-client (the ``otel`` extra).

Install with ``pip install 'acp-reconnect[otel]'`` and turn it on with one call, before making clients::

    import acp_client.otel

    acp_client.otel.instrument()  # the global TracerProvider and MeterProvider

Every client and connection made afterwards reports spans (a request, a connection attempt, a recovery
round, one session's recovery), metrics (reconnects, recoveries, forgotten sessions, dropped items,
durations, sessions by link state, the recovery queue, agent->client requests in flight) and sends the
current trace context to the agent in ``params._meta`` and in the HTTP/WebSocket headers. The names are
listed, stable, in ``docs/topics/observability.md``. ``import acp_client`` alone never imports
OpenTelemetry: this module is imported only when you import it.
"""

from __future__ import annotations

import atexit

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from acp_client import _observe
from acp_client.otel._observer import OpenTelemetryObserver

__all__ = ["Instrumentation", "instrument", "uninstrument"]


class Instrumentation:
    """The handle :func:`instrument` returns: what is installed, and how to remove it."""

    def __init__(self, observer: OpenTelemetryObserver) -> None:
        self._observer = observer

    @property
    def propagates(self) -> bool:
        """``True`` when trace context is sent to the agent (``params._meta`` and headers)."""
        return self._observer.propagate_context

    @property
    def installed(self) -> bool:
        """``True`` while this instrumentation is the one clients made from now on report to."""
        return _observe.current() is self._observer

    def flush(self) -> None:
        """Record, now, the requests that have ended but whose spans and durations are not recorded yet.

        Request spans are ended (with the end time of their answers) and their durations measured off the
        requests' latency path, in batches on the caller's event loop: once 64 have ended, or 50 ms after
        the first of them. Call this before reading an in-memory exporter or reader, or before flushing or
        shutting down your providers yourself; :meth:`uninstrument` and the interpreter's exit do it too."""
        self._observer.flush()

    def uninstrument(self) -> None:
        """Stop instrumenting clients and connections made from now on (those already made keep theirs),
        after recording what :meth:`flush` records."""
        _observe.uninstall(self._observer)
        self._observer.flush()


def instrument(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    propagate: bool = True,
) -> Instrumentation:
    """Report every client and connection made from now on to OpenTelemetry.

    ``tracer_provider``/``meter_provider`` default to the global ones (``opentelemetry.trace`` and
    ``opentelemetry.metrics``). ``propagate`` (default ``True``) sends the current trace context to the
    agent in both carriers: ``params._meta.traceparent``/``tracestate`` of every request (as MCP's
    semantic conventions do) and the ``traceparent``/``tracestate`` headers of each Streamable HTTP POST
    and of the WebSocket handshake, written by the global propagator. Calling it again replaces the
    previous instrumentation. Returns a handle whose :meth:`Instrumentation.uninstrument` turns it off.

    A request's span is started before the request is written (its context goes with it) but recorded,
    with its end time and attributes, after the answer, in batches (see :meth:`Instrumentation.flush`).
    """
    observer = OpenTelemetryObserver(
        tracer_provider=tracer_provider, meter_provider=meter_provider, propagate_context=propagate
    )
    _observe.install(observer)
    # before the SDK providers' own exit hooks (registered earlier, so run later): nothing queued is lost
    atexit.register(observer.flush)
    return Instrumentation(observer)


def uninstrument() -> None:
    """Stop instrumenting clients and connections made from now on, whichever instrumentation is installed
    (after recording its ended requests, as :meth:`Instrumentation.flush` does)."""
    observer = _observe.current()
    _observe.uninstall()
    if isinstance(observer, OpenTelemetryObserver):
        observer.flush()

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
from collections.abc import Mapping

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from acp_client import _observe
from acp_client.exceptions import UsageError
from acp_client.otel._observer import OpenTelemetryObserver
from acp_client.transports._agent_env import PASSED_OTEL_KEYS, is_otel_credential

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
        if _observe.current() is self._observer:
            _observe.set_agent_otel(None)
        _observe.uninstall(self._observer)
        self._observer.flush()


def instrument(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    propagate: bool = True,
    agent_otel: Mapping[str, str] | None = None,
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

    ``agent_otel`` is what the stdio agents the client spawns are told about OTLP: a mapping of
    ``OTEL_EXPORTER_OTLP_[TRACES_|METRICS_|LOGS_]ENDPOINT``/``_PROTOCOL`` and ``OTEL_SERVICE_NAME`` (the
    agent's service name). ``None`` (default) hands on those of this process's environment, with a service
    name of the agent's own. Credentials (``OTEL_EXPORTER_OTLP_HEADERS`` ...) are refused here and never
    handed on; values the agent's ``env`` sets win. See ``docs/topics/observability.md``.
    """
    _observe.set_agent_otel(_checked_agent_otel(agent_otel))
    observer = OpenTelemetryObserver(
        tracer_provider=tracer_provider, meter_provider=meter_provider, propagate_context=propagate
    )
    _observe.install(observer)
    # before the SDK providers' own exit hooks (registered earlier, so run later): nothing queued is lost
    atexit.register(observer.flush)
    return Instrumentation(observer)


def _checked_agent_otel(settings: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """``instrument(agent_otel=...)`` checked when given: known OTLP keys with string values, no credential."""
    if settings is None:
        return None
    if not isinstance(settings, Mapping):
        raise UsageError(f"instrument(agent_otel=...) must be a mapping or None, not {type(settings).__name__}")
    allowed = {*PASSED_OTEL_KEYS, "OTEL_SERVICE_NAME"}
    for key, value in settings.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise UsageError("instrument(agent_otel=...) maps variable names to string values")
        if is_otel_credential(key):
            raise UsageError(f"instrument(agent_otel=...) never hands a credential to an agent: {key} refused")
        if key not in allowed:
            raise UsageError(f"instrument(agent_otel=...) takes {', '.join(sorted(allowed))}; not {key}")
    return settings


def uninstrument() -> None:
    """Stop instrumenting clients and connections made from now on, whichever instrumentation is installed
    (after recording its ended requests, as :meth:`Instrumentation.flush` does)."""
    observer = _observe.current()
    _observe.uninstall()
    _observe.set_agent_otel(None)
    if isinstance(observer, OpenTelemetryObserver):
        observer.flush()

"""The environment of a spawned stdio agent: the application's OTLP settings go along, its credentials never.

When the application configured OTLP (an ``OTEL_EXPORTER_OTLP_ENDPOINT`` or per-signal endpoint in this
process's environment, or ``acp_client.otel.instrument(agent_otel=...)``), the agent gets the endpoint(s),
the protocol(s) and an ``OTEL_SERVICE_NAME`` of its own, so its spans reach the same collector under their
own name (the v2 draft's observability page). Values set in the agent's own ``env`` are kept. Credentials
are never handed on: ``OTEL_EXPORTER_OTLP_HEADERS`` (and its per-signal forms) and the mTLS client key and
certificate; an agent that must authenticate to the collector gets them in its ``env`` from the user.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from acp_client import _observe

__all__ = ["PASSED_OTEL_KEYS", "agent_environment", "is_otel_credential"]

_SIGNALS = ("", "TRACES_", "METRICS_", "LOGS_")
#: the settings handed on: where and how to export (every signal), nothing that authenticates
PASSED_OTEL_KEYS = tuple(
    f"OTEL_EXPORTER_OTLP_{signal}{what}" for signal in _SIGNALS for what in ("ENDPOINT", "PROTOCOL")
)
_ENDPOINTS = tuple(key for key in PASSED_OTEL_KEYS if key.endswith("ENDPOINT"))
_SECRET_WORDS = ("HEADERS", "CLIENT_KEY", "CLIENT_CERTIFICATE", "PASSWORD", "TOKEN", "SECRET", "AUTH")


def is_otel_credential(name: str) -> bool:
    """``True`` for an ``OTEL_*`` variable that may carry a credential (headers, client key, token ...)."""
    upper = name.upper()
    return upper.startswith("OTEL_") and any(word in upper for word in _SECRET_WORDS)


def _service_name(argv: Sequence[str]) -> str:
    """A service name for the agent ``argv`` runs: ``acp-agent-<program>`` (the script or module for a
    Python interpreter)."""
    program = os.path.basename(argv[0])
    if program.startswith("python") and len(argv) > 1:
        program = argv[2] if argv[1] == "-m" and len(argv) > 2 else os.path.basename(argv[1])
    return f"acp-agent-{program}"


def agent_environment(argv: Sequence[str], env: Mapping[str, str] | None) -> dict[str, str] | None:
    """The environment to start the agent ``argv`` with, given the caller's ``env`` (``None``: inherit).

    Returns ``None`` (inherit unchanged) when nothing is to be added or removed. Otherwise a full
    environment: the caller's ``env`` (or this process's, without its OTLP credentials), plus the OTLP
    settings the caller's ``env`` does not set and ``OTEL_SERVICE_NAME`` for the agent.
    """
    configured = _observe.agent_otel()
    source = configured if configured is not None else os.environ
    settings = {key: source[key] for key in PASSED_OTEL_KEYS if source.get(key)}
    enabled = any(key in settings for key in _ENDPOINTS)
    if env is None:
        inherited = dict(os.environ)
        leaks = [name for name in inherited if is_otel_credential(name)]
        if not enabled and not leaks:
            return None
        for name in leaks:
            del inherited[name]
        if enabled:  # the inherited service name is the client's own: the agent gets one of its own below
            inherited.pop("OTEL_SERVICE_NAME", None)
        base = inherited
    else:
        base = dict(env)
    if not enabled:
        return base
    for key, value in settings.items():
        if env is None:
            base[key] = value  # over what the agent would inherit: the instrumentation's settings win
        else:
            base.setdefault(key, value)  # what the user set for this agent wins
    base.setdefault("OTEL_SERVICE_NAME", (configured or {}).get("OTEL_SERVICE_NAME") or _service_name(argv))
    return base

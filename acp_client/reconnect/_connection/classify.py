"""Is an error worth another connection attempt? A pure, replaceable function."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from acp_client.exceptions import (
    AuthRequired,
    ConnectError,
    ConnectionLost,
    H2COnlyServer,
    HandshakeRejected,
    NotAnACPEndpoint,
    TLSError,
    UnsupportedProtocolVersion,
    UsageError,
)

__all__ = ["Classifier", "Verdict", "classify_error"]

# WebSocket close codes after which reconnecting cannot help (protocol error, unsupported data, bad
# payload, policy violation, too big, missing extension); 4000-4099 are application "do not retry" codes.
_FATAL_CLOSE_CODES = frozenset({1002, 1003, 1007, 1008, 1009, 1010})
_RETRYABLE_STATUS = frozenset({408, 425, 429})
# what a server answers while its /acp route does not exist yet (qwen serve: 406 to the upgrade for about a
# second after it accepts connections), or a proxy before the upstream is routed: a bounded run is retried
_STARTUP_REFUSALS = frozenset({404, 406})
# codes this client sends when the agent's data was bad (invalid UTF-8, too big): retryable when ours
_LINK_FAULT_CODES = frozenset({1007, 1009})


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do after an error: ``retry`` or stop; ``reason`` is a stable snake_case name for events.

    ``retry_after`` is a server hint in seconds; ``auth`` marks authentication failures, which a
    configured header/token provider gets one chance to fix before the manager gives up. ``refusal`` marks
    an answer a server gives while it is starting or restarting (its ``/acp`` route not there yet: HTTP
    404/406): not final at once, the connection loop retries a run of up to
    ``RecoveryPolicy.startup_refusals`` of them in a row with backoff, and only the next one is fatal.
    """

    retry: bool
    reason: str
    retry_after: float | None = None
    auth: bool = False
    refusal: bool = False


Classifier = Callable[[BaseException], Verdict]


def classify_error(exc: BaseException) -> Verdict:
    """The default classifier (see ``docs/topics/reconnect.md`` for the table)."""
    if isinstance(exc, NotAnACPEndpoint):
        return Verdict(False, "not_acp")  # the answer says no ACP endpoint is there: no refusal run either
    if isinstance(exc, HandshakeRejected):
        status = exc.status_code
        if status in (401, 403):
            return Verdict(False, f"http_{status}", auth=True)
        if status == 503 or status in _RETRYABLE_STATUS or status >= 500:
            return Verdict(True, f"http_{status}", retry_after=exc.retry_after)
        return Verdict(False, f"http_{status}", refusal=status in _STARTUP_REFUSALS)
    if isinstance(exc, TLSError):
        return Verdict(False, "tls")
    if isinstance(exc, H2COnlyServer):
        return Verdict(False, "h2c_only")  # these options can never work; http2="prior_knowledge" would
    if isinstance(exc, UnsupportedProtocolVersion):
        return Verdict(False, "unsupported_protocol_version")
    if isinstance(exc, AuthRequired):
        return Verdict(False, "auth_required", auth=True)
    if isinstance(exc, UsageError):
        return Verdict(False, "usage")
    if isinstance(exc, ConnectError) and isinstance(exc.__cause__, (FileNotFoundError, PermissionError)):
        return Verdict(False, "agent_not_found")  # the agent's executable is missing or not runnable
    if isinstance(exc, ConnectionLost):
        code = exc.close_code
        if exc.closed_by_client and code in _LINK_FAULT_CODES:
            # we closed because the agent sent bad UTF-8 or an oversized frame: a fault of this link
            return Verdict(True, f"close_{code}_sent")
        if code is not None and (code in _FATAL_CLOSE_CODES or 4000 <= code <= 4099):
            return Verdict(False, f"close_{code}", auth=code in (1008, 4001, 4003))
        if code == 1013:  # try again later
            return Verdict(True, "close_1013", retry_after=5.0)
        return Verdict(True, "connection_lost" if code is None else f"close_{code}")
    return Verdict(True, type(exc).__name__)

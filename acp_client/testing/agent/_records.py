"""What the reference agent saw, and waiting on it: ``agent.records`` of a :class:`~acp_client.testing.ReferenceAgent`.

Tests inspect the agent through four logs — :attr:`~AgentRecords.received` (every inbound request and
notification), :attr:`~AgentRecords.invalid_frames`, :attr:`~AgentRecords.handshakes` and
:attr:`~AgentRecords.trace_contexts` (the W3C trace context each carrier brought) — and wait with
:meth:`~AgentRecords.wait_for` (any predicate over the agent) or :meth:`~AgentRecords.wait_for_method`.
The agent calls :meth:`~AgentRecords.notify_changed` after every change of its own state, so a predicate
is re-checked exactly when it may have become true (see :mod:`acp_client.testing._waiting`).

:class:`AgentRecords` owns the four logs and the waiters, and needs nothing from the agent; the agent
offers the names tests read (``received``, ``wait_for`` ...) as thin delegates to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from acp_client._logging import get_logger
from acp_client.jsonrpc import Invalid
from acp_client.testing._waiting import Waiters

if TYPE_CHECKING:
    from acp_client.testing.agent._connection import AgentConnection

__all__ = ["AgentRecords", "Handshake", "Received", "TraceContext"]

_log = get_logger(__name__)


class Received(NamedTuple):
    """One inbound request or notification, as recorded in :attr:`ReferenceAgent.received`."""

    connection_id: str
    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class Handshake:
    """One opening handshake the agent saw (a WebSocket upgrade or a Streamable HTTP ``initialize``), accepted
    or not."""

    path: str
    headers: dict[str, str]
    status: int
    #: when it arrived (``time.monotonic()``)
    at: float = 0.0


class TraceContext(NamedTuple):
    """W3C trace context as the agent received it, in :attr:`ReferenceAgent.trace_contexts`.

    ``carrier`` is ``"meta"`` (``params._meta`` of a request or notification), ``"http"`` (the headers of a
    Streamable HTTP POST) or ``"websocket"`` (the headers of the WebSocket handshake, ``method`` ``None``).
    """

    carrier: str
    method: str | None
    traceparent: str
    tracestate: str | None


class AgentRecords:
    """The reference agent's logs and waits (``agent.records``)."""

    def __init__(self) -> None:
        """Empty logs, nobody waiting."""
        #: every inbound request and notification, in processing order
        self.received: list[Received] = []
        #: every unusable inbound frame (parse errors, invalid requests, unknown response ids)
        self.invalid_frames: list[tuple[str, Invalid]] = []
        #: every opening handshake (WebSocket upgrades, Streamable HTTP ``initialize`` requests)
        self.handshakes: list[Handshake] = []
        #: every ``traceparent`` received: in ``params._meta``, in a POST's or a handshake's headers
        self.trace_contexts: list[TraceContext] = []
        self._waiters = Waiters()

    # ------------------------------------------------------------------ recording (used by connections and listeners)

    def record(self, connection: AgentConnection, method: str, params: Any) -> None:
        """Record an inbound request or notification in :attr:`received` and wake waiters."""
        self.received.append(Received(connection.id, method, params))
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("traceparent"), str):
            state = meta.get("tracestate")
            self.trace_contexts.append(
                TraceContext("meta", method, meta["traceparent"], state if isinstance(state, str) else None)
            )
        _log.debug("reference_agent_received", connection_id=connection.id, method=method)
        self.notify_changed()

    def record_invalid(self, connection: AgentConnection, event: Invalid) -> None:
        """Record an unusable inbound frame."""
        self.invalid_frames.append((connection.id, event))
        _log.debug("reference_agent_invalid_frame", connection_id=connection.id, kind=event.kind, detail=event.detail)
        self.notify_changed()

    def record_handshake(self, path: str, headers: dict[str, str], status: int) -> None:
        """Record an opening handshake (WebSocket or Streamable HTTP) in :attr:`handshakes` and wake waiters."""
        self.handshakes.append(Handshake(path, headers, status, time.monotonic()))
        self.notify_changed()

    def record_trace_headers(self, carrier: str, method: str | None, headers: Mapping[str, str]) -> None:
        """Record the ``traceparent``/``tracestate`` headers of a POST or handshake, if it has them."""
        lowered = {k.lower(): v for k, v in headers.items()}
        traceparent = lowered.get("traceparent")
        if traceparent is not None:
            self.trace_contexts.append(TraceContext(carrier, method, traceparent, lowered.get("tracestate")))
            self.notify_changed()

    def notify_changed(self) -> None:
        """Re-check every pending ``wait_for*`` predicate."""
        self._waiters.changed()

    # ------------------------------------------------------------------ inspecting and waiting

    def count(self, method: str, session_id: str | None = None) -> int:
        """How many requests/notifications named ``method`` (for ``session_id`` when given) were received."""
        return len(self._matching(method, session_id))

    def _matching(self, method: str, session_id: str | None) -> list[Received]:
        return [
            r
            for r in self.received
            if r.method == method
            and (session_id is None or (isinstance(r.params, dict) and r.params.get("sessionId") == session_id))
        ]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Wait until ``predicate()`` holds; it is re-checked on every frame, connection and state change.
        Raises ``TimeoutError`` after ``timeout`` seconds."""
        await self._waiters.wait_until(predicate, timeout)

    async def wait_for_method(
        self, method: str, count: int = 1, *, session_id: str | None = None, timeout: float = 5.0
    ) -> list[Received]:
        """Wait until ``method`` was received at least ``count`` times; returns the matching records."""
        await self.wait_for(lambda: len(self._matching(method, session_id)) >= count, timeout)
        return self._matching(method, session_id)

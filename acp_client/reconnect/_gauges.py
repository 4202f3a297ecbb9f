"""What a ``ReconnectingClient`` shows an instrumentation that samples it (``acp_client._observe``).

Read at collection time only (an OpenTelemetry observable instrument's callback), so nothing is counted on
the hot path: the sessions by link state, the recovery requests waiting for a slot, and the agent->client
requests the live connection serves; with a store shared by several workers, this worker's ownership
figures (sessions owned, leases renewed and lost, hand-overs).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from acp_client.reconnect._ownership.leases import SessionOwnership
from acp_client.reconnect._recovery.limits import FixedLimit
from acp_client.reconnect._roles import ConnectionView
from acp_client.sessions import SessionRegistry

__all__ = ["ClientGauges"]


class ClientGauges:
    """One client's gauges, read from the parts that own each number (never written here)."""

    __slots__ = ("_connection", "_limit", "_ownership", "_registry")

    def __init__(
        self,
        registry: SessionRegistry,
        limit: FixedLimit,
        connection: ConnectionView,
        ownership: SessionOwnership | None = None,
    ) -> None:
        self._registry = registry
        self._limit = limit
        self._connection = connection
        self._ownership = ownership

    def sessions_by_link(self) -> Mapping[str, int]:
        """How many known sessions are in each link state."""
        return Counter(session.link.value for session in self._registry)

    def recovery_queue_depth(self) -> int:
        """How many recovery requests wait for a concurrency slot."""
        return self._limit.waiting

    def inbound_in_flight(self) -> int:
        """The agent->client requests the live connection serves or queues (0 without one)."""
        client = self._connection.live_client()
        return client.connection.inbound_in_flight if client is not None else 0

    def ownership(self) -> Mapping[str, int | str] | None:
        """This worker's ownership figures with a shared store (``None`` otherwise): ``owner`` (its id),
        ``owned`` (sessions it holds an unexpired lease on), and the totals so far ``renewed``, ``lost``,
        ``adopted`` (hand-overs to this worker) and ``renew_failures``."""
        ownership = self._ownership
        if ownership is None:
            return None
        counts = ownership.counts
        return {
            "owner": ownership.owner_id,
            "owned": ownership.owned_count(),
            "renewed": counts.renewed,
            "lost": counts.lost,
            "adopted": counts.adopted,
            "renew_failures": counts.renew_failures,
        }

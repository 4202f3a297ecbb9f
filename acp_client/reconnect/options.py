"""What a :class:`~acp_client.ReconnectingClient` is configured with, besides its collaborators.

Four frozen value objects, each checked when it is built (an invalid value raises
:class:`~acp_client.exceptions.UsageError` naming the field and what it accepts):

* :class:`RecoveryPolicy`: how the connection and the sessions are recovered, whatever the strategy;
* :class:`~acp_client.client.options.Timeouts`: how long each wait may take, one job per setting;
* :class:`Limits`: the client's bounds;
* :class:`~acp_client.transports.TransportOptions`: the transport and the link.

The flat keywords of earlier releases map onto their fields through :data:`FLAT_KEYWORDS`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from acp_client.client.options import Destination, Timeouts, check_count, check_seconds
from acp_client.exceptions import UsageError
from acp_client.reconnect.dialects import DEFAULT_DIALECTS, SessionDialects
from acp_client.transports.options import TRANSPORT_FIELDS

__all__ = ["FLAT_KEYWORDS", "Limits", "McpSecrets", "RecoveryPolicy", "Timeouts"]


@dataclass(frozen=True, slots=True)
class RecoveryPolicy:
    """How a client recovers its connection and its sessions, whatever the recovery strategy decides.

    ``concurrency`` (default ``"adaptive"``)
        how many recovery requests may be in flight at once: ``"adaptive"`` grows while answers stay fast
        and shrinks on slowness and errors (see :class:`~acp_client.reconnect.AdaptiveLimit`); an int >= 1
        fixes it.
    ``tries`` (default ``3``, an int >= 1)
        failed attempts per session inside one recovery round; after them the round goes on without the
        session, which keeps retrying with backoff in the background while the connection lives.
    ``start_jitter`` (default ``0.25``, seconds >= 0)
        each session of a round starts after a random delay up to this, so many clients reconnecting at
        once do not hit the agent in step.
    ``unknown_session_codes`` (default ``{-32002}``, ints)
        error codes read as "the agent does not know this session", whatever their words.
    ``dialects`` (default :data:`~acp_client.reconnect.dialects.DEFAULT_DIALECTS`)
        the other ways agents say "unknown session" or "live on another connection" (``-32602`` with
        "Session not found", ``-32023`` ...), and how the ``session/list`` check is made: a
        :class:`~acp_client.reconnect.dialects.SessionDialects`.
    ``startup_refusals`` (default ``8``, an int >= 0)
        HTTP refusals of the endpoint a server gives while it is starting (``404``/``406`` to the WebSocket
        upgrade or the first POST, classified as ``refusal`` by the classifier) retried in a row with
        backoff; the next one fails the client, naming this bound. ``0``: the first refusal is fatal.
    ``stable_after`` (default ``10.0``, seconds >= 0)
        a connection that stayed up this long resets the reconnect backoff to its first step.
    ``suspended_interval`` (default ``30.0``, seconds > 0)
        how often a ``SUSPENDED`` client (the crash-loop breaker tripped) tries again.
    ``adopt_jitter`` (default ``0.25``, seconds >= 0)
        with a store shared by several workers: each adoption round (claiming the sessions of a dead or
        releasing worker) starts after a random delay up to this, and claims them in a random order, so
        the surviving workers do not race for the same sessions in step.

    Change a copy with :func:`dataclasses.replace`.
    """

    concurrency: int | Literal["adaptive"] = "adaptive"
    tries: int = 3
    start_jitter: float = 0.25
    unknown_session_codes: frozenset[int] = field(default=frozenset({-32002}))
    dialects: SessionDialects = field(default=DEFAULT_DIALECTS)
    startup_refusals: int = 8
    stable_after: float = 10.0
    suspended_interval: float = 30.0
    adopt_jitter: float = 0.25

    def __post_init__(self) -> None:
        check_seconds("RecoveryPolicy", "adopt_jitter", self.adopt_jitter, zero=True)
        concurrency: object = self.concurrency
        fixed = isinstance(concurrency, int) and not isinstance(concurrency, bool) and concurrency >= 1
        if concurrency != "adaptive" and not fixed:
            raise UsageError(f"RecoveryPolicy.concurrency must be 'adaptive' or an int >= 1, not {concurrency!r}")
        check_count("RecoveryPolicy", "tries", self.tries)
        check_seconds("RecoveryPolicy", "start_jitter", self.start_jitter, zero=True)
        check_seconds("RecoveryPolicy", "stable_after", self.stable_after, zero=True)
        check_seconds("RecoveryPolicy", "suspended_interval", self.suspended_interval)
        codes: object = self.unknown_session_codes
        if isinstance(codes, str | bytes) or not isinstance(codes, Iterable):
            raise UsageError(f"RecoveryPolicy.unknown_session_codes must be ints, not {codes!r}")
        normalised = frozenset(codes)
        if not all(isinstance(c, int) and not isinstance(c, bool) for c in normalised):
            raise UsageError(f"RecoveryPolicy.unknown_session_codes must be ints, not {codes!r}")
        object.__setattr__(self, "unknown_session_codes", normalised)  # any iterable in, a frozenset kept
        if not isinstance(self.dialects, SessionDialects):
            raise UsageError(f"RecoveryPolicy.dialects must be a SessionDialects, not {self.dialects!r}")
        check_count("RecoveryPolicy", "startup_refusals", self.startup_refusals, minimum=0)


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds of a client (the link's own bound, ``max_frame_bytes``, is a transport option).

    ``event_buffer`` (default ``1024``, an int >= 1)
        events kept per reader of ``events()``; one that falls behind loses the oldest and then receives
        :class:`~acp_client.reconnect.EventsDropped`.
    ``probe_concurrency`` (default ``8``, an int >= 1)
        ``session/status`` probes in flight at once when ``reconcile`` checks the sessions that look
        attached (each bounded by ``Timeouts.probe``).
    ``replay_updates`` (default ``100_000``, an int >= 1)
        updates one ``session/resume``/``session/load`` may replay; past it the attempt is given up
        (a replay that never ends cannot grow the rebuilt transcript without bound) and retried.
    ``adopt_per_second`` (default ``1000``, an int >= 1)
        with a store shared by several workers: sessions this worker claims per second from the free pool
        (a dead or releasing worker's), one second's worth at once; the rest wait for the pace. Bounds a
        hand-over storm: ``N`` sessions freed at once reach ``W`` surviving workers in about
        ``N / (W * adopt_per_second)`` seconds past the lease TTL.

    Change a copy with :func:`dataclasses.replace`.
    """

    event_buffer: int = 1024
    probe_concurrency: int = 8
    replay_updates: int = 100_000
    adopt_per_second: int = 1000

    def __post_init__(self) -> None:
        check_count("Limits", "adopt_per_second", self.adopt_per_second)
        check_count("Limits", "event_buffer", self.event_buffer)
        check_count("Limits", "probe_concurrency", self.probe_concurrency)
        check_count("Limits", "replay_updates", self.replay_updates)


#: ``mcp_secrets(session_id, servers)``, sync or async: the MCP servers to send when a session is re-attached,
#: given the servers as the store keeps them (names, commands, URLs and the names of ``env``/``headers``
#: entries, every value blanked). With it set, no secret value of an MCP server is ever written to the store.
McpSecrets = Callable[[str, list[dict[str, Any]]], list[dict[str, Any]] | Awaitable[list[dict[str, Any]]]]


def _to(group: str, *fields: str, factor: float = 1.0) -> tuple[Destination, ...]:
    return tuple((group, name, factor) for name in fields)


#: Where each deprecated flat keyword of ``ReconnectingClient`` goes. ``recovery_timeout`` did four jobs;
#: it still sets all four (the list check at four times the value, as before).
FLAT_KEYWORDS: dict[str, tuple[Destination, ...]] = {
    **{name: _to("transport_options", name) for name in TRANSPORT_FIELDS},
    "request_timeout": _to("timeouts", "request"),
    "initialize_timeout": _to("timeouts", "initialize"),
    "session_wait_timeout": _to("timeouts", "session_wait"),
    "ready_timeout": _to("timeouts", "ready"),
    "recovery_deadline": _to("timeouts", "recovery_deadline"),
    "recovery_timeout": (
        _to("timeouts", "probe", "strategy", "replay_silence") + _to("timeouts", "list_check", factor=4)
    ),
    "recovery_concurrency": _to("policy", "concurrency"),
    "recovery_tries": _to("policy", "tries"),
    "recovery_start_jitter": _to("policy", "start_jitter"),
    "unknown_session_codes": _to("policy", "unknown_session_codes"),
    "stable_after": _to("policy", "stable_after"),
    "suspended_interval": _to("policy", "suspended_interval"),
    "event_buffer": _to("limits", "event_buffer"),
}

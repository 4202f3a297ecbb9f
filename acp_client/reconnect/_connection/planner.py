"""What follows a connection attempt of a :class:`~acp_client.ReconnectingClient`: a pause in ``BACKOFF``,
a suspension when the crash-loop breaker trips, or ``FAILED``.

:class:`ReconnectPlanner` owns the bookkeeping behind that choice: the failed attempts since the last
stable connection (the backoff's exponent), the start-up refusals in a row, whether the header provider had
its one chance to refresh, the crash-loop breaker, and how the last attempt ended. The supervisor tells it
when a connection opened and how each attempt ended, and acts on the :class:`Plan` it returns.
"""

from __future__ import annotations

from dataclasses import dataclass

from acp_client._logging import get_logger
from acp_client.exceptions import ConnectionLost, ReconnectFailed
from acp_client.reconnect._backoff import Backoff, CrashLoopBreaker
from acp_client.reconnect._connection.classify import Classifier
from acp_client.reconnect._events import ClientState

__all__ = ["Ended", "Plan", "ReconnectPlanner"]

log = get_logger("acp_client.reconnect")


@dataclass(frozen=True, slots=True)
class Ended:
    """How one attempt ended: the error that stopped the connect (``lived`` is ``None``), or the loss of
    the connection and how long it lived after it became ready."""

    error: BaseException
    lived: float | None
    generation: int


@dataclass(frozen=True, slots=True)
class Plan:
    """What follows an attempt: a pause in ``BACKOFF`` or ``SUSPENDED`` for ``delay`` seconds, or ``FAILED``."""

    state: ClientState
    delay: float
    reason: str
    attempt: int
    failure: ReconnectFailed | None
    cause: BaseException | None = None  #: how the attempt ended (what a ``BACKOFF`` reports as its ``error``)


class ReconnectPlanner:
    """Plans the pause after each attempt (see the module docstring)."""

    __slots__ = (
        "_attempts",
        "_auth_retry_used",
        "_backoff",
        "_breaker",
        "_classify",
        "_last_error",
        "_refreshes_headers",
        "_refusals",
        "_stable_after",
        "_startup_refusals",
        "_suspended_interval",
    )

    def __init__(
        self,
        *,
        classifier: Classifier,
        backoff: Backoff,
        breaker: CrashLoopBreaker,
        stable_after: float,
        suspended_interval: float,
        startup_refusals: int,
        refreshes_headers: bool,
    ) -> None:
        self._classify = classifier
        self._backoff = backoff
        self._breaker = breaker
        self._stable_after = stable_after
        self._suspended_interval = suspended_interval
        self._startup_refusals = startup_refusals
        self._refreshes_headers = refreshes_headers
        self._attempts = 0  # failed attempts since the last stable connection (the backoff's exponent)
        self._auth_retry_used = False  # the header provider had its one chance since the last open
        self._refusals = 0  # start-up refusals (HTTP 404/406) in a row since the last open
        self._last_error: BaseException | None = None

    @property
    def attempts(self) -> int:
        """Failed attempts since the last stable connection."""
        return self._attempts

    @property
    def last_error(self) -> BaseException | None:
        """How the last attempt ended (named when a wait for ``READY`` times out)."""
        return self._last_error

    def start(self) -> None:
        """The loop (re)starts: a fresh run of attempts."""
        self._attempts = 0
        self._auth_retry_used = False

    def opened(self) -> None:
        """A connection opened and initialized: refusals in a row and the header refresh start over."""
        self._auth_retry_used = False
        self._refusals = 0

    def forgive(self) -> None:
        """The application asked to reconnect now: deaths recorded so far no longer count as a crash loop."""
        self._breaker.reset()

    def after(self, ended: Ended, *, manual: bool, skip_pause: bool, ever_ready: bool) -> Plan:
        """Classify how ``ended`` ended and plan what follows. ``manual``: ``reconnect_now()`` dropped that
        connection (not a crash); ``skip_pause``: it asked for no pause after this attempt; ``ever_ready``:
        the client was ready once (a tripped breaker then suspends instead of failing)."""
        error, generation = ended.error, ended.generation
        verdict = self._classify(error)
        self._last_error = error
        detail: str | None = None
        if ended.lived is None:  # the connection never opened
            retry = verdict.retry
            if not retry and verdict.auth and self._refreshes_headers and not self._auth_retry_used:
                self._auth_retry_used = retry = True  # the header provider gets one chance to refresh
            if not retry and verdict.refusal:
                # the peer may be starting or restarting (its route not there yet): a bounded run is retried
                self._refusals += 1
                retry = self._refusals <= self._startup_refusals
                detail = (
                    f"refused {self._refusals} connection attempt{'s' if self._refusals != 1 else ''} in a row, "
                    f"past the bound RecoveryPolicy.startup_refusals={self._startup_refusals}"
                )
            log.warning("acp.connect_failed", error=str(error), reason=verdict.reason, generation=generation)
            # an agent that dies before initialize completes is a crash, not a slow network
            crash = retry and isinstance(error, ConnectionLost) and self._breaker.record(0.0)
            crash_reason = "agent_keeps_dying"
        else:
            retry = verdict.retry or manual
            crash = retry and not manual and self._breaker.record(ended.lived)
            crash_reason = "flapping"
            if ended.lived >= self._stable_after:
                self._attempts = 0
        if not retry:
            failed = ReconnectFailed(verdict.reason, error, detail=detail)
            return Plan(ClientState.FAILED, 0.0, verdict.reason, self._attempts, failed)
        if crash:
            # the breaker tripped: FAILED if never ready (``async with`` raises it), else a slow retry
            self._attempts = 0
            failure = ReconnectFailed(crash_reason, error)
            state = ClientState.SUSPENDED if ever_ready else ClientState.FAILED
            return Plan(state, self._suspended_interval, crash_reason, 0, failure)
        self._attempts += 1
        delay = self._backoff.delay(self._attempts, verdict.retry_after)
        if skip_pause:
            delay = 0.0  # reconnect_now() during this attempt
        return Plan(ClientState.BACKOFF, delay, verdict.reason, self._attempts, None, error)

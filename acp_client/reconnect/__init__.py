"""The reconnect manager: backoff, error classification, liveness, and the ReconnectingClient state machine."""

from acp_client.reconnect._backoff import Backoff, Clock, CrashLoopBreaker
from acp_client.reconnect._client import ReconnectingClient
from acp_client.reconnect._connection.classify import Classifier, Verdict, classify_error
from acp_client.reconnect._events import (
    LEGAL_TRANSITIONS,
    ClientState,
    ConnectionDropped,
    Event,
    EventsDropped,
    PromptClassified,
    RecoveryRoundFinished,
    SessionConfigNotRestored,
    SessionDetached,
    SessionForgotten,
    SessionRecovered,
    SessionRecoveryFailed,
    SessionsAdopted,
    SessionStoreFailed,
    SessionStoreReset,
    SessionTakenOver,
    StateChanged,
)
from acp_client.reconnect._recovery.limits import AdaptiveLimit, FixedLimit
from acp_client.reconnect.dialects import DEFAULT_DIALECTS, SessionDialects
from acp_client.reconnect.options import Limits, RecoveryPolicy, Timeouts

__all__ = [
    "DEFAULT_DIALECTS",
    "LEGAL_TRANSITIONS",
    "AdaptiveLimit",
    "Backoff",
    "Classifier",
    "ClientState",
    "Clock",
    "ConnectionDropped",
    "CrashLoopBreaker",
    "Event",
    "EventsDropped",
    "FixedLimit",
    "Limits",
    "PromptClassified",
    "ReconnectingClient",
    "RecoveryPolicy",
    "RecoveryRoundFinished",
    "SessionConfigNotRestored",
    "SessionDetached",
    "SessionDialects",
    "SessionForgotten",
    "SessionRecovered",
    "SessionRecoveryFailed",
    "SessionStoreFailed",
    "SessionStoreReset",
    "SessionTakenOver",
    "SessionsAdopted",
    "StateChanged",
    "Timeouts",
    "Verdict",
    "classify_error",
]

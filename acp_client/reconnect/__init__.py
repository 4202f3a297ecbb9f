"""The reconnect manager: backoff, error classification, liveness, and the ReconnectingClient state machine."""

from acp_client.reconnect._backoff import Backoff, Clock, CrashLoopBreaker
from acp_client.reconnect._classify import Classifier, Verdict, classify_error
from acp_client.reconnect._client import ReconnectingClient
from acp_client.reconnect._events import (
    LEGAL_TRANSITIONS,
    ClientState,
    ConnectionDropped,
    Event,
    EventsDropped,
    RecoveryRoundFinished,
    SessionDetached,
    SessionForgotten,
    SessionRecovered,
    SessionRecoveryFailed,
    SessionStoreFailed,
    SessionStoreReset,
    SessionTakenOver,
    StateChanged,
)
from acp_client.reconnect._limits import AdaptiveLimit, FixedLimit

__all__ = [
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
    "ReconnectingClient",
    "RecoveryRoundFinished",
    "SessionDetached",
    "SessionForgotten",
    "SessionRecovered",
    "SessionRecoveryFailed",
    "SessionStoreFailed",
    "SessionStoreReset",
    "SessionTakenOver",
    "StateChanged",
    "Verdict",
    "classify_error",
]

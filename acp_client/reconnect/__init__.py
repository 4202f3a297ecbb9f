"""The reconnect manager: backoff, error classification, liveness, and the ReconnectingClient state machine."""

from acp_client.reconnect._backoff import Backoff, Clock, CrashLoopBreaker
from acp_client.reconnect._classify import Classifier, Verdict, classify_error
from acp_client.reconnect._client import ReconnectingClient
from acp_client.reconnect._events import (
    LEGAL_TRANSITIONS,
    ClientState,
    ConnectionDropped,
    Event,
    SessionDetached,
    SessionForgotten,
    SessionRecovered,
    SessionRecoveryFailed,
    StateChanged,
)

__all__ = [
    "LEGAL_TRANSITIONS",
    "Backoff",
    "Classifier",
    "ClientState",
    "Clock",
    "ConnectionDropped",
    "CrashLoopBreaker",
    "Event",
    "ReconnectingClient",
    "SessionDetached",
    "SessionForgotten",
    "SessionRecovered",
    "SessionRecoveryFailed",
    "StateChanged",
    "Verdict",
    "classify_error",
]

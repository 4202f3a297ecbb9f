"""The reconnect manager could not keep a session or a link (see :mod:`acp_client.exceptions`)."""

from __future__ import annotations

from acp_client.exceptions._root import ACPError

__all__ = ["ConfigNotRestored", "ReconnectFailed", "RecoveryError", "RecoveryFailed", "SessionLost"]


class RecoveryError(ACPError):
    """The reconnect manager could not keep a session or a connection."""


class SessionLost(RecoveryError):
    """The agent does not know the session any more (``-32002``); the client forgot it.

    ``reason`` is the machine-readable cause, as in :class:`~acp_client.SessionForgotten`: ``"unknown"``
    (the agent answered -32002 to status, resume or load), ``"not_listed"`` (recovery failed and
    ``session/list`` does not name it), ``"application"`` or ``"forgotten"`` (the application forgot it),
    or a short phrase. The message says it as a sentence.
    """

    def __init__(self, session_id: str, reason: str = "unknown") -> None:
        self.session_id = session_id
        self.reason = reason
        why = _LOSS_REASONS.get(reason, reason)
        super().__init__(f"session {session_id} is lost: {why}")


#: the sentence a :class:`SessionLost` message gives for each machine-readable reason
_LOSS_REASONS: dict[str, str] = {
    "unknown": "the agent no longer knows it",
    "not_listed": "the agent could not restore it and no longer lists it",
    "application": "it was forgotten by your application",
    "forgotten": "it was forgotten by your application",
}


class RecoveryFailed(RecoveryError):
    """Recovering a session failed for a reason other than -32002; the manager retries it with backoff."""

    def __init__(self, session_id: str, cause: BaseException | None = None) -> None:
        self.session_id = session_id
        self.cause = cause
        detail = f": {cause}" if cause is not None else ""
        super().__init__(f"recovery of session {session_id} failed{detail}")


class ReconnectFailed(RecoveryError):
    """The manager gave up reconnecting: a fatal error, an exhausted budget, or the crash-loop breaker.

    ``reason`` is the verdict's stable name (``"http_406"``, ``"flapping"`` ...), ``cause`` the last error;
    ``detail``, when given, ends the message (which bound ran out, for example).
    """

    def __init__(self, reason: str, cause: BaseException | None = None, *, detail: str | None = None) -> None:
        self.reason = reason
        self.cause = cause
        text = f": {cause}" if cause is not None else ""
        more = f"; {detail}" if detail else ""
        super().__init__(f"reconnecting failed ({reason}){text}{more}")


class ConfigNotRestored(RecoveryError):
    """After a session was restored (the agent had lost it from memory), setting the mode, model or a
    config option the application had chosen again failed. Raised once, by the next ``Session.prompt()`` or
    ``Session.send_prompt()`` of that session, before anything is sent (so no prompt runs in a config the
    application did not choose); the call after it sends normally. ``failures`` maps each setting
    (``"mode"`` or ``"option:<configId>"``) to the error text the agent answered."""

    def __init__(self, session_id: str, failures: dict[str, str]) -> None:
        self.session_id = session_id
        self.failures = dict(failures)
        listed = "; ".join(f"{key}: {error}" for key, error in self.failures.items())
        super().__init__(f"session {session_id}: the chosen config was not restored after a restore ({listed})")

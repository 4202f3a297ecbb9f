"""Recovery outcomes and :class:`SessionLinks`, the one place the reconnect layer moves a session's link.

A recovery ends in one of a few outcomes (re-attached, failed and retried, left detached, forgotten,
taken over by another worker). Each outcome says, in one table-like class, where the session's link goes,
which :class:`~acp_client.sessions.RecoveryMarker` its stream gets and which event the client reports;
:meth:`SessionLinks.apply` does all three and wakes the waiters. The link itself is a state machine owned
by the :class:`~acp_client.sessions.Session` (see ``LINK_TRANSITIONS``); this module only asks it to move.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from acp_client.exceptions import ConnectionLost, SessionLost
from acp_client.reconnect._events import (
    Event,
    PromptClassified,
    SessionConfigNotRestored,
    SessionDetached,
    SessionForgotten,
    SessionRecovered,
    SessionRecoveryFailed,
)
from acp_client.sessions import Attachment, RecoveryMarker, Session, SessionControl, SessionLink, SessionRecord

__all__ = [
    "Forgotten",
    "LeftDetached",
    "Outcome",
    "Reattached",
    "RetryLater",
    "SessionLinks",
    "StillRecovering",
    "TakenOver",
]


@dataclass(frozen=True, slots=True)
class Reattached:
    """Attached again: by the recovery ladder, or because the transport resumed its event stream
    (``path="stream_resumed"``; nothing was lost). A ladder outcome carries the ``attachment`` the
    per-connection client reported when the agent answered (the connection, its version, the servers
    sent): applying the outcome moves the link to ``attached`` on that connection and writes the record
    (the recovery kept an :class:`~acp_client.client.UpdateAcceptance` open until then, so the updates
    that follow the answer were routed meanwhile). A resumed stream never left ``attached``: no link."""

    outcome: Literal["reattached", "restored"]
    mode: str
    replayed: bool
    missed: bool
    status: str | None
    generation: int
    path: Literal["ladder", "stream_resumed"] = "ladder"
    stream_resumption: str | None = None
    attachment: Attachment | None = None
    #: the desired settings set again after a restore, and those that failed (with the agent's error)
    config_reapplied: tuple[str, ...] = ()
    config_failed: tuple[tuple[str, str], ...] = ()

    @property
    def link(self) -> SessionLink | None:
        """``attached`` for a ladder outcome (on ``attachment.connection_id``); ``None``: no move."""
        return SessionLink.ATTACHED if self.attachment is not None else None

    def marker(self, session_id: str) -> RecoveryMarker:
        """The marker for the session's stream."""
        return RecoveryMarker(
            session_id, self.outcome, self.mode, self.replayed, self.missed, status=self.status, path=self.path
        )

    def event(self, session: Session) -> Event:
        """The event the client reports."""
        return SessionRecovered(
            session.id,
            self.outcome,
            self.mode,
            self.replayed,
            self.missed,
            self.status,
            session.state,
            self.generation,
            path=self.path,
            stream_resumption=self.stream_resumption,
            config_reapplied=self.config_reapplied,
            config_not_restored=tuple(key for key, _ in self.config_failed),
        )

    def more_events(self, session: Session, control: SessionControl) -> list[Event]:
        """The events that follow :class:`SessionRecovered`: one :class:`PromptClassified` per prompt the
        drop left in flight (classified now, from what this re-attach showed), and
        :class:`SessionConfigNotRestored` when setting the desired config again failed."""
        events: list[Event] = [
            PromptClassified(session.id, e.prompt_id, e.state.value, e.evidence, e.message_id, self.generation)
            for e in control.classify_prompts(session, replayed=self.replayed)
        ]
        if self.config_failed:
            events.append(SessionConfigNotRestored(session.id, self.config_failed, self.generation))
        return events


@dataclass(frozen=True, slots=True)
class RetryLater:
    """An attempt failed for a reason other than "unknown session"; it is retried with backoff."""

    error: str
    attempt: int
    generation: int

    link = SessionLink.FAILED

    def marker(self, session_id: str) -> RecoveryMarker:
        """The marker for the session's stream."""
        return RecoveryMarker(session_id, "failed", reason=self.error)

    def event(self, session: Session) -> Event:
        """The event the client reports."""
        return SessionRecoveryFailed(session.id, self.error, self.attempt, True, self.generation)


@dataclass(frozen=True, slots=True)
class StillRecovering:
    """The recovery round ended (``Timeouts.recovery_round``) while this session's attempt still runs (a
    replay that never ends): it is reported failed-and-retrying, and its link stays ``recovering``."""

    error: str
    generation: int

    link = None

    def marker(self, session_id: str) -> RecoveryMarker:
        """The marker for the session's stream."""
        return RecoveryMarker(session_id, "failed", reason=self.error)

    def event(self, session: Session) -> Event:
        """The event the client reports (attempt 1: the one still running)."""
        return SessionRecoveryFailed(session.id, self.error, 1, True, self.generation)


@dataclass(frozen=True, slots=True)
class LeftDetached:
    """The strategy kept the session detached (for the application to decide)."""

    reason: str
    not_found: bool
    generation: int

    link = SessionLink.DETACHED

    def marker(self, session_id: str) -> RecoveryMarker:
        """The marker for the session's stream."""
        return RecoveryMarker(session_id, "kept", reason=self.reason)

    def event(self, session: Session) -> Event:
        """The event the client reports."""
        return SessionDetached(session.id, self.reason, self.not_found, self.generation)


@dataclass(frozen=True, slots=True)
class Forgotten:
    """Forgotten for good: the agent does not know it, a strategy said so, or the application did."""

    reason: str
    via: str | None
    generation: int

    link = SessionLink.LOST

    def marker(self, session_id: str) -> RecoveryMarker:
        """The marker for the session's stream (the last item before it ends)."""
        return RecoveryMarker(session_id, "lost", reason=self.reason)

    def event(self, session: Session) -> Event:
        """The event the client reports."""
        return SessionForgotten(session.id, self.reason, self.via, self.generation)


@dataclass(frozen=True, slots=True)
class TakenOver:
    """Another worker serves the session now. The ownership manager reports ``SessionTakenOver`` itself
    (it knows the new holder), so this outcome has no event of its own."""

    reason: str

    link = SessionLink.DETACHED

    def marker(self, session_id: str) -> RecoveryMarker:
        """The marker for the session's stream."""
        return RecoveryMarker(session_id, "taken_over", reason=self.reason)

    def event(self, session: Session) -> Event | None:
        """No event (see the class docstring)."""
        return None


Outcome = Reattached | RetryLater | StillRecovering | LeftDetached | Forgotten | TakenOver


class SessionLinks:
    """Moves session links and writes session records for the reconnect layer (its only writer of either),
    and turns each recovery outcome into its link, marker and event in one step (:meth:`apply`)."""

    __slots__ = ("_changed", "_control", "_emit")

    def __init__(self, *, emit: Callable[[Event], None], changed: Callable[[], None]) -> None:
        self._emit = emit
        self._changed = changed
        self._control = SessionControl()  # the only object of the reconnect layer that moves links

    def apply(self, session: Session, outcome: Outcome) -> tuple[RecoveryMarker, Event | None]:
        """Apply ``outcome`` to ``session``: the marker goes into its stream (before the stream ends, for a
        final outcome), its link moves, the event is reported, and waiters wake. Returns the marker and
        the event."""
        marker = outcome.marker(session.id)
        self._control.mark(session, marker)
        if isinstance(outcome, Reattached):
            if outcome.attachment is not None:
                self._control.attach(session, outcome.attachment)
        elif isinstance(outcome, Forgotten):
            self._control.move_link(session, SessionLink.LOST, error=SessionLost(session.id, outcome.reason))
        elif isinstance(outcome, TakenOver):
            text = f"session {session.id} is served by another worker now ({outcome.reason})"
            loss = ConnectionLost(text, request_sent=True, reason=outcome.reason)
            self._control.move_link(session, SessionLink.DETACHED, loss=loss)
        elif outcome.link is not None:
            self._control.move_link(session, outcome.link)
        event = outcome.event(session)
        if event is not None:
            self._emit(event)
        if isinstance(outcome, Reattached):
            for more in outcome.more_events(session, self._control):
                self._emit(more)
        elif isinstance(outcome, Forgotten):  # nothing will show what became of its prompts in flight
            for e in self._control.classify_prompts(session, replayed=False):
                self._emit(
                    PromptClassified(session.id, e.prompt_id, e.state.value, e.evidence, None, outcome.generation)
                )
        self._changed()
        return marker, event

    def move(self, session: Session, link: SessionLink) -> None:
        """Move ``session`` between ``detached``, ``recovering`` and ``closed`` outside of an outcome (a
        recovery starts, a connection is lost under it, the application closes it); waiters wake."""
        if self._control.move_link(session, link):
            self._changed()

    # ------------------------------------------------------------------ what the per-connection client reports
    # (no wake-up here: the connection's own state change, or the recovery outcome that follows, wakes waiters)

    def attached(self, session: Session, attachment: Attachment) -> None:
        """``session`` was created or attached by the application (``new_session()``, ``resume_session()``,
        ``load_session()``): its link moves to ``attached`` now, so the updates that follow the answer are
        routed to it, and its record takes the attach's version and servers. (A recovery's attach comes
        back in its :class:`Reattached` outcome instead.)"""
        self._control.attach(session, attachment)

    def adopt(self, session: Session, record: SessionRecord) -> None:
        """``session`` was adopted from another worker: it takes that worker's record."""
        self._control.replace_record(session, record)

    def detached(self, session: Session, loss: ConnectionLost) -> None:
        """The connection ``session`` was attached on ended: ``detached``, failing the turns waiting."""
        self._control.move_link(session, SessionLink.DETACHED, loss=loss)

    def closed(self, session: Session) -> None:
        """The agent confirmed the close or delete of ``session`` (already ``closed`` when the client's own
        close ran first)."""
        self._control.move_link(session, SessionLink.CLOSED)

    def attached_to(self, session: Session, connection_id: int) -> bool:
        """``True`` if ``session`` is attached on the connection ``connection_id``."""
        return self._control.attached_to(session, connection_id)

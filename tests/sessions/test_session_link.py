"""A session's link is a state machine: the table, its one writer, and the outcomes that move it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from acp_client.exceptions import ConnectionLost, SessionLost
from acp_client.reconnect import SessionDetached, SessionForgotten, SessionRecovered, SessionRecoveryFailed
from acp_client.reconnect._events import Event
from acp_client.reconnect._sessions.links import (
    Forgotten,
    LeftDetached,
    Reattached,
    RetryLater,
    SessionLinks,
    TakenOver,
)
from acp_client.sessions import (
    LINK_TRANSITIONS,
    Attachment,
    RecoveryMarker,
    Session,
    SessionControl,
    SessionLink,
    SessionRecord,
)

L = SessionLink
CONTROL = SessionControl()  # the owner side: what moves a link


class Owner:
    """A SessionOwner that sends nothing (the link never needs the wire)."""

    protocol_version = 2

    async def session_request(
        self, session: Session, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> Any:
        raise AssertionError("nothing is sent in these tests")

    async def session_notify(self, session: Session, method: str, params: dict[str, Any]) -> None:
        raise AssertionError("nothing is sent in these tests")

    async def wait_attached(self, session: Session, method: str, timeout: float) -> float:
        return timeout

    def attached(self, session: Session, attachment: Attachment) -> None:
        CONTROL.attach(session, attachment)

    def detached(self, session: Session, loss: ConnectionLost) -> None:
        CONTROL.move_link(session, L.DETACHED, loss=loss)

    def closed(self, session: Session) -> None:
        CONTROL.move_link(session, L.CLOSED)

    async def persist(self, session: Session) -> None:
        return None


def make(link: SessionLink = L.DETACHED) -> Session:
    session = Session(Owner(), SessionRecord("s1", "/w"))
    if link is L.ATTACHED:
        CONTROL.move_link(session, L.ATTACHED, connection_id=1)
    elif link is not L.DETACHED:
        if link in (L.FAILED,):
            CONTROL.move_link(session, L.RECOVERING)
        CONTROL.move_link(session, link)
    assert session.link is link
    return session


def test_the_table_has_every_link_and_final_links_have_no_exit() -> None:
    assert set(LINK_TRANSITIONS) == set(SessionLink)
    assert LINK_TRANSITIONS[L.LOST] == LINK_TRANSITIONS[L.CLOSED] == frozenset()
    for targets in LINK_TRANSITIONS.values():
        assert targets <= set(SessionLink)


@pytest.mark.parametrize("old", [L.DETACHED, L.RECOVERING, L.FAILED, L.ATTACHED])
@pytest.mark.parametrize("new", list(SessionLink))
def test_every_move_is_checked_against_the_table(old: SessionLink, new: SessionLink) -> None:
    session = make(old)
    kwargs: dict[str, Any] = {"connection_id": 2} if new is L.ATTACHED else {}
    if old is new and new is not L.ATTACHED:
        assert CONTROL.move_link(session, new, **kwargs) is False  # already there: nothing happens
    elif new in LINK_TRANSITIONS[old]:
        assert CONTROL.move_link(session, new, **kwargs) is True
        assert session.link is new
    else:
        with pytest.raises(RuntimeError, match="illegal session link transition"):
            CONTROL.move_link(session, new, **kwargs)
        assert session.link is old


@pytest.mark.parametrize("final", [L.LOST, L.CLOSED])
def test_a_final_link_absorbs_every_later_move(final: SessionLink) -> None:
    session = make(L.RECOVERING)
    assert CONTROL.move_link(session, final, error=SessionLost("s1", "gone") if final is L.LOST else None)
    for new in SessionLink:
        assert CONTROL.move_link(session, new, connection_id=3) is False  # a late answer cannot revive it
        assert session.link is final


def test_attached_needs_a_connection_and_a_reattach_moves_it() -> None:
    session = make()
    with pytest.raises(ValueError):
        CONTROL.move_link(session, L.ATTACHED)
    CONTROL.move_link(session, L.ATTACHED, connection_id=1)
    assert CONTROL.attached_to(session, 1)
    CONTROL.move_link(session, L.ATTACHED, connection_id=2)
    assert CONTROL.attached_to(session, 2) and not CONTROL.attached_to(session, 1)


async def test_a_loss_fails_the_waiting_turn_and_forgets_the_state() -> None:
    session = make(L.ATTACHED)
    CONTROL.apply_snapshot(session, "running")
    waiter: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
    session._turn_waiters = [waiter]  # made on first use
    CONTROL.move_link(session, L.DETACHED, loss=ConnectionLost("gone"))
    assert session.link is L.DETACHED and session.state is None
    with pytest.raises(ConnectionLost) as caught:
        waiter.result()
    assert caught.value.request_sent


class Sink:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.wakes = 0

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def changed(self) -> None:
        self.wakes += 1


async def test_each_outcome_gives_its_link_marker_and_event_in_one_step() -> None:
    sink = Sink()
    links = SessionLinks(emit=sink.emit, changed=sink.changed)
    cases: list[tuple[Any, SessionLink, str, type | None]] = [
        (RetryLater("OSError: x", 2, 5), L.FAILED, "failed", SessionRecoveryFailed),
        (LeftDetached("kept", True, 5), L.DETACHED, "kept", SessionDetached),
        (TakenOver("lease_expired"), L.DETACHED, "taken_over", None),
        (Forgotten("unknown", "session/status", 5), L.LOST, "lost", SessionForgotten),
    ]
    for outcome, link, marker_outcome, event_type in cases:
        session = make(L.RECOVERING)
        updates = session.updates()
        marker, event = links.apply(session, outcome)
        assert session.link is link
        assert isinstance(marker, RecoveryMarker) and marker.outcome == marker_outcome
        assert (await updates.__anext__()) == marker  # the marker is in the stream (before its end if final)
        if event_type is None:
            assert event is None
        else:
            assert isinstance(event, event_type) and sink.events[-1] is event
    assert sink.wakes == len(cases)
    session = make(L.ATTACHED)
    marker, event = links.apply(session, Reattached("reattached", "resume", False, False, None, 5, "stream_resumed"))
    assert session.link is L.ATTACHED and marker.path == "stream_resumed"
    assert isinstance(event, SessionRecovered) and event.path == "stream_resumed"


async def test_a_ladder_reattach_carries_its_link_and_applying_it_moves_the_link_and_writes_the_record() -> None:
    sink = Sink()
    links = SessionLinks(emit=sink.emit, changed=sink.changed)
    session = Session(Owner(), SessionRecord("s1", "/w", [{"name": "fs", "command": "fs"}], protocol_version=1))
    CONTROL.move_link(session, L.RECOVERING)
    servers = [{"type": "stdio", "name": "fs", "command": "fs"}]
    outcome = Reattached("restored", "resume", False, True, "inactive", 5, attachment=Attachment(7, 2, servers))
    assert outcome.link is L.ATTACHED  # the outcome names the link it produces
    assert session.link is L.RECOVERING  # nothing moved before it is applied
    assert session.record.protocol_version == 1
    links.apply(session, outcome)
    assert session.link is L.ATTACHED and CONTROL.attached_to(session, 7)
    assert session.record.protocol_version == 2 and session.record.mcp_servers == servers
    assert isinstance(sink.events[-1], SessionRecovered)
    # a resumed stream never left attached: no link to move
    assert Reattached("reattached", "resume", False, False, None, 5, "stream_resumed").link is None


def test_a_forgotten_session_takes_no_late_attachment() -> None:
    session = make(L.RECOVERING)
    CONTROL.move_link(session, L.LOST, error=SessionLost("s1", "unknown"))
    assert not CONTROL.attach(session, Attachment(3, 1, [{"name": "x"}]))
    assert session.link is L.LOST and session.record.protocol_version == 2 and session.record.mcp_servers == []


def test_the_record_is_replaced_only_through_the_owner_side() -> None:
    session = make()
    with pytest.raises(AttributeError):
        session.record = SessionRecord("s1", "/elsewhere")  # type: ignore[misc]
    adopted = SessionRecord("s1", "/elsewhere", meta={"from": "worker-2"})
    CONTROL.replace_record(session, adopted)
    assert session.record is adopted
    with pytest.raises(ValueError, match="s2"):
        CONTROL.replace_record(session, SessionRecord("s2", "/w"))

"""The sessions one client knows, by id: written only through this class, by the client that owns it.

A :class:`SessionRegistry` belongs to exactly one top-level client: an :class:`~acp_client.ACPClient` used
on its own, or a :class:`~acp_client.ReconnectingClient`, which lends its registry to the per-connection
``ACPClient`` it runs underneath. Nobody else holds the dictionary.

Forgetting is final: :meth:`SessionRegistry.forget` leaves a tombstone, so an answer that arrives late (a
``session/resume`` that was already on the wire) cannot bring the session back. Only the application
reopening the id on purpose (``resume_session``/``load_session``) clears the tombstone.
"""

from __future__ import annotations

import collections
import types
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from acp_client.sessions._session import Session

__all__ = ["SessionRegistry"]

#: How many forgotten ids are remembered (oldest first out); enough for any realistic race window.
_MAX_TOMBSTONES = 65_536


class SessionRegistry:
    """Known :class:`~acp_client.sessions.Session` handles by id, with tombstones for forgotten ones."""

    __slots__ = ("_forgotten", "_sessions", "_view")

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._view = types.MappingProxyType(self._sessions)
        self._forgotten: collections.OrderedDict[str, None] = collections.OrderedDict()

    def __repr__(self) -> str:
        return f"<SessionRegistry {len(self._sessions)} sessions, {len(self._forgotten)} forgotten>"

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))

    @property
    def view(self) -> Mapping[str, Session]:
        """A read-only live view of the sessions by id."""
        return self._view

    def get(self, session_id: str) -> Session | None:
        """The handle of ``session_id``, or ``None``."""
        return self._sessions.get(session_id)

    def add(self, session: Session) -> bool:
        """Register ``session``; ``False`` (nothing changes) if its id was forgotten."""
        if session.id in self._forgotten:
            return False
        self._sessions[session.id] = session
        return True

    def reopen(self, session: Session) -> None:
        """Register ``session`` even if its id was forgotten (the application asked for it by id)."""
        self._forgotten.pop(session.id, None)
        self._sessions[session.id] = session

    def remove(self, session_id: str) -> Session | None:
        """Drop ``session_id`` without a tombstone (closed or deleted by the application)."""
        return self._sessions.pop(session_id, None)

    def forget(self, session_id: str) -> Session | None:
        """Drop ``session_id`` for good: a later :meth:`add` of the same id is refused."""
        self._forgotten[session_id] = None
        self._forgotten.move_to_end(session_id)
        while len(self._forgotten) > _MAX_TOMBSTONES:
            self._forgotten.popitem(last=False)
        return self._sessions.pop(session_id, None)

    def forgotten(self, session_id: str) -> bool:
        """``True`` if ``session_id`` was forgotten (and not reopened since)."""
        return session_id in self._forgotten

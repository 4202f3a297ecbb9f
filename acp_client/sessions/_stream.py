"""What a session's update stream carries, and the subscriptions that carry it.

:class:`SessionUpdate` (one update, its typed model built lazily), :class:`RecoveryMarker`,
:class:`UpdatesDropped`; each ``session.updates()`` is a bounded buffer plus an iterator that unregisters
itself when closed, ended or garbage-collected (the session holds only the buffer).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from acp_client import _observe
from acp_client.schema._parse import _DEFERRED, _validate_update
from acp_client.schema.updates import TypedUpdate, typed_update, update_text

__all__ = [
    "DEFAULT_UPDATES_BUFFER",
    "RecoveryMarker",
    "SessionUpdate",
    "StreamItem",
    "UpdatesDropped",
]

#: Default bound of each ``session.updates()`` subscription (items); see :meth:`Session.updates`.
DEFAULT_UPDATES_BUFFER = 1024


class SessionUpdate:
    """One ``session/update`` for this session (read-only).

    ``kind`` is the raw ``sessionUpdate`` string; ``update`` the typed model (or the schema's unknown-kind
    wrapper, keeping the raw dictionary); ``raw`` the ``update`` object as received. ``replay`` is ``True``
    for updates that arrived while a ``session/resume`` or ``session/load`` was outstanding: history, not
    live activity — they never finish a turn nor count usage.

    The typed model of a well-formed text chunk is built from ``raw`` the first time ``update`` is read (a
    consumer of a long stream that reads ``kind`` and ``raw`` never pays for it); malformed updates never
    get this far (they are discarded and counted as ``updates_malformed``).
    """

    __slots__ = ("_kind", "_raw", "_replay", "_session_id", "_update", "_version")
    __match_args__ = ("session_id", "kind", "update", "raw", "replay")

    def __init__(self, session_id: str, kind: str, update: Any, raw: dict[str, Any], replay: bool = False) -> None:
        self._session_id = session_id
        self._kind = kind
        self._update = update
        self._raw = raw
        self._replay = replay
        self._version = 0

    @classmethod
    def _from_fields(
        cls, session_id: str, kind: str, update: Any, raw: dict[str, Any], replay: bool, version: int
    ) -> SessionUpdate:
        # Keeps the ``update`` object only, not the notification's params: an item waiting in a subscription
        # buffer holds as few objects as possible for the garbage collector to traverse. One per update:
        # the slots are set here, without a call of __init__ (half the cost).
        item = _new(cls)
        item._session_id = session_id
        item._kind = kind
        item._update = update
        item._raw = raw
        item._replay = replay
        item._version = version  # a deferred model is built from raw as this version when first read
        return item

    @property
    def session_id(self) -> str:
        """The session this update belongs to."""
        return self._session_id

    @property
    def kind(self) -> str:
        """The raw ``sessionUpdate`` string."""
        return self._kind

    @property
    def raw(self) -> dict[str, Any]:
        """The ``update`` object as received."""
        return self._raw

    @property
    def replay(self) -> bool:
        """``True`` for history replayed by a resume/load, ``False`` for live activity."""
        return self._replay

    @property
    def update(self) -> Any:
        """The typed model of the update (built on first access for a text chunk)."""
        update = self._update
        if update is _DEFERRED:
            update = self._update = _validate_update(self._kind, self._raw, self._version)
        return update

    @property
    def typed(self) -> TypedUpdate:
        """A version-neutral dataclass for this update (see :mod:`acp_client.schema.updates`), built when read."""
        return typed_update(self.raw)

    @property
    def text(self) -> str:
        """The text of a message or thought chunk (or v2 whole message); ``""`` for other updates."""
        return update_text(self.raw)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, SessionUpdate)
        return (self.session_id, self.kind, self.update, self.raw, self.replay) == (
            other.session_id,
            other.kind,
            other.update,
            other.raw,
            other.replay,
        )

    __hash__ = None  # type: ignore[assignment]  # holds dicts, like the frozen dataclass it replaces

    def __repr__(self) -> str:
        return (
            f"SessionUpdate(session_id={self.session_id!r}, kind={self.kind!r}, update={self.update!r}, "
            f"raw={self.raw!r}, replay={self.replay!r})"
        )


_new = object.__new__


@dataclass(frozen=True, slots=True)
class RecoveryMarker:
    """Marks, inside a session's update stream, where a reconnect happened and how it ended.

    ``outcome`` is ``"reattached"`` (the agent still had it in memory), ``"restored"`` (loaded back from the
    agent's storage), ``"lost"`` (forgotten; the stream ends after this marker), ``"failed"`` (will be
    retried), ``"kept"`` (the strategy left it detached for the application to decide) or ``"taken_over"``
    (another worker serves it now). ``mode`` is the call used (``"resume"`` or ``"load"``).
    ``may_have_missed_updates`` is ``True`` when updates sent while the link was down cannot have been
    replayed. ``path`` says how a re-attached session came back, as in
    :class:`~acp_client.reconnect.SessionRecovered`: ``"ladder"`` (status, then resume or load, on a new
    connection) or ``"stream_resumed"`` (the transport resumed its event stream: nothing was lost);
    ``None`` for the other outcomes.
    """

    session_id: str
    outcome: str
    mode: str | None = None
    replayed: bool = False
    may_have_missed_updates: bool = False
    status: str | None = None
    reason: str | None = None
    path: str | None = None


@dataclass(frozen=True, slots=True)
class UpdatesDropped:
    """A slow consumer fell behind: ``count`` of the oldest items were dropped from this subscription.

    The transcript and state are still complete; only this subscription's buffer overflowed.
    """

    count: int


StreamItem = SessionUpdate | RecoveryMarker | UpdatesDropped


class _Subscription:
    """One subscription's bounded buffer. A consumer that finds it empty waits on ``arrived``, counted in
    ``sleepers`` while it waits; a push sets the event only when someone waits, so a burst of updates costs
    an append each (no ``Event.set()`` call per item) and the consumer wakes as soon as it did before."""

    __slots__ = ("arrived", "buffer", "dropped", "maxsize", "sleepers")

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.buffer: collections.deque[StreamItem | None] = collections.deque()
        self.dropped = 0
        self.arrived = asyncio.Event()
        self.sleepers = 0

    def push(self, item: StreamItem | None) -> None:
        buffer = self.buffer
        if item is not None and len(buffer) >= self.maxsize:
            buffer.popleft()
            self.dropped += 1
        buffer.append(item)
        if self.sleepers:
            self.arrived.set()

    async def wait(self) -> None:
        """Wait until something is pushed (several tasks may wait; a cancelled one spoils no other)."""
        self.arrived.clear()
        self.sleepers += 1
        try:
            await self.arrived.wait()
        finally:
            self.sleepers -= 1


class _UpdatesIterator:
    """One ``session.updates()`` subscription: unregistered when closed, ended, or garbage-collected (so
    a reader task that is cancelled and dropped leaks nothing: the session holds only the buffer)."""

    __slots__ = ("_sub", "_unsubscribe")

    def __init__(self, unsubscribe: Callable[[_Subscription], None], sub: _Subscription) -> None:
        # the session's own unsubscribe (a bound method: it keeps the session alive while read, as before)
        self._unsubscribe: Callable[[_Subscription], None] | None = unsubscribe
        self._sub = sub

    def __aiter__(self) -> _UpdatesIterator:
        return self

    async def __anext__(self) -> StreamItem:
        sub = self._sub
        if self._unsubscribe is None:
            raise StopAsyncIteration
        while not sub.buffer:  # a cancelled wait loses nothing: the iterator can be awaited again
            await sub.wait()
        if sub.dropped:
            count, sub.dropped = sub.dropped, 0
            _observe.note_dropped("updates", count)
            return UpdatesDropped(count)
        item = sub.buffer.popleft()
        if item is None:
            self._unregister()
            raise StopAsyncIteration
        return item

    async def aclose(self) -> None:
        """Stop this subscription."""
        self._unregister()

    def _unregister(self) -> None:
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe(self._sub)

    def __del__(self) -> None:
        self._unregister()

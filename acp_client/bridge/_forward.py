"""Session mapping and update forwarding: one :class:`SessionPipe` per session the bridge knows.

Session ids are the remote agent's own (recovery re-attaches the same id), so the mapping is the identity;
what the bridge keeps per session is a subscription to the :class:`~acp_client.Session` handle's stream
and the editor's view of it. The pipe forwards live updates as ``session/update`` notifications and handles
the recovery items of the stream:

- updates flagged ``replay`` while the *editor* asked for a replay (its ``session/load`` or a ``session/resume``
  with ``replayFrom``) are forwarded as they are: the editor wants that history;
- updates flagged ``replay`` during a recovery the bridge ran are buffered, with whatever arrives live
  until the :class:`~acp_client.RecoveryMarker`; at the marker the replay is reconciled with the editor's
  view (:func:`~acp_client.bridge._view.reconcile`), only the difference is sent, then the buffered live
  updates; a gap notice follows when the marker says updates may have been missed or the replay could not
  be reconciled;
- a ``lost`` marker records that the agent forgot the session and shows the editor a notice.

Responses to the editor that must follow a session's updates (a v1 prompt's answer after its chunks, a load's
answer after its replay) wait for :meth:`SessionPipe.drain`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from acp_client._logging import get_logger
from acp_client.bridge._outage import META_KEY, gap_notice, lost_notice
from acp_client.bridge._view import EditorView, reconcile
from acp_client.exceptions import ConnectionLost
from acp_client.sessions import RecoveryMarker, Session, SessionUpdate, UpdatesDropped

__all__ = ["SessionPipe", "SessionPipes"]

log = get_logger("acp_client.bridge")

#: Items one subscription buffers before the oldest are dropped (then the editor gets a gap notice).
PIPE_BUFFER = 100_000
#: Bound on waiting for a session's updates to reach the editor before a response is sent anyway.
DRAIN_TIMEOUT = 10.0

Notify = Callable[[str, dict[str, Any]], Awaitable[None]]


def _published(session: Session) -> int:
    return session.stats["live"] + session.stats["replayed"]


class SessionPipe:
    """Forwards one session's stream to the editor (see the module docstring).

    ``opened`` is ``True`` once the editor knows the session (it created, loaded or resumed it through this
    bridge); a session only recovered from the store is tracked but nothing is forwarded for it.
    """

    def __init__(self, session: Session, notify: Notify, protocol_version: Callable[[], int], *, opened: bool) -> None:
        self.session = session
        self.opened = opened
        self.view = EditorView()
        #: why the agent forgot the session, once it did
        self.lost: str | None = None
        self._notify = notify
        self._version = protocol_version
        self._subscription = session.updates(maxsize=PIPE_BUFFER)  # subscribe now: nothing published is missed
        self._base = _published(session)
        self._handled = 0
        self._progress = asyncio.Event()
        self._preload: list[dict[str, Any]] = []
        self._recovery: list[SessionUpdate] | None = None
        self._editor_replays = 0
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<SessionPipe {self.session.id} opened={self.opened} lost={self.lost}>"

    @property
    def id(self) -> str:
        """The session id (the agent's own)."""
        return self.session.id

    def start(self, preload: list[dict[str, Any]] | None = None) -> None:
        """Start forwarding; ``preload`` are ``session/update`` params captured before the subscription
        existed (the replay of an editor's load of a session the client did not know), sent first."""
        self._preload = list(preload or ())
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"acp-bridge-pipe-{self.id}")

    async def stop(self) -> None:
        """Stop forwarding (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    # ------------------------------------------------------------------ editor-driven replays

    def begin_editor_replay(self, *, replay: bool) -> None:
        """The editor asked to (re)attach the session; with ``replay`` the history it gets is forwarded and
        rebuilds its view, without it the editor keeps a history the bridge has not seen."""
        self.opened = True
        self.view = EditorView(known=replay)
        self._editor_replays += 1

    def editor_knows(self) -> None:
        """The editor knows the session now (it created, loaded or resumed it): forward its updates."""
        self.opened = True

    def history_unseen(self) -> None:
        """The editor attached without a replay: it keeps a history the bridge has not seen."""
        self.view = EditorView(known=False)

    def end_editor_replay(self) -> None:
        """The editor's load/resume has been answered (and drained)."""
        self._editor_replays = max(0, self._editor_replays - 1)

    def note_prompt(self, blocks: list[Any]) -> None:
        """The editor sent a prompt (v1): it shows it itself, so the view gets it as the user's message."""
        self.view.add_prompt(blocks)

    async def drain(self, timeout: float = DRAIN_TIMEOUT) -> None:
        """Wait until every update the session received so far has been handled (forwarded or settled),
        at most ``timeout`` seconds (a recovery waiting for its marker may hold updates back)."""
        target = _published(self.session) - self._base
        try:
            async with asyncio.timeout(timeout):
                while (self._preload or self._handled < target) and self._task is not None and not self._task.done():
                    self._progress.clear()
                    await self._progress.wait()
        except TimeoutError:
            log.warning("bridge_drain_timeout", session_id=self.id, handled=self._handled, target=target)

    # ------------------------------------------------------------------ the forwarding loop

    def _done(self, count: int = 1) -> None:
        self._handled += count
        self._progress.set()

    async def _send(self, update: dict[str, Any], *, record: bool = True) -> None:
        if record:
            self.view.apply(update)
        if self.opened:
            await self._notify("session/update", {"sessionId": self.id, "update": update})

    async def _run(self) -> None:
        try:
            for params in self._preload:
                update = params.get("update")
                if isinstance(update, dict):
                    self.view.apply(update)
                    if self.opened:
                        await self._notify("session/update", params)
            self._preload = []
            self._progress.set()
            async for item in self._subscription:
                if isinstance(item, SessionUpdate):
                    await self._on_update(item)
                elif isinstance(item, RecoveryMarker):
                    await self._on_marker(item)
                else:
                    assert isinstance(item, UpdatesDropped)
                    log.warning("bridge_updates_dropped", session_id=self.id, count=item.count)
                    self._done(item.count)
                    await self._send(gap_notice("overflow"), record=False)
        except ConnectionLost:  # the editor link broke: nothing more can be forwarded
            log.debug("bridge_pipe_stopped", session_id=self.id)
        except Exception:
            log.exception("bridge_pipe_crashed", session_id=self.id)
        finally:
            self._progress.set()

    async def _on_update(self, item: SessionUpdate) -> None:
        if item.replay and self._editor_replays:
            await self._send(item.raw)  # history the editor asked for
            self._done()
        elif item.replay or self._recovery is not None:
            if self._recovery is None:
                self._recovery = []
            self._recovery.append(item)  # settled at the recovery marker
        else:
            await self._send(item.raw)
            self._done()

    async def _on_marker(self, marker: RecoveryMarker) -> None:
        buffered, self._recovery = self._recovery or [], None
        replayed = [i.raw for i in buffered if i.replay]
        live = [i for i in buffered if not i.replay]
        log.info(
            "bridge_recovery_marker",
            session_id=self.id,
            outcome=marker.outcome,
            replayed=len(replayed),
            live=len(live),
            may_have_missed_updates=marker.may_have_missed_updates,
        )
        if marker.outcome == "lost":
            self.lost = marker.reason or "forgotten"
            if self.opened:
                await self._send(lost_notice(self.lost), record=False)
            self._done(len(buffered))
            return
        if marker.outcome not in ("reattached", "restored"):
            self._done(len(buffered))  # failed (retried later) or kept detached: the replay was not applied
            return
        gap: str | None = None
        if marker.replayed:
            result = reconcile(self.view, replayed, self._version())
            gap = result.gap
            for update in result.updates:
                await self._send(update, record=False)
        if marker.may_have_missed_updates:
            gap = gap or "no_replay"
        # a v2 turn the editor saw running may have ended unseen, and the agent cannot say: end it for the
        # editor (marked synthetic) rather than leave it waiting for an idle state that may never come
        unknown_turn = (
            self._version() >= 2
            and self.session.state is None
            and self.view.last_state in ("running", "requires_action")
        )
        if unknown_turn:
            gap = gap or "state_unknown"
        if gap is not None and self.opened:
            log.info("bridge_gap_notice", session_id=self.id, reason=gap)
            await self._send(gap_notice(gap), record=False)
        if unknown_turn:
            await self._send(
                {"sessionUpdate": "state_update", "state": "idle", "_meta": {META_KEY: {"synthetic": True}}}
            )
        for item in live:
            await self._send(item.raw)
        self._done(len(buffered))


class SessionPipes:
    """The bridge's sessions by id, and the ones the remote agent forgot."""

    def __init__(self, notify: Notify, protocol_version: Callable[[], int]) -> None:
        self._notify = notify
        self._version = protocol_version
        self._pipes: dict[str, SessionPipe] = {}

    def get(self, session_id: str) -> SessionPipe | None:
        """The pipe of ``session_id``, if the bridge tracks it."""
        return self._pipes.get(session_id)

    def adopt(self, session: Session, *, opened: bool, preload: list[dict[str, Any]] | None = None) -> SessionPipe:
        """The pipe of ``session``, created and started if new (a forgotten one is replaced)."""
        pipe = self._pipes.get(session.id)
        if pipe is not None and pipe.session is session:
            if opened:
                pipe.editor_knows()
            return pipe
        pipe = SessionPipe(session, self._notify, self._version, opened=opened)
        self._pipes[session.id] = pipe
        pipe.start(preload)
        return pipe

    def lost_reason(self, session_id: str) -> str | None:
        """Why the agent forgot ``session_id``, if it did."""
        pipe = self._pipes.get(session_id)
        return pipe.lost if pipe is not None else None

    async def remove(self, session_id: str) -> None:
        """Stop tracking a session (closed or deleted by the editor)."""
        pipe = self._pipes.pop(session_id, None)
        if pipe is not None:
            await pipe.stop()

    async def stop_all(self) -> None:
        """Stop every pipe."""
        pipes = list(self._pipes.values())
        self._pipes.clear()
        for pipe in pipes:
            await pipe.stop()

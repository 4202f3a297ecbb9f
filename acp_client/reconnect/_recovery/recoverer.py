"""SessionRecoverer: the one owner of every per-session recovery task.

For each session to recover on a new connection it runs exactly one task (a *job*): probe with
``session/status``, ask the strategy, re-attach with ``session/resume``/``session/load``, and on a failure
wait out a backoff (holding no concurrency slot) and try again while the connection lives. A job is
cancelled by ``forget``/``close`` of its session and by the loss of the connection, so no request for a
forgotten session goes out after ``forget()`` returns.

The recoverer decides nothing about the registry or the store: it reports outcomes to its host (the
:class:`~acp_client.ReconnectingClient`), which owns both.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import random
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from acp_client import _observe
from acp_client._logging import get_logger
from acp_client.client import ACPClient, UpdateAcceptance
from acp_client.exceptions import (
    ACPTimeoutError,
    AuthRequired,
    ConnectionLost,
    MethodNotFound,
    ProtocolError,
    RPCError,
    SessionNotFound,
)
from acp_client.reconnect._backoff import Backoff, Clock
from acp_client.reconnect._events import RecoveryRoundFinished
from acp_client.reconnect._recovery.config import ConfigRestore, reapply_config
from acp_client.reconnect._recovery.jobs import Job, Round, Slot
from acp_client.reconnect._recovery.limits import AdaptiveLimit, FixedLimit
from acp_client.reconnect._recovery.listing import listing_lacks
from acp_client.reconnect._sessions.links import LeftDetached, Outcome, Reattached, RetryLater, StillRecovering
from acp_client.reconnect.dialects import SessionErrorKind
from acp_client.reconnect.options import McpSecrets, RecoveryPolicy, Timeouts
from acp_client.reconnect.strategy import (
    Action,
    Capabilities,
    Forget,
    Keep,
    Reattach,
    RecoveryStrategy,
    StatusProbe,
)
from acp_client.sessions import Session, SessionControl, SessionLink

__all__ = ["RecoveryHost", "SessionRecoverer"]

log = get_logger("acp_client.reconnect")


def _message_counts(session: Session) -> collections.Counter[str]:
    """How much text the session's transcript holds per role (``user``, ``agent``, ``thought``), in characters:
    a measure a replay can be compared with however the agent split its messages into chunks."""
    counts = collections.Counter({"user": 0, "agent": 0, "thought": 0})
    for message in session.transcript.messages:
        counts[message.role] += len(message.text)
    return counts


def _replay_shorter(session: Session, local: collections.Counter[str]) -> bool:
    """Whether a replay rebuilt less than the client held (``local``, see :func:`_message_counts`): an agent
    that persisted less than it said, or a prompt it never inserted. The gap is reported, never hidden
    behind "replayed". A role the replay has none of is not compared (many v1 agents replay no user
    messages at all), unless it is the agent's own."""
    rebuilt = _message_counts(session)
    shorter = any(0 < rebuilt[role] < local[role] for role in local) or rebuilt["agent"] == 0 < local["agent"]
    if shorter:
        log.warning(
            "replay_shorter_than_local",
            session_id=session.id,
            local_characters=dict(local),
            replayed_characters=dict(rebuilt),
        )
    return shorter


class RecoveryHost(Protocol):
    """What the recoverer needs from the client that owns the sessions (its
    :class:`~acp_client.reconnect._sessions.keeper.SessionKeeper`)."""

    def strategy_for(self, session_id: str) -> RecoveryStrategy:
        """The strategy that decides for ``session_id``."""
        ...

    def report(self, session: Session, outcome: Outcome) -> None:
        """A recovery outcome: the session's link, marker and event."""
        ...

    def move(self, session: Session, link: SessionLink) -> None:
        """Move the session's link outside of an outcome (``recovering``, ``detached``)."""
        ...

    async def forget_handle(self, session: Session, reason: str, via: str | None, generation: int) -> None:
        """Forget the session for good (called from its own job)."""
        ...

    async def save_record(self, session: Session) -> None:
        """Store a recovered session's record."""
        ...


class SessionRecoverer:
    """Runs at most one recovery job per session; see the module docstring."""

    def __init__(
        self,
        host: RecoveryHost,
        *,
        policy: RecoveryPolicy,
        timeouts: Timeouts,
        limit: FixedLimit,
        backoff: Backoff,
        clock: Clock,
        rng: random.Random,
        on_auth_required: Callable[[ACPClient], Awaitable[None]] | None = None,
        max_replay: int | None = None,
        mcp_secrets: McpSecrets | None = None,
    ) -> None:
        self._host = host
        self._sessions = SessionControl()  # the probe's snapshot is applied through it
        self._max_replay = max_replay
        self._mcp_secrets = mcp_secrets
        self.policy = policy
        self.timeouts = timeouts
        self.limit = limit
        self._backoff = backoff
        self._clock = clock
        self._rng = rng
        self._on_auth_required = on_auth_required
        self._jobs: dict[str, Job] = {}
        self._cut_resumption: str | None = None
        # the Capabilities of the last connection asked, with what they were read from: every session of a
        # round shares them (one object, not four capability walks per session)
        self._caps: tuple[ACPClient, dict[str, Any], int, Capabilities] | None = None

    @classmethod
    def build(
        cls,
        host: RecoveryHost,
        *,
        policy: RecoveryPolicy,
        timeouts: Timeouts,
        backoff: Backoff,
        clock: Clock,
        rng: random.Random,
        on_auth_required: Callable[[ACPClient], Awaitable[None]] | None = None,
        max_replay: int | None = None,
        mcp_secrets: McpSecrets | None = None,
    ) -> SessionRecoverer:
        """A recoverer with the concurrency limit ``policy.concurrency`` asks for."""
        limit = AdaptiveLimit() if policy.concurrency == "adaptive" else FixedLimit(policy.concurrency)
        return cls(
            host,
            policy=policy,
            timeouts=timeouts,
            limit=limit,
            backoff=backoff,
            clock=clock,
            rng=rng,
            on_auth_required=on_auth_required,
            max_replay=max_replay,
            mcp_secrets=mcp_secrets,
        )

    def __repr__(self) -> str:
        return f"<SessionRecoverer jobs={len(self._jobs)} limit={self.limit!r}>"

    def busy(self, session_id: str) -> bool:
        """``True`` while a job for ``session_id`` runs (attempting or waiting out a backoff)."""
        return session_id in self._jobs

    # ------------------------------------------------------------------ rounds and jobs

    def note_cut(self, stream_resumption: str | None) -> None:
        """The connection before the next round was lost, and its transport could not resume its event
        stream for this reason (``None``: no stream resumption on that transport); the round's
        ``SessionRecovered`` events carry it."""
        self._cut_resumption = stream_resumption

    async def run_round(self, client: ACPClient, sessions: list[Session], generation: int) -> RecoveryRoundFinished:
        """Recover ``sessions`` on ``client``; returns when each has a first outcome (failed ones go on
        retrying in the background while the connection lives), or after ``Timeouts.recovery_round``:
        a session still recovering then is reported failed-and-retrying while its attempt goes on, so one
        replay that never ends cannot keep the client from ``READY``."""
        self.limit.new_path()  # a new connection: the adaptive limit re-learns the round trip
        round_ = Round()
        jobs = [self._start(client, s, generation, jitter=True) for s in sessions]
        for job in jobs:
            job.join(round_)
        if round_.left:
            await asyncio.wait({round_.done}, timeout=self.timeouts.recovery_round)
        counts = {"reattached": 0, "restored": 0, "forgotten": 0, "failed": 0, "kept": 0}
        for session, job in zip(sessions, jobs, strict=True):
            result = round_.results.get(job)
            if result is None:
                counts["failed"] += 1
                bound = self.timeouts.recovery_round
                error = f"still recovering after {bound:g} s (Timeouts.recovery_round); the attempt goes on"
                log.warning("acp.recovery_round_bound_reached", session_id=session.id, after=bound)
                self._host.report(session, StillRecovering(error, generation))
                continue
            counts[result if result in counts else "failed"] += 1
        return RecoveryRoundFinished(generation, **counts)

    async def recover_now(self, client: ACPClient, session: Session, generation: int) -> str:
        """Recover one session now: join its running job (cutting a backoff short) or start one."""
        job = self._jobs.get(session.id)
        if job is None:
            job = self._start(client, session, generation, jitter=False)
            return await asyncio.shield(job.outcome())
        waiter = job.next_outcome()
        job.wake.set()
        return await asyncio.shield(waiter)

    def _start(self, client: ACPClient, session: Session, generation: int, *, jitter: bool) -> Job:
        job = self._jobs.get(session.id)
        if job is not None:
            return job
        job = Job()
        self._host.move(session, SessionLink.RECOVERING)
        self._jobs[session.id] = job
        job.task = asyncio.create_task(
            self._run(job, client, session, generation, jitter), name=f"acp-recover-{session.id}"
        )
        return job

    async def cancel(self, session_id: str) -> None:
        """Stop the job of ``session_id`` (forget/close): its requests are withdrawn, nothing more is sent."""
        job = self._jobs.get(session_id)
        if job is None or job.task is None or job.task is asyncio.current_task():
            return  # nothing runs, or the job itself is forgetting its session (it ends on its own)
        del self._jobs[session_id]
        job.task.cancel()
        await asyncio.wait({job.task})
        job.settle("cancelled")

    async def stop_all(self) -> None:
        """Stop every job (the connection is gone, or the client closes)."""
        jobs = list(self._jobs.values())
        self._jobs.clear()
        self._caps = None  # hold no closed client
        tasks = [j.task for j in jobs if j.task is not None and j.task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        for job in jobs:
            job.settle("cancelled")

    async def _run(self, job: Job, client: ACPClient, session: Session, generation: int, jitter: bool) -> None:
        attempt = 0
        try:
            if jitter and self.policy.start_jitter > 0:
                await self._clock.sleep(self._rng.uniform(0.0, self.policy.start_jitter))
            auth_refreshed = False
            while True:
                attempt += 1
                try:
                    with _observe.session_recovery(session.id, attempt, generation, client.connection.facts) as scope:
                        outcome = await self._attempt(client, session, generation)
                        scope.outcome(outcome)
                except AuthRequired as exc:
                    if self._on_auth_required is not None and not auth_refreshed:
                        auth_refreshed = True
                        attempt -= 1
                        await self._on_auth_required(client)
                        continue
                    error: BaseException = exc
                except ConnectionLost:
                    self._host.move(session, SessionLink.DETACHED)  # the next connection tries again
                    job.settle("failed")
                    return
                except Exception as exc:
                    error = exc
                else:
                    job.settle(outcome)
                    if outcome != "failed":
                        return
                    error = RuntimeError("recovery failed")
                if client.connection.closed:
                    self._host.move(session, SessionLink.DETACHED)
                    job.settle("failed")
                    return
                self._host.report(session, RetryLater(f"{type(error).__name__}: {error}", attempt, generation))
                if attempt >= self.policy.tries:
                    job.settle("failed")  # the round goes on; this job keeps trying in the background
                await self._pause(job, attempt)
                self._host.move(session, SessionLink.RECOVERING)
        finally:
            if self._jobs.get(session.id) is job:
                del self._jobs[session.id]
            self._sessions.config_restored(session, {})  # never leave its prompts waiting for a config gate
            job.settle("failed")

    async def _pause(self, job: Job, attempt: int) -> None:
        """Wait out a retry's backoff (no slot held); ``recover_now`` cuts it short."""
        job.wake.clear()
        sleeper = asyncio.ensure_future(self._clock.sleep(self._backoff.delay(attempt)))
        waker = asyncio.ensure_future(job.wake.wait())
        try:
            await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeper, waker):
                task.cancel()
            await asyncio.wait({sleeper, waker})

    # ------------------------------------------------------------------ one attempt

    def _capabilities(self, client: ACPClient) -> Capabilities:
        """What ``client``'s connection offers (read again only when the client or its answer changed)."""
        cached = self._caps
        raw, version = client.agent_capabilities, client.protocol_version
        if cached is not None and cached[0] is client and cached[1] is raw and cached[2] == version:
            return cached[3]
        caps = Capabilities(
            protocol_version=version,
            load=client.supports("load"),
            resume=client.supports("resume"),
            status=client.supports("status"),
        )
        self._caps = (client, raw, version, caps)
        return caps

    async def _attempt(self, client: ACPClient, session: Session, generation: int) -> str:
        # the probe's slot is kept for the resume/load that usually follows (given back when none does)
        slot = Slot(self.limit)
        try:
            return await self._attempt_on(slot, client, session, generation)
        finally:
            slot.give_back()

    async def _attempt_on(self, slot: Slot, client: ACPClient, session: Session, generation: int) -> str:
        caps = self._capabilities(client)
        via = "session/status"
        if caps.status:
            probe = await slot.carry(lambda: self._probe(client, session), client.connection, keep=True)
        else:
            probe = StatusProbe(None, skipped_reason="not_advertised")  # no request: no slot needed
        if probe.state is not None and caps.protocol_version >= 2:
            self._sessions.apply_snapshot(session, probe.state.state)
        action = await self._decide(session, probe, caps, slot)
        if isinstance(action, Forget):
            slot.give_back()  # no request follows
            await self._host.forget_handle(session, action.reason, via, generation)
            return "forgotten"
        if isinstance(action, Keep):
            slot.give_back()
            self._keep(session, action, probe.not_found, generation)
            return "kept"
        # the answer's updates are routed to the session until this job's outcome moved its link (the
        # client leaves the attach's report in the window; the outcome carries it)
        with client.accept_updates(session.id) as window:
            return await self._reattach_and_report(slot, client, session, action, caps, probe, generation, window)

    async def _reattach_and_report(
        self,
        slot: Slot,
        client: ACPClient,
        session: Session,
        action: Reattach,
        caps: Capabilities,
        probe: StatusProbe,
        generation: int,
        window: UpdateAcceptance,
    ) -> str:
        via = f"session/{action.mode}"
        before, had_history = session.stats["replayed"], bool(session.transcript.messages)
        # what the client holds, to compare with what a replay rebuilds (only measured when one may come: it
        # walks the transcript's text; a v1 resume answered -32601 falls back to a load, which replays)
        may_replay = action.replay or action.mode == "load" or (caps.protocol_version < 2 and caps.load)
        local = _message_counts(session) if may_replay and had_history else None
        if action.outcome == "restored" and session.desired_config:
            self._sessions.config_restoring(session)  # its prompts wait until the desired config is set again
        try:
            mode, replayed = await slot.carry(
                lambda: self._reattach(client, session, action, caps, slot, window), client.connection
            )
        except AuthRequired:
            raise  # the job calls on_auth_required and tries again
        except RPCError as exc:
            kind = self._read(exc)
            if kind == "unknown":
                return await self._not_found(session, caps, via, generation)
            # "live on another connection" is never proof of absence: the attempt fails and is retried
            if kind == "elsewhere" or not await self._absent_from_list(client, session, exc):
                raise
            await self._host.forget_handle(session, "not_listed", via, generation)
            return "forgotten"
        empty = replayed and had_history and session.stats["replayed"] == before
        if empty and await self._empty_replay_unlisted(client, session):
            # the session had a history, the agent answered success but replayed none of it, and does not list
            # the session: it made a fresh, empty one under the old id (pydantic-acp answers a load of an unknown
            # id so)
            await self._host.forget_handle(session, "not_listed", via, generation)
            return "forgotten"
        shorter = replayed and local is not None and _replay_shorter(session, local)
        restore = await self._restore_config(client, session, action)
        outcome = Reattached(
            action.outcome,
            mode,
            replayed,
            not replayed or shorter,
            probe.status,
            generation,
            stream_resumption=self._cut_resumption,
            attachment=window.attachment,  # applying the outcome moves the link and writes the record
            config_reapplied=tuple(restore.reapplied),
            config_failed=tuple(restore.failed.items()),
        )
        self._host.report(session, outcome)
        await self._host.save_record(session)
        return str(action.outcome)

    async def _restore_config(self, client: ACPClient, session: Session, action: Reattach) -> ConfigRestore:
        """After a restore, set the application's desired config again (``reapply_config``); the session's
        prompts waited for it, and the next one raises ``ConfigNotRestored`` if some of it failed."""
        if action.outcome != "restored" or not session.desired_config:
            return ConfigRestore()
        restore = ConfigRestore()
        try:
            restore = await reapply_config(client, session, self.timeouts.probe)
        finally:
            self._sessions.config_restored(session, restore.failed)
        return restore

    def _read(self, exc: RPCError) -> SessionErrorKind:
        """What an error answer about one session says: ``-32002`` and ``unknown_session_codes`` are
        *unknown*; the dialects read the rest."""
        if isinstance(exc, SessionNotFound) or exc.code in self.policy.unknown_session_codes:
            return "unknown"
        return self.policy.dialects.read(exc)

    async def _not_found(self, session: Session, caps: Capabilities, via: str, generation: int) -> str:
        verdict = await self._decide(session, StatusProbe(None, not_found=True, skipped_reason=via), caps)
        if isinstance(verdict, Forget):
            await self._host.forget_handle(session, verdict.reason, via, generation)
            return "forgotten"
        self._keep(session, verdict if isinstance(verdict, Keep) else Keep("kept"), True, generation)
        return "kept"

    def _keep(self, session: Session, action: Keep, not_found: bool, generation: int) -> None:
        self._host.report(session, LeftDetached(action.reason, not_found, generation))

    async def _probe(self, client: ACPClient, session: Session) -> StatusProbe:
        try:
            answer = await client.session_status(session.id, timeout=self.timeouts.probe)
        except SessionNotFound as exc:
            return StatusProbe(None, not_found=True, error=exc)
        except MethodNotFound as exc:
            return StatusProbe(None, skipped_reason="method_not_found", error=exc)
        except (ConnectionLost, AuthRequired, ACPTimeoutError):
            raise
        except RPCError as exc:
            if self._read(exc) == "unknown":
                return StatusProbe(None, not_found=True, error=exc)
            log.warning("acp.status_probe_failed", session_id=session.id, error=str(exc))
            return StatusProbe(None, skipped_reason="error", error=exc)
        except ProtocolError as exc:  # null, {}, a non-string status, a bare string: an answer, but no status
            log.warning("acp.status_probe_malformed", session_id=session.id, error=str(exc))
            return StatusProbe(None, skipped_reason="malformed", error=exc)
        return StatusProbe(answer.status, state=answer.state)

    async def _decide(
        self, session: Session, probe: StatusProbe, caps: Capabilities, slot: Slot | None = None
    ) -> Action:
        decided: Action | Awaitable[Action] = self._host.strategy_for(session.id).decide(session.record, probe, caps)
        if inspect.isawaitable(decided):
            if slot is not None:
                slot.give_back()  # a strategy may take its time: hold no slot meanwhile
            async with asyncio.timeout(self.timeouts.strategy):
                return await decided
        return decided

    async def _reattach(
        self,
        client: ACPClient,
        session: Session,
        action: Reattach,
        caps: Capabilities,
        slot: Slot,
        window: UpdateAcceptance,
    ) -> tuple[str, bool]:
        mode, replay = action.mode, action.replay
        # a given-up request frees its slot at once: awaiting the agent's answer to the cancel (which a
        # hung agent may never send) must not keep healthy sessions waiting for a slot
        watch: dict[str, Any] = {
            "silence": self.timeouts.replay_silence,
            "deadline": self.timeouts.recovery_deadline,
            "max_replay": self._max_replay,
            "on_give_up": lambda: slot.release(ok=False),
            "acceptance": window,  # the answer is reported there, not to the owner: the outcome applies it
        }
        if self._mcp_secrets is not None:  # the store keeps no secret values: the application supplies them
            stored = session.record.without_mcp_secrets().mcp_servers
            filled = self._mcp_secrets(session.id, stored)
            if inspect.isawaitable(filled):
                filled = await filled
            watch["mcp_servers"] = list(filled)
        try:
            await client.attach(session, mode=mode, replay=replay, timeout=None, **watch)
        except MethodNotFound:
            if mode != "resume" or not caps.load or caps.protocol_version >= 2:
                raise
            log.info("acp.resume_not_implemented_falling_back_to_load", session_id=session.id)
            mode, replay = "load", True
            await client.attach(session, mode="load", replay=True, timeout=None, **watch)
        return mode, (replay or mode == "load")

    async def _absent_from_list(self, client: ACPClient, session: Session, error: RPCError) -> bool:
        """After a resume/load error that names the session neither unknown nor live elsewhere: ``True``
        only if the agent advertises ``session/list`` and its listing, asked for the session's own ``cwd``
        (``SessionDialects.list_with_cwd``), names other sessions but not this one. An empty listing
        proves nothing unless ``SessionDialects.empty_list_proves_absent`` (an agent that lists only what
        it touched since it started, or nothing without a ``cwd``, would make every live session look
        absent); a failure of the listing itself means "not proven absent" too."""
        absent = await listing_lacks(client, session, self.policy.dialects, self.timeouts.list_check)
        if absent:
            log.info("acp.session_not_listed", session_id=session.id, code=error.code)
        return absent

    async def _empty_replay_unlisted(self, client: ACPClient, session: Session) -> bool:
        """A re-attach that asked for a replay of a session with a history was answered with success and no
        update: is the session missing from the agent's listing (so the answer was a fresh, empty session
        under the old id)?
        Without ``session/list``, or with an empty or failed listing, the answer is taken as given."""
        if not self.policy.dialects.verify_empty_replay:
            return False
        absent = await listing_lacks(client, session, self.policy.dialects, self.timeouts.list_check)
        if absent:
            log.warning("acp.empty_replay_not_listed", session_id=session.id)
        else:
            log.info("acp.empty_replay_accepted", session_id=session.id)
        return absent

"""The session handle: stable across reconnects, with its update stream, transcript and foreground state."""

from __future__ import annotations

import asyncio
import collections
import enum
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from acp_client._logging import get_logger
from acp_client.exceptions import (
    ACPTimeoutError,
    CapabilityNotSupported,
    ConnectionLost,
    NotConnected,
    PromptNotResendable,
    RPCError,
    SessionLost,
    TurnFailed,
    UsageError,
)
from acp_client.schema import parse_prompt_answer, parse_state_update
from acp_client.schema._parse import _DEFERRED
from acp_client.schema.content import PromptContent, prompt_blocks
from acp_client.sessions._config_gate import ConfigGate
from acp_client.sessions._ledger import (
    ClassifyEvidence,
    PromptEntry,
    PromptLedger,
    PromptState,
    content_digest,
    new_prompt_id,
)
from acp_client.sessions._store import SessionRecord
from acp_client.sessions._stream import (
    DEFAULT_UPDATES_BUFFER,
    RecoveryMarker,
    SessionUpdate,
    StreamItem,
    UpdatesDropped,
    _Subscription,
    _UpdatesIterator,
)
from acp_client.sessions._transcript import KEPT_KINDS, Message, Transcript

__all__ = [
    "LINK_TRANSITIONS",
    "Attachment",
    "PromptResult",
    "RecoveryMarker",
    "Session",
    "SessionControl",
    "SessionLink",
    "SessionOwner",
    "SessionUpdate",
    "StreamItem",
    "UpdatesDropped",
    "config_option_params",
    "text_blocks",
]

log = get_logger(__name__)

#: the foreground states the protocol names: a state read from a frame is replaced by one of these constants,
#: so 100,000 idle sessions share one ``"idle"`` instead of keeping a string each
_KNOWN_STATES = {state: state for state in ("idle", "running", "requires_action")}
#: session updates that carry facts about the session rather than conversation
_FACT_KEYS = frozenset({"available_commands_update", "config_option_update", "current_mode_update"})
#: How long a prompt waits, at most, for its ledger entry to reach the store before it is sent anyway (seconds)
LEDGER_WRITE_WAIT = 5.0


class SessionLink(enum.Enum):
    """Where a session stands with respect to the current connection."""

    # members are singletons compared by identity: hash them so too (Enum hashes the name in Python, and
    # every link move looks the link up in a transition table)
    __hash__ = object.__hash__

    ATTACHED = "attached"  #: created or re-attached on the current connection; prompts go out
    DETACHED = "detached"  #: the connection it was attached to is gone; recovery has not started
    RECOVERING = "recovering"  #: status probe / resume / load in progress on a new connection
    FAILED = "failed"  #: the last recovery failed for a reason other than -32002; it will be retried
    LOST = "lost"  #: the agent does not know it any more (-32002) or it was forgotten; final
    CLOSED = "closed"  #: closed or deleted by the application; final


_L = SessionLink
#: Every legal ``old -> new`` move of :attr:`Session.link`. ``LOST`` and ``CLOSED`` are final: a move out
#: of them is ignored (a late answer cannot revive a forgotten session); any other move not listed raises.
#: ``ATTACHED -> ATTACHED`` is a re-attach on another connection.
LINK_TRANSITIONS: dict[SessionLink, frozenset[SessionLink]] = {
    _L.DETACHED: frozenset({_L.ATTACHED, _L.RECOVERING, _L.LOST, _L.CLOSED}),
    _L.RECOVERING: frozenset({_L.ATTACHED, _L.DETACHED, _L.FAILED, _L.LOST, _L.CLOSED}),
    _L.FAILED: frozenset({_L.ATTACHED, _L.RECOVERING, _L.DETACHED, _L.LOST, _L.CLOSED}),
    _L.ATTACHED: frozenset({_L.ATTACHED, _L.DETACHED, _L.RECOVERING, _L.LOST, _L.CLOSED}),
    _L.LOST: frozenset(),
    _L.CLOSED: frozenset(),
}
_FINAL = (_L.LOST, _L.CLOSED)


@dataclass(frozen=True, slots=True)
class PromptResult:
    """How a turn ended: the ``stop_reason`` (open set: ``end_turn``, ``cancelled``, ``error``, ...; ``None`` if
    the agent did not say), the raw prompt response, and ``message_id``: the id of the user message the agent
    inserted (v2: its receipt; v1: the id of the agent's echo of the prompt, if it gave one; else ``None``)."""

    stop_reason: str | None
    raw: Any = field(default=None)
    message_id: str | None = None


@dataclass(frozen=True, slots=True)
class PromptReceipt:
    """The agent's answer to a v2 ``session/prompt`` (:meth:`Session.send_prompt`): the prompt was inserted
    as the user message ``message_id`` (``None`` when an older agent answered without one); ``raw`` is the
    response object. The turn goes on: its end arrives as a ``state_update`` (:meth:`Session.on_turn_finished`,
    :meth:`Session.updates`)."""

    message_id: str | None
    raw: Any = field(default=None)
    #: the prompt's entry in the session's prompt ledger
    entry: PromptEntry | None = field(default=None, repr=False)


#: How long :meth:`Session.prompt` waits, at most, for a turn whose prompt call was cancelled (Ctrl-C) to end
#: before it sends the next prompt anyway (seconds; the caller's own ``timeout`` bounds it too).
ABANDONED_TURN_WAIT = 10.0


@dataclass(frozen=True, slots=True)
class Attachment:
    """What the connection layer reports when the agent answered a ``session/new``, ``session/resume`` or
    ``session/load``: the session is attached on the connection ``connection_id``, which speaks
    ``protocol_version``, and (a resume/load) the ``mcp_servers`` it was sent, in that version's shape.
    The session's owner applies it (:meth:`SessionControl.attach`): nothing is written before that."""

    connection_id: int
    protocol_version: int
    mcp_servers: list[dict[str, Any]] | None = None


class SessionOwner(Protocol):
    """The client that owns a :class:`Session`: it sends the session's calls, and it is the one writer of the
    session's link (through :class:`SessionControl`). A client hands its sessions a small owner object, so
    these names are not part of the client's own API.

    The connection layer (the per-connection client and its router) reports here what happened to a session
    (:meth:`attached`, :meth:`detached`, :meth:`closed`); it never moves a link itself."""

    @property
    def protocol_version(self) -> int:
        """The protocol version of the current connection."""
        ...

    async def session_request(
        self, session: Session, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> Any:
        """Send one request of ``session`` and return its result."""
        ...

    async def session_notify(self, session: Session, method: str, params: dict[str, Any]) -> None:
        """Send one notification of ``session`` (``session/cancel``)."""
        ...

    async def wait_attached(self, session: Session, method: str, timeout: float) -> float:
        """Wait at most ``timeout`` seconds (``TimeoutError``) until ``session`` may send ``method``, and
        return what is left of ``timeout``. A reconnecting owner waits for its re-attachment; a
        one-connection owner returns ``timeout`` at once. Raises when waiting cannot help."""
        ...

    def attached(self, session: Session, attachment: Attachment) -> None:
        """``session`` was created or attached as ``attachment`` says (the agent's answer arrived)."""
        ...

    def detached(self, session: Session, loss: ConnectionLost) -> None:
        """The connection ``session`` was attached on ended (``loss`` says how)."""
        ...

    def closed(self, session: Session) -> None:
        """The agent confirmed ``session/close`` or ``session/delete`` of ``session``."""
        ...

    async def persist(self, session: Session) -> None:
        """Store ``session``'s record now, if this owner keeps a store (its prompt ledger or desired config
        changed). Never raises for a store fault (the owner reports and retries it)."""
        ...


class SessionControl:
    """The owner side of :class:`Session`: the one interface through which a session's link, its record, its
    foreground snapshot, its replay bookkeeping and its stream are written from outside this module.

    It holds no state: which object holds one is the rule. A session's :class:`SessionOwner` moves links and
    writes the record (:meth:`move_link`, :meth:`attach`, :meth:`replace_record`); the per-connection client
    brackets a resume/load (:meth:`begin_replay`, :meth:`end_replay`) and delivers the agent's updates
    (:meth:`deliver`); the recovery applies a status snapshot (:meth:`apply_snapshot`) and puts markers into
    the stream (:meth:`mark`). Applications never use it."""

    __slots__ = ()

    # ------------------------------------------------------------------ reads

    def attached_to(self, session: Session, connection_id: int) -> bool:
        """``True`` if ``session`` is attached on the connection ``connection_id``."""
        return session._attached_to(connection_id)

    def check_usable(self, session: Session) -> None:
        """Raise what a call on ``session`` would raise now (``SessionLost``, or ``UsageError`` once closed)."""
        session._check_usable()

    def replay_progress(self, session: Session) -> Callable[[], int]:
        """A function that counts the updates replayed into ``session`` so far (a recovery watches it)."""
        return session._replay_progress

    def has_subscribers(self, session: Session) -> bool:
        """Whether an ``updates()`` subscription of ``session`` is open."""
        return session._has_subscribers()

    # ------------------------------------------------------------------ writes

    def move_link(
        self,
        session: Session,
        new: SessionLink,
        *,
        connection_id: int | None = None,
        loss: ConnectionLost | None = None,
        error: SessionLost | None = None,
    ) -> bool:
        """Move ``session``'s link along :data:`LINK_TRANSITIONS` (see :meth:`Session._move_link`); ``False``
        when nothing changed. Only the session's owner calls this."""
        return session._move_link(new, connection_id=connection_id, loss=loss, error=error)

    def attach(self, session: Session, attachment: Attachment) -> bool:
        """Apply what the connection layer reported: the link moves to ``attached`` on
        ``attachment.connection_id`` and the record takes the version (and the servers) the attach used.
        ``False`` when the link did not move (a session forgotten or closed meanwhile: nothing is written).
        Only the session's owner calls this."""
        if not session._move_link(SessionLink.ATTACHED, connection_id=attachment.connection_id):
            return False
        record = session._record
        record.protocol_version = attachment.protocol_version
        if attachment.mcp_servers is not None:
            record.mcp_servers = attachment.mcp_servers
        return True

    def replace_record(self, session: Session, record: SessionRecord) -> None:
        """Give ``session`` the record another worker left (its owner adopts the session); same id only."""
        if record.session_id != session._record.session_id:
            raise ValueError(f"record of {record.session_id} given to session {session._record.session_id}")
        session._record = record

    def apply_snapshot(self, session: Session, state: str | None) -> None:
        """Apply a foreground state learned from a status probe, or the default of a new session."""
        session._apply_snapshot(state)

    def begin_replay(self, session: Session, *, rebuild: bool) -> None:
        """A resume/load of ``session`` is about to be sent (``rebuild``: its transcript is replayed)."""
        session._begin_replay(rebuild=rebuild)

    def end_replay(self, session: Session, *, success: bool) -> None:
        """The resume/load of ``session`` was answered (``success``) or failed."""
        session._end_replay(success=success)

    def deliver(self, session: Session, kind: str, update: Any, raw: dict[str, Any], version: int) -> None:
        """Apply one checked update from the agent to ``session`` (see :meth:`Session._handle_update`)."""
        session._handle_update(kind, update, raw, version)

    def learn(self, session: Session, answer: Any) -> None:
        """Take what an agent's answer for ``session`` says about it (``session/new``, ``session/resume``,
        ``session/load``, ``session/set_config_option``): its ``availableCommands`` and ``configOptions``."""
        session._learn(answer)

    def mark(self, session: Session, marker: RecoveryMarker) -> None:
        """Put a recovery marker into every subscription of ``session``'s stream."""
        session._mark(marker)

    def classify_prompts(self, session: Session, *, replayed: bool) -> list[PromptEntry]:
        """``session`` was re-attached (``replayed``: a replay rebuilt its transcript): classify every prompt
        the drop left in flight (see :meth:`PromptLedger.classify`); returns them."""
        return session._classify_prompts(replayed)

    def want_config(self, session: Session, key: str, value: str | bool) -> None:
        """The application set ``key`` (``"mode"`` or ``"option:<configId>"``) to ``value`` on ``session``
        (through the per-connection client): keep it as desired config."""
        session._want(key, value)

    def fresh_config(self, session: Session) -> frozenset[str]:
        """What the agent said about ``session``'s config since its last resume/load began (``"config"``:
        its config options, ``"mode"``: its current mode)."""
        return session._fresh or frozenset()

    def config_restoring(self, session: Session) -> None:
        """The desired config of ``session`` is about to be set again (a restore): prompts wait for it."""
        session._config_restoring()

    def config_restored(self, session: Session, failures: dict[str, str]) -> None:
        """Setting the desired config again ended; ``failures`` (setting -> error text) makes the next prompt
        raise :class:`~acp_client.exceptions.ConfigNotRestored`."""
        session._config_restored(failures)


def config_option_params(session_id: str, config_id: str, value: str | bool, version: int) -> dict[str, Any]:
    """The params of ``session/set_config_option``: a bool is a ``boolean`` option; v2 names a select's
    value type (``id``)."""
    params: dict[str, Any] = {"sessionId": session_id, "configId": config_id, "value": value}
    if isinstance(value, bool):
        params["type"] = "boolean"
    elif version >= 2:
        params["type"] = "id"
    return params


def text_blocks(content: PromptContent) -> list[dict[str, Any]]:
    """Prompt content as ACP content blocks (see :func:`acp_client.schema.content.prompt_blocks`): a string becomes
    one text block; anything that is not content raises ``UsageError``."""
    return prompt_blocks(content)


class Session:
    """A handle on one ACP session. It stays valid across reconnects: code holding it never re-fetches it.

    Created by ``client.new_session()`` (or load/resume); do not construct it yourself.
    """

    # Rarely set state, as class defaults: an instance holds its own only once it is set (memory per session).
    # what the agent last said about the session
    _commands: list[dict[str, Any]] | None = None
    _config: list[dict[str, Any]] | None = None
    # v2: a prompt() call was cancelled after its prompt went out: the turn may run on (see ABANDONED_TURN_WAIT)
    _abandoned: bool = False
    # v2: the error object of the last live idle update whose stopReason was "error" (read by prompt())
    _turn_error: Any = None
    # prompts recorded while the session was not attached: they wait for the re-attachment, so no replay
    # before it can hold them; a replay's rebuilt transcript takes them over (Transcript._carry_prompts)
    _held_prompts: list[Message] | None = None
    _mode: str | None = None
    # what the agent said about the config since the last resume/load began ("config", "mode")
    _fresh: frozenset[str] | None = None
    _ledger: PromptLedger | None = None
    # holds prompts while a restore sets the desired config again (made by the first such restore)
    _config_gate: ConfigGate | None = None

    @property
    def available_commands(self) -> list[dict[str, Any]] | None:
        """The agent's slash commands for this session, as last reported (``available_commands_update``, or
        the ``availableCommands`` of a ``session/new``/``session/resume`` answer, v2 alpha.6 and later); raw
        objects (``name``, ``description``, ``input``...). ``None`` until the agent says."""
        return self._commands

    @property
    def config_options(self) -> list[dict[str, Any]] | None:
        """The session's config options (mode, model, effort ...) as the agent last reported them
        (``configOptions`` of ``session/new``, ``session/resume`` (v2 alpha.7), ``session/load``,
        ``session/set_config_option``, or a ``config_option_update``); raw objects. ``None`` until the agent
        says."""
        return self._config

    def _learn(self, answer: Any) -> None:
        if not isinstance(answer, dict):
            return
        commands = answer.get("availableCommands")
        if isinstance(commands, list):
            self._commands = [c for c in commands if isinstance(c, dict)]
        config = answer.get("configOptions")
        if isinstance(config, list):
            self._config = [c for c in config if isinstance(c, dict)]
            self._fresh = (self._fresh or frozenset()) | {"config"}
        modes = answer.get("modes")
        mode = modes.get("currentModeId") if isinstance(modes, dict) else answer.get("currentModeId")
        if isinstance(mode, str):
            self._mode = mode
            self._fresh = (self._fresh or frozenset()) | {"mode"}

    @property
    def current_mode(self) -> str | None:
        """The session's current mode id (v1 ``modes.currentModeId`` of an answer, or a
        ``current_mode_update``), ``None`` until the agent says."""
        return self._mode

    @property
    def desired_config(self) -> dict[str, Any]:
        """The mode and config options the application set on this session (:meth:`set_mode`,
        :meth:`set_config_option`, or the client's methods of the same names), as ``{"mode": id,
        "options": {configId: value}}`` (a copy; empty when none was set). A reconnecting client keeps it in
        the session record (and store) and sets it again after a *restored* recovery."""
        desired = self.record.desired_config or {}
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in desired.items()}

    @property
    def prompt_ledger(self) -> PromptLedger:
        """This session's prompt ledger: a :class:`PromptEntry` per prompt (the last
        :data:`~acp_client.sessions.PROMPT_LEDGER_SIZE`), oldest first. Read it; only the session writes it."""
        if self._ledger is None:
            self._ledger = PromptLedger()
        return self._ledger

    def __init__(self, owner: SessionOwner, record: SessionRecord) -> None:
        # Everything an idle session does not use is made on first use (``None`` until then): a client may
        # hold 100,000 sessions, and an empty list, set or transcript per session would be most of its memory.
        self._owner = owner
        self._record = record  # replaced only by the owner (SessionControl.replace_record)
        self._link = SessionLink.DETACHED
        self._transcript: Transcript | None = None  # the conversation (see :attr:`transcript`)
        # Unknown until the agent says; ``new_session`` sets v2 sessions to idle (the protocol's default).
        self._state: str | None = None
        # v2: a turn was running when the connection was lost; the first state known afterwards that shows
        # the agent idle ends it for :meth:`on_turn_finished` (the agent's own idle update was sent to nobody)
        self._interrupted = False
        self._snapshot_seen = False
        self._subs: list[_Subscription] | None = None
        self._turn_waiters: list[asyncio.Future[str | None]] | None = None
        # waiters of prompts sent while an earlier turn was still running: an ``idle`` that arrives before
        # their prompt is answered (or seen running) ends that earlier turn, not theirs
        self._unarmed: set[asyncio.Future[str | None]] | None = None
        self._turn_callbacks: list[Callable[[Session, str | None], None]] | None = None
        self._replaying = 0
        # a replay rebuilds the transcript: what it replays goes into ``_shadow`` (made at the first update
        # the transcript keeps), swapped in when the resume/load succeeds
        self._rebuilding = False
        self._shadow: Transcript | None = None
        self._lost: SessionLost | None = None
        self._connection_id: int | None = None
        #: The last ``usage_update`` received live (raw dict), if any.
        self.usage: dict[str, Any] | None = None
        self._live_updates = 0
        self._replayed_updates = 0
        if record.prompts and isinstance(record.prompts, list):  # a restart: the ledger the store kept
            self.prompt_ledger.load(record.prompts)

    @property
    def transcript(self) -> Transcript:
        """The conversation as this client knows it (rebuilt from empty on a replay)."""
        if self._transcript is None:
            self._transcript = Transcript()
        return self._transcript

    @property
    def stats(self) -> collections.Counter[str]:
        """Updates received for this session: ``live`` and ``replayed`` (history and snapshots sent while a
        resume/load was outstanding). A new counter at each read; keys with a zero count are left out."""
        counts = collections.Counter[str]()
        if self._live_updates:
            counts["live"] = self._live_updates
        if self._replayed_updates:
            counts["replayed"] = self._replayed_updates
        return counts

    def __repr__(self) -> str:
        return f"<Session {self.id} {self.link.value} state={self.state or 'unknown'}>"

    # ------------------------------------------------------------------ properties

    @property
    def record(self) -> SessionRecord:
        """What the client keeps about the session (what the store persists). Its ``meta`` is the
        application's; the other fields are written by the session's owner (the record itself is replaced
        only by an owner adopting it from another worker)."""
        return self._record

    @property
    def id(self) -> str:
        """The agent's session id."""
        return self._record.session_id

    @property
    def cwd(self) -> str:
        """The session's working directory."""
        return self._record.cwd

    @property
    def state(self) -> str | None:
        """v2 foreground state (``idle``, ``running``, ``requires_action`` or a newer value), ``None`` if unknown.

        Always ``None`` in v1, which has no foreground state.
        """
        return self._state

    @property
    def link(self) -> SessionLink:
        """Where this session stands with respect to the current connection (see :class:`SessionLink`)."""
        return self._link

    @property
    def replaying(self) -> bool:
        """``True`` while a resume or load for this session is outstanding."""
        return self._replaying > 0

    # ------------------------------------------------------------------ user API

    async def prompt(self, content: PromptContent, *, timeout: float | None = None) -> PromptResult:
        """Send a prompt and wait until the turn ends (v1: the response; v2: the idle ``state_update``).

        A prompt is never re-sent automatically: if the link drops, this raises ``ConnectionLost`` (with
        ``request_sent=True`` when the agent may have received it) and the caller decides after recovery.
        ``timeout`` (float seconds, ``None`` = wait as long as the turn runs) raises ``ACPTimeoutError`` in
        both versions. Its default is ``None``, not the client's ``Timeouts.request``: a turn lasts as long
        as the agent works (minutes of tool calls are normal), so a prompt is the one request whose
        deadline the application states itself. In v1 giving up also sends ``$/cancel_request``; in v2 the
        prompt was already accepted, so the turn goes on — call :meth:`cancel` to stop it.

        The prompt enters :attr:`transcript` as a user message when it is sent (removed again if it turns
        out it was never sent, or the agent refused it); the agent's echo of it takes that message's place: in
        v2 the receipt's ``messageId`` names the echo, so the message is held once however the echo, the
        answer and a later replay interleave.

        If an earlier ``prompt()`` call of this session was cancelled (Ctrl-C) while its v2 turn still runs,
        this first waits for that turn to end, at most :data:`ABANDONED_TURN_WAIT` seconds (and within
        ``timeout``), so the new prompt does not land in the old turn; then it is sent either way.
        """
        self._check_usable()
        return await self._prompt(text_blocks(content), timeout, None)

    async def _prompt(self, blocks: list[dict[str, Any]], timeout: float | None, prompt_id: str | None) -> PromptResult:
        params = {"sessionId": self.id, "prompt": blocks}
        given = timeout
        timeout = await self._wait_sendable("session/prompt", timeout)
        timeout = await self._settle_abandoned_turn(timeout)
        timeout = await self._settle_config(timeout)
        entry = await self._ledger_begin(blocks, prompt_id)
        recorded = entry._message = self._record_prompt(blocks)
        try:
            result = await self._prompt_turn(params, timeout, given, recorded, entry)
        except BaseException as exc:
            self._retract_if_not_inserted(recorded, exc)
            raised = self._ledger_failed(entry, exc)  # in memory; the store has it with the next write
            if raised is exc:
                raise
            raise raised from exc
        if result.message_id is None and recorded.message_id is not None:  # v1: the echo named it
            result = PromptResult(result.stop_reason, result.raw, recorded.message_id)
        evidence = "answer" if self._owner.protocol_version < 2 else "turn_end"
        self.prompt_ledger.move(entry, PromptState.FINISHED, evidence, message_id=result.message_id)
        entry.stop_reason = result.stop_reason
        await self._persist_ledger()
        return result

    async def send_prompt(self, content: PromptContent, *, timeout: float | None = None) -> PromptReceipt:
        """Send a prompt and return as soon as the agent has inserted it (v2 only): the receipt names the user
        message, and the turn goes on. Follow it with :meth:`updates` or :meth:`on_turn_finished`.

        For callers that stream; :meth:`prompt` is this plus waiting for the turn's end. ``timeout`` bounds
        the wait for the receipt. v1 has no insertion receipt (its answer is the turn's end): this raises
        ``UsageError`` there; use :meth:`prompt`.
        """
        self._check_usable()
        if self._owner.protocol_version < 2:
            raise UsageError(
                "send_prompt() needs protocol v2 (v1 answers a prompt only when its turn ends): use prompt()"
            )
        blocks = text_blocks(content)
        params = {"sessionId": self.id, "prompt": blocks}
        timeout = await self._wait_sendable("session/prompt", timeout)
        timeout = await self._settle_config(timeout)
        entry = await self._ledger_begin(blocks, None)
        recorded = entry._message = self._record_prompt(blocks)
        try:
            raw = await self._owner.session_request(self, "session/prompt", params, timeout=timeout)
        except BaseException as exc:
            self._retract_if_not_inserted(recorded, exc)
            raised = self._ledger_failed(entry, exc)  # in memory; the store has it with the next write
            if raised is exc:
                raise
            raise raised from exc
        answer = parse_prompt_answer(raw)
        if answer.message_id is not None:
            self.transcript._receipt(recorded, answer.message_id)
        self._ledger_answered(entry, answer.message_id)
        await self._persist_ledger()
        return PromptReceipt(answer.message_id, raw, entry)

    def _retract_if_not_inserted(self, recorded: Message, exc: BaseException) -> None:
        """Remove the prompt recorded as ``recorded`` when ``exc`` shows it never reached the conversation:
        never sent, or (v2, where an answer means insertion) answered with an error. A turn that failed after
        insertion (``TurnFailed``) keeps it."""
        never_sent = getattr(exc, "request_sent", None) is False or isinstance(exc, UsageError | NotConnected)
        refused = isinstance(exc, RPCError) and not isinstance(exc, TurnFailed) and self._owner.protocol_version >= 2
        if never_sent or refused:
            self.transcript._retract_prompt(recorded)

    def _record_prompt(self, blocks: list[dict[str, Any]]) -> Message:
        recorded = self.transcript._record_prompt(blocks)
        if self._link is not SessionLink.ATTACHED:
            self._held_prompts = [*(self._held_prompts or ()), recorded]
        return recorded

    # ------------------------------------------------------------------ the prompt ledger

    async def _ledger_begin(self, blocks: list[dict[str, Any]], prompt_id: str | None) -> PromptEntry:
        """A ledger entry for a prompt about to go out, written to the store first (bounded wait)."""
        ledger = self.prompt_ledger
        entry = ledger.begin(blocks, prompt_id)
        try:
            await self._persist_ledger()
        except BaseException:
            ledger.settle_unsent(entry)  # cancelled before the send: it never left
            raise
        return entry

    def _ledger_answered(self, entry: PromptEntry, message_id: str | None) -> None:
        """The agent answered the v2 prompt: it is inserted (its receipt's ``messageId``, if it gave one)."""
        self.prompt_ledger.move(
            entry, PromptState.INSERTED, "receipt" if message_id is not None else "answer", message_id=message_id
        )

    def _ledger_failed(self, entry: PromptEntry, exc: BaseException) -> BaseException:
        """Record what ``exc`` (raised by a prompt's call) shows about ``entry``; returns the error to raise
        (a ``ConnectionLost`` is copied with the entry as its ``prompt_entry``)."""
        ledger = self.prompt_ledger
        self._ledger_echoed(entry)
        never_sent = getattr(exc, "request_sent", None) is False or isinstance(exc, UsageError | NotConnected)
        if never_sent and entry.state is PromptState.SENT:
            ledger.settle_unsent(entry)
        elif isinstance(exc, TurnFailed):
            ledger.move(entry, PromptState.INSERTED, "answer")
            ledger.move(entry, PromptState.FINISHED, "turn_end")
            entry.stop_reason = "error"
        elif isinstance(exc, RPCError):
            # v2: an error answer means it was never inserted; v1: the turn's end and its insertion are one answer
            refused = self._owner.protocol_version >= 2
            ledger.move(entry, PromptState.REFUSED if refused else PromptState.UNKNOWN, "answer")
        if isinstance(exc, ConnectionLost):
            copy = exc.with_request_sent(exc.request_sent)
            copy.prompt_entry = entry
            return copy
        return exc

    def _ledger_echoed(self, entry: PromptEntry) -> None:
        """The agent's live echo named the prompt's user message: it is inserted."""
        recorded = entry._message
        if entry.state is PromptState.SENT and recorded is not None and recorded.message_id is not None:
            self.prompt_ledger.move(entry, PromptState.INSERTED, "echo", message_id=recorded.message_id)

    def _ledger_interrupted(self, ledger: PromptLedger) -> None:
        """The link dropped under the prompts in flight: what the echo showed is taken, and each is owed a
        classification after the recovery."""
        for entry in ledger.pending() + ledger.interrupted():
            self._ledger_echoed(entry)

    async def _persist_ledger(self) -> None:
        """Copy the ledger into the record and have the owner store it, waiting at most
        :data:`LEDGER_WRITE_WAIT` (a slow store never holds a prompt longer: the write is then given up here
        and owed, written with the record's next write)."""
        if self._ledger is not None:
            self.record.prompts = self._ledger.snapshot()
        # awaited in place, no task: a store that answers at once (memory) costs no loop turn, so a prompt
        # still goes out in call order with the calls made after it
        try:
            async with asyncio.timeout(LEDGER_WRITE_WAIT):
                await self._owner.persist(self)
        except TimeoutError:
            log.warning("prompt_ledger_write_slow", session_id=self.id, waited=LEDGER_WRITE_WAIT)

    def _classify_prompts(self, replayed: bool) -> list[PromptEntry]:
        ledger = self._ledger
        if ledger is None or not ledger.pending():
            return []
        users: tuple[tuple[str | None, str], ...] = ()
        if replayed and self._transcript is not None:
            own = {id(e._message) for e in ledger if e._message is not None}
            users = tuple(
                (m.message_id, content_digest(m.content))
                for m in self._transcript.messages
                if m.role == "user" and id(m) not in own
            )
        state = self._state if self._owner.protocol_version >= 2 else None
        done = ledger.classify(ClassifyEvidence(replayed, users, state))
        self.record.prompts = ledger.snapshot()
        return done

    async def resend(
        self, entry: PromptEntry | str, content: PromptContent | None = None, *, timeout: float | None = None
    ) -> PromptResult:
        """Send a prompt of the ledger again, on the application's request (the SDK never re-sends), and wait
        for its turn like :meth:`prompt`. ``entry`` is a :class:`PromptEntry` of this session (or its
        ``prompt_id``); ``content`` is needed only for an entry read back from a store (which keeps a digest,
        not the content), and must match it.

        Refused with :class:`~acp_client.exceptions.PromptNotResendable` (nothing sent) when the ledger shows
        the prompt ``inserted`` or ``finished`` (it is in the conversation: sending it again would run it
        twice), ``sent`` (still in flight, not classified yet: ``await entry.wait_classified(...)``), or
        re-sent already. Allowed for ``not_sent``, ``refused`` and ``unknown``. The old prompt's user message
        is taken out of :attr:`transcript` first, so the conversation shows the prompt once. The new prompt
        gets an entry of its own; the old one's ``resent_as`` names it."""
        self._check_usable()
        found = self.prompt_ledger.get(entry if isinstance(entry, str) else entry.prompt_id)
        if found is None or (isinstance(entry, PromptEntry) and found is not entry):
            raise UsageError("resend() takes an entry of this session's prompt ledger (or its prompt_id)")
        blocks = self._resend_blocks(found, content)
        new_id = new_prompt_id()
        found.resent_as = new_id  # at once: a second resend() of the same entry is refused from here on
        if found._message is not None:
            self.transcript._retract_prompt(found._message)
        try:
            return await self._prompt(blocks, timeout, new_id)
        finally:
            if self.prompt_ledger.get(new_id) is None:
                found.resent_as = None  # never got as far as an entry: it may be re-sent again

    def _resend_blocks(self, found: PromptEntry, content: PromptContent | None) -> list[dict[str, Any]]:
        state = found.state
        if found.resent_as is not None:
            raise PromptNotResendable(found.prompt_id, state.value, f"it was re-sent already as {found.resent_as}")
        if state in (PromptState.INSERTED, PromptState.FINISHED):
            raise PromptNotResendable(found.prompt_id, state.value, "the agent inserted it into the conversation")
        if state is PromptState.SENT:
            why = "it may still reach the agent (not classified yet: await entry.wait_classified(timeout))"
            raise PromptNotResendable(found.prompt_id, state.value, why)
        if content is None:
            if found.content is None:
                raise UsageError(
                    f"prompt {found.prompt_id} was read back from a store, which keeps no prompt content: "
                    "pass it as content="
                )
            return found.content
        blocks = text_blocks(content)
        if content_digest(blocks) != found.digest:
            raise UsageError(f"content= is not the prompt {found.prompt_id} records (its digest differs)")
        return blocks

    # ------------------------------------------------------------------ desired config

    async def set_config_option(
        self, config_id: str, value: str | bool, *, timeout: float | None = 30.0
    ) -> list[dict[str, Any]] | None:
        """``session/set_config_option`` (model, effort ...: the ids of :attr:`config_options`); returns the
        agent's config options after the change. The choice is kept as :attr:`desired_config` (in the
        store too) and set again after a restore (see ``docs/topics/prompt-ledger.md``)."""
        self._check_usable()
        if not isinstance(config_id, str) or not config_id:
            raise UsageError(f"config_id must be a non-empty string, not {config_id!r}")
        if not isinstance(value, str | bool):
            raise UsageError(f"value must be a string or a bool, not {type(value).__name__}")
        params = config_option_params(self.id, config_id, value, self._owner.protocol_version)
        timeout = await self._wait_sendable("session/set_config_option", timeout)
        result = await self._owner.session_request(self, "session/set_config_option", params, timeout=timeout)
        self._learn(result)
        self._want(f"option:{config_id}", value)
        await self._persist_ledger()
        return self._config

    async def set_mode(self, mode_id: str, *, timeout: float | None = 30.0) -> None:
        """v1 ``session/set_mode`` (v2 has config options instead: ``CapabilityNotSupported``, nothing sent).
        Kept as :attr:`desired_config` and set again after a restore, like :meth:`set_config_option`."""
        self._check_usable()
        if not isinstance(mode_id, str) or not mode_id:
            raise UsageError(f"mode_id must be a non-empty string, not {mode_id!r}")
        if self._owner.protocol_version >= 2:
            raise CapabilityNotSupported("session/set_mode", None, 2, hint="use set_config_option()")
        params = {"sessionId": self.id, "modeId": mode_id}
        timeout = await self._wait_sendable("session/set_mode", timeout)
        await self._owner.session_request(self, "session/set_mode", params, timeout=timeout)
        self._mode = mode_id
        self._want("mode", mode_id)
        await self._persist_ledger()

    def _want(self, key: str, value: str | bool) -> None:
        """Keep ``key`` (``"mode"`` or ``"option:<configId>"``) = ``value`` as desired config (a new dict:
        a store may hold the old one)."""
        desired = dict(self.record.desired_config or {})
        if key == "mode":
            desired["mode"] = value
        else:
            desired["options"] = {**desired.get("options", {}), key.removeprefix("option:"): value}
        self.record.desired_config = desired

    def _config_restoring(self) -> None:
        if self._config_gate is None:
            self._config_gate = ConfigGate(self.id)
        self._config_gate.close()

    def _config_restored(self, failures: dict[str, str]) -> None:
        if self._config_gate is None:
            self._config_gate = ConfigGate(self.id)
        self._config_gate.open(failures)

    async def _settle_config(self, timeout: float | None) -> float | None:
        """Before a prompt: see :meth:`ConfigGate.settle` (nothing to do before the first restore)."""
        return timeout if self._config_gate is None else await self._config_gate.settle(timeout)

    async def _settle_abandoned_turn(self, timeout: float | None) -> float | None:
        """Wait (bounded) for a turn whose ``prompt()`` was cancelled to end; return what is left of
        ``timeout``. Never raises for the wait itself: after the bound the next prompt goes out anyway."""
        if not self._abandoned:
            return timeout
        if self._state not in ("running", "requires_action"):
            self._abandoned = False
            return timeout
        bound = ABANDONED_TURN_WAIT if timeout is None else min(timeout, ABANDONED_TURN_WAIT)
        loop = asyncio.get_running_loop()
        started = loop.time()
        waiter: asyncio.Future[str | None] = loop.create_future()
        if self._turn_waiters is None:
            self._turn_waiters = []
        self._turn_waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), bound)
        except TimeoutError:
            log.warning("abandoned_turn_still_running", session_id=self.id, waited=round(bound, 3))
        finally:
            if self._turn_waiters and waiter in self._turn_waiters:
                self._turn_waiters.remove(waiter)
            if not waiter.done():
                waiter.cancel()
        self._abandoned = False
        return None if timeout is None else max(0.0, timeout - (loop.time() - started))

    async def _wait_sendable(self, method: str, timeout: float | None) -> float | None:
        """Wait, within ``timeout``, until the owner can send for this session (a reconnecting owner waits
        for its re-attachment); return what is left of ``timeout``. Nothing is sent here, so giving up
        says that the request was never sent (never that a turn may still be running)."""
        if timeout is None:
            return timeout  # the owner's own wait (bounded by its session_wait_timeout) says "never sent"
        try:
            return await self._owner.wait_attached(self, method, timeout)
        except TimeoutError as exc:
            if isinstance(exc, ACPTimeoutError):
                raise
            raise ACPTimeoutError(
                f"session {self.id} was not re-attached within {timeout:g} s: {method} was never sent"
            ) from None

    async def _prompt_turn(
        self,
        params: dict[str, Any],
        timeout: float | None,
        given: float | None,
        recorded: Message,
        entry: PromptEntry,
    ) -> PromptResult:
        if self._owner.protocol_version < 2:
            result = await self._owner.session_request(self, "session/prompt", params, timeout=timeout)
            stop = parse_prompt_answer(result).stop_reason
            self._fire_turn_finished(stop)
            return PromptResult(stop, result)
        waiter: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        if self._turn_waiters is None:
            self._turn_waiters = []
        self._turn_waiters.append(waiter)
        if self._state in ("running", "requires_action"):
            if self._unarmed is None:
                self._unarmed = set()
            self._unarmed.add(waiter)
        answered = False
        try:
            try:
                async with asyncio.timeout(timeout):
                    result = await self._owner.session_request(self, "session/prompt", params, timeout=None)
                    answered = True
                    answer = parse_prompt_answer(result)
                    if answer.message_id is not None:
                        self.transcript._receipt(recorded, answer.message_id)
                    self._ledger_answered(entry, answer.message_id)
                    await self._persist_ledger()  # inserted: a crash from here on must not read as "sent"
                    if self._unarmed:
                        self._unarmed.discard(waiter)  # answered: the next idle is this turn's
                    stop = await waiter
            except TimeoutError as exc:
                if isinstance(exc, ACPTimeoutError):
                    raise
                # the agent accepted the prompt and works on: say so (call cancel() to stop it)
                said = timeout if given is None else given
                raise ACPTimeoutError(f"the turn did not end within {said:g} s; it may still be running") from None
            except asyncio.CancelledError:
                if answered or self._state in ("running", "requires_action"):
                    self._abandoned = True  # the turn may run on: the next prompt() waits for it (bounded)
                raise
            if stop == "error":  # v2 alpha.8: the turn failed after its prompt was inserted
                raise TurnFailed.from_error(self._turn_error, message_id=recorded.message_id)
            return PromptResult(stop, result, answer.message_id)
        finally:
            if self._unarmed:
                self._unarmed.discard(waiter)
            if self._turn_waiters and waiter in self._turn_waiters:
                self._turn_waiters.remove(waiter)
            if not waiter.done():
                waiter.cancel()

    async def cancel_tool_call(self, tool_call_id: str, *, timeout: float | None = 30.0) -> None:
        """Ask the agent to stop one tool call (``tool_call/cancel``, v2, **UNSTABLE**). Returns once the agent
        accepted; its final status (normally ``cancelled``) arrives as a ``tool_call_update``. The turn goes
        on. Refused with ``CapabilityNotSupported`` before anything is sent when the tool call does not
        currently advertise ``capabilities.cancel`` (or in v1, which has no such call)."""
        self._check_usable()
        if self._owner.protocol_version < 2:
            raise CapabilityNotSupported("tool_call/cancel", None, self._owner.protocol_version)
        call = self.transcript.tool_calls.get(tool_call_id)
        if call is None or not call.cancellable:
            raise CapabilityNotSupported("tool_call/cancel", f"capabilities.cancel on tool call {tool_call_id!r}", 2)
        params = {"sessionId": self.id, "toolCallId": tool_call_id}
        await self._owner.session_request(self, "tool_call/cancel", params, timeout=timeout)

    async def cancel(self) -> None:
        """Ask the agent to stop the current turn (``session/cancel``); the turn still ends normally."""
        self._check_usable()
        await self._owner.session_notify(self, "session/cancel", {"sessionId": self.id})

    def updates(self, *, maxsize: int = DEFAULT_UPDATES_BUFFER) -> AsyncIterator[StreamItem]:
        """Subscribe to this session's stream: updates, recovery markers, and overflow notices.

        Each call makes an independent subscription starting now, bounded to ``maxsize`` items: a consumer
        that falls behind loses the *oldest* items and then receives one :class:`UpdatesDropped` saying how
        many (the transcript is never affected). The iterator ends when the session is lost or closed.
        """
        sub = _Subscription(maxsize)
        if self._link in (SessionLink.LOST, SessionLink.CLOSED):
            sub.push(None)  # already ended: the iterator ends at once
        elif self._subs is None:
            self._subs = [sub]
        else:
            self._subs.append(sub)
        return _UpdatesIterator(self._unsubscribe, sub)

    def on_turn_finished(self, callback: Callable[[Session, str | None], None]) -> Callable[[], None]:
        """Call ``callback(session, stop_reason)`` when a turn ends live (never for replayed history or
        snapshots). Returns a function that unregisters it.

        In v2, a turn that was running (or a prompt that was unanswered) when the connection was lost also
        ends here if the first state learned afterwards (the status probe, the resume's snapshot or a live
        update) shows the agent idle. Its ``stop_reason`` is ``None``: the agent's own idle update went to
        the dead connection."""
        callbacks = self._turn_callbacks
        if callbacks is None:
            callbacks = self._turn_callbacks = []
        callbacks.append(callback)
        return lambda: callbacks.remove(callback) if callback in callbacks else None

    # ------------------------------------------------------------------ owner-facing hooks

    def _check_usable(self) -> None:
        if self._lost is not None:
            raise self._lost
        if self.link is SessionLink.CLOSED:
            raise UsageError(f"session {self.id} was closed")

    def _has_subscribers(self) -> bool:
        """Whether an ``updates()`` subscription is open (the order of what it receives then matters)."""
        return bool(self._subs)

    def _unsubscribe(self, sub: _Subscription) -> None:
        """An ``updates()`` iterator ended, was closed or dropped: stop feeding its subscription."""
        if self._subs and sub in self._subs:
            self._subs.remove(sub)

    def _publish(self, item: StreamItem | None) -> None:
        for sub in self._subs or ():
            sub.push(item)

    def _begin_replay(self, *, rebuild: bool) -> None:
        """A resume/load is about to be sent: what arrives until :meth:`_end_replay` is history."""
        self._replaying += 1
        self._snapshot_seen = False
        if self._fresh is not None:
            self._fresh = None  # what the agent says about the config from here on is fresh
        if rebuild:
            self._rebuilding = True
            self._shadow = None

    def _end_replay(self, *, success: bool) -> None:
        """The resume/load answered (``success``) or failed; swap in the rebuilt transcript on success."""
        self._replaying = max(0, self._replaying - 1)
        if self._rebuilding:
            if success:
                old, new = self._transcript, self._shadow  # None: nothing was replayed, an empty transcript
                if old is not None and self._held_prompts:
                    new = old._carry_prompts(new, self._held_prompts)
                if self._held_prompts is not None:
                    self._held_prompts = None
                self._transcript = new
            self._rebuilding = False
            self._shadow = None
        if success and not self._snapshot_seen and self._owner.protocol_version >= 2:
            self._state = None  # the response alone does not imply idle

    def _handle_update(self, kind: str, update: Any, raw: dict[str, Any], version: int) -> None:
        """Apply one update from the agent (live, or history while a resume/load is outstanding): its
        ``kind``, its ``update`` model (or the marker of one built from ``raw`` as ``version`` when first
        read, see :func:`~acp_client.schema.session_update_fields`), and ``raw``, the ``update`` object, whose
        ``sessionUpdate`` is ``kind`` (the router checked both)."""
        replay = self._replaying > 0
        if kind in KEPT_KINDS:  # never a state_update nor a usage_update
            if replay and self._rebuilding:
                if self._shadow is None:
                    self._shadow = Transcript()
                transcript = self._shadow
            else:
                transcript = self._transcript or self.transcript
            if update is _DEFERRED:  # deferred only for a message chunk whose content is a text block
                transcript._text_chunk(kind, raw)
            else:
                transcript._apply(kind, raw)
        elif kind == "state_update":
            new = parse_state_update(raw)
            old = self._state
            if new is None or new.state == "unknown":
                self._state = None  # malformed, or the agent cannot tell: not reported, never idle
            else:
                state = self._state = self._record.last_state = _KNOWN_STATES.get(new.state, new.state)
                if replay:
                    self._snapshot_seen = True  # applied as current state, never as a transition
                    self._learned_after_loss(state)
                elif state == "idle" and (
                    old in ("running", "requires_action") or self._turn_waiters or self._interrupted
                ):
                    self._interrupted = False
                    if new.stop_reason == "error" or self._turn_error is not None:
                        self._turn_error = new.error if new.stop_reason == "error" else None
                    self._fire_turn_finished(new.stop_reason)
                else:
                    self._learned_after_loss(state)
                    if state == "running" and self._unarmed:
                        self._unarmed.clear()  # a new turn runs: the waiting prompts' idle is the next one
        elif kind == "usage_update" and not replay:
            self.usage = raw
        elif kind in _FACT_KEYS:
            self._learn(raw)
        if replay:
            self._replayed_updates += 1
        else:
            self._live_updates += 1
        subs = self._subs
        if subs:
            item = SessionUpdate._from_fields(self._record.session_id, kind, update, raw, replay, version)
            for sub in subs:
                sub.push(item)

    def _fire_turn_finished(self, stop_reason: str | None) -> None:
        if self._abandoned:
            self._abandoned = False
        if self._held_prompts is not None:
            self._held_prompts = None  # sent and answered: a later replay holds them
        if self._ledger is not None:
            self._ledger.turn_ended(stop_reason, "turn_end")
        self.transcript._end_turn()
        if self._turn_waiters:
            unarmed = self._unarmed or ()
            for waiter in self._turn_waiters:
                if not waiter.done() and waiter not in unarmed:
                    waiter.set_result(stop_reason)
            self._turn_waiters = [w for w in self._turn_waiters if not w.done()]
        self._call_turn_callbacks(stop_reason)

    def _call_turn_callbacks(self, stop_reason: str | None) -> None:
        for callback in list(self._turn_callbacks or ()):
            try:
                callback(self, stop_reason)
            except Exception:
                log.exception("turn_finished_callback_failed", session_id=self.id)

    def _apply_snapshot(self, state: str | None) -> None:
        """Apply a status or resume snapshot as current state (never a transition)."""
        if state is not None:
            state = self._record.last_state = _KNOWN_STATES.get(state, state)
        self._state = state
        self._learned_after_loss(state)

    def _learned_after_loss(self, state: str | None) -> None:
        """The first known state after a lost connection: ``idle`` ends the turn the loss interrupted (for
        the callbacks only: waiters of prompts sent since then wait for their own turn); any other state
        hands the turn back to the live updates, whose ``idle`` ends it."""
        if not self._interrupted or state is None:
            return
        self._interrupted = False
        if state == "idle":
            self.transcript._end_turn()
            self._call_turn_callbacks(None)

    def _move_link(
        self,
        new: SessionLink,
        *,
        connection_id: int | None = None,
        loss: ConnectionLost | None = None,
        error: SessionLost | None = None,
    ) -> bool:
        """The one writer of :attr:`link`: move it along :data:`LINK_TRANSITIONS` and do what the new link
        implies. ``ATTACHED`` needs ``connection_id``. ``DETACHED`` with ``loss`` (the connection died, or
        another worker serves the session now) fails the turns waiting and forgets the foreground state.
        ``LOST``/``CLOSED`` end every subscription and fail the waiters with ``error`` (or a "closed"
        ``UsageError``). Returns ``False`` when nothing changed (the same link, or a final one)."""
        old = self._link
        if old in _FINAL:
            return False
        if old is not new or new is SessionLink.ATTACHED:
            if new not in LINK_TRANSITIONS[old]:
                raise RuntimeError(f"illegal session link transition {old.value} -> {new.value}")
        elif loss is None:
            return False  # already there; a loss still fails the turns waiting (below)
        self._link = new
        if new is SessionLink.ATTACHED:
            if connection_id is None:
                raise ValueError("an attached session needs its connection id")
            self._connection_id = connection_id
        elif new is SessionLink.DETACHED and loss is not None:
            if self._owner.protocol_version >= 2:
                # a turn seen running, or a prompt still unanswered (its running update may be lost with
                # the link): either may be running on the agent now
                self._interrupted = (
                    self._interrupted or self._state in ("running", "requires_action") or bool(self._turn_waiters)
                )
                self._state = None  # unknown until the agent reports again
            if self._ledger is not None:
                self._ledger_interrupted(self._ledger)
            if self._turn_waiters:  # the copy (and its text) only for turns that wait: not per session
                self._fail_waiters(loss.with_request_sent(True))
        elif new in _FINAL:
            self._lost = error
            self._fail_waiters(error or UsageError(f"session {self.id} was closed"))
            self._publish(None)
        return True

    def _fail_waiters(self, exc: BaseException) -> None:
        if not self._turn_waiters:
            return
        for waiter in self._turn_waiters:
            if not waiter.done():
                waiter.set_exception(exc)
                waiter.exception()  # the prompt() caller may already be gone; never "never retrieved"
        self._turn_waiters.clear()

    def _replay_progress(self) -> int:
        """How many updates arrived while a resume/load was outstanding (a recovery watches it for progress)."""
        return self._replayed_updates

    def _attached_to(self, connection_id: int) -> bool:
        """``True`` if attached on the connection ``connection_id``."""
        return self._link is SessionLink.ATTACHED and self._connection_id == connection_id

    def _mark(self, marker: RecoveryMarker) -> None:
        """Put a recovery marker into every subscription of this session's stream."""
        self._publish(marker)

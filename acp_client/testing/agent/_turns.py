"""Prompt turns of the reference agent (:class:`PromptTurn`) and the running of a prompt's script
(:func:`run_script`); the mini-language itself, and its table of commands, is :mod:`._script`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from acp_client._logging import get_logger
from acp_client.testing.agent._errors import AgentError, PeerError, PeerGone
from acp_client.testing.agent._script import ScriptStep, parse_script
from acp_client.testing.agent._sessions import AgentSessionRecord, TranscriptMessage, new_message_id
from acp_client.testing.agent._tools import run_tool

if TYPE_CHECKING:
    from acp_client.testing.agent._connection import AgentConnection, Reply
    from acp_client.testing.reference_agent import ReferenceAgent

__all__ = ["PromptHook", "PromptTurn", "ScriptStep", "emit_update", "parse_script", "run_script"]

_log = get_logger(__name__)

#: ``agent.on_prompt``: an async callable given the turn; returns a stop reason or ``None`` (→ ``end_turn``).
PromptHook: TypeAlias = Callable[["PromptTurn"], Awaitable[str | None]]

_DEFAULT_OPTIONS: list[dict[str, Any]] = [
    {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
]


async def emit_update(
    agent: ReferenceAgent,
    session: AgentSessionRecord,
    update: dict[str, Any],
    mutate: Callable[[], None] | None = None,
) -> bool:
    """Apply ``mutate`` to the session and send ``update`` to its attached connection, atomically with respect
    to a replaying ``session/resume``/``session/load``. ``False`` when no live connection got it."""
    async with session.emit_lock:
        if mutate is not None:
            mutate()
        return await send_update_locked(agent, session, update)


async def send_update_locked(agent: ReferenceAgent, session: AgentSessionRecord, update: dict[str, Any]) -> bool:
    """Send one ``session/update`` to the attached connection; the caller holds ``session.emit_lock``."""
    agent.records.notify_changed()
    connection = session.connection
    delivered = False
    if connection is not None and not connection.closed:
        delivered = await connection.notify("session/update", {"sessionId": session.session_id, "update": update})
    if not delivered:
        agent.dropped_updates += 1
    return delivered


class PromptTurn:
    """One prompt turn, handed to scripts and to ``ReferenceAgent.on_prompt`` hooks.

    Output methods (:meth:`say`, :meth:`think`, :meth:`update`, :meth:`request_permission`) accept the prompt
    first if needed: v1 records the user message; v2 answers the prompt with its insertion receipt
    (``{"messageId": ...}``, or an older shape: ``ReferenceAgent(prompt_answer=...)``), then sends
    ``user_message`` with the same id and ``state_update running``. A hook that raises :class:`AgentError`
    before accepting rejects the prompt.
    """

    def __init__(
        self,
        agent: ReferenceAgent,
        connection: AgentConnection,
        session: AgentSessionRecord,
        prompt: Sequence[dict[str, Any]],
        reply: Reply,
    ) -> None:
        """Prepare a turn for ``prompt`` received on ``connection`` (use :meth:`run` to play it)."""
        self.agent = agent
        self.connection = connection
        self.session = session
        self.prompt = [dict(block) for block in prompt]
        self.protocol_version = connection.protocol_version or agent.protocol_version
        self.text = "\n".join(str(b.get("text", "")) for b in self.prompt if b.get("type") == "text")
        self.user_message_id = new_message_id("user")
        self.agent_message_id = new_message_id("agent")
        self.thought_message_id = new_message_id("thought")
        self.accepted = False
        self.cancel_requested = False
        self.stop_reason: str | None = None
        self._reply = reply
        loop = asyncio.get_running_loop()
        self._cancel_fut: asyncio.Future[None] = loop.create_future()
        self._done: asyncio.Future[None] = loop.create_future()
        self._agent_message: TranscriptMessage | None = None
        self._thought_message: TranscriptMessage | None = None

    @property
    def request_id(self) -> int | str:
        """The id of the ``session/prompt`` request that started this turn."""
        return self._reply.request_id

    @property
    def session_id(self) -> str:
        """The session this turn runs in."""
        return self.session.session_id

    @property
    def done(self) -> asyncio.Future[None]:
        """Resolved when the turn has ended (normally, by error, or cancelled)."""
        return self._done

    def is_cancelled(self) -> bool:
        """Whether :meth:`cancel` was called (a method, so checks after an ``await`` are re-evaluated)."""
        return self.cancel_requested

    def cancel(self) -> None:
        """Ask the turn to stop (``session/cancel``, ``session/close``): it ends with ``cancelled``."""
        if not self.cancel_requested:
            self.cancel_requested = True
            self._cancel_fut.set_result(None)

    # ------------------------------------------------------------------ output

    async def accept(self) -> None:
        """Accept the prompt (idempotent); see the class docstring for what goes on the wire."""
        if self.accepted:
            return
        self.accepted = True
        v2 = self.protocol_version >= 2
        if v2:
            answer = self.agent.prompt_answer
            if answer == "receipt":
                await self._reply.result({"messageId": self.user_message_id})
            else:
                await self._reply.result({} if answer == "empty" else {"stopReason": "end_turn"})
        session = self.session
        user = TranscriptMessage(self.user_message_id, "user", [dict(b) for b in self.prompt])

        def insert_user_message() -> None:
            session.transcript.append(user)
            if session.title is None and self.text:
                session.title = self.text.splitlines()[0][:60]
            session.touch()

        def start_running() -> None:
            session.state = "running"
            session.stop_reason = None

        if v2:
            content = [dict(b) for b in self.prompt]
            await emit_update(
                self.agent,
                session,
                {"sessionUpdate": "user_message", "messageId": self.user_message_id, "content": content},
                insert_user_message,
            )
            await emit_update(self.agent, session, {"sessionUpdate": "state_update", "state": "running"}, start_running)
        else:
            async with session.emit_lock:
                insert_user_message()
                start_running()
        self.agent.records.notify_changed()

    async def say(self, text: str) -> None:
        """Stream one agent message chunk (appended to this turn's agent message in the transcript)."""
        await self.accept()

        def append() -> None:
            if self._agent_message is None:
                self._agent_message = TranscriptMessage(self.agent_message_id, "agent")
                self.session.transcript.append(self._agent_message)
            self._agent_message.append_text(text)

        update = {
            "sessionUpdate": "agent_message_chunk",
            "messageId": self.agent_message_id,
            "content": {"type": "text", "text": text},
        }
        await emit_update(self.agent, self.session, update, append)

    async def think(self, text: str) -> None:
        """Stream one agent thought chunk."""
        await self.accept()

        def append() -> None:
            if self._thought_message is None:
                self._thought_message = TranscriptMessage(self.thought_message_id, "thought")
                self.session.transcript.append(self._thought_message)
            self._thought_message.append_text(text)

        update = {
            "sessionUpdate": "agent_thought_chunk",
            "messageId": self.thought_message_id,
            "content": {"type": "text", "text": text},
        }
        await emit_update(self.agent, self.session, update, append)

    async def update(self, update: dict[str, Any]) -> bool:
        """Send any raw ``session/update`` payload (not recorded in the transcript)."""
        await self.accept()
        return await emit_update(self.agent, self.session, update)

    async def cancellable_tool_call(self, title: str = "long reference tool", *, seconds: float = 30.0) -> str:
        """v2: run a tool call that advertises ``capabilities.cancel`` for ``seconds``; returns its final status:
        ``cancelled`` when the client sent ``tool_call/cancel`` (or the turn was cancelled), else ``completed``.
        The client learns each step from ``tool_call_update`` updates."""
        await self.accept()
        call_id = f"call_{uuid.uuid4().hex[:10]}"
        stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.session.cancellable_tools[call_id] = stop
        try:
            await emit_update(
                self.agent,
                self.session,
                {
                    "sessionUpdate": "tool_call_update",  # v2 upserts tool calls by id
                    "toolCallId": call_id,
                    "title": title,
                    "kind": "execute",
                    "status": "in_progress",
                    "capabilities": {"cancel": {}},
                },
            )
            done, _ = await asyncio.wait([stop, self._cancel_fut], timeout=seconds, return_when="FIRST_COMPLETED")
        finally:
            self.session.cancellable_tools.pop(call_id, None)
        status = "cancelled" if done else "completed"
        final = {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": status, "capabilities": None}
        await emit_update(self.agent, self.session, final)
        return status

    async def sleep(self, seconds: float) -> bool:
        """Work for ``seconds``; ``False`` if the turn was cancelled meanwhile (returns at once then)."""
        await self.accept()
        if self.cancel_requested:
            return False
        done, _ = await asyncio.wait([self._cancel_fut], timeout=seconds)
        return not done

    async def drop_connection(self, code: int = 1011, *, abort: bool = False) -> None:
        """Close the connection the session is attached to (the turn itself goes on)."""
        connection = self.session.connection
        if connection is not None and not connection.closed:
            await self.agent.faults.close_connection(connection, code=code, reason="reference agent drop", abort=abort)

    async def request_permission(
        self, title: str = "Run the reference tool?", options: Sequence[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """Ask the client for permission and return the ``outcome`` object.

        While waiting the session is ``requires_action`` (v2 reports it). If the connection dies, the
        request is sent again to the next connection that attaches the session (unless the agent's
        ``reissue_permission_on_reattach`` is off: then the outcome is ``cancelled``). ``session/cancel``
        abandons it with ``$/cancel_request`` and yields ``{"outcome": "cancelled"}``.
        """
        await self.accept()
        v2 = self.protocol_version >= 2
        session = self.session
        tool = {"toolCallId": f"call_{uuid.uuid4().hex[:10]}", "title": title, "kind": "execute", "status": "pending"}
        opts = [dict(o) for o in (options if options is not None else _DEFAULT_OPTIONS)]
        params: dict[str, Any]
        if v2:

            def blocked() -> None:
                session.state = "requires_action"

            await emit_update(self.agent, session, {"sessionUpdate": "tool_call_update", **tool})
            await emit_update(
                self.agent, session, {"sessionUpdate": "state_update", "state": "requires_action"}, blocked
            )
            params = {
                "sessionId": session.session_id,
                "title": title,
                "description": "The reference agent wants to run a tool.",
                "subject": {"type": "tool_call", "toolCall": dict(tool)},
                "options": opts,
            }
        else:
            session.state = "requires_action"
            await emit_update(self.agent, session, {"sessionUpdate": "tool_call", **tool})
            params = {"sessionId": session.session_id, "toolCall": dict(tool), "options": opts}
        outcome = await self._ask_permission(params)
        granted = outcome.get("outcome") == "selected"

        def resumed() -> None:
            session.state = "running"

        if v2:
            if granted:
                await emit_update(self.agent, session, {"sessionUpdate": "state_update", "state": "running"}, resumed)
            status = "completed" if granted else "cancelled"
        else:
            resumed()
            status = "completed" if granted else "failed"
        await emit_update(
            self.agent,
            session,
            {"sessionUpdate": "tool_call_update", "toolCallId": tool["toolCallId"], "status": status},
        )
        return outcome

    async def _ask_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        cancelled: dict[str, Any] = {"outcome": "cancelled"}
        while not self.is_cancelled():
            connection = self.session.connection
            if connection is None or connection.closed:
                if not self.agent.reissue_permission_on_reattach:
                    return cancelled
                attached = self.session.wait_attached()
                try:
                    await asyncio.wait([attached, self._cancel_fut], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    attached.cancel()
                continue
            request_id, fut = await connection.start_request("session/request_permission", params)
            try:
                await asyncio.wait([fut, self._cancel_fut], return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                connection.forget_request(request_id)
                raise
            if not fut.done():  # session/cancel while waiting
                await connection.cancel_request(request_id)
                return cancelled
            try:
                result = fut.result()
            except PeerGone:
                continue
            except PeerError as exc:
                _log.info("reference_agent_permission_error", session_id=self.session_id, code=exc.code)
                return cancelled
            outcome = result.get("outcome") if isinstance(result, dict) else None
            # an unknown outcome is never read as approval
            return outcome if isinstance(outcome, dict) else cancelled
        return cancelled

    # ------------------------------------------------------------------ running

    async def run_script(self, text: str) -> str:
        """Play ``text`` as a mini-language script inside this turn; returns the stop reason."""
        return await run_script(self, parse_script(text))

    async def run(self, hook: PromptHook | None) -> None:
        """Play the turn (``hook`` or the prompt's script) and report its end (v1 response / v2 idle)."""
        session = self.session
        session.turn = self
        try:
            try:
                if hook is not None:
                    stop = await hook(self) or "end_turn"
                else:
                    stop = await run_script(self, parse_script(self.text))
            except Exception as exc:
                if not self.accepted or self.protocol_version < 2:
                    self._settle(None)
                    raise
                _log.info("reference_agent_turn_failed", session_id=self.session_id, error=repr(exc))
                # v2 (schema alpha.8): a turn that failed after its prompt was inserted ends idle with
                # stopReason "error" and the JSON-RPC error object
                error: dict[str, Any] = (
                    {"code": exc.code, "message": exc.message}
                    if isinstance(exc, AgentError)
                    else {"code": -32603, "message": "Internal error"}
                )
                if isinstance(exc, AgentError) and exc.data is not None:
                    error["data"] = exc.data
                await self._finish("error", error=error)
                return
            if self.cancel_requested and stop == "end_turn":
                stop = "cancelled"
            await self.accept()
            await self._finish(stop)
        except asyncio.CancelledError:
            self._settle("cancelled")
            raise
        finally:
            if session.turn is self:
                session.turn = None
            if not self._done.done():
                self._done.set_result(None)
            self.agent.records.notify_changed()

    def _settle(self, stop_reason: str | None) -> None:
        if self.accepted:
            self.session.state = "idle"
            self.session.stop_reason = stop_reason
            self.stop_reason = stop_reason

    async def _finish(self, stop_reason: str, *, error: dict[str, Any] | None = None) -> None:
        session = self.session
        self.stop_reason = stop_reason

        def idle() -> None:
            session.state = "idle"
            session.stop_reason = stop_reason
            session.touch()

        if self.protocol_version >= 2:
            update: dict[str, Any] = {"sessionUpdate": "state_update", "state": "idle", "stopReason": stop_reason}
            if error is not None:
                update["error"] = error
            await emit_update(self.agent, session, update, idle)
        else:
            async with session.emit_lock:
                idle()
            await self._reply.result({"stopReason": stop_reason})


async def run_script(turn: PromptTurn, steps: Sequence[ScriptStep]) -> str:
    """Play parsed mini-language steps in ``turn``; returns the stop reason."""
    if steps and steps[0].kind == "fail":
        raise AgentError(steps[0].code, steps[0].text or None)
    await turn.accept()
    for step in steps:
        if turn.is_cancelled():
            return "cancelled"
        if step.kind == "echo":
            await turn.say(step.text)
        elif step.kind == "thought":
            await turn.think(step.text)
        elif step.kind == "stream":
            for i in range(1, step.count + 1):
                if turn.is_cancelled():
                    return "cancelled"
                await turn.say(f"chunk {i} ")
                if step.seconds and i < step.count and not await turn.sleep(step.seconds):
                    return "cancelled"
        elif step.kind == "sleep":
            if not await turn.sleep(step.seconds):
                return "cancelled"
        elif step.kind == "permission":
            outcome = await turn.request_permission()
            if outcome.get("outcome") != "selected":
                return "cancelled"
            if str(outcome.get("optionId", "")).startswith("reject"):
                await turn.say("permission denied")
                return "end_turn"
            await turn.say("permission granted")
        elif step.kind == "fail":
            raise AgentError(step.code, step.text or None)
        elif step.kind == "stop":
            return step.text
        elif step.kind in ("drop", "abort"):
            await turn.drop_connection(step.code or 1011, abort=step.kind == "abort")
        elif step.kind == "tool":
            command, *words = step.text.split()
            await run_tool(turn, command.lower(), words)
    return "cancelled" if turn.is_cancelled() else "end_turn"

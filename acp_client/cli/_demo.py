"""The ``acp-client demo`` story: the embedded reference agent, a cut link, a restart, a forgotten session.

Every step prints what happens; the client's events are printed live as they arrive. Only the CLI imports
this module (it prints, and it imports the test kit).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from acp_client import RecoveryPolicy
from acp_client.cli._console import EXIT_FAILURE, EXIT_OK, Style, error, short_id
from acp_client.exceptions import ConnectionLost
from acp_client.reconnect import (
    Backoff,
    ClientState,
    ConnectionDropped,
    Event,
    ReconnectingClient,
    RecoveryRoundFinished,
    SessionForgotten,
    SessionRecovered,
    SessionRecoveryFailed,
    StateChanged,
)
from acp_client.sessions import RecoveryMarker, Session, SessionUpdate, UpdatesDropped
from acp_client.testing._waiting import Waiters

if TYPE_CHECKING:
    from acp_client.testing import ReferenceAgent

__all__ = ["DEMO_DEADLINE", "run_demo"]

#: The whole demo is bounded by this many seconds (it normally takes a few).
DEMO_DEADLINE = 60.0


@dataclass
class _Tally:
    """What one session's update stream showed, per recovery round."""

    live: int = 0
    replayed: int = 0
    #: (marker, updates replayed before it), one per recovery
    rounds: list[tuple[RecoveryMarker, int]] = field(default_factory=list)


class _Demo:
    """The reconnect demo: every step prints what happens; events are printed live as they arrive."""

    def __init__(self, protocol: int, sessions: int, style: Style, transport: str = "websocket") -> None:
        self.protocol = protocol
        self.transport = transport
        self.count = sessions
        self.style = style
        self.events: list[Event] = []
        self.tallies: dict[str, _Tally] = {}
        self._waiters = Waiters()
        self._started = time.monotonic()
        self._tasks: list[asyncio.Task[None]] = []

    # -------------------------------------------------------------- output helpers

    def say(self, text: str) -> None:
        """A timestamped line."""
        print(f"{self.style(f'{time.monotonic() - self._started:6.2f}s', 'dim')}  {text}")

    def step(self, text: str) -> None:
        """A step heading."""
        print()
        self.say(self.style(f"== {text}", "bold", "cyan"))

    def _bump(self) -> None:
        self._waiters.changed()

    async def until(self, predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
        """Wait (bounded) until ``predicate()`` holds; re-checked whenever an event or update arrives."""
        await self._waiters.wait_until(predicate, timeout, what=f"{what} (the demo)")

    def ready_count(self) -> int:
        """How many times the client became READY."""
        return sum(isinstance(e, StateChanged) and e.new is ClientState.READY for e in self.events)

    # -------------------------------------------------------------- background readers

    def _describe_event(self, event: Event) -> str:
        s = self.style
        if isinstance(event, StateChanged):
            extra = f" (attempt {event.attempt}, waiting {event.delay:.2f}s)" if event.delay is not None else ""
            reason = f" - {event.reason}" if event.reason else ""
            colour = {"ready": "green", "failed": "red", "backoff": "yellow"}.get(event.new.value, "blue")
            return f"state  {event.old.value} -> {s(event.new.value, colour)}{extra}{reason}  [gen {event.generation}]"
        if isinstance(event, ConnectionDropped):
            code = f", close code {event.close_code}" if event.close_code is not None else ""
            return s(f"link   dropped after {event.lived:.2f}s ({event.reason or 'no reason'}{code})", "yellow")
        if isinstance(event, SessionRecovered):
            probe = event.status or "not probed"
            state = f", state {event.state}" if event.state else ""
            return (
                f"recov  {short_id(event.session_id)}: probe {s(probe, 'bold')} -> {s(event.outcome, 'green')} "
                f"via session/{event.mode}, replayed={'yes' if event.replayed else 'no'}, "
                f"may_have_missed_updates={'yes' if event.may_have_missed_updates else 'no'}{state}"
            )
        if isinstance(event, SessionForgotten):
            cause = f"the agent answered -32002 to {event.via}" if event.via else event.reason
            return f"recov  {short_id(event.session_id)}: {s('forgotten', 'red')} (reason {event.reason}: {cause})"
        if isinstance(event, SessionRecoveryFailed):
            retry = "will retry" if event.will_retry else "no more tries on this connection"
            return s(f"recov  {short_id(event.session_id)}: failed ({event.error}; {retry})", "red")
        if isinstance(event, RecoveryRoundFinished):
            return (
                f"round  gen {event.generation}: {event.reattached} reattached, {event.restored} restored, "
                f"{event.forgotten} forgotten, {event.failed} failed, {event.kept} kept"
            )
        return f"event  {event}"

    async def _watch_events(self, events: AsyncIterator[Event]) -> None:
        async for event in events:
            self.events.append(event)
            self.say(self._describe_event(event))
            self._bump()

    async def _watch_updates(self, session: Session) -> None:
        tally = self.tallies[session.id]
        async for item in session.updates(maxsize=100_000):
            if isinstance(item, SessionUpdate):
                if item.replay:
                    tally.replayed += 1
                else:
                    tally.live += 1
            elif isinstance(item, RecoveryMarker):
                tally.rounds.append((item, tally.replayed))
                if item.outcome != "failed":
                    what = f"{tally.replayed} replayed update(s)" if item.replayed else "no replay"
                    self.say(f"replay {short_id(session.id)}: {what}, then marker '{item.outcome}'")
                tally.replayed = 0
            elif isinstance(item, UpdatesDropped):  # pragma: no cover - the buffer is large enough
                self.say(f"update {short_id(session.id)}: {item.count} update(s) dropped by a slow reader")
            self._bump()

    def _spawn(self, coro: Any, name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def _stop_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)

    # -------------------------------------------------------------- the story

    async def run(self) -> int:
        """Play the demo; returns the exit code."""
        from acp_client.testing import ReferenceAgent  # the test kit is imported only for the demo

        self.step(f"starting the embedded reference agent (protocol v{self.protocol})")
        async with ReferenceAgent(self.protocol, host="127.0.0.1", port=0) as agent:
            url = agent.http_url if self.transport == "http" else agent.url  # one endpoint serves both
            self.say(f"agent listening on {url}")
            client = ReconnectingClient(
                url,
                protocol_version=1 if self.protocol == 1 else 2,
                backoff=Backoff(base=0.1, cap=1.0),
                policy=RecoveryPolicy(start_jitter=0.0, stable_after=0.0),
            )
            self._spawn(self._watch_events(client.events()), "demo-events")
            try:
                return await self._story(agent, client)
            finally:
                await client.aclose()
                await self._stop_tasks()

    async def _story(self, agent: ReferenceAgent, client: ReconnectingClient) -> int:
        s = self.style
        await client.start()
        await client.wait_ready(timeout=10)

        self.step(f"opening {self.count} sessions")
        sessions: list[Session] = []
        for i in range(self.count):
            session = await client.new_session(f"/demo/workspace-{i + 1}")
            sessions.append(session)
            self.tallies[session.id] = _Tally()
            self._spawn(self._watch_updates(session), f"demo-updates-{i}")
            await session.prompt(f"echo: hello from session {i + 1}", timeout=10)
            self.say(f"session {short_id(session.id)} ({session.id}) opened and answered one prompt")

        streaming = sessions[0]
        self.step(f"cutting the link while {short_id(streaming.id)} streams a long answer")
        prompt = asyncio.create_task(streaming.prompt("stream 40 every 0.05"), name="demo-prompt")
        tally = self.tallies[streaming.id]
        await self.until(lambda: tally.live >= 8, "the first streamed chunks")
        self.say(f"{tally.live} updates streamed so far; resetting the TCP connection now")
        await agent.drop_all_connections(abort=True)
        try:
            async with asyncio.timeout(10):
                await prompt
        except ConnectionLost as exc:
            sent = "the agent may have it" if exc.request_sent else "never sent"
            self.say(s(f"the interrupted prompt raised ConnectionLost ({sent}): {exc}", "yellow"))
        else:
            self.say(s("the prompt finished before the drop was noticed", "yellow"))
        await self.until(lambda: self.ready_count() >= 2, "the first recovery")
        first = [e for e in self.events if isinstance(e, SessionRecovered) and e.generation == client.generation]
        active = sum(e.status == "active" and e.outcome == "reattached" for e in first)
        self.say(f"{active} of {len(sessions)} sessions re-attached (probe said active: the agent kept them)")

        self.step("letting the interrupted turn finish on the agent")
        record = agent.sessions[streaming.id]
        await agent.wait_for(lambda: record.turn is None, timeout=10)
        self.say(
            f"the agent kept working through the drop; {short_id(streaming.id)} now holds "
            f"{len(streaming.transcript.messages)} transcript messages"
        )

        forgotten = sessions[-1]
        self.step(f"restarting the agent and making it forget {short_id(forgotten.id)}")
        # forget first: once restart() returns the client may already be reconnecting
        agent.forget_session(forgotten.id)
        rounds_before = {sid: len(t.rounds) for sid, t in self.tallies.items()}
        await agent.restart(keep_sessions=True)
        self.say("agent restarted: every session it remembers is inactive (on disk, not in memory)")
        await self.until(lambda: self.ready_count() >= 3, "the recovery after the restart")
        await self.until(
            lambda: all(len(t.rounds) > rounds_before[sid] for sid, t in self.tallies.items()),
            "every session's recovery marker",
        )

        return self._summary(client, sessions)

    def _summary(self, client: ReconnectingClient, sessions: Sequence[Session]) -> int:
        s = self.style
        last: dict[str, SessionRecovered | SessionForgotten] = {}
        for seen in self.events:
            if isinstance(seen, SessionRecovered | SessionForgotten):
                last[seen.session_id] = seen
        self.step("summary after the restart")
        header = ("session", "status probe", "outcome", "mode", "replayed", "messages")
        rows: list[tuple[str, ...]] = []
        for session in sessions:
            event = last.get(session.id)
            marker, replayed = self.tallies[session.id].rounds[-1]
            short, messages = short_id(session.id), str(len(session.transcript.messages))
            if isinstance(event, SessionRecovered):
                rows.append((short, event.status or "-", event.outcome, event.mode, str(replayed), messages))
            elif isinstance(event, SessionForgotten):
                rows.append((short, "not found", "forgotten", "-", "-", messages))
            else:  # pragma: no cover - the demo waited for every marker
                rows.append((short, "-", marker.outcome, marker.mode or "-", str(replayed), messages))
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        print("  ".join(s(h.ljust(w), "bold") for h, w in zip(header, widths, strict=True)))
        print("  ".join("-" * w for w in widths))
        for row in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        restored = sum(r[2] == "restored" for r in rows)
        lost = [r[0] for r in rows if r[2] == "forgotten"]
        print()
        print(
            f"{restored} session(s) restored, {len(lost)} forgotten ({', '.join(lost) or 'none'}); "
            f"client state {client.state.value}, {client.generation} connections made, protocol v{self.protocol}"
        )
        return EXIT_OK


async def run_demo(protocol: int, sessions: int, style: Style, transport: str = "websocket") -> int:
    """Play the demo with ``sessions`` sessions over protocol ``protocol`` and ``transport`` (``"websocket"``
    or ``"http"``, Streamable HTTP); returns the exit code."""
    try:
        async with asyncio.timeout(DEMO_DEADLINE):
            return await _Demo(protocol, sessions, style, transport).run()
    except TimeoutError as exc:
        error(str(exc) or f"the demo did not finish within {DEMO_DEADLINE:g} s")
        return EXIT_FAILURE

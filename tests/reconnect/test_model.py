"""Model-based test: hypothesis drives drops, restarts, calls and cancellations; invariants hold throughout.

Hypothesis has no async rules, so the machine owns one event loop and each rule runs to completion on it.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import acp_client
from acp_client import (
    Backoff,
    ClientState,
    CrashLoopBreaker,
    ReconnectingClient,
    RecoveryPolicy,
    Session,
    SessionLink,
    SessionUpdate,
    StateChanged,
    Timeouts,
)
from acp_client.reconnect import LEGAL_TRANSITIONS
from acp_client.testing import ReferenceAgent
from tests.conftest import bound


class ReconnectModel(RuleBasedStateMachine):
    """One agent, one reconnecting client, a few sessions, and faults."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.baseline_tasks = 0
        self.agent = ReferenceAgent(2)
        self.run(self.agent.__aenter__())
        self.client = ReconnectingClient(
            self.agent.url,
            timeouts=Timeouts(session_wait=10.0),
            policy=RecoveryPolicy(start_jitter=0.0, stable_after=0.0),
            backoff=Backoff(base=0.01, cap=0.05),
            breaker=CrashLoopBreaker(threshold=10_000),  # the drops here are deliberate, not a crash loop
            wait_for_ready=True,
        )
        self.transitions: list[tuple[ClientState, ClientState]] = []
        self.run(self.client.start())
        self.watcher = self.loop.create_task(self._watch_states())
        self.run(self.client.wait_ready())
        self.sessions: list[Session] = []
        self.forgotten: set[str] = set()
        self.calls: list[asyncio.Task[Any]] = []
        self.outcomes: collections.Counter[str] = collections.Counter()
        #: live (not replayed) agent text per (session, messageId, chunk text), and whole live agent messages:
        #: a v2 replay arrives as whole ``agent_message`` updates, a v1 one as chunks; neither may pass as live
        self.live_seen: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self.live_whole: collections.Counter[tuple[str, str]] = collections.Counter()
        #: how each cancelled call ended ("cancelled", or what it returned or raised instead)
        self.cancel_outcomes: list[str] = []
        self.readers: list[asyncio.Task[None]] = []

    async def _watch_states(self) -> None:
        async for event in self.client.events():
            if isinstance(event, StateChanged):
                self.transitions.append((event.old, event.new))

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, bound(20)))

    async def _read(self, session: Session) -> None:
        async for item in session.updates(maxsize=100_000):
            if not isinstance(item, SessionUpdate) or item.replay:
                continue
            message_id = str(item.raw.get("messageId"))
            if item.kind == "agent_message_chunk":
                self.live_seen[(session.id, message_id, item.raw["content"]["text"])] += 1
            elif item.kind == "agent_message":
                self.live_whole[(session.id, message_id)] += 1

    def settle(self) -> None:
        """Let the client reach READY again and every session's recovery finish (bounded)."""
        self.run(self.client.wait_ready())
        self.run(self._links_settled())

    async def _links_settled(self) -> None:
        """Wait (bounded) until no session is between states: each is attached or lost. On timeout the
        ``sessions_follow_the_agent`` invariant says which one is stuck, and how."""
        try:
            async with asyncio.timeout(bound(10)):
                while True:
                    changed = self.client._supervisor.changed()  # set on every state or session-link change
                    if all(s.link in (SessionLink.ATTACHED, SessionLink.LOST) for s in self.sessions):
                        return
                    await changed.wait()
        except TimeoutError:
            return

    # ------------------------------------------------------------------ rules

    @precondition(lambda self: len(self.sessions) < 4)
    @rule()
    def new_session(self) -> None:
        self.settle()
        session = self.run(self.client.new_session("/w"))
        self.sessions.append(session)
        self.readers.append(self.loop.create_task(self._read(session)))

    @precondition(lambda self: bool(self.sessions))
    @rule(index=st.integers(0, 3), chunks=st.integers(1, 5))
    def prompt(self, index: int, chunks: int) -> None:
        session = self.sessions[index % len(self.sessions)]
        if session.id in self.forgotten:
            return
        self.settle()

        async def call() -> str:
            try:
                await session.prompt(f"stream {chunks}")
                return "ok"
            except Exception as exc:
                return type(exc).__name__

        task = self.loop.create_task(call())
        self.calls.append(task)
        self.outcomes[self.run(task)] += 1

    @rule(abort=st.booleans())
    def drop(self, abort: bool) -> None:
        self.run(self.agent.drop_all_connections(abort=abort))
        self.settle()

    @rule(keep=st.booleans())
    def restart(self, keep: bool) -> None:
        self.run(self.agent.restart(keep_sessions=keep))
        if not keep:
            self.forgotten.update(s.id for s in self.sessions)
        self.settle()

    @precondition(lambda self: bool(self.sessions))
    @rule(index=st.integers(0, 3))
    def forget_on_agent(self, index: int) -> None:
        session = self.sessions[index % len(self.sessions)]
        self.agent.forget_session(session.id)
        self.forgotten.add(session.id)
        self.run(self.agent.drop_all_connections())
        self.settle()

    @precondition(lambda self: bool(self.sessions))
    @rule(index=st.integers(0, 3))
    def cancelled_call(self, index: int) -> None:
        session = self.sessions[index % len(self.sessions)]
        if session.id in self.forgotten:
            return
        self.settle()
        task = self.loop.create_task(session.prompt("sleep 5"))
        self.calls.append(task)

        async def cancel_soon() -> None:
            await self.agent.wait_for_method("session/prompt", self.agent.count("session/prompt"), timeout=5)
            task.cancel()
            await asyncio.wait({task})

        self.run(cancel_soon())
        if task.cancelled():
            self.cancel_outcomes.append("cancelled")
        elif task.exception() is not None:
            self.cancel_outcomes.append(f"raised {type(task.exception()).__name__}")
        else:
            self.cancel_outcomes.append(f"returned {task.result()!r}")
        self.run(self.agent.drop_all_connections())  # the agent's turn is still running: start clean
        self.settle()

    # ------------------------------------------------------------------ invariants

    @invariant()
    def transitions_are_legal(self) -> None:
        for old, new in self.transitions:
            assert new in LEGAL_TRANSITIONS[old]

    @invariant()
    def forgotten_sessions_are_not_attached(self) -> None:
        for session in self.sessions:
            if session.link is SessionLink.LOST:
                assert session.id not in self.client.sessions
            if session.id in self.client.sessions:
                assert session.link is not SessionLink.LOST

    @invariant()
    def sessions_follow_the_agent(self) -> None:
        # after every rule recovery has settled: what the agent forgot is LOST, what it kept is attached
        for session in self.sessions:
            if session.id in self.forgotten:
                assert session.link is SessionLink.LOST, (session.id, session.link, "forgotten by the agent")
                assert session.id not in self.client.sessions
            else:
                assert session.link is SessionLink.ATTACHED, (session.id, session.link, "kept by the agent")
                assert session.id in self.client.sessions

    @invariant()
    def cancelled_calls_end_cancelled(self) -> None:
        # cancelling the caller's task cancels the call: never swallowed, never turned into a result or error
        assert all(outcome == "cancelled" for outcome in self.cancel_outcomes), self.cancel_outcomes

    @invariant()
    def at_most_one_live_connection(self) -> None:
        assert self.agent.connections <= 1

    @invariant()
    def no_update_delivered_twice(self) -> None:
        duplicates = [key for key, n in self.live_seen.items() if n > 1]
        duplicates += [key for key, n in self.live_whole.items() if n > 1]
        # a message streamed live as chunks must not come again as a whole live message (a leaked v2 replay)
        chunked = {(sid, mid) for sid, mid, _text in self.live_seen}
        duplicates += [key for key in self.live_whole if key in chunked]
        assert not duplicates, duplicates

    @invariant()
    def every_call_resolved(self) -> None:
        assert all(task.done() for task in self.calls)

    @invariant()
    def failures_are_typed(self) -> None:
        # a prompt may be refused (e.g. the interrupted turn still runs on the agent), but only with our errors
        for outcome in self.outcomes:
            if outcome != "ok":
                assert issubclass(getattr(acp_client, outcome), acp_client.ACPError), outcome

    def teardown(self) -> None:
        try:
            self.run(self.client.aclose())
            self.run(asyncio.wait({self.watcher}))  # the events iterator ends when the client closes
            for reader in self.readers:
                reader.cancel()
            if self.readers:
                self.loop.run_until_complete(asyncio.wait(self.readers))
            self.run(self.agent.aclose())
            assert self.client.state is ClientState.CLOSED
            leftover = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            assert not leftover, leftover
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()


ReconnectModel.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestReconnectModel = ReconnectModel.TestCase

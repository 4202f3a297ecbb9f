"""The ``acp-client`` command: a reconnect demo, session probes, and the reference agent.

::

    acp-client demo [--protocol 1|2] [--sessions N]
    acp-client status URL SESSION_ID... [--timeout S]
    acp-client locate SESSION_ID URL... [--timeout S]
    acp-client serve-reference [--host H] [--port N] [--protocol 1|2] [--also-v1] [--stdio]
    acp-client bridge URL [--store FILE] [--header 'NAME: VALUE'] [--log-file F] [--outage-timeout S]

Exit codes: 0 success, 1 failure (unreachable agent, session not active anywhere, ...), 2 usage errors.
The CLI is the only place in the package that prints and that configures logging.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

import structlog

from acp_client._connect import connect
from acp_client._version import __version__
from acp_client.client import ACPClient
from acp_client.exceptions import ACPError, ConnectionLost, RPCError, SessionNotFound, TransportError, UsageError
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

if TYPE_CHECKING:
    from acp_client.testing import ReferenceAgent

__all__ = ["main"]

#: Exit codes.
EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2

#: The whole demo is bounded by this many seconds (it normally takes a few).
DEMO_DEADLINE = 60.0


# ---------------------------------------------------------------------- output


class Style:
    """ANSI colours when writing to a terminal and ``NO_COLOR`` is unset; plain text otherwise."""

    _CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34", "cyan": "36"}

    def __init__(self, stream: TextIO) -> None:
        isatty = getattr(stream, "isatty", None)
        self.enabled = bool(isatty and isatty()) and not os.environ.get("NO_COLOR")

    def __call__(self, text: str, *names: str) -> str:
        """``text`` wrapped in the named colours (unchanged when colour is off)."""
        if not self.enabled or not names:
            return text
        codes = ";".join(self._CODES[name] for name in names)
        return f"\033[{codes}m{text}\033[0m"


def _error(message: str) -> None:
    """One line on stderr."""
    print(f"acp-client: error: {message}", file=sys.stderr)


def _short(session_id: str) -> str:
    """A session id short enough for a table column."""
    return session_id.removeprefix("sess_")[:8]


@contextlib.contextmanager
def _quiet_library_logs() -> Iterator[None]:
    """Route the library's structlog output to stderr at WARNING and above, and restore the previous
    configuration afterwards (``main()`` may run inside another program, e.g. a test session)."""
    was_configured = structlog.is_configured()
    previous = structlog.get_config()
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    try:
        yield
    finally:
        if was_configured:
            structlog.configure(**previous)
        else:
            structlog.reset_defaults()


# ---------------------------------------------------------------------- argument parsing


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value


def _session_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 2 <= value <= 50:
        raise argparse.ArgumentTypeError("the demo needs between 2 and 50 sessions")
    return value


def _check_url(url: str) -> str | None:
    """Why ``url`` is not a usable agent endpoint, or ``None`` when it is."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        return f"bad URL {url!r}: {exc}"
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        return f"bad URL {url!r}: expected ws://HOST[:PORT]/PATH or wss://..."
    return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acp-client",
        description="Agent Client Protocol client tools: a reconnect demo, session probes, a reference agent.",
    )
    parser.add_argument("--version", action="version", version=f"acp-client {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="watch the reconnect manager recover sessions from the embedded reference agent",
        description="Start the embedded reference agent, cut the link, restart the agent, forget a session, "
        "and show every state change and recovery decision.",
    )
    demo.add_argument("--protocol", type=int, choices=(1, 2), default=2, help="protocol version (default 2)")
    demo.add_argument("--sessions", type=_session_count, default=3, help="sessions to open (2-50, default 3)")

    status = sub.add_parser(
        "status",
        help="probe sessions with session/status",
        description="Connect to an agent and ask session/status for each session id.",
    )
    status.add_argument("url", metavar="URL", help="agent endpoint, ws:// or wss://")
    status.add_argument("session_ids", metavar="SESSION_ID", nargs="+", help="session ids to probe")
    status.add_argument("--timeout", type=_positive_float, default=10.0, help="seconds per step (default 10)")

    locate = sub.add_parser(
        "locate",
        help="find which agent endpoints hold a session active",
        description="Ask several agent endpoints concurrently whether they hold a session (a router's probe).",
    )
    locate.add_argument("session_id", metavar="SESSION_ID", help="the session id to look for")
    locate.add_argument("urls", metavar="URL", nargs="+", help="agent endpoints, ws:// or wss://")
    locate.add_argument("--timeout", type=_positive_float, default=5.0, help="seconds per endpoint (default 5)")

    serve = sub.add_parser(
        "serve-reference",
        help="run the reference agent standalone",
        description="Serve the reference ACP agent; prints its URL, serves until interrupted.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=0, help="TCP port (default 0: any free port)")
    serve.add_argument("--protocol", type=int, choices=(1, 2), default=2, help="latest version (default 2)")
    serve.add_argument("--also-v1", action="store_true", help="also answer protocol version 1 when offered")
    serve.add_argument("--stdio", action="store_true", help="serve one connection on stdin/stdout")
    serve.add_argument("--require-auth", action="store_true", help="session methods need authentication first")
    serve.add_argument("--verbose", action="store_true", help="debug logs on stderr")

    from acp_client.bridge import add_arguments as add_bridge_arguments

    bridge = sub.add_parser(
        "bridge",
        help="be a stdio agent for an editor, forwarding to a remote agent across dropped links",
        description="Speak ACP on stdin/stdout to an editor and forward to the remote agent at URL through the "
        "reconnect manager. Nothing but JSON-RPC is written to stdout. See examples/editor_bridge.md.",
    )
    add_bridge_arguments(bridge)
    return parser


# ---------------------------------------------------------------------- status and locate


def _describe_status(status: str, state: str | None) -> str:
    """``active`` / ``inactive`` / ``unknown value: X``, plus the v2 foreground state when reported."""
    text = status if status in ("active", "inactive") else f"unknown value: {status}"
    return f"{text} (state: {state})" if state is not None else text


def _connect_options(timeout: float) -> dict[str, Any]:
    return {"open_timeout": timeout, "initialize_timeout": timeout, "request_timeout": timeout}


async def _status(url: str, session_ids: Sequence[str], timeout: float, style: Style) -> int:
    async with asyncio.timeout(timeout * (2 + len(session_ids))), connect(url, **_connect_options(timeout)) as client:
        if not client.supports("status"):
            _error(f"{url} (protocol v{client.protocol_version}) does not advertise session/status")
            return EXIT_FAILURE
        answered = True
        for session_id in session_ids:
            try:
                answer = await client.session_status(session_id, timeout=timeout)
            except SessionNotFound:
                line = style("not found", "yellow") + " (-32002)"
            except RPCError as exc:
                answered = False
                line = style(f"error {exc.code}: {exc.message}", "red")
            else:
                state = answer.state.state if answer.state is not None else None
                colour = "green" if answer.status == "active" else "blue" if answer.status == "inactive" else "yellow"
                line = style(_describe_status(answer.status, state), colour)
            print(f"{session_id}: {line}")
        return EXIT_OK if answered else EXIT_FAILURE


@dataclass(frozen=True, slots=True)
class _Located:
    url: str
    result: str  # active / inactive / not found / unreachable / timeout / unknown value: X / no status / error
    detail: str = ""


async def _probe_endpoint(url: str, session_id: str, timeout: float) -> _Located:
    try:
        async with asyncio.timeout(timeout), connect(url, **_connect_options(timeout)) as client:
            return await _probe_on(client, url, session_id)
    except TimeoutError:
        return _Located(url, "timeout", f"no answer within {timeout:g} s")
    except SessionNotFound:
        return _Located(url, "not found", "-32002")
    except (TransportError, OSError) as exc:
        return _Located(url, "unreachable", str(exc))
    except ACPError as exc:
        return _Located(url, "error", f"{type(exc).__name__}: {exc}")


async def _probe_on(client: ACPClient, url: str, session_id: str) -> _Located:
    if not client.supports("status"):
        return _Located(url, "no status", f"v{client.protocol_version} agent does not advertise session/status")
    answer = await client.session_status(session_id)
    state = answer.state.state if answer.state is not None else None
    if answer.status in ("active", "inactive"):
        return _Located(url, answer.status, f"state: {state}" if state else "")
    return _Located(url, f"unknown value: {answer.status}", f"state: {state}" if state else "")


async def _locate(session_id: str, urls: Sequence[str], timeout: float, style: Style) -> int:
    results = await asyncio.gather(*(_probe_endpoint(url, session_id, timeout) for url in urls))
    colours = {"active": "green", "inactive": "blue", "not found": "yellow"}
    width = max(len(url) for url in urls)
    for found in results:
        result = style(found.result, colours.get(found.result, "red"))
        detail = style(f"  ({found.detail})", "dim") if found.detail else ""
        print(f"{found.url.ljust(width)}  {result}{detail}")
    active = [found.url for found in results if found.result == "active"]
    if active:
        print(style(f"session {session_id} is active on: {', '.join(active)}", "bold"))
        return EXIT_OK
    print(style(f"session {session_id} is not active on any endpoint", "bold"))
    return EXIT_FAILURE


# ---------------------------------------------------------------------- the demo


@dataclass
class _Tally:
    """What one session's update stream showed, per recovery round."""

    live: int = 0
    replayed: int = 0
    #: (marker, updates replayed before it), one per recovery
    rounds: list[tuple[RecoveryMarker, int]] = field(default_factory=list)


class _Demo:
    """The reconnect demo: every step prints what happens; events are printed live as they arrive."""

    def __init__(self, protocol: int, sessions: int, style: Style) -> None:
        self.protocol = protocol
        self.count = sessions
        self.style = style
        self.events: list[Event] = []
        self.tallies: dict[str, _Tally] = {}
        self._changed = asyncio.Event()
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
        self._changed.set()

    async def until(self, predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
        """Wait (bounded) until ``predicate()`` holds; re-checked whenever an event or update arrives."""
        try:
            async with asyncio.timeout(timeout):
                while not predicate():
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise TimeoutError(f"the demo gave up waiting for {what} after {timeout:g} s") from None

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
                f"recov  {_short(event.session_id)}: probe {s(probe, 'bold')} -> {s(event.outcome, 'green')} "
                f"via session/{event.mode}, replayed={'yes' if event.replayed else 'no'}, "
                f"may_have_missed_updates={'yes' if event.may_have_missed_updates else 'no'}{state}"
            )
        if isinstance(event, SessionForgotten):
            cause = f"the agent answered -32002 to {event.via}" if event.via else event.reason
            return f"recov  {_short(event.session_id)}: {s('forgotten', 'red')} (reason {event.reason}: {cause})"
        if isinstance(event, SessionRecoveryFailed):
            retry = "will retry" if event.will_retry else "no more tries on this connection"
            return s(f"recov  {_short(event.session_id)}: failed ({event.error}; {retry})", "red")
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
                    self.say(f"replay {_short(session.id)}: {what}, then marker '{item.outcome}'")
                tally.replayed = 0
            elif isinstance(item, UpdatesDropped):  # pragma: no cover - the buffer is large enough
                self.say(f"update {_short(session.id)}: {item.count} update(s) dropped by a slow reader")
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
            self.say(f"agent listening on {agent.url}")
            client = ReconnectingClient(
                agent.url,
                protocol_version=1 if self.protocol == 1 else 2,
                backoff=Backoff(base=0.1, cap=1.0),
                recovery_start_jitter=0.0,
                stable_after=0.0,
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
            self.say(f"session {_short(session.id)} ({session.id}) opened and answered one prompt")

        streaming = sessions[0]
        self.step(f"cutting the link while {_short(streaming.id)} streams a long answer")
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
            f"the agent kept working through the drop; {_short(streaming.id)} now holds "
            f"{len(streaming.transcript.messages)} transcript messages"
        )

        forgotten = sessions[-1]
        self.step(f"restarting the agent and making it forget {_short(forgotten.id)}")
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
            short, messages = _short(session.id), str(len(session.transcript.messages))
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


async def _demo(protocol: int, sessions: int, style: Style) -> int:
    try:
        async with asyncio.timeout(DEMO_DEADLINE):
            return await _Demo(protocol, sessions, style).run()
    except TimeoutError as exc:
        _error(str(exc) or f"the demo did not finish within {DEMO_DEADLINE:g} s")
        return EXIT_FAILURE


# ---------------------------------------------------------------------- entry point


def _serve_reference(args: argparse.Namespace) -> int:
    from acp_client.testing.reference_agent import main as serve_main

    argv = ["--host", args.host, "--port", str(args.port), "--protocol", str(args.protocol)]
    argv += [flag for flag, on in (("--also-v1", args.also_v1), ("--stdio", args.stdio)) if on]
    argv += [flag for flag, on in (("--require-auth", args.require_auth), ("--verbose", args.verbose)) if on]
    return serve_main(argv)


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    style = Style(sys.stdout)
    if args.command == "demo":
        return asyncio.run(_demo(args.protocol, args.sessions, style))
    if args.command == "status":
        problem = _check_url(args.url)
        if problem is not None:
            _error(problem)
            return EXIT_USAGE
        return asyncio.run(_status(args.url, args.session_ids, args.timeout, style))
    if args.command == "locate":
        for url in args.urls:
            problem = _check_url(url)
            if problem is not None:
                _error(problem)
                return EXIT_USAGE
        return asyncio.run(_locate(args.session_id, args.urls, args.timeout, style))
    if args.command == "serve-reference":
        return _serve_reference(args)
    parser.print_help()
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``acp-client`` console script; returns the exit code (argparse exits 2 itself)."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "serve-reference":
            return _serve_reference(args)  # configures its own logging
        if args.command == "bridge":
            from acp_client.bridge import run_command as run_bridge

            return run_bridge(args)  # stdout carries JSON-RPC only; logs go to stderr or --log-file
        with _quiet_library_logs():
            return _run(args, parser)
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except UsageError as exc:
        _error(str(exc))
        return EXIT_USAGE
    except TimeoutError as exc:
        _error(str(exc) or "timed out")
        return EXIT_FAILURE
    except (ACPError, OSError) as exc:
        _error(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

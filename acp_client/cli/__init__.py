"""The ``acp-client`` command: a reconnect demo, session probes, stored sessions, and the reference agent.

::

    acp-client demo [--protocol 1|2] [--sessions N] [--transport websocket|http]
    acp-client status URL SESSION_ID... [--timeout S]
    acp-client locate SESSION_ID URL... [--timeout S]
    acp-client sessions --store FILE | --redis URL [--namespace NS] [--lease-ttl S]
    acp-client serve-reference [--host H] [--port N] [--protocol 1|2] [--also-v1] [--stdio] [--state-dir DIR]
    acp-client bridge URL [--store FILE] [--header 'NAME: VALUE'] [--log-file F] [--outage-timeout S]

Exit codes: 0 success, 1 failure (unreachable agent, a session not found, not active anywhere, ...), 2 usage
errors. The CLI is the only place in the package that prints and that configures logging.

Each subcommand is one :class:`Command` in :data:`COMMANDS`: its name, help, a function that adds its
arguments and a function that runs it. A new subcommand is one more entry.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from acp_client._version import __version__
from acp_client.cli._console import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, Style, error, out, printable, shown_url
from acp_client.client import ACPClient
from acp_client.client._connect import connect, url_problem
from acp_client.exceptions import ACPError, RPCError, SessionNotFound, StoreError, TransportError, UsageError
from acp_client.reconnect import Timeouts
from acp_client.sessions import SessionRecord, StoredSession
from acp_client.transports import TransportOptions

__all__ = ["COMMANDS", "Command", "main"]

#: The URL schemes ``status`` and ``locate`` accept.


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


# ---------------------------------------------------------------------- argument helpers


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
    problem = url_problem(url)
    return None if problem is None else f"bad URL {shown_url(url)!r}: {problem}"


def _check_urls(urls: Sequence[str]) -> int | None:
    for url in urls:
        problem = _check_url(url)
        if problem is not None:
            error(problem)
            return EXIT_USAGE
    return None


def _connect_options(timeout: float) -> dict[str, Any]:
    return {
        "transport_options": TransportOptions(open_timeout=timeout),
        "timeouts": Timeouts(initialize=timeout, request=timeout),
    }


# ---------------------------------------------------------------------- status


def _describe_status(status: str, state: str | None) -> str:
    """``active`` / ``inactive`` / ``unknown value: X``, plus the v2 foreground state when reported."""
    text = status if status in ("active", "inactive") else f"unknown value: {status}"
    return f"{text} (state: {state})" if state is not None else text


async def _status(url: str, session_ids: Sequence[str], timeout: float, style: Style) -> int:
    """Print each session's status; exit 1 when any is not found or answered with an error."""
    async with asyncio.timeout(timeout * (2 + len(session_ids))), connect(url, **_connect_options(timeout)) as client:
        if not client.supports("status"):
            error(f"{shown_url(url)} (protocol v{client.protocol_version}) does not advertise session/status")
            return EXIT_FAILURE
        all_found = True
        for session_id in session_ids:
            try:
                answer = await client.session_status(session_id, timeout=timeout)
            except SessionNotFound:
                all_found = False
                line = style("not found", "yellow") + " (-32002)"
            except RPCError as exc:
                all_found = False
                line = style(f"error {exc.code}: {printable(exc.message)}", "red")
            else:
                state = answer.state.state if answer.state is not None else None
                colour = "green" if answer.status == "active" else "blue" if answer.status == "inactive" else "yellow"
                line = style(_describe_status(printable(answer.status), printable(state) if state else None), colour)
            out(f"{printable(session_id)}: {line}")
        return EXIT_OK if all_found else EXIT_FAILURE


def _add_status(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", metavar="URL", help="agent endpoint: ws://, wss://, http:// or https://")
    parser.add_argument("session_ids", metavar="SESSION_ID", nargs="+", help="session ids to probe")
    parser.add_argument("--timeout", type=_positive_float, default=10.0, help="seconds per step (default 10)")


def _run_status(args: argparse.Namespace) -> int:
    bad = _check_urls([args.url])
    if bad is not None:
        return bad
    return asyncio.run(_status(args.url, args.session_ids, args.timeout, Style(sys.stdout)))


# ---------------------------------------------------------------------- locate


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
    width = max(len(shown_url(url)) for url in urls)
    shown_id = printable(session_id)
    for found in results:
        result = style(printable(found.result), colours.get(found.result, "red"))
        detail = style(f"  ({printable(found.detail)})", "dim") if found.detail else ""
        out(f"{shown_url(found.url).ljust(width)}  {result}{detail}")
    active = [shown_url(found.url) for found in results if found.result == "active"]
    if active:
        out(style(f"session {shown_id} is active on: {', '.join(active)}", "bold"))
        return EXIT_OK
    out(style(f"session {shown_id} is not active on any endpoint", "bold"))
    return EXIT_FAILURE


def _add_locate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session_id", metavar="SESSION_ID", help="the session id to look for")
    parser.add_argument("urls", metavar="URL", nargs="+", help="agent endpoints (ws://, wss://, http://, https://)")
    parser.add_argument("--timeout", type=_positive_float, default=5.0, help="seconds per endpoint (default 5)")


def _run_locate(args: argparse.Namespace) -> int:
    bad = _check_urls(args.urls)
    if bad is not None:
        return bad
    return asyncio.run(_locate(args.session_id, args.urls, args.timeout, Style(sys.stdout)))


# ---------------------------------------------------------------------- sessions in a store


def _stored_records(path: Path) -> list[SessionRecord]:
    """The records of a SQLite session store, read-only: the store may be in use by a running client (which
    holds its lock), and listing it must neither wait for nor disturb that client."""
    if not path.is_file():
        raise UsageError(f"no session store at {path}")
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10.0)
    try:
        rows = db.execute("SELECT record FROM acp_sessions ORDER BY rowid").fetchall()
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"{path} is not an acp-client session store ({exc})") from None
    finally:
        db.close()
    records = []
    for (text,) in rows:
        try:
            records.append(SessionRecord.from_json(text))
        except (ValueError, TypeError):
            error(f"skipped a damaged record in {path}")
    return records


def _add_sessions(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--store", metavar="FILE", help="a SQLiteSessionStore file")
    where.add_argument(
        "--redis", metavar="URL", help="a RedisSessionStore server: redis://, rediss://, unix://, redis+cluster://"
    )
    parser.add_argument("--namespace", default="acp", help="the RedisSessionStore namespace (default acp)")
    parser.add_argument(
        "--lease-ttl", type=_positive_float, default=15.0, help="the workers' lease_ttl, for the lease age (default 15)"
    )
    parser.add_argument("--timeout", type=_positive_float, default=5.0, help="seconds to reach the server (default 5)")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], style: Style) -> None:
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    out("  ".join(style(h.ljust(w), "bold") for h, w in zip(header, widths, strict=True)).rstrip())
    for row in rows:
        out("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _without_password(text: str, url: str) -> str:
    """``text`` with the URL's password (if any) blanked: an error of the Redis client may quote it."""
    from urllib.parse import unquote, urlsplit

    try:
        password = urlsplit(url).password
    except ValueError:
        return text
    for secret in {password, unquote(password)} if password else ():
        text = text.replace(secret, "***")
    return text


async def _shared_sessions(url: str, namespace: str, timeout: float) -> list[StoredSession]:
    from acp_client.sessions import RedisSessionStore

    store = RedisSessionStore(
        url, namespace=namespace, retry_for=timeout, socket_timeout=timeout, release_on_close=False
    )
    try:
        return await store.describe()
    finally:
        await store.close()


def _run_shared_sessions(args: argparse.Namespace, style: Style) -> int:
    """List the sessions of a RedisSessionStore by owner, with lease age and state (read-only)."""
    url: str = args.redis
    try:
        found = asyncio.run(_shared_sessions(url, args.namespace, args.timeout))
    except UsageError as exc:  # the store's own URL check (one list of schemes, valkey:// included)
        error(f"bad Redis URL: {exc}")
        return EXIT_USAGE
    except StoreError as exc:
        error(f"{shown_url(url)}: {_without_password(str(exc), url)}")
        return EXIT_FAILURE
    if not found:
        out(f"no sessions in namespace {printable(args.namespace)!r} at {shown_url(url)}")
        return EXIT_OK
    rows = [
        tuple(
            printable(cell)  # ids, owners and records came from workers and agents: shown, never interpreted
            for cell in (
                s.owner or "(free)",
                s.session_id,
                "-" if s.expires_in is None else f"{max(0.0, args.lease_ttl - s.expires_in):.1f}s",
                "-" if s.expires_in is None else f"{s.expires_in:.1f}s",
                "-" if s.token is None else str(s.token),
                (s.record.last_state or "-") if s.record is not None else "(no record)",
                s.record.cwd if s.record is not None else "",
            )
        )
        for s in found
    ]
    _table(("owner", "session", "lease age", "expires in", "token", "state", "cwd"), rows, style)
    owners: dict[str, int] = {}
    for s in found:
        owners[s.owner or "(free)"] = owners.get(s.owner or "(free)", 0) + 1
    out(", ".join(f"{printable(owner)}: {count}" for owner, count in owners.items()))
    return EXIT_OK


def _run_sessions(args: argparse.Namespace) -> int:
    style = Style(sys.stdout)
    if args.redis is not None:
        return _run_shared_sessions(args, style)
    path = Path(args.store)
    records = _stored_records(path)
    if not records:
        out(f"no sessions in {printable(path)}")
        return EXIT_OK
    header = ("session", "protocol", "state", "created", "cwd", "title")
    rows = [
        tuple(
            printable(cell)  # a record's fields came from an agent: shown, never interpreted by the terminal
            for cell in (
                r.session_id,
                f"v{r.protocol_version}",
                r.last_state or "-",
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_at)),
                r.cwd,
                r.title or "",
            )
        )
        for r in records
    ]
    _table(header, rows, style)
    return EXIT_OK


# ---------------------------------------------------------------------- demo, reference agent, bridge


def _add_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--protocol", type=int, choices=(1, 2), default=2, help="protocol version (default 2)")
    parser.add_argument("--sessions", type=_session_count, default=3, help="sessions to open (2-50, default 3)")
    parser.add_argument(
        "--transport",
        choices=("websocket", "http"),
        default="websocket",
        help="the link to the embedded agent: WebSocket (default) or Streamable HTTP",
    )


def _run_demo(args: argparse.Namespace) -> int:
    from acp_client.cli._demo import run_demo  # imports the test kit: only for the demo

    return asyncio.run(run_demo(args.protocol, args.sessions, Style(sys.stdout), args.transport))


def _add_serve_reference(parser: argparse.ArgumentParser) -> None:
    from acp_client.testing.agent._serve import add_arguments  # the agent's own options, nothing heavy

    add_arguments(parser)


def _run_serve_reference(args: argparse.Namespace) -> int:
    from acp_client.testing.agent._serve import run

    return run(args)


def _add_bridge(parser: argparse.ArgumentParser) -> None:
    from acp_client.bridge import add_arguments

    add_arguments(parser)


def _run_bridge(args: argparse.Namespace) -> int:
    from acp_client.bridge import run_command

    return run_command(args)  # stdout carries JSON-RPC only; logs go to stderr or --log-file


def _add_wire_log(parser: argparse.ArgumentParser) -> None:
    from acp_client.cli._wire_log import add_arguments

    add_arguments(parser)


def _run_wire_log(args: argparse.Namespace) -> int:
    from acp_client.cli._wire_log import run

    return run(args)


# ---------------------------------------------------------------------- the command table


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: ``configure`` adds its arguments, ``run`` executes it and returns the exit code.

    ``own_logging``: the command configures logging itself (otherwise the library's warnings go to stderr).
    """

    name: str
    help: str
    description: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    own_logging: bool = False


#: Every subcommand, in ``--help`` order.
COMMANDS: list[Command] = [
    Command(
        "demo",
        "watch the reconnect manager recover sessions from the embedded reference agent",
        "Start the embedded reference agent, cut the link, restart the agent, forget a session, "
        "and show every state change and recovery decision.",
        _add_demo,
        _run_demo,
    ),
    Command(
        "status",
        "probe sessions with session/status (exit 1 if one is not found)",
        "Connect to an agent and ask session/status for each session id; exit 1 when any is unknown.",
        _add_status,
        _run_status,
    ),
    Command(
        "locate",
        "find which agent endpoints hold a session active",
        "Ask several agent endpoints concurrently whether they hold a session (a router's probe).",
        _add_locate,
        _run_locate,
    ),
    Command(
        "sessions",
        "list the sessions a SQLite or Redis session store tracks",
        "Read a SQLiteSessionStore file (read-only, even while a client uses it) and list its sessions; or, "
        "with --redis URL, list a RedisSessionStore's sessions by owner, with lease age and state (read-only: "
        "nothing is claimed or written).",
        _add_sessions,
        _run_sessions,
    ),
    Command(
        "serve-reference",
        "run the reference agent standalone",
        "Serve the reference ACP agent; prints its URL, serves until interrupted. With --state-dir its "
        "sessions survive a restart of the process.",
        _add_serve_reference,
        _run_serve_reference,
        own_logging=True,
    ),
    Command(
        "bridge",
        "be a stdio agent for an editor, forwarding to a remote agent across dropped links",
        "Speak ACP on stdin/stdout to an editor and forward to the remote agent at URL through the "
        "reconnect manager. Nothing but JSON-RPC is written to stdout. See examples/editor_bridge.md.",
        _add_bridge,
        _run_bridge,
        own_logging=True,
    ),
    Command(
        "wire-log",
        "print a wire log (ReconnectingClient(wire_log=...), bridge --wire-log) as a table",
        "Read a wire log and its rotated files (FILE.1, FILE.2 ...), oldest first, and print one row per frame "
        "(time, generation, direction, kind, method or id, size) and per lifecycle event, with each reconnect "
        "marked. A line cut short (a crash while writing) is skipped and counted.",
        _add_wire_log,
        _run_wire_log,
    ),
]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acp-client",
        description="Agent Client Protocol client tools: a reconnect demo, session probes, a reference agent.",
    )
    parser.add_argument("--version", action="version", version=f"acp-client {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.configure(sub.add_parser(command.name, help=command.help, description=command.description))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``acp-client`` console script; returns the exit code (argparse exits 2 itself)."""
    parser = _parser()
    args = parser.parse_args(argv)
    command = next((c for c in COMMANDS if c.name == args.command), None)
    if command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        if command.own_logging:
            return command.run(args)
        with _quiet_library_logs():
            return command.run(args)
    except KeyboardInterrupt:
        error("interrupted")
        return 130
    except UsageError as exc:
        error(str(exc))
        return EXIT_USAGE
    except TimeoutError as exc:
        error(str(exc) or "timed out")
        return EXIT_FAILURE
    except (ACPError, OSError) as exc:
        error(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILURE


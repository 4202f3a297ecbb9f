"""``acp-client bridge URL``: arguments, logging, stdout reservation, exit codes."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from acp_client._files import open_private
from acp_client.bridge._bridge import Bridge
from acp_client.bridge._editor import reserve_stdout
from acp_client.bridge._options import BridgeOptions, describe_url
from acp_client.client._connect import url_problem
from acp_client.client.wire_log import WireLog

__all__ = ["add_arguments", "run_command"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip() or any(c in name for c in " \t\r\n") or any(c in value for c in "\r\n"):
        raise argparse.ArgumentTypeError("a header is 'Name: value'")  # never echo it: it may be a token
    return name.strip(), value.strip()


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(value: str) -> str:
    """``value`` with every ``${NAME}`` replaced from the environment (``KeyError`` names a missing one)."""
    return _VARIABLE.sub(lambda match: os.environ[match.group(1)], value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``bridge`` subcommand's arguments."""
    parser.add_argument(
        "url", metavar="URL", help="the remote agent: ws://, wss://, or http://, https:// (Streamable HTTP)"
    )
    parser.add_argument("--store", metavar="FILE", help="keep sessions in this SQLite file across bridge restarts")
    parser.add_argument(
        "--header",
        metavar="'NAME: VALUE'",
        type=_header,
        action="append",
        default=[],
        help="add a header to every handshake/request (repeatable); ${NAME} in the value is read from the "
        "environment, so a token need not appear on the command line",
    )
    parser.add_argument("--log-file", metavar="F", help="write logs to this file instead of stderr")
    parser.add_argument(
        "--wire-log",
        metavar="FILE",
        help="write one JSON line per frame to and from the remote, and per reconnect, to FILE (0600, rotated at "
        "10 MiB, 3 backups; no payloads); read it with 'acp-client wire-log FILE'",
    )
    parser.add_argument(
        "--wire-log-payloads",
        action="store_true",
        help="with --wire-log: also write each frame's JSON, credentials redacted (tokens, header values, "
        "URL passwords, MCP server env values)",
    )
    parser.add_argument(
        "--log-level", choices=sorted(_LEVELS), help="log level (default: warning on stderr, info in --log-file)"
    )
    parser.add_argument(
        "--outage-timeout",
        type=_seconds,
        default=30.0,
        metavar="S",
        help="how long an editor request waits for a dropped link to come back (default 30)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=_seconds,
        default=5.0,
        metavar="S",
        help="answer the editor's initialize with an error naming the cause, and exit 1, when the remote "
        "cannot be reached within S seconds at start (default 5)",
    )
    parser.add_argument(
        "--max-backoff",
        type=_seconds,
        default=5.0,
        metavar="S",
        help="longest wait between reconnect attempts (default 5)",
    )
    parser.add_argument(
        "--ping-interval", type=_seconds, default=10.0, metavar="S", help="liveness ping interval (default 10)"
    )
    parser.add_argument(
        "--ping-timeout", type=_seconds, default=10.0, metavar="S", help="liveness ping timeout (default 10)"
    )


def _error(message: str) -> None:
    sys.stderr.write(f"acp-client bridge: error: {message}\n")
    sys.stderr.flush()


def _check_url(url: str) -> str | None:
    problem = url_problem(url)
    return None if problem is None else f"bad URL {describe_url(url)}: {problem}"


@contextlib.contextmanager
def _logging(log_file: str | None, level_name: str | None) -> Iterator[None]:
    """Route the library's (stdlib) logging to stderr or ``log_file``; restored afterwards."""
    level = _LEVELS[level_name or ("info" if log_file else "warning")]
    stream: TextIO = sys.stderr
    if log_file:  # 0600 and no symbolic link followed: the log may name sessions, paths and servers
        fd = open_private(Path(log_file), os.O_WRONLY | os.O_APPEND)
        stream = open(fd, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed in the finally below
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    handler.setLevel(level)
    root = logging.getLogger()
    library = logging.getLogger("acp_client")
    previous = library.level
    root.addHandler(handler)
    library.setLevel(level)
    try:
        yield
    finally:
        root.removeHandler(handler)
        library.setLevel(previous)
        if log_file:
            stream.close()


async def _serve(bridge: Bridge, out_fd: int) -> int:
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            loop.add_signal_handler(sig, bridge.stop)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no such signal
            pass
    try:
        return await bridge.run(out_fd)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def run_command(args: argparse.Namespace) -> int:
    """Run the bridge for parsed ``args``; returns the exit code (0 editor left, 1 remote unreachable or
    I/O failure, 2 usage error)."""
    problem = _check_url(args.url)
    if problem is not None:
        _error(problem)
        return EXIT_USAGE
    try:
        headers = tuple((name, _expand(value)) for name, value in args.header)
    except KeyError as exc:
        _error(f"--header refers to ${{{exc.args[0]}}}, which is not set in the environment")
        return EXIT_USAGE
    options = BridgeOptions(
        url=args.url,
        headers=headers,
        store=args.store,
        outage_timeout=args.outage_timeout,
        connect_timeout=args.connect_timeout,
        ping_interval=args.ping_interval,
        ping_timeout=args.ping_timeout,
        max_backoff=args.max_backoff,
        wire_log=WireLog(args.wire_log, payloads=args.wire_log_payloads) if args.wire_log else None,
    )
    if args.wire_log_payloads and not args.wire_log:
        _error("--wire-log-payloads needs --wire-log FILE")
        return EXIT_USAGE
    for flag, path in (("--log-file", args.log_file), ("--wire-log", args.wire_log)):
        if path and os.path.islink(path):
            _error(f"{flag} {path} is a symbolic link: give the file's own path (links are not followed)")
            return EXIT_USAGE
    bridge = Bridge(options)
    try:
        with _logging(args.log_file, args.log_level), reserve_stdout() as out_fd:
            code = asyncio.run(_serve(bridge, out_fd))
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except ValueError as exc:  # stdin/stdout are regular files: asyncio cannot serve them
        _error(f"stdin and stdout must be pipes or a terminal ({exc})")
        return EXIT_USAGE
    except OSError as exc:
        _error(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILURE
    if bridge.fatal is not None:
        _error(bridge.fatal)
    return code

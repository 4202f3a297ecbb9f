"""Serving the reference agent standalone: its command-line options, :func:`serve_forever` and :func:`main`.

``python -m acp_client.testing.reference_agent`` and ``acp-client serve-reference`` share
:func:`add_arguments` and :func:`run`, so both accept the same options. Importing this module is cheap
(the agent itself is imported when serving starts).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from acp_client.testing.agent._resumable import Resumable

__all__ = ["add_arguments", "main", "run", "serve_forever"]

#: Protocol versions the reference agent speaks.
_VERSIONS = (1, 2)


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the reference agent's options to ``parser`` (its own, or the CLI's ``serve-reference``)."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="TCP port (default 0: any free port)")
    parser.add_argument("--protocol", type=int, choices=_VERSIONS, default=2, help="latest version (default 2)")
    parser.add_argument("--also-v1", action="store_true", help="also answer protocol version 1 when offered")
    parser.add_argument("--stdio", action="store_true", help="serve one connection on stdin/stdout instead")
    parser.add_argument("--require-auth", action="store_true", help="session methods need authentication first")
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        default=None,
        help="keep sessions in DIR so that a restarted agent process restores them (inactive until loaded)",
    )
    parser.add_argument(
        "--resumable",
        action="store_true",
        help="serve resumable WebSocket streams (durable transport draft, PR 2208) and advertise transport.resumable",
    )
    parser.add_argument(
        "--retention-seconds",
        type=float,
        default=300.0,
        help="with --resumable: how long a dropped connection and its messages are kept (default 300)",
    )
    parser.add_argument(
        "--refuse-resume", action="store_true", help="with --resumable: advertise it but refuse every resume"
    )
    parser.add_argument("--verbose", action="store_true", help="debug logs on stderr")
    return parser


def _parser() -> argparse.ArgumentParser:
    return add_arguments(
        argparse.ArgumentParser(
            prog="python -m acp_client.testing.reference_agent", description="Serve the ACP reference agent."
        )
    )


async def serve_forever(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    protocol_version: int = 2,
    supported_versions: Sequence[int] | None = None,
    require_auth: bool = False,
    stdio: bool = False,
    state_dir: str | None = None,
    on_ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    resumable: Resumable | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGINT/SIGTERM when ``stop`` is ``None``); calls ``on_ready(url)`` once
    listening (``"stdio"`` in stdio mode). With ``state_dir`` the sessions survive the process (see
    :mod:`acp_client.testing.agent._state`); ``resumable`` serves resumable streams (``ReferenceAgent``'s
    option of that name)."""
    from acp_client.testing.agent._channel import stdio_line_limit
    from acp_client.testing.agent._state import AgentStateDir
    from acp_client.testing.reference_agent import ReferenceAgent

    loop = asyncio.get_running_loop()
    stop_event = stop if stop is not None else asyncio.Event()
    installed: list[signal.Signals] = []
    if stop is None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop_event.set)
            installed.append(sig)
    state = AgentStateDir(state_dir) if state_dir is not None else None
    try:
        async with ReferenceAgent(
            protocol_version,
            host=host,
            port=port,
            supported_versions=supported_versions,
            require_auth=require_auth,
            listen=not stdio,
            resumable=resumable,
        ) as agent:
            waiters: list[asyncio.Task[Any]] = [loop.create_task(stop_event.wait(), name="acp-ref-stop")]
            if state is not None:
                state.restore(agent)
                waiters.append(loop.create_task(state.keep_saved(agent), name="acp-ref-state"))
            try:
                if stdio:
                    reader = asyncio.StreamReader(limit=stdio_line_limit())
                    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
                    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout)
                    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
                    waiters.append(loop.create_task(agent.serve_stream(reader, writer), name="acp-ref-stdio"))
                    if on_ready is not None:
                        on_ready("stdio")
                elif on_ready is not None:
                    on_ready(agent.url)
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in waiters:
                    task.cancel()
                await asyncio.wait(waiters)
                if state is not None:
                    state.save(agent)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def run(args: argparse.Namespace) -> int:
    """Serve with parsed options (from :func:`add_arguments`); the URL is the only line written to stdout.

    Logs (warnings, or everything with ``--verbose``) go to stderr. Returns the exit code.
    """
    import structlog

    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG if args.verbose else logging.WARNING),
    )

    def ready(url: str) -> None:
        if url != "stdio":
            sys.stdout.write(url + "\n")
            sys.stdout.flush()

    versions = sorted({1, args.protocol}) if args.also_v1 else [args.protocol]
    try:
        asyncio.run(
            serve_forever(
                host=args.host,
                port=args.port,
                protocol_version=args.protocol,
                supported_versions=versions,
                require_auth=args.require_auth,
                stdio=args.stdio,
                state_dir=args.state_dir,
                on_ready=ready,
                resumable=_resumable(args),
            )
        )
    except KeyboardInterrupt:
        return 130
    return 0


def _resumable(args: argparse.Namespace) -> Resumable | None:
    """The ``Resumable`` the options ask for (``None`` without ``--resumable``); a bad value exits with usage."""
    if not args.resumable:
        return None
    try:
        return Resumable(retention_seconds=args.retention_seconds, refuse=args.refuse_resume)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry of ``python -m acp_client.testing.reference_agent``; returns the exit code."""
    return run(_parser().parse_args(argv))

"""The reference agent in a child process, with a line-based control channel on stdin (benchmarks only).

``python -m acp_client.testing.reference_agent`` serves the agent but offers no way to restart or stall it
from outside, and the benchmarks need both while a client is connected. This wrapper serves the same
:class:`~acp_client.testing.ReferenceAgent` on 127.0.0.1 (any free port), prints its URL as the first line
on stdout, then answers one command per stdin line with one ``ok …`` line:

=================  ===================================================================================
``restart``        ``agent.restart(keep_sessions=True)``: every connection drops (close 1012), every
                   session becomes *inactive*
``stall``          ``agent.stall()``: sockets stay open, nothing is read or answered (no pongs)
``unstall``        ``agent.unstall()``
``drop``           ``agent.drop_all_connections()``
``sessions``       ``ok <number of sessions the agent knows>``
``connections``    ``ok <number of live connections>``
``quit``           stop serving and exit (end of stdin does the same)
=================  ===================================================================================

``--resumable`` serves the durable transport draft (``ReferenceAgent(resumable=Resumable(...))``, 60 s
retention), ``--refuse`` with its switch to refuse every resume. Logging is configured to drop everything
below WARNING, as in the benchmark scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import structlog

from acp_client.testing import ReferenceAgent, Resumable


def _reply(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


async def _serve(protocol: int, also_v1: bool, resumable: Resumable | None) -> None:
    versions = sorted({1, protocol}) if also_v1 else [protocol]
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with ReferenceAgent(
        protocol, host="127.0.0.1", port=0, supported_versions=versions, resumable=resumable
    ) as agent:
        _reply(agent.url)
        while True:
            line = await reader.readline()
            if not line:
                return
            command = line.decode().strip()
            if command == "restart":
                await agent.restart(keep_sessions=True)
                _reply("ok")
            elif command == "stall":
                agent.stall()
                _reply("ok")
            elif command == "unstall":
                agent.unstall()
                _reply("ok")
            elif command == "drop":
                _reply(f"ok {await agent.drop_all_connections()}")
            elif command == "sessions":
                _reply(f"ok {len(agent.sessions)}")
            elif command == "connections":
                _reply(f"ok {agent.connections}")
            elif command == "quit":
                _reply("ok")
                return
            else:
                _reply(f"error unknown command {command!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", type=int, choices=(1, 2), default=2)
    parser.add_argument("--also-v1", action="store_true")
    parser.add_argument("--resumable", action="store_true", help="serve resumable streams (PR 2208)")
    parser.add_argument("--refuse", action="store_true", help="with --resumable: refuse every resume")
    args = parser.parse_args()
    resumable = Resumable(retention_seconds=60.0, refuse=args.refuse) if args.resumable else None
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    asyncio.run(_serve(args.protocol, args.also_v1, resumable))
    return 0


if __name__ == "__main__":
    sys.exit(main())

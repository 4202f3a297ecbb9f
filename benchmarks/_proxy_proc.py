"""A :class:`~acp_client.testing.FaultProxy` delaying every chunk, in a child process (benchmarks only).

Run as ``python benchmarks/_proxy_proc.py UPSTREAM_PORT DELAY_SECONDS``: it forwards 127.0.0.1 (any free
port) to ``127.0.0.1:UPSTREAM_PORT`` with ``ProxyMode.delay(DELAY_SECONDS)`` both ways, prints its
``ws://`` URL as the first line on stdout, and stops at the end of stdin. A line ``delay SECONDS`` on stdin
changes the delay of the live links and of new ones (``0``: pass-through) and is answered with ``ok``: the
network path changed under a connected client.

Why a process of its own: a proxy in the client's process runs on the client's event loop, so every chunk
it forwards waits while the client computes, and the link's latency grows with the client's CPU load. A
real network delays packets without taking the client's CPU; here the proxy is outside the client and
outside the agent, and every method (the raw floor included) goes through the same one.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import structlog

from acp_client.testing import FaultProxy, ProxyMode


async def _serve(upstream_port: int, delay: float) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with FaultProxy("127.0.0.1", upstream_port) as proxy:
        proxy.set_mode(ProxyMode.delay(delay), "both")
        sys.stdout.write(proxy.url() + "\n")
        sys.stdout.flush()
        while line := await reader.readline():
            words = line.decode().split()
            if len(words) == 2 and words[0] == "delay":
                seconds = float(words[1])
                proxy.set_mode(ProxyMode.delay(seconds) if seconds > 0 else "pass", "both")
                sys.stdout.write("ok\n")
            else:
                sys.stdout.write(f"error unknown command {line.decode().strip()!r}\n")
            sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("upstream_port", type=int)
    parser.add_argument("delay", type=float)
    args = parser.parse_args()
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    asyncio.run(_serve(args.upstream_port, args.delay))


if __name__ == "__main__":
    main()

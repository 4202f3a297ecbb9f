"""The official-SDK interop agent (``official_agent.py``) served by hypercorn, for Streamable HTTP over h2c.

``python tests/interop/official_http_agent.py`` binds 127.0.0.1 (any free port), prints ``READY <port>`` and
serves the SDK's ASGI app (``acp.http.asgi.create_asgi_app``) with hypercorn, which speaks HTTP/1.1 and
HTTP/2 cleartext (prior knowledge) on the same socket, until stdin closes. With ``--certfile``/``--keyfile``
it serves TLS instead, offering HTTP/2 and HTTP/1.1 by ALPN. A child process for the same
reasons as ``official_agent.py`` (the SDK's warnings under ``-W error``).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from pathlib import Path

from hypercorn.asyncio import serve
from hypercorn.config import Config

sys.path.insert(0, str(Path(__file__).parent))
from official_agent import build_app  # a sibling script, not a package module


async def _stdin_closed() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while await reader.read(65536):
            pass
    finally:
        transport.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--certfile", help="serve TLS (HTTP/2 by ALPN) with this certificate chain (PEM)")
    parser.add_argument("--keyfile", help="the certificate's private key (PEM)")
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    config.loglevel = "WARNING"
    config.accesslog = None
    config.graceful_timeout = 1.0
    if args.certfile:
        config.certfile = args.certfile
        config.keyfile = args.keyfile
    # the socket is listening already: a client connecting now waits in the backlog until hypercorn accepts
    sys.stdout.write(f"READY {sock.getsockname()[1]}\n")
    sys.stdout.flush()
    # hypercorn adopts the descriptor and closes it on shutdown
    await serve(build_app(), config, shutdown_trigger=_stdin_closed)  # type: ignore[arg-type]


if __name__ == "__main__":
    asyncio.run(main())

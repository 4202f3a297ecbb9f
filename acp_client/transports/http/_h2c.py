"""Telling an HTTP/2-cleartext-only server (h2c with prior knowledge) from a broken one.

With default options a ``http://`` URL is spoken to in HTTP/1.1 (HTTP/2 is only offered by ALPN, over TLS).
A server that speaks nothing but h2c answers an HTTP/1.1 request with HTTP/2 frames (a SETTINGS and a
GOAWAY), which the HTTP/1.1 parser reports as ``RemoteProtocolError: illegal request line``: retrying cannot
help, and the message does not say what would. When the ``initialize`` POST fails that way, the transport
asks the server once more, in HTTP/2: a cleartext connection that sends the client preface and an empty
SETTINGS frame, and reads the first frame header of the answer. A server whose first frame is a SETTINGS
frame speaks h2c, so the caller gets :class:`~acp_client.exceptions.H2COnlyServer` (fatal, naming
``http2="prior_knowledge"``) instead of an endless retry.
"""

from __future__ import annotations

import asyncio
import contextlib

#: The HTTP/2 client connection preface (RFC 9113 §3.4) followed by an empty SETTINGS frame.
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_SETTINGS = 0x4
#: The largest SETTINGS payload a sane server sends first (RFC 9113 defines six 6-byte settings).
_MAX_SETTINGS_PAYLOAD = 6 * 64


async def speaks_h2c(host: str, port: int, timeout: float) -> bool:
    """Whether the server at ``host:port`` answers the HTTP/2 preface with a SETTINGS frame (within
    ``timeout`` seconds). Any failure (refused, closed, timed out, another answer) is ``False``."""
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(_PREFACE)
            await writer.drain()
            header = await reader.readexactly(9)
    except (OSError, EOFError, TimeoutError, asyncio.IncompleteReadError):
        return False
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    length = int.from_bytes(header[:3], "big")
    stream_id = int.from_bytes(header[5:9], "big") & 0x7FFFFFFF
    return header[3] == _SETTINGS and stream_id == 0 and length % 6 == 0 and length <= _MAX_SETTINGS_PAYLOAD

"""What every transport provides: an ordered, bidirectional stream of text frames.

Transports know nothing of JSON-RPC. They translate their library's errors into :mod:`acp_client.exceptions`
exactly once, here at the seam: ``send`` and ``recv`` raise :class:`~acp_client.exceptions.ConnectionLost`
when the link is gone, and opening raises :class:`~acp_client.exceptions.ConnectError` (or a subclass).

Every transport in this package also exposes ``stats``, a live :class:`TransportStats`: counters that let
tests and operators see what was moved and what was discarded (never silently).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from acp_client.schema.transport import ResumableTransport

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "StreamResumable", "Transport", "TransportStats"]

#: Default limit on one inbound frame (WebSocket message or stdio line): 16 MiB.
DEFAULT_MAX_FRAME_BYTES = 16 * 2**20


@runtime_checkable
class Transport(Protocol):
    """An open link that moves text frames (one JSON-RPC message or batch per frame)."""

    async def send(self, frame: str) -> None:
        """Write one text frame. Raises ``ConnectionLost`` if the link is gone."""
        ...

    async def recv(self) -> str:
        """Wait for the next text frame. Raises ``ConnectionLost`` once the link is closed or dead.

        Binary frames and other non-text input are discarded (and counted) by the transport itself.
        Only one task may wait in ``recv`` at a time; cancelling a ``recv`` is safe (no frame is lost).
        """
        ...

    async def close(self) -> None:
        """Close the link. Idempotent, bounded in time, safe to call from any task."""
        ...

    @property
    def closed(self) -> bool:
        """``True`` once the link is closed or known dead."""
        ...

    @property
    def description(self) -> str:
        """A short human description for logs (``ws://127.0.0.1:8765/acp``, ``stdio:my-agent``); no secrets."""
        ...


#: A frame its transport already decoded (it had to look inside to route it): the text and the JSON value
#: :func:`acp_client.jsonrpc.decode` gave for it. The reader takes the value instead of decoding it again.
Decoded = tuple[str, object]


@runtime_checkable
class BatchTransport(Protocol):
    """A transport that hands over, in one call, every frame it holds (some of them :data:`Decoded`): the
    connection's reader then takes a read's worth of frames per wake-up instead of one ``recv`` each."""

    async def recv_batch(self) -> list[str | Decoded]:
        """Wait until at least one frame is there and return all of them, in order. Raises
        ``ConnectionLost`` (as ``recv`` does) once the link is gone and every frame before was taken."""
        ...


@runtime_checkable
class StreamResumable(Protocol):
    """A transport that can resume its stream from a cursor after a drop (the durable transport draft, PR
    2208), once told the agent offers it. :class:`~acp_client.ACPClient` calls :meth:`watch_cursors` before
    it sends ``initialize`` (so no message after the answer goes unnoted) and :meth:`enable_stream_resume`
    with what the answer advertised."""

    def watch_cursors(self) -> None:
        """Note the cursors of inbound messages until :meth:`enable_stream_resume` says whether to go on."""
        ...

    def enable_stream_resume(self, capability: ResumableTransport | None) -> None:
        """Resume after a drop from now on (``capability``: what ``transport.resumable`` advertised), or, with
        ``None``, stop noting cursors: the agent does not offer it."""
        ...


@dataclass
class TransportStats:
    """Live counters of one transport. Every frame that is not delivered is counted in one of them.

    ``frames_in``/``frames_out`` count text frames delivered by ``recv`` and written by ``send``;
    ``bytes_in``/``bytes_out`` their UTF-8 size. ``binary_discarded`` counts WebSocket binary frames (the
    ACP WebSocket transport ignores them); ``empty_discarded`` counts blank stdio lines.
    """

    frames_in: int = 0
    frames_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    binary_discarded: int = 0
    empty_discarded: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain ``dict`` (for logs and metrics)."""
        return asdict(self)

"""What every transport provides: an ordered, bidirectional stream of text frames.

Transports know nothing of JSON-RPC. They translate their library's errors into :mod:`acp_client.exceptions`
exactly once, here at the seam: ``send`` and ``recv`` raise :class:`~acp_client.exceptions.ConnectionLost`
when the link is gone, and opening raises :class:`~acp_client.exceptions.ConnectError` (or a subclass).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Transport"]


@runtime_checkable
class Transport(Protocol):
    """An open link that moves text frames (one JSON-RPC message or batch per frame)."""

    async def send(self, frame: str) -> None:
        """Write one text frame. Raises ``ConnectionLost`` if the link is gone."""
        ...

    async def recv(self) -> str:
        """Wait for the next text frame. Raises ``ConnectionLost`` once the link is closed or dead.

        Binary frames and other non-text input are discarded (and counted) by the transport itself.
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

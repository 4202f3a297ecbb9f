"""Local server processes a test starts and stops (:class:`ManagedServer`): Redis/Valkey, a Redis Cluster."""

from __future__ import annotations

import asyncio
import socket
from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self

__all__ = ["ManagedServer", "free_port"]


def free_port() -> int:
    """A port free on 127.0.0.1 when asked. Another process may take it before the caller binds it: a server
    started on it must fail visibly then, and its caller pick again."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ManagedServer(ABC):
    """A server a test runs for a while: :meth:`start` and :meth:`stop`, or a sync or async context manager
    around them (the async one starts and stops it in a worker thread, so the event loop keeps running)."""

    @abstractmethod
    def start(self) -> None:
        """Start the server; returns once it serves."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the server and remove what it left on disk."""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

"""What the reference agent's ACP endpoint (:mod:`._agent_http`) and its HTTP/1.1 and HTTP/2 servers
(:mod:`._agent_http1`, :mod:`._agent_h2`) exchange: a parsed request and the writer of its response."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


class _Gone(Exception):
    """The client went away while a response was being written."""


@dataclass
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class _Responder:
    """Writes one response (HTTP/1.1 or HTTP/2); ``data`` raises :class:`_Gone` once the client left."""

    async def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        raise NotImplementedError

    async def data(self, chunk: bytes) -> None:
        raise NotImplementedError

    async def end(self) -> None:
        raise NotImplementedError

    @property
    def gone(self) -> asyncio.Future[None]:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

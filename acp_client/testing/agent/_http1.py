"""The reference agent's HTTP/1.1 server (h11): keep-alive, requests served one after another, event
streams as chunked bodies."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import h11

from acp_client.testing.agent._http_wire import _Gone, _Request, _Responder

if TYPE_CHECKING:
    from acp_client.testing.agent._http import HttpEndpoint
    from acp_client.testing.agent._sniff import _DualConnection


class _H11Responder(_Responder):
    def __init__(self, server: _H11Server) -> None:
        self.server = server
        self._started = False

    @property
    def gone(self) -> asyncio.Future[None]:
        return self.server.lost

    async def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        self.server.send(h11.Response(status_code=status, headers=headers, reason=b""))
        self._started = True
        await self.server.drain()

    async def data(self, chunk: bytes) -> None:
        if self.server.lost.done():
            raise _Gone
        self.server.send(h11.Data(data=chunk))
        await self.server.drain()

    async def end(self) -> None:
        if self.server.lost.done():
            raise _Gone
        self.server.send(h11.EndOfMessage())
        await self.server.drain()

    def abort(self) -> None:
        self.server.conn_owner.abort_tcp()


class _H11Server:
    """HTTP/1.1 keep-alive server over one TCP connection (requests served one after another)."""

    def __init__(self, owner: _DualConnection, endpoint: HttpEndpoint) -> None:
        self.conn_owner = owner
        self.endpoint = endpoint
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=16 * 1024 * 1024)
        self.events: asyncio.Queue[Any] = asyncio.Queue()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.done = asyncio.Event()

    def start(self) -> None:
        pass

    async def serve(self) -> None:
        """Serve requests until the connection ends (runs in the connection's own handler task)."""
        await self._run()

    def data_received(self, data: bytes) -> None:
        self.h11.receive_data(data)
        self._pull()

    def eof_received(self) -> None:
        with contextlib.suppress(h11.RemoteProtocolError):
            self.h11.receive_data(b"")
        self._pull()

    def _pull(self) -> None:
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self.events.put_nowait(exc)
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            self.events.put_nowait(event)
            if isinstance(event, h11.ConnectionClosed):
                return

    def connection_lost(self) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        self.events.put_nowait(h11.ConnectionClosed())

    def send(self, event: Any) -> None:
        data = self.h11.send(event)
        if data:
            self.conn_owner.write(data)

    async def drain(self) -> None:
        if self.lost.done():
            raise _Gone
        try:
            await self.conn_owner.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise _Gone from exc

    async def _run(self) -> None:
        try:
            while True:
                event = await self.events.get()
                if isinstance(event, h11.RemoteProtocolError):
                    with contextlib.suppress(h11.LocalProtocolError):
                        self.send(h11.Response(status_code=400, headers=[("content-length", "0")]))
                    return
                if isinstance(event, h11.ConnectionClosed):
                    return
                if not isinstance(event, h11.Request):
                    continue
                body = bytearray()
                while True:
                    part = await self.events.get()
                    if isinstance(part, h11.Data):
                        body.extend(part.data)
                    elif isinstance(part, h11.EndOfMessage):
                        break
                    else:
                        return
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
                request = _Request(event.method.decode(), event.target.decode("latin-1"), headers, bytes(body))
                try:
                    await self.endpoint.handle(request, _H11Responder(self), "HTTP/1.1")
                except _Gone:
                    return
                if self.h11.our_state is h11.MUST_CLOSE or self.h11.their_state is h11.MUST_CLOSE:
                    return
                try:
                    self.h11.start_next_cycle()
                except h11.LocalProtocolError:
                    return
                self._pull()
        finally:
            self.done.set()
            if not self.conn_owner.transport.is_closing():
                self.conn_owner.transport.close()

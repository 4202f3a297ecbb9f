"""The reference agent's HTTP/2 cleartext server (h2, prior knowledge): each request in its own task, and
the SETTINGS it announces under the endpoint's control (``h2_max_concurrent_streams``)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from hyperframe.frame import SettingsFrame

from acp_client.testing.agent._http_wire import _Gone, _Request, _Responder

if TYPE_CHECKING:
    from acp_client.testing.agent._http import HttpEndpoint
    from acp_client.testing.agent._sniff import _DualConnection


class _H2Stream(_Responder):
    def __init__(self, server: _H2Server, stream_id: int, headers: dict[str, str]) -> None:
        self.server = server
        self.stream_id = stream_id
        self.headers = headers
        self.body = bytearray()
        self._gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.window = asyncio.Event()

    @property
    def gone(self) -> asyncio.Future[None]:
        return self._gone

    def mark_gone(self) -> None:
        if not self._gone.done():
            self._gone.set_result(None)
        self.window.set()

    async def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        if self._gone.done():
            raise _Gone
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.server.h2.send_headers(self.stream_id, [(":status", str(status)), *headers])
        self.server.flush()
        await self.server.drain()

    async def data(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            if self._gone.done():
                raise _Gone
            try:
                window = self.server.h2.local_flow_control_window(self.stream_id)
            except h2.exceptions.ProtocolError:
                raise _Gone from None
            size = min(window, self.server.h2.max_outbound_frame_size, len(view))
            if size <= 0:
                self.window.clear()
                await self.window.wait()
                continue
            try:
                self.server.h2.send_data(self.stream_id, bytes(view[:size]))
            except h2.exceptions.ProtocolError:
                raise _Gone from None
            view = view[size:]
            self.server.flush()
            await self.server.drain()

    async def end(self) -> None:
        if self._gone.done():
            raise _Gone
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.server.h2.end_stream(self.stream_id)
        self.server.flush()

    def abort(self) -> None:
        self.server.conn_owner.abort_tcp()


class _H2Server:
    """HTTP/2 cleartext (prior knowledge) over one TCP connection; each request in its own task."""

    def __init__(self, owner: _DualConnection, endpoint: HttpEndpoint) -> None:
        self.conn_owner = owner
        self.endpoint = endpoint
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="latin-1"))
        self.streams: dict[int, _H2Stream] = {}
        self.done = asyncio.Event()

    def start(self) -> None:
        self.h2.initiate_connection()
        self.h2.data_to_send()  # replaced: announce only the settings we mean
        settings = dict(self.h2.local_settings)
        limit = self.endpoint.h2_max_concurrent_streams
        code = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS
        if limit is None:
            settings.pop(code, None)
        else:
            settings[code] = limit
        self.conn_owner.write(SettingsFrame(0, settings={int(k): v for k, v in settings.items()}).serialize())

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.conn_owner.write(data)

    async def drain(self) -> None:
        try:
            await self.conn_owner.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise _Gone from exc

    def data_received(self, data: bytes) -> None:
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.flush()
            self.conn_owner.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                headers = {str(k).lower(): str(v) for k, v in event.headers}
                self.streams[event.stream_id] = _H2Stream(self, event.stream_id, headers)
            elif isinstance(event, h2.events.DataReceived):
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    stream.body.extend(event.data)
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    self.endpoint.spawn(self._serve(stream), f"acp-ref-h2-{event.stream_id}")
            elif isinstance(event, h2.events.StreamReset):
                stream = self.streams.pop(event.stream_id, None)
                if stream is not None:
                    stream.mark_gone()
            elif isinstance(event, h2.events.WindowUpdated):
                targets = self.streams.values() if event.stream_id == 0 else [self.streams.get(event.stream_id)]
                for target in targets:
                    if target is not None:
                        target.window.set()
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.conn_owner.transport.close()
        self.flush()

    async def _serve(self, stream: _H2Stream) -> None:
        h = stream.headers
        request = _Request(h.get(":method", ""), h.get(":path", ""), h, bytes(stream.body))
        try:
            await self.endpoint.handle(request, stream, "HTTP/2")
        except _Gone:
            pass
        finally:
            self.streams.pop(stream.stream_id, None)

    def eof_received(self) -> None:
        pass

    async def serve(self) -> None:
        """Wait until the connection ends (each request runs in its own task)."""
        await self.done.wait()

    def connection_lost(self) -> None:
        for stream in list(self.streams.values()):
            stream.mark_gone()
        self.done.set()

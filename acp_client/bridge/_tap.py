"""A read-only tap on the remote link: raw results the typed client does not keep, and update capture.

The typed :class:`~acp_client.ReconnectingClient` returns a :class:`~acp_client.Session` from
``new_session`` / ``load_session`` / ``resume_session`` and drops the rest of the agent's answer (``modes``,
``configOptions``, ``_meta`` ...), which an editor needs. The bridge therefore opens each remote transport
itself (the client accepts a zero-argument coroutine function as its target) and wraps it in
:class:`TappedTransport`, which watches those three requests go out and keeps their raw results by session
id. Frames pass through unchanged; only frames that can matter are parsed.

It also captures the ``session/update`` notifications of a session the editor attaches that the client did
not know yet: its :class:`~acp_client.Session` handle is created inside the call, so no subscription can
exist before the replay arrives (see ``_forward.SessionPipes.adopt``).
"""

from __future__ import annotations

import collections
from typing import Any

from acp_client.jsonrpc import decode
from acp_client.transports import Transport

__all__ = ["RawTap", "TappedTransport"]

_WATCHED = ("session/new", "session/load", "session/resume")
_KEEP_RESULTS = 256
_MISSING = object()


class RawTap:
    """Shared by every connection of one bridge: raw results by ``(method, session id)``, and captures."""

    def __init__(self) -> None:
        self._results: collections.OrderedDict[tuple[str, str], Any] = collections.OrderedDict()
        self._captures: dict[str, list[dict[str, Any]]] = {}

    def wrap(self, transport: Transport) -> TappedTransport:
        """``transport`` with this tap on it."""
        return TappedTransport(transport, self)

    def take(self, method: str, session_id: str, default: Any = None) -> Any:
        """The raw result of the last ``method`` for ``session_id`` (removed), or ``default``."""
        value = self._results.pop((method, session_id), _MISSING)
        return default if value is _MISSING else value

    def capture(self, session_id: str) -> None:
        """Start keeping every ``session/update`` params object for ``session_id``."""
        self._captures.setdefault(session_id, [])

    def release(self, session_id: str) -> list[dict[str, Any]]:
        """Stop capturing for ``session_id``; returns what was captured (in arrival order)."""
        return self._captures.pop(session_id, [])

    @property
    def capturing(self) -> bool:
        """``True`` while some session's updates are being captured."""
        return bool(self._captures)

    def captured(self, session_id: str, params: dict[str, Any]) -> None:
        """A ``session/update`` of ``session_id`` went by: keep it if that session is being captured."""
        captures = self._captures.get(session_id)
        if captures is not None:
            captures.append(params)

    def keep(self, method: str, session_id: str, result: Any) -> None:
        """Keep the raw ``result`` of ``method`` for ``session_id`` (the latest few hundred are kept)."""
        self._results[(method, session_id)] = result
        while len(self._results) > _KEEP_RESULTS:
            self._results.popitem(last=False)


def _messages(frame: str) -> list[Any]:
    try:
        data = decode(frame)  # the core's reader: a frame nested too deep is a ValueError, not a crash
    except ValueError:
        return []
    return data if isinstance(data, list) else [data]


class TappedTransport:
    """A :class:`~acp_client.transports.Transport` that lets frames through and shows some to a :class:`RawTap`."""

    def __init__(self, inner: Transport, tap: RawTap) -> None:
        self._inner = inner
        self._tap = tap
        #: outstanding watched requests on this link: id -> (method, session id from the params)
        self._watched: dict[Any, tuple[str, str | None]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # ping, stats, latency ... of the real transport

    def __repr__(self) -> str:
        return f"<TappedTransport {self._inner!r}>"

    @property
    def closed(self) -> bool:
        """See :class:`~acp_client.transports.Transport`."""
        return self._inner.closed

    @property
    def description(self) -> str:
        """See :class:`~acp_client.transports.Transport`."""
        return self._inner.description

    async def send(self, frame: str) -> None:
        """See :class:`~acp_client.transports.Transport`."""
        if any(method in frame for method in _WATCHED):
            for message in _messages(frame):
                id_ = message.get("id") if isinstance(message, dict) else None
                if isinstance(message, dict) and message.get("method") in _WATCHED and isinstance(id_, int | str):
                    params = message.get("params")
                    sid = params.get("sessionId") if isinstance(params, dict) else None
                    self._watched[id_] = (message["method"], sid if isinstance(sid, str) else None)
        await self._inner.send(frame)

    async def recv(self) -> str:
        """See :class:`~acp_client.transports.Transport`."""
        frame = await self._inner.recv()
        answers = bool(self._watched) and ('"result"' in frame or '"error"' in frame)
        updates = self._tap.capturing and "session/update" in frame
        if answers or updates:
            for message in _messages(frame):
                if isinstance(message, dict):
                    self._observe(message)
        return frame

    def _observe(self, message: dict[str, Any]) -> None:
        if message.get("method") == "session/update":
            params = message.get("params")
            sid = params.get("sessionId") if isinstance(params, dict) else None
            if isinstance(sid, str):
                assert isinstance(params, dict)
                self._tap.captured(sid, params)
            return
        id_ = message.get("id")
        watched = self._watched.pop(id_, None) if "method" not in message and isinstance(id_, int | str) else None
        if watched is None or "result" not in message:
            return
        method, sid = watched
        result = message["result"]
        if method == "session/new" and isinstance(result, dict) and isinstance(result.get("sessionId"), str):
            sid = result["sessionId"]
        if sid is not None:
            self._tap.keep(method, sid, result)

    async def close(self) -> None:
        """See :class:`~acp_client.transports.Transport`."""
        await self._inner.close()

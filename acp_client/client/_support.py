"""What :class:`~acp_client.client.ACPClient` needs besides its calls: the capability gates of each call,
the shapes it reads and writes (``SessionInfo``, MCP server entries per version), and the routing of what
the agent sends (:class:`InboundRouter`: agent requests to the handlers, updates to their sessions).
"""

from __future__ import annotations

import asyncio
import collections
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from acp_client._logging import get_logger
from acp_client.exceptions import ConnectionLost, ProtocolError, UsageError
from acp_client.handlers import ClientHandlers, dispatch_request
from acp_client.schema import session_update_fields
from acp_client.sessions import SessionLink, SessionRegistry

if TYPE_CHECKING:
    from acp_client.client.connection import Connection

__all__ = ["EARLY_UPDATES", "_GATES", "InboundRouter", "SessionInfo", "parse_list_page", "shape_mcp_servers"]

log = get_logger("acp_client.client")

#: How many updates for a not-yet-registered session are kept while a session/new is outstanding.
EARLY_UPDATES = 256

# what each gated call needs, per protocol version: (capability path, human name)
_GATES: dict[tuple[str, int], tuple[tuple[str, ...], str]] = {
    ("load", 1): (("loadSession",), "agentCapabilities.loadSession"),
    ("resume", 1): (("sessionCapabilities", "resume"), "agentCapabilities.sessionCapabilities.resume"),
    ("list", 1): (("sessionCapabilities", "list"), "agentCapabilities.sessionCapabilities.list"),
    ("close", 1): (("sessionCapabilities", "close"), "agentCapabilities.sessionCapabilities.close"),
    ("delete", 1): (("sessionCapabilities", "delete"), "agentCapabilities.sessionCapabilities.delete"),
    ("status", 1): (("sessionCapabilities", "status"), "agentCapabilities.sessionCapabilities.status"),
    ("additional_directories", 1): (
        ("sessionCapabilities", "additionalDirectories"),
        "agentCapabilities.sessionCapabilities.additionalDirectories",
    ),
    ("logout", 1): (("auth", "logout"), "agentCapabilities.auth.logout"),
    ("session", 2): (("session",), "capabilities.session"),
    ("resume", 2): (("session",), "capabilities.session"),
    ("list", 2): (("session",), "capabilities.session"),
    ("close", 2): (("session",), "capabilities.session"),
    ("delete", 2): (("session", "delete"), "capabilities.session.delete"),
    ("status", 2): (("session", "status"), "capabilities.session.status"),
    ("additional_directories", 2): (
        ("session", "additionalDirectories"),
        "capabilities.session.additionalDirectories",
    ),
}


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One entry of ``session/list``: ``raw`` keeps every field the agent sent."""

    session_id: str
    cwd: str
    title: str | None
    updated_at: str | None
    raw: dict[str, Any]


def parse_list_page(result: Any) -> tuple[list[SessionInfo], str | None]:
    """One ``session/list`` answer: its well-formed entries (a string ``sessionId`` and ``cwd``; others are
    skipped) and the cursor of the next page (``None`` on the last). Raises ``ProtocolError`` for an answer
    that is not an object."""
    if not isinstance(result, dict):
        raise ProtocolError("session/list answered something other than an object")
    infos: list[SessionInfo] = []
    for item in result.get("sessions") or ():
        if isinstance(item, dict) and isinstance(item.get("sessionId"), str) and isinstance(item.get("cwd"), str):
            title, updated = item.get("title"), item.get("updatedAt")
            infos.append(
                SessionInfo(
                    item["sessionId"],
                    item["cwd"],
                    title if isinstance(title, str) else None,
                    updated if isinstance(updated, str) else None,
                    item,
                )
            )
    cursor = result.get("nextCursor")
    return infos, cursor if isinstance(cursor, str) and cursor else None


#: a path argument: a ``str`` or an ``os.PathLike`` (``pathlib.Path`` ...)
PathArg = str | os.PathLike[str]


def path_text(value: object, name: str) -> str:
    """``value`` as the ``str`` path the protocol sends; ``UsageError`` naming ``name`` if it is no path."""
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        text = os.fspath(value)
        if isinstance(text, str):
            return text
    raise UsageError(f"{name} must be a path (a str or os.PathLike such as pathlib.Path), not {type(value).__name__}")


def _as_list(value: object, name: str, what: str) -> list[object]:
    """``value`` as a list; a lone string, path or dict where a list belongs is a :class:`UsageError`."""
    if isinstance(value, str | bytes | Mapping | os.PathLike) or not isinstance(value, Iterable):
        raise UsageError(
            f"{name} takes a list of {what}, not a {type(value).__name__} ({value!r:.60}); wrap a single one in [...]"
        )
    return list(value)


def directory_list(value: object, name: str = "additional_directories") -> list[str]:
    """Checked ``additional_directories``: a list of paths, each sent as ``str``."""
    return [path_text(item, f"{name}[{i}]") for i, item in enumerate(_as_list(value, name, "paths"))]


def server_list(value: object, name: str = "mcp_servers") -> list[Mapping[str, Any]]:
    """Checked ``mcp_servers``: a list of MCP server entries, each a mapping."""
    servers: list[Mapping[str, Any]] = []
    for i, item in enumerate(_as_list(value, name, "MCP server entries (dicts)")):
        if not isinstance(item, Mapping):
            raise UsageError(f"{name}[{i}] must be an MCP server entry (a dict), not {type(item).__name__}")
        servers.append(item)
    return servers


def shape_mcp_servers(servers: Sequence[Mapping[str, Any]], version: int) -> list[dict[str, Any]]:
    """MCP server entries in the shape of protocol ``version``.

    v1 stdio entries carry no ``type`` and require ``args`` and ``env``; in v2 every entry carries
    ``type`` (``"stdio"`` for one with a ``command``). So a session recorded under one version is sent
    correctly after the agent moved to the other. Entries of other (future or custom) types pass unchanged.
    """
    shaped: list[dict[str, Any]] = []
    for server in servers:
        entry = dict(server)
        kind = entry.get("type")
        stdio = kind == "stdio" or (kind is None and "command" in entry)
        if stdio:
            if version >= 2:
                entry = {"type": "stdio", **{k: v for k, v in entry.items() if k != "type"}}
            else:
                entry.pop("type", None)
                entry.setdefault("args", [])
                entry.setdefault("env", [])
        elif kind in ("http", "sse") and version < 2:
            entry.setdefault("headers", [])
        shaped.append(entry)
    return shaped


class InboundRouter:
    """The agent-to-client side of :class:`~acp_client.client.ACPClient` (a mixin): requests go to the
    handlers (a permission request races its session's cancel), updates to the session they name."""

    # provided by ACPClient
    connection: Connection
    handlers: ClientHandlers
    protocol_version: int
    _registry: SessionRegistry
    _permission_waiters: dict[str, set[asyncio.Event]]
    _attaching: set[str]
    _early: collections.deque[tuple[str, dict[str, Any]]]
    _new_pending: int

    async def _on_request(self, method: str, params: Any) -> Any:
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if method != "session/request_permission" or not isinstance(session_id, str):
            return await dispatch_request(self.handlers, method, params)
        # a permission request races the session's cancel: session/cancel answers it "cancelled"
        cancelled = asyncio.Event()
        waiters = self._permission_waiters.setdefault(session_id, set())
        waiters.add(cancelled)
        handler = asyncio.ensure_future(dispatch_request(self.handlers, method, params))
        stop = asyncio.ensure_future(cancelled.wait())
        try:
            await asyncio.wait({handler, stop}, return_when=asyncio.FIRST_COMPLETED)
            if handler.done():
                return handler.result()
            return {"outcome": {"outcome": "cancelled"}}
        finally:
            for task in (handler, stop):
                task.cancel()
            await asyncio.wait({handler, stop})
            waiters.discard(cancelled)
            if not waiters:
                self._permission_waiters.pop(session_id, None)

    def _on_notification(self, method: str, params: Any) -> None:
        if method != "session/update":
            # unknown notifications SHOULD be ignored (custom `_` ones and `elicitation/complete` included)
            self.connection.stats["notifications_ignored"] += 1
            return
        if not isinstance(params, dict):
            self.connection.stats["updates_malformed"] += 1
            return
        session_id = params.get("sessionId")
        session = self._registry.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            # An agent may send updates (available commands, a title) right behind its session/new answer,
            # in the same read: they arrive before the caller registered the session. Keep a few, briefly.
            self.connection.stats["updates_unknown_session"] += 1
            if isinstance(session_id, str) and self._new_pending:
                self._early.append((session_id, params))
                if len(self._early) > EARLY_UPDATES:
                    self._early.popleft()
                    self.connection.stats["early_updates_dropped"] += 1
            return
        if not session._attached_to(self.connection.id) and session.id not in self._attaching:
            # late frames of a connection the session has left (or never joined) reach nothing
            self.connection.stats["updates_other_connection"] += 1
            return
        try:
            # lazy: a text chunk's typed model is built only if someone reads SessionUpdate.update
            _, kind, update, params, version = session_update_fields(params, self.protocol_version, lazy=True)
        except ProtocolError as exc:
            self.connection.stats["updates_malformed"] += 1
            log.warning("update_discarded", session_id=session.id, error=str(exc))
            return
        session._handle_update(kind, update, params["update"], version)

    def _detach_all(self) -> None:
        self._on_connection_lost(self.connection.loss or ConnectionLost(reason="closed"))

    def _on_connection_lost(self, loss: ConnectionLost) -> None:
        for session in self._registry:
            if session.link is SessionLink.ATTACHED and session._connection_id in (None, self.connection.id):
                session._move_link(SessionLink.DETACHED, loss=loss)

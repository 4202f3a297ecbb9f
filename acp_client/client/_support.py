"""What :class:`~acp_client.client.ACPClient` needs besides its calls: the capability gates of each call and
the shapes it reads and writes (``SessionInfo``, MCP server entries per version). The routing of what the
agent sends is :class:`~acp_client.client._router.InboundRouter`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from acp_client.client.options import RequestTimeout
from acp_client.exceptions import ProtocolError, UsageError

__all__ = ["DEFAULT_MAX_LIST_PAGES", "_GATES", "SessionInfo", "list_pages", "parse_list_page", "shape_mcp_servers"]

#: Pages of ``session/list`` read at most by one listing (each page is bounded by the frame size).
DEFAULT_MAX_LIST_PAGES = 1000


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
    ("archive", 1): (("sessionCapabilities", "archive"), "agentCapabilities.sessionCapabilities.archive"),
    ("auth_status", 1): (("auth", "status"), "agentCapabilities.auth.status"),
    ("archive", 2): (("session", "archive"), "capabilities.session.archive"),
    ("auth_status", 2): (("auth", "status"), "capabilities.auth.status"),
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


async def list_pages(
    request: Callable[..., Awaitable[Any]],
    cwd: str | None,
    *,
    timeout: RequestTimeout,
    max_pages: int,
    archived: str | None = None,
) -> AsyncIterator[SessionInfo]:
    """Every entry of ``session/list``, page after page, sent with ``request(method, params, timeout=...)``.

    A cursor the agent sent before (a loop), or more than ``max_pages`` pages, ends the listing with
    ``ProtocolError`` naming the bound: a listing always ends.
    """
    cursor: str | None = None
    seen: set[str] = set()
    for page in range(1, max_pages + 1):
        params: dict[str, Any] = {"cwd": cwd} if cwd is not None else {}
        if archived is not None:
            params["archived"] = archived
        if cursor is not None:
            params["cursor"] = cursor
        infos, cursor = parse_list_page(await request("session/list", params, timeout=timeout))
        for info in infos:
            yield info
        if cursor is None:
            return
        if cursor in seen:
            raise ProtocolError(
                f"session/list sent a cursor it had already sent (page {page}): the agent's listing loops"
            )
        seen.add(cursor)
    raise ProtocolError(f"session/list had more than {max_pages} pages (max_pages={max_pages}); stopped there")


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

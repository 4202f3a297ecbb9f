"""What the reference agent advertises in ``initialize`` and which methods each capability gates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acp_client._version import __version__

__all__ = [
    "AUTH_METHOD_ID",
    "CAPABILITY_NAMES",
    "METHOD_GATES",
    "agent_info",
    "auth_methods",
    "capability_name",
    "initialize_result",
]

#: Capability switches understood by ``ReferenceAgent(capabilities=...)`` and ``set_capability``.
#: ``loadSession`` (v1), ``resume``/``list``/``close`` (v1 markers; baseline in v2, so hiding them there only
#: makes the method answer -32601), ``delete``, ``status``, ``additionalDirectories`` (v1 and v2 markers),
#: ``logout`` (v1 ``auth.logout``), ``archive`` (``session/archive``/``unarchive``, v1 and v2 markers) and
#: ``authStatus`` (``auth/status``, the ``auth.status`` marker of both versions).
CAPABILITY_NAMES = (
    "loadSession",
    "resume",
    "list",
    "close",
    "delete",
    "status",
    "additionalDirectories",
    "logout",
    "archive",
    "authStatus",
)

#: method → the capability that gates it (a hidden capability makes the method answer -32601).
METHOD_GATES: Mapping[str, str] = {
    "session/load": "loadSession",
    "session/resume": "resume",
    "session/list": "list",
    "session/close": "close",
    "session/delete": "delete",
    "session/status": "status",
    "logout": "logout",
    "session/archive": "archive",
    "session/unarchive": "archive",
    "auth/status": "authStatus",
}

#: The one authentication method the agent offers when ``require_auth`` is on.
AUTH_METHOD_ID = "agent-login"


def capability_name(name: str) -> str:
    """Normalise a capability name: dotted wire paths (``sessionCapabilities.resume``,
    ``capabilities.session.delete``, ``auth.logout``) map to their last component. Raises ``ValueError``."""
    short = name.rsplit(".", 1)[-1]
    if name.endswith("auth.status"):  # its last component, "status", names the session/status switch
        short = "authStatus"
    if short not in CAPABILITY_NAMES:
        raise ValueError(f"unknown capability {name!r}; known: {', '.join(CAPABILITY_NAMES)}")
    return short


def agent_info() -> dict[str, Any]:
    """The agent's ``Implementation`` object."""
    return {"name": "acp-client-reference-agent", "title": "ACP reference agent", "version": __version__}


def auth_methods(version: int, require_auth: bool) -> list[dict[str, Any]]:
    """``authMethods`` in the shape of protocol ``version`` (empty unless authentication is required)."""
    if not require_auth:
        return []
    if version >= 2:
        return [{"type": "agent", "methodId": AUTH_METHOD_ID, "name": "Agent login"}]
    return [{"id": AUTH_METHOD_ID, "name": "Agent login", "description": "Log in with the reference agent"}]


def _v1_capabilities(caps: Mapping[str, bool]) -> dict[str, Any]:
    session_caps: dict[str, Any] = {
        name: {}
        for name in ("list", "resume", "close", "delete", "status", "additionalDirectories", "archive")
        if caps[name]
    }
    result: dict[str, Any] = {
        "loadSession": caps["loadSession"],
        "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
        "mcpCapabilities": {"http": True, "sse": False},
        "sessionCapabilities": session_caps,
    }
    auth: dict[str, Any] = {
        name: {} for name, switch in (("logout", "logout"), ("status", "authStatus")) if caps[switch]
    }
    if auth:
        result["auth"] = auth
    return result


def _v2_capabilities(caps: Mapping[str, bool]) -> dict[str, Any]:
    session: dict[str, Any] = {"prompt": {"embeddedContext": {}}, "mcp": {"stdio": {}, "http": {}}}
    for name in ("delete", "status", "additionalDirectories", "archive"):
        if caps[name]:
            session[name] = {}
    result: dict[str, Any] = {"session": session}
    if caps["authStatus"]:
        result["auth"] = {"status": {}}
    return result


def initialize_result(
    version: int, caps: Mapping[str, bool], require_auth: bool, resumable: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The ``initialize`` result for the negotiated ``version`` (v1: ``agentCapabilities``/``agentInfo``;
    v2: ``capabilities``/``info``); ``resumable`` is advertised as ``transport.resumable`` when given."""
    if version >= 2:
        capabilities = _v2_capabilities(caps)
        if resumable is not None:
            capabilities["transport"] = {"resumable": dict(resumable)}
        return {
            "protocolVersion": version,
            "capabilities": capabilities,
            "info": agent_info(),
            "authMethods": auth_methods(version, require_auth),
        }
    agent_capabilities = _v1_capabilities(caps)
    if resumable is not None:
        agent_capabilities["transport"] = {"resumable": dict(resumable)}
    return {
        "protocolVersion": version,
        "agentCapabilities": agent_capabilities,
        "agentInfo": agent_info(),
        "authMethods": auth_methods(version, require_auth),
    }

"""What ``initialize`` sends and what its answer says: the versions this client speaks, the ``initialize``
params per version, the reading of the agent's answer, the capability gate of each call, and the facts an
observer reads about the connection.

Plain functions over plain values; :class:`~acp_client.client.ACPClient` calls them and keeps the outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from acp_client._logging import get_logger
from acp_client.client._support import _GATES
from acp_client.exceptions import (
    ACPTimeoutError,
    CapabilityNotSupported,
    ProtocolError,
    UnsupportedProtocolVersion,
    UsageError,
)
from acp_client.schema import capability_present
from acp_client.transports.base import Transport

__all__ = [
    "SUPPORTED_PROTOCOL_VERSIONS",
    "ClientFacts",
    "Negotiated",
    "ProtocolVersionOption",
    "attach_method",
    "initialize_params",
    "read_initialize_answer",
    "require",
    "supported",
    "timeout_with_stray_line",
]

log = get_logger("acp_client.client")  # the logger name users configure; stable across moves

#: Protocol versions this client speaks.
SUPPORTED_PROTOCOL_VERSIONS = (1, 2)

#: ``1``, ``2`` or ``"auto"`` (offer v2, accept v1).
ProtocolVersionOption: TypeAlias = Literal[1, 2, "auto"]


class ClientFacts:
    """What an observer reads about a client's connection (:class:`acp_client._observe.LinkFacts`): the
    transport it talks over and the version ``initialize`` negotiated (read when needed)."""

    __slots__ = ("_transport", "_version")

    def __init__(self, transport: Transport, version: Callable[[], int]) -> None:
        self._transport = transport
        self._version = version

    @property
    def peer(self) -> str:
        return self._transport.description

    @property
    def protocol_version(self) -> int:
        return self._version()


def initialize_params(capabilities: dict[str, Any], client_info: Mapping[str, str], version: int) -> dict[str, Any]:
    """The ``initialize`` params for a protocol version (v1- or v2-shaped)."""
    if version >= 2:
        return {"protocolVersion": version, "capabilities": capabilities, "info": dict(client_info)}
    return {"protocolVersion": version, "clientCapabilities": capabilities, "clientInfo": dict(client_info)}


def timeout_with_stray_line(error: ACPTimeoutError, stray: tuple[str, str] | None) -> ACPTimeoutError | None:
    """An ``initialize`` that timed out after the agent wrote a line that is not JSON-RPC: the timeout again,
    saying so (``None`` when no such line came)."""
    if stray is None:
        return None
    kind, excerpt = stray
    shown = excerpt if len(excerpt) <= 120 else excerpt[:117] + "..."
    return ACPTimeoutError(
        f"{error}; the agent did send a line that is not a JSON-RPC message ({kind}): {shown!r}. An ACP "
        "agent must write only JSON-RPC messages to its output (stdout for a stdio agent); logs belong "
        "on stderr"
    )


@dataclass(frozen=True, slots=True)
class Negotiated:
    """What an ``initialize`` answer says: the version both speak and the agent's raw facts."""

    version: int
    result: dict[str, Any]
    capabilities: dict[str, Any]
    info: dict[str, Any]
    auth_methods: list[dict[str, Any]]


def read_initialize_answer(result: Any, offered: int, *, connection_id: int) -> Negotiated:
    """Read the agent's ``initialize`` answer to an offer of ``offered``.

    Raises :class:`UnsupportedProtocolVersion` for a version this client does not speak (or one above the
    offer), ``ProtocolError`` for an answer that is not an object.
    """
    if not isinstance(result, dict):
        raise ProtocolError(f"initialize answered {type(result).__name__}, expected an object")
    answered = result.get("protocolVersion")
    if not isinstance(answered, int) or isinstance(answered, bool) or answered not in SUPPORTED_PROTOCOL_VERSIONS:
        raise UnsupportedProtocolVersion(offered, answered)
    if answered > offered:
        # an agent may not answer above the offer, so this connection accepts only what it offered or less
        raise UnsupportedProtocolVersion(
            offered, answered, accepted=tuple(v for v in SUPPORTED_PROTOCOL_VERSIONS if v <= offered)
        )
    if answered >= 2 and ("agentCapabilities" in result or "info" not in result):
        # Some v1 agents echo the offered version (the official Python SDK's examples do): a v2 answer
        # must carry `info`, and `agentCapabilities` is v1's name. Believe the shape, not the number.
        log.warning("agent_claimed_v2_with_a_v1_answer", connection_id=connection_id)
        answered = 1
    caps = result.get("capabilities" if answered >= 2 else "agentCapabilities")
    info = result.get("info" if answered >= 2 else "agentInfo")
    methods = result.get("authMethods")
    return Negotiated(
        version=answered,
        result=result,
        capabilities=caps if isinstance(caps, dict) else {},
        info=info if isinstance(info, dict) else {},
        auth_methods=[m for m in methods if isinstance(m, dict)] if isinstance(methods, list) else [],
    )


def supported(feature: str, version: int, capabilities: Mapping[str, Any]) -> bool:
    """Whether ``capabilities`` (of protocol ``version``) advertise ``feature`` (see ``ACPClient.supports``)."""
    gate = _GATES.get((feature, version))
    return gate is not None and capability_present(capabilities, gate[0])


def require(method: str, feature: str, version: int, capabilities: Mapping[str, Any]) -> None:
    """Raise unless ``method`` may be sent: ``UsageError`` before ``initialize`` (version ``0``),
    :class:`CapabilityNotSupported` when the agent did not advertise ``feature`` (or the call does not
    exist in this version)."""
    if version == 0:
        raise UsageError(f"{method}: call initialize() first")
    gate = _GATES.get((feature, version))
    if gate is None:
        raise CapabilityNotSupported(method, None, version)
    if not capability_present(capabilities, gate[0]):
        raise CapabilityNotSupported(method, gate[1], version)


def attach_method(mode: Literal["resume", "load"], replay: bool, version: int, capabilities: Mapping[str, Any]) -> str:
    """The method that attaches a known session (``session/resume`` or v1 ``session/load``), once the agent
    is known to serve it; raises :class:`CapabilityNotSupported` otherwise (v2 has no load, v1 resume never
    replays)."""
    if mode == "load":
        if version >= 2:
            raise CapabilityNotSupported("session/load", None, 2, hint="use resume_session(..., replay=True)")
        require("session/load", "load", version, capabilities)
        return "session/load"
    require("session/resume", "resume", version, capabilities)
    if replay and version < 2:
        raise CapabilityNotSupported(
            "session/resume with replay", None, 1, hint="v1 resume never replays: use load_session()"
        )
    return "session/resume"

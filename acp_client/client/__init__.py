"""The one-connection client: :class:`ACPClient` (``_acp``: initialize, every client->agent method), its
:class:`~acp_client.client.connection.Connection` (``connection``: one transport and one JSON-RPC core), the
reading of ``initialize`` and the capability gates (``_negotiate``), the routing of what the agent sends
(``_router``), the shapes of what is sent and read (``_support``), and opening a link (``_connect``:
``Target``, ``Connector``, :func:`connect`). :data:`USE_CLIENT_DEFAULT` is the default ``timeout=`` of every
request: the client's ``Timeouts.request``."""

from acp_client.client._acp import (
    SUPPORTED_PROTOCOL_VERSIONS,
    ACPClient,
    ProtocolVersionOption,
    SessionInfo,
    shape_mcp_servers,
)
from acp_client.client._router import UpdateAcceptance
from acp_client.client.options import USE_CLIENT_DEFAULT, RequestTimeout, UseClientDefault

__all__ = [
    "SUPPORTED_PROTOCOL_VERSIONS",
    "USE_CLIENT_DEFAULT",
    "ACPClient",
    "ProtocolVersionOption",
    "RequestTimeout",
    "SessionInfo",
    "UpdateAcceptance",
    "UseClientDefault",
    "shape_mcp_servers",
]

"""Every error acp-client raises, in one tree.

Catch :class:`ACPError` to catch everything the SDK raises on purpose. Lower-layer errors
(``OSError``, ``websockets`` exceptions, ``ssl.SSLError``, ``json`` errors) are translated into this
tree exactly once, at the transport seam, so no caller ever needs to import ``websockets``.

::

    ACPError
    ├── TransportError                   the link to the agent failed
    │   ├── ConnectError                 could not open a connection (refused, DNS, timeout, spawn)
    │   │   ├── AgentNotFound            the stdio agent's program is missing or not executable (fatal)
    │   │   ├── HandshakeRejected        the WebSocket upgrade got an HTTP status (401, 404, 429, 503 ...)
    │   │   │   ├── HTTPTransportError   a Streamable HTTP answer the transport cannot use (415, HTML ...)
    │   │   │   └── NotAnACPEndpoint     the answer shows no ACP endpoint is there (HTTP/1.0, a banner,
    │   │   │                            most 4xx): names what answered (fatal, at once)
    │   │   ├── TLSError                 the TLS handshake failed (certificate not trusted, ...)
    │   │   └── H2COnlyServer            an http:// server speaks only HTTP/2 cleartext: use
    │   │                                http2="prior_knowledge" (fatal)
    │   ├── ConnectionLost               an open connection died; ``request_sent`` says if the request
    │   │                                had been written before the loss
    │   └── NotConnected                 there is no usable connection right now (reconnecting)
    ├── ACPTimeoutError (TimeoutError)   a request or handshake ran out of time
    ├── RPCError                         the agent answered with a JSON-RPC error object
    │   ├── ParseError                   -32700
    │   ├── InvalidRequest               -32600
    │   ├── MethodNotFound               -32601
    │   ├── InvalidParams                -32602
    │   ├── InternalError                -32603
    │   ├── AuthRequired                 -32000
    │   ├── SessionNotFound              -32002 (carries ``session_id`` from ``data.sessionId``)
    │   ├── RequestCancelled             -32800
    │   └── TurnFailed                   a v2 turn ended idle with stopReason "error" (its error object)
    ├── ProtocolError                    the agent broke the protocol (bad frame, wrong shape, lie)
    │   └── UnsupportedProtocolVersion   the agent only speaks a version we do not
    ├── UsageError                       the caller misused the SDK
    │   ├── CapabilityNotSupported       the agent did not advertise what this call needs
    │   ├── ClientClosed                 the client or connection was closed by its owner
    │   └── PromptNotResendable          resend() refused: the ledger shows the prompt was inserted
    ├── RecoveryError                    the reconnect manager could not keep a session or a link
    │   ├── SessionLost                  the agent no longer knows the session; it was forgotten
    │   ├── RecoveryFailed               recovering a session failed for another reason (retried)
    │   ├── ConfigNotRestored            the chosen mode/config could not be set again after a restore
    │   └── ReconnectFailed              the manager stopped reconnecting (fatal error or breaker)
    └── StoreError                       the session store failed or refused a write
        ├── StoreUnavailable             the store's server cannot be reached (after bounded retries)
        ├── StoreLocked                  another process owns the store (SQLite file lock)
        └── LeaseLost                    this worker does not hold the session's lease; write rejected

``ACPTimeoutError`` also derives from the builtin ``TimeoutError`` so ``except TimeoutError`` and
``asyncio.timeout()`` users are served too.

A :class:`ConnectError` or :class:`ConnectionLost` caused by a stdio agent that died carries its
``exit_code`` (negative: killed by that signal) and ``stderr_tail``, the last lines it wrote to stderr;
both are empty (``None`` / ``()``) for other transports.

The classes are defined by theme in private modules (``_transport``, ``_rpc``, ``_usage``, ``_recovery``,
``_store``); this package is their one public path: each class's ``__module__`` names it, so reprs, pickles
and the reference pages say ``acp_client.exceptions``.
"""

from __future__ import annotations

from acp_client.exceptions._recovery import (
    ConfigNotRestored,
    ReconnectFailed,
    RecoveryError,
    RecoveryFailed,
    SessionLost,
)
from acp_client.exceptions._root import ACPError
from acp_client.exceptions._rpc import (
    AuthRequired,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    ParseError,
    RequestCancelled,
    RPCError,
    SessionNotFound,
    TurnFailed,
    rpc_error_from_object,
)
from acp_client.exceptions._store import LeaseLost, StoreError, StoreLocked, StoreUnavailable
from acp_client.exceptions._transport import (
    ACPTimeoutError,
    AgentNotFound,
    ConnectError,
    ConnectionLost,
    H2COnlyServer,
    HandshakeRejected,
    HTTPTransportError,
    NotAnACPEndpoint,
    NotConnected,
    TLSError,
    TransportError,
)
from acp_client.exceptions._usage import (
    CapabilityNotSupported,
    ClientClosed,
    PromptNotResendable,
    ProtocolError,
    UnsupportedProtocolVersion,
    UsageError,
)

__all__ = [
    "ACPError",
    "ACPTimeoutError",
    "AgentNotFound",
    "AuthRequired",
    "CapabilityNotSupported",
    "ClientClosed",
    "ConfigNotRestored",
    "ConnectError",
    "ConnectionLost",
    "H2COnlyServer",
    "HTTPTransportError",
    "HandshakeRejected",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "LeaseLost",
    "MethodNotFound",
    "NotAnACPEndpoint",
    "NotConnected",
    "ParseError",
    "PromptNotResendable",
    "ProtocolError",
    "RPCError",
    "ReconnectFailed",
    "RecoveryError",
    "RecoveryFailed",
    "RequestCancelled",
    "SessionLost",
    "SessionNotFound",
    "StoreError",
    "StoreLocked",
    "StoreUnavailable",
    "TLSError",
    "TransportError",
    "TurnFailed",
    "UnsupportedProtocolVersion",
    "UsageError",
    "rpc_error_from_object",
]

for _name in __all__:  # the public path, not the private module that defines each name
    globals()[_name].__module__ = __name__
del _name

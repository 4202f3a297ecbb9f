"""Opening a link to an agent: targets, transports, and ``connect()``.

``connect()`` opens a transport, starts a :class:`~acp_client.client.connection.Connection`, sends ``initialize``
and returns an :class:`~acp_client.client.ACPClient`. It works as ``client = await connect(url)`` and as
``async with connect(url) as client:``. For a connection that survives drops, use
:class:`acp_client.ReconnectingClient`, which runs one ``ACPClient`` per connection underneath and opens
each one through the same :class:`Connector` and the same :class:`~acp_client.transports.TransportOptions`.
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Any, Literal, TypeAlias

from acp_client._logging import get_logger
from acp_client.client import ACPClient, ProtocolVersionOption
from acp_client.exceptions import UnsupportedProtocolVersion, UsageError
from acp_client.handlers import ClientHandlers
from acp_client.sessions import SessionOwner, SessionRegistry
from acp_client.transports import CookieJar, Transport, TransportKind, TransportOptions
from acp_client.transports.options import HeadersLike, HeadersProvider

__all__ = ["Connector", "Target", "connect", "open_transport"]

log = get_logger("acp_client.client")

#: What to connect to: a ``ws://``/``wss://`` URL, a command (string or argv list) to spawn over stdio, an
#: open :class:`~acp_client.transports.Transport`, or a zero-argument coroutine function returning one.
Target: TypeAlias = str | Sequence[str] | Transport | Callable[[], Awaitable[Transport]]


async def open_transport(target: Target, options: TransportOptions | None = None) -> Transport:
    """Open a transport for ``target`` (see :data:`Target`) with ``options`` (defaults when ``None``)."""
    options = options if options is not None else TransportOptions()
    if isinstance(target, Transport):
        return target
    if callable(target):
        return await target()
    if isinstance(target, str) and target.startswith(("ws://", "wss://")):
        from acp_client.transports.websocket import open_websocket

        return await open_websocket(target, options)
    if isinstance(target, str) and target.startswith(("http://", "https://")):
        try:
            from acp_client.transports import http
        except ImportError:  # the Streamable HTTP transport is not part of this build
            raise UsageError(
                "Streamable HTTP (http://, https://) needs httpx: pip install 'acp-reconnect[http]'"
            ) from None
        return await http.open_endpoint(target, options)  # transport=None/"http"/"websocket"/"auto"
    if isinstance(target, str) and "://" in target:
        scheme = target.split("://", 1)[0]
        raise UsageError(f"unsupported URL scheme in {scheme!r}: use ws://, wss://, http://, https:// or a command")
    from acp_client.transports.stdio import spawn_stdio

    argv = shlex.split(target) if isinstance(target, str) else list(target)
    if not argv:
        raise UsageError("an empty command cannot be spawned")
    return await spawn_stdio(
        argv,
        max_frame_bytes=options.max_frame_bytes,
        env=options.stdio_env,
        cwd=options.stdio_cwd,
    )


class Connector:
    """What :func:`connect` returns: await it for an :class:`ACPClient`, or use it with ``async with``.

    A :class:`~acp_client.ReconnectingClient` makes one per connection attempt, with its own registry,
    session owner and generation.
    """

    def __init__(
        self,
        target: Target,
        *,
        options: TransportOptions | None = None,
        handlers: ClientHandlers | None = None,
        protocol_version: ProtocolVersionOption = "auto",
        request_timeout: float | None = 30.0,
        initialize_timeout: float | None = 10.0,
        client_info: Mapping[str, str] | None = None,
        registry: SessionRegistry | None = None,
        session_owner: SessionOwner | None = None,
        generation: int | None = None,
    ) -> None:
        self._target = target
        self._options = options if options is not None else TransportOptions()
        self._handlers = handlers
        self._protocol_version = protocol_version
        self._request_timeout = request_timeout
        self._initialize_timeout = initialize_timeout
        self._client_info = client_info
        self._registry = registry
        self._session_owner = session_owner
        self._generation = generation
        self._client: ACPClient | None = None

    def __await__(self) -> Generator[Any, None, ACPClient]:
        return self._open().__await__()

    async def __aenter__(self) -> ACPClient:
        self._client = await self._open()
        return self._client

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def _open(self) -> ACPClient:
        reopenable = not isinstance(self._target, Transport)
        offer = 1 if self._protocol_version == 1 else 2
        client = await self._attempt(offer)
        if (
            self._protocol_version == "auto"
            and client.protocol_version == 1
            and client.handlers.needs_v1_only_capabilities()
        ):
            if reopenable:
                # a v2-shaped initialize cannot carry fs/terminal: introduce ourselves again, v1-shaped
                log.info("reinitializing_v1_shaped", reason="handlers offer v1-only capabilities")
                await client.aclose()
                client = await self._attempt(1)
            else:
                log.warning("v1_capabilities_not_advertised", reason="the transport cannot be reopened")
        if self._protocol_version == 2 and client.protocol_version != 2:
            answered = client.protocol_version
            await client.aclose()
            raise UnsupportedProtocolVersion(2, answered, accepted=(2,))
        return client

    async def _attempt(self, offer: int) -> ACPClient:
        transport = await open_transport(self._target, self._options)
        client = ACPClient(
            transport,
            handlers=self._handlers,
            client_info=self._client_info,
            registry=self._registry,
            session_owner=self._session_owner,
            request_timeout=self._request_timeout,
            generation=self._generation,
        )
        try:
            await client.connection.start()
            await client.initialize(offer, timeout=self._initialize_timeout)
        except BaseException:
            await client.aclose()
            raise
        return client


def connect(
    target: Target,
    *,
    handlers: ClientHandlers | None = None,
    protocol_version: ProtocolVersionOption = "auto",
    headers: HeadersLike | HeadersProvider | None = None,
    cookies: CookieJar | None = None,
    ssl: Any = None,
    request_timeout: float | None = 30.0,
    open_timeout: float | None = 10.0,
    initialize_timeout: float | None = 10.0,
    ping_interval: float | None = 20.0,
    ping_timeout: float | None = 20.0,
    close_timeout: float = 10.0,
    max_frame_bytes: int = 16 * 1024 * 1024,
    compression: str | None = "deflate",
    transport: TransportKind = None,
    http2: bool | Literal["prior_knowledge"] = True,
    stdio_env: Mapping[str, str] | None = None,
    stdio_cwd: str | None = None,
    client_info: Mapping[str, str] | None = None,
) -> Connector:
    """Connect to an agent and initialize; returns a :class:`Connector` (await it or ``async with`` it).

    ``protocol_version``: ``1``, ``2`` or ``"auto"`` (offer v2 v2-shaped, accept an answer of 1; when the
    handlers implement v1-only capabilities such as ``fs`` or ``terminal``, initialize again v1-shaped on a
    fresh connection so the agent learns them). ``headers`` may be a mapping or a zero-argument callable
    (sync or async) called before every connection attempt, e.g. to fetch a fresh token. Timeouts are float
    seconds; ``None`` disables one. The transport keywords are gathered into one
    :class:`~acp_client.transports.TransportOptions` (see it for each one's meaning).
    """
    options = TransportOptions(
        headers=headers,
        cookies=cookies if cookies is not None else CookieJar(),
        ssl=ssl,
        open_timeout=open_timeout,
        ping_interval=ping_interval,
        ping_timeout=ping_timeout,
        close_timeout=close_timeout,
        max_frame_bytes=max_frame_bytes,
        compression=compression,  # type: ignore[arg-type]
        transport=transport,
        http2=http2,
        stdio_env=stdio_env,
        stdio_cwd=stdio_cwd,
    )
    return Connector(
        target,
        options=options,
        handlers=handlers,
        protocol_version=protocol_version,
        request_timeout=request_timeout,
        initialize_timeout=initialize_timeout,
        client_info=client_info,
    )

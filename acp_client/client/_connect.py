"""Opening a link to an agent: targets, transports, and ``connect()``.

``connect()`` opens a transport, starts a :class:`~acp_client.client.connection.Connection`, sends ``initialize``
and returns an :class:`~acp_client.client.ACPClient`. It works as ``client = await connect(url)`` and as
``async with connect(url) as client:``. For a connection that survives drops, use
:class:`acp_client.ReconnectingClient`, which runs one ``ACPClient`` per connection underneath and opens
each one through the same :class:`Connector` and the same :class:`~acp_client.transports.TransportOptions`.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Any, TypeAlias
from urllib.parse import urlsplit

from acp_client._checks import check_instance, check_str_mapping
from acp_client._logging import get_logger, redact_url
from acp_client.client import ACPClient, ProtocolVersionOption
from acp_client.client.options import Destination, Timeouts, fold_flat_keywords, option_object
from acp_client.client.wire_log import WireLogOption, WireRecorder, as_wire_log
from acp_client.exceptions import UnsupportedProtocolVersion, UsageError
from acp_client.handlers import ClientHandlers
from acp_client.sessions import SessionOwner, SessionRegistry
from acp_client.transports import Transport, TransportOptions
from acp_client.transports.options import TRANSPORT_FIELDS

__all__ = [
    "CONNECT_FLAT_KEYWORDS",
    "Connector",
    "Target",
    "check_protocol_version",
    "check_target",
    "connect",
    "open_transport",
    "url_problem",
]

log = get_logger("acp_client.client")

#: What to connect to: a ``ws://``/``wss://``/``http://``/``https://`` URL (a string is always a URL), an argv
#: list or tuple to spawn a stdio agent, an open :class:`~acp_client.transports.Transport`, or a zero-argument
#: coroutine function returning one.
Target: TypeAlias = str | Sequence[str] | Transport | Callable[[], Awaitable[Transport]]


_URL_SCHEMES = ("ws", "wss", "http", "https")
_TARGET_HELP = (
    "connect to an agent with a URL such as 'ws://127.0.0.1:8765/acp' or 'http://127.0.0.1:8765/acp', or "
    "spawn a stdio agent with an argv list such as ['my-agent', '--acp']"
)


def url_problem(url: str) -> str | None:
    """Why ``url`` is not an agent endpoint (``ws``, ``wss``, ``http`` or ``https``, a host, a valid port), or
    ``None`` when it is one. The one URL check of the package: targets, ``acp-client`` and the bridge use it."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "a target string must be a URL"
    if scheme.lower() not in _URL_SCHEMES:
        return f"unsupported scheme {scheme!r}: expected ws://, wss:// (WebSocket) or http://, https:// (HTTP)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        return str(exc)
    return None if rest and parts.hostname else "no host"


def check_client_keywords(handlers: object, client_info: object) -> None:
    """Raise :class:`UsageError` unless ``handlers`` is a :class:`ClientHandlers` (or ``None``) and
    ``client_info`` a mapping of str to str (or ``None``): the keywords every client takes."""
    check_instance("", "handlers", handlers, ClientHandlers)
    check_str_mapping("", "client_info", client_info)


def check_target(target: object) -> None:
    """Raise :class:`UsageError` unless ``target`` is a usable :data:`Target`, before any I/O.

    A ``str`` is always a URL (``ws``, ``wss``, ``http`` or ``https``, with a host): a string is never
    started as a program, so an "agent URL" taken from a settings field or a form cannot run a command. A
    stdio agent is an argv list or tuple of strings (or paths).
    """
    if isinstance(target, Transport) or callable(target):
        return
    if isinstance(target, str):
        problem = url_problem(target)
        if problem is not None:
            raise UsageError(f"bad URL {redact_url(target)!r}: {problem}; {_TARGET_HELP}")
        return
    if isinstance(target, list | tuple):
        if not target:
            raise UsageError(f"an empty argv list cannot be spawned; {_TARGET_HELP}")
        if not all(isinstance(arg, str | os.PathLike) for arg in target):
            raise UsageError(f"a stdio agent's argv must hold strings (or paths) only; {_TARGET_HELP}")
        return
    raise UsageError(f"a target must be a URL string, an argv list, a transport or a factory, not "
                     f"{type(target).__name__}; {_TARGET_HELP}")


async def open_transport(target: Target, options: TransportOptions | None = None) -> Transport:
    """Open a transport for ``target`` (see :data:`Target`, checked by :func:`check_target`) with
    ``options`` (defaults when ``None``)."""
    check_target(target)
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
    from acp_client.transports.stdio import open_stdio

    assert isinstance(target, list | tuple)  # check_target let nothing else through
    return await open_stdio([os.fspath(arg) for arg in target], options)


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
        timeouts: Timeouts | None = None,
        client_info: Mapping[str, str] | None = None,
        registry: SessionRegistry | None = None,
        session_owner: SessionOwner | None = None,
        generation: int | None = None,
        wire: WireRecorder | None = None,
    ) -> None:
        check_target(target)
        self._target = target
        self._options = options if options is not None else TransportOptions()
        self._handlers = handlers
        self._protocol_version = protocol_version
        self._timeouts = timeouts if timeouts is not None else Timeouts()
        self._client_info = client_info
        self._registry = registry
        self._session_owner = session_owner
        self._generation = generation
        self._wire = wire
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
            request_timeout=self._timeouts.request,
            generation=self._generation,
            wire=self._wire,
        )
        try:
            await client.connection.start()
            await client.initialize(offer, timeout=self._timeouts.initialize)
        except BaseException:
            await client.aclose()
            raise
        return client


#: Where each deprecated flat keyword of :func:`connect` goes (``transport_options`` or ``timeouts``).
CONNECT_FLAT_KEYWORDS: dict[str, tuple[Destination, ...]] = {
    **{name: (("transport_options", name, 1.0),) for name in TRANSPORT_FIELDS},
    "request_timeout": (("timeouts", "request", 1.0),),
    "initialize_timeout": (("timeouts", "initialize", 1.0),),
}


def check_protocol_version(value: object) -> None:
    """Raise :class:`UsageError` unless ``value`` is a ``protocol_version`` option: 1, 2 or ``"auto"``."""
    if value not in (1, 2, "auto") or isinstance(value, bool):
        raise UsageError(f"protocol_version must be 1, 2 or 'auto', not {value!r}")


def connect(
    target: Target,
    *,
    handlers: ClientHandlers | None = None,
    protocol_version: ProtocolVersionOption = "auto",
    timeouts: Timeouts | None = None,
    transport_options: TransportOptions | None = None,
    client_info: Mapping[str, str] | None = None,
    wire_log: WireLogOption = None,
    **deprecated: object,
) -> Connector:
    """Connect to an agent and initialize; returns a :class:`Connector` (await it or ``async with`` it).

    ``target``: see :data:`Target`. ``handlers`` (default: a plain :class:`ClientHandlers`) answer the
    agent's requests. ``protocol_version``: ``1``, ``2`` or ``"auto"`` (the default: offer v2 v2-shaped,
    accept an answer of 1; when the handlers implement v1-only capabilities such as ``fs`` or ``terminal``,
    initialize again v1-shaped on a fresh connection so the agent learns them). ``timeouts`` (default
    ``Timeouts()``): this function reads its ``initialize`` and ``request``.
    ``transport_options`` (default ``TransportOptions()``): headers,
    cookies, TLS, the link's own timeouts, frame bound, transport kind, a stdio agent's environment.
    ``client_info`` (default: this SDK's name and version) is sent as ``clientInfo``. ``wire_log`` (default
    ``None``): a :class:`~acp_client.WireLog`, a file path or a text stream; every frame of the connection is
    written to it as a JSON line (see ``ReconnectingClient(wire_log=)``), closed with the client.

    The flat keywords of earlier releases (``headers=``, ``request_timeout=`` ...) still work, folded into
    those objects, and warn with :class:`DeprecationWarning`; they go away in the next release.
    """
    check_protocol_version(protocol_version)
    check_client_keywords(handlers, client_info)
    wire_options = as_wire_log("wire_log", wire_log)
    objects: dict[str, Timeouts | TransportOptions] = {
        "timeouts": option_object("timeouts", timeouts, Timeouts),
        "transport_options": option_object("transport_options", transport_options, TransportOptions),
    }
    if deprecated:
        objects = fold_flat_keywords("connect", deprecated, CONNECT_FLAT_KEYWORDS, objects)
    folded_timeouts = objects["timeouts"]
    folded_options = objects["transport_options"]
    assert isinstance(folded_timeouts, Timeouts) and isinstance(folded_options, TransportOptions)
    return Connector(
        target,
        options=folded_options,
        handlers=handlers,
        protocol_version=protocol_version,
        timeouts=folded_timeouts,
        client_info=client_info,
        wire=WireRecorder(wire_options) if wire_options is not None else None,
    )

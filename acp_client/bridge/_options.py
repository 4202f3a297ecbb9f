"""What the bridge is configured with: :class:`BridgeOptions` (the remote and the waits) and
:class:`BridgeStrategy` (how it recovers sessions), plus :func:`describe_url` for logs and reprs."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from acp_client.client.options import check_count, check_seconds
from acp_client.client.wire_log import WireLogOption, check_wire_log
from acp_client.reconnect.strategy import Action, Capabilities, DefaultStrategy, Forget, Reattach, StatusProbe
from acp_client.sessions import SessionRecord

__all__ = ["BridgeOptions", "BridgeStrategy", "describe_url"]


def describe_url(url: str) -> str:
    """``scheme://host:port/path`` of ``url``, without credentials or query (they may hold a token). A string
    that is no URL (no scheme or no host: ``127.0.0.1:8765/acp``, ``http//nope``) is shown as given, less its
    query, fragment and anything before an ``@``."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "<malformed URL>"
    if not parts.scheme or not parts.netloc:
        shown = url.split("?", 1)[0].split("#", 1)[0]
        return shown.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"


@dataclass(frozen=True, slots=True, repr=False)
class BridgeOptions:
    """How the bridge reaches the remote agent and how long it waits (float seconds).

    ``outage_timeout`` bounds how long an editor request waits for the link to come back;
    ``connect_timeout`` bounds reaching the remote when the editor initializes (5 s: then ``initialize`` is
    answered with an error naming the last attempt's cause, and the bridge exits);
    ``ping_interval``/``ping_timeout`` set the liveness check that notices a silent (half-open) drop;
    ``max_backoff`` caps the wait between reconnect attempts (an editor request also cuts a wait short);
    ``max_frame_bytes`` bounds one message from the remote. ``wire_log`` (a path or a
    :class:`~acp_client.WireLog`; default ``None``) writes the remote link's frames and lifecycle as JSON
    lines (``acp-client wire-log FILE`` reads them). The bridge hands them to the client's
    :class:`~acp_client.Timeouts` and :class:`~acp_client.TransportOptions`; an invalid value is a
    :class:`~acp_client.exceptions.UsageError` here already, naming the field.
    """

    url: str = field(repr=False)  # may carry a token in its query
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # Authorization ...
    store: str | None = None
    outage_timeout: float = 30.0
    connect_timeout: float = 5.0
    ping_interval: float | None = 10.0
    ping_timeout: float | None = 10.0
    max_backoff: float = 5.0
    max_frame_bytes: int = 16 * 1024 * 1024
    wire_log: WireLogOption = None

    def __post_init__(self) -> None:
        check_wire_log("BridgeOptions.wire_log", self.wire_log)
        for name in ("outage_timeout", "connect_timeout", "max_backoff"):
            check_seconds("BridgeOptions", name, getattr(self, name))
        for name in ("ping_interval", "ping_timeout"):
            check_seconds("BridgeOptions", name, getattr(self, name), optional=True)
        check_count("BridgeOptions", "max_frame_bytes", self.max_frame_bytes)

    def __repr__(self) -> str:
        return (
            f"BridgeOptions(url={describe_url(self.url)!r}, headers=<{len(self.headers)} hidden>, "
            f"store={self.store!r}, outage_timeout={self.outage_timeout}, connect_timeout={self.connect_timeout})"
        )


class BridgeStrategy:
    """Recovery for the bridge: prefer a replay whenever the agent can give one.

    The bridge compares a replay with what the editor already has and forwards only what is new, so a
    replay lets the editor get exactly what it missed; a resume without one can only end in a gap notice.
    v1 sessions are therefore restored with ``session/load`` when advertised (even when still live), v2
    ones with ``replayFrom: start`` (the default strategy); everything else as the default strategy says.
    """

    def __init__(self) -> None:
        self._default = DefaultStrategy()

    def __repr__(self) -> str:
        return "BridgeStrategy()"

    def decide(self, record: SessionRecord, probe: StatusProbe, capabilities: Capabilities) -> Action:
        """See the class docstring."""
        if probe.not_found:
            return Forget("unknown")
        if capabilities.protocol_version < 2 and capabilities.load:
            return Reattach("load", replay=True, outcome="reattached" if probe.active else "restored")
        return self._default.decide(record, probe, capabilities)

"""The settings of one :class:`~acp_client.ReconnectingClient`, stated once: :class:`ClientSettings`.

Each field is one keyword of ``ReconnectingClient(...)``, in the signature's order, with the check that
refuses a bad value (the field's ``metadata["check"]``) and, for a keyword whose default is ``None`` but
means an object, the factory of that object. :meth:`ClientSettings.from_keywords` walks the fields: it
checks every keyword as given, folds the deprecated flat keywords into the option objects and fills in
the defaults. The assembly (:func:`~acp_client.reconnect._assembly.assemble`) reads the result; the
blocking facade's signature is derived from the async one, which a test holds to these fields.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from acp_client._checks import check_bool, check_callables, check_instance, check_str_mapping, option_object
from acp_client.client import ACPClient, ProtocolVersionOption
from acp_client.client._connect import check_protocol_version, check_target
from acp_client.client.options import fold_flat_keywords
from acp_client.client.wire_log import WireLogOption, check_wire_log
from acp_client.exceptions import UsageError
from acp_client.handlers import ClientHandlers
from acp_client.reconnect._backoff import Backoff, Clock, CrashLoopBreaker, check_clock
from acp_client.reconnect._connection.classify import Classifier, classify_error
from acp_client.reconnect.options import FLAT_KEYWORDS, Limits, McpSecrets, RecoveryPolicy, Timeouts
from acp_client.reconnect.strategy import DefaultStrategy, RecoveryStrategy, check_strategy
from acp_client.sessions import MemorySessionStore, SessionStore, SharedSessionStore
from acp_client.transports import Transport, TransportOptions

__all__ = ["ClientSettings", "check_reconnect_target"]

#: a field's check: called with the keyword's name and its value as given (``None`` included)
Check = Callable[[str, Any], object]


def _checked(check: Check, **more: object) -> dict[str, object]:
    return {"check": check, **more}


def _instance(kind: type) -> Check:
    return lambda name, value: check_instance("", name, value, kind)


def _callable(name: str, value: object) -> None:
    check_callables("", **{name: value})


def _required_callable(name: str, value: object) -> None:
    """A hook with a default of its own (not ``None``): ``None`` is refused like any other non-callable."""
    if not callable(value):
        raise UsageError(f"{name} must be a callable, not {value!r}")


def check_reconnect_target(target: object) -> None:
    """Raise :class:`UsageError` unless a reconnecting client can reopen ``target`` (not an open transport)."""
    if isinstance(target, Transport):
        raise UsageError("a ReconnectingClient needs something it can reopen: a URL, an argv list or a factory")
    check_target(target)


def _signature_default(spec: Any) -> object:
    """The keyword's default in ``ReconnectingClient(...)``: the field's plain default, or ``None`` (a field
    with a factory is ``None`` in the signature)."""
    return None if spec.default is MISSING else spec.default


def _option(kind: type) -> dict[str, object]:
    """An option object (``timeouts=`` ...): ``None`` is a default one; the deprecated flat keywords fold
    into it."""
    return _checked(lambda name, value: option_object(name, value, kind), option=True)


@dataclass(frozen=True, kw_only=True, slots=True)
class ClientSettings:
    """The keywords of ``ReconnectingClient(...)`` once checked, with every default filled in (see the
    client's docstring for what each one does). ``backoff`` and ``breaker`` stay ``None`` when not given:
    their defaults are built from ``rng`` and ``clock`` by the assembly."""

    handlers: ClientHandlers = field(default_factory=ClientHandlers, metadata=_checked(_instance(ClientHandlers)))
    protocol_version: ProtocolVersionOption = field(
        default="auto", metadata=_checked(lambda name, value: check_protocol_version(value))
    )
    client_info: Mapping[str, str] | None = field(
        default=None, metadata=_checked(lambda name, value: check_str_mapping("", name, value))
    )
    store: SessionStore = field(default_factory=MemorySessionStore, metadata=_checked(_instance(SessionStore)))
    strategy: RecoveryStrategy = field(default_factory=DefaultStrategy, metadata=_checked(check_strategy))
    policy: RecoveryPolicy = field(default_factory=RecoveryPolicy, metadata=_option(RecoveryPolicy))
    should_own: Callable[[str], bool] | None = field(default=None, metadata=_checked(_callable))
    mcp_secrets: McpSecrets | None = field(default=None, metadata=_checked(_callable))
    timeouts: Timeouts = field(default_factory=Timeouts, metadata=_option(Timeouts))
    limits: Limits = field(default_factory=Limits, metadata=_option(Limits))
    transport_options: TransportOptions = field(default_factory=TransportOptions, metadata=_option(TransportOptions))
    backoff: Backoff | None = field(default=None, metadata=_checked(_instance(Backoff)))
    breaker: CrashLoopBreaker | None = field(default=None, metadata=_checked(_instance(CrashLoopBreaker)))
    classifier: Classifier = field(default=classify_error, metadata=_checked(_required_callable))
    on_auth_required: Callable[[ACPClient], Awaitable[None]] | None = field(default=None, metadata=_checked(_callable))
    wait_for_ready: bool = field(default=False, metadata=_checked(lambda name, value: check_bool("", name, value)))
    wire_log: WireLogOption = field(default=None, metadata=_checked(check_wire_log))
    clock: Clock = field(default_factory=Clock, metadata=_checked(check_clock))
    rng: random.Random = field(default_factory=random.Random, metadata=_checked(_instance(random.Random)))

    @classmethod
    def from_options(cls, target: object, options: Mapping[str, Any], *, warn: bool = True) -> ClientSettings:
        """What ``ReconnectingClient(target, **options)`` checks, from its keywords as a mapping (a keyword
        not given takes its signature's default): the target, then :meth:`from_keywords`. The blocking
        facade calls it (``warn=False``: the construction that follows warns) before its loop thread starts."""
        check_reconnect_target(target)
        names = {spec.name for spec in fields(cls)}
        given = {spec.name: options.get(spec.name, _signature_default(spec)) for spec in fields(cls)}
        deprecated = {name: value for name, value in options.items() if name not in names}
        return cls.from_keywords(given, deprecated, warn=warn)

    @classmethod
    def from_keywords(
        cls, given: Mapping[str, Any], deprecated: Mapping[str, object], *, warn: bool = True
    ) -> ClientSettings:
        """Check each keyword as given (a :class:`UsageError` naming the first bad one), fold the
        ``deprecated`` flat keywords into the option objects (each warns unless ``warn`` is false), and
        fill in the defaults of those left at ``None``. ``given`` holds every field by name (the client's
        signature lists them all)."""
        values: dict[str, Any] = {}
        options: dict[str, Any] = {}
        for spec in fields(cls):
            value = given[spec.name]
            checked = spec.metadata["check"](spec.name, value)
            if spec.metadata.get("option"):
                options[spec.name] = checked  # the option object itself (a default one for None)
            elif value is not None or spec.default_factory is MISSING:
                values[spec.name] = value
        if deprecated:
            options = fold_flat_keywords("ReconnectingClient", deprecated, FLAT_KEYWORDS, options, warn=warn)
        if values.get("should_own") is not None and not isinstance(values.get("store"), SharedSessionStore):
            raise UsageError("should_own needs a store shared by several workers (RedisSessionStore)")
        return cls(**values, **options)

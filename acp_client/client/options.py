"""How long the client waits: :class:`Timeouts`, one frozen value object with one job per setting.

:func:`~acp_client.connect` reads ``initialize`` and ``request``; :class:`~acp_client.ReconnectingClient`
reads all of them. The link's own waits (opening it, the keepalive, the closing handshake) belong to the
transport and are fields of :class:`~acp_client.transports.TransportOptions`.

:data:`USE_CLIENT_DEFAULT` is the default ``timeout=`` of every request the SDK sends for the application:
the call then runs with ``Timeouts.request``. The checks the option objects run at construction
(``check_*``) live in :mod:`acp_client._checks`, shared by every layer, and are re-exported here.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, TypeAlias, TypeVar

from acp_client._checks import check_callables, check_count, check_seconds, is_number, option_object

__all__ = [
    "USE_CLIENT_DEFAULT",
    "RequestTimeout",
    "Timeouts",
    "UseClientDefault",
    "check_callables",
    "check_count",
    "check_seconds",
    "fold_flat_keywords",
    "option_object",
]

_O = TypeVar("_O")


class UseClientDefault:
    """The type of :data:`USE_CLIENT_DEFAULT`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "USE_CLIENT_DEFAULT"

    def __reduce__(self) -> str:
        return "USE_CLIENT_DEFAULT"  # one instance, also after a copy or a pickle


#: The default of every ``timeout=`` of a request: "the client's ``Timeouts.request``" (the ``request_timeout``
#: of a bare :class:`~acp_client.client.ACPClient`). Pass a number of seconds to bound one call otherwise,
#: or ``None`` for no deadline at all.
USE_CLIENT_DEFAULT: Final = UseClientDefault()

#: What a request's ``timeout=`` takes: float seconds, ``None`` (no deadline) or :data:`USE_CLIENT_DEFAULT`.
RequestTimeout: TypeAlias = float | UseClientDefault | None


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long each wait of a client may take, in float seconds (``None`` where allowed: no limit).

    Every setting bounds exactly one thing:

    ``initialize`` (default ``10.0``, or ``None``)
        the ``initialize`` handshake of each new connection.
    ``request`` (default ``30.0``, or ``None``: no deadline)
        every request the SDK sends for the application without a ``timeout=`` of its own
        (``session_status()``, ``new_session()``, ``list_sessions()`` (each page), ``request()`` ...: their
        ``timeout=`` defaults to :data:`USE_CLIENT_DEFAULT`, and a number or ``None`` given there wins).
        Two calls keep a deadline of their own, documented where they are: ``initialize`` (the setting
        above) and ``Session.prompt()``, whose turn may run for as long as the agent works (no deadline
        unless its ``timeout=`` says).
    ``probe`` (default ``10.0``)
        one ``session/status`` probe: the one that opens a session's recovery, and the ones
        ``reconcile`` sends for sessions that look attached.
    ``strategy`` (default ``10.0``)
        a recovery strategy whose ``decide()`` is a coroutine (it holds no recovery slot meanwhile).
    ``replay_silence`` (default ``10.0``)
        the silence during ``session/resume``/``session/load`` after which the attempt is given up (a
        replay that keeps streaming is never cut off by it).
    ``recovery_deadline`` (default ``None``)
        an overall cap on one ``session/resume``/``session/load``, streaming or not.
    ``recovery_round`` (default ``60.0``, or ``None``: wait for every session)
        how long a recovery round waits for its sessions' first outcomes before the client is ``READY``;
        a session still recovering then (a replay that never ends) is reported failed-and-retrying
        (:class:`~acp_client.reconnect.SessionRecoveryFailed`) while its attempt goes on.
    ``list_check`` (default ``40.0``)
        walking ``session/list`` (every page) to learn whether the agent still knows a session that a
        resume/load refused with a code that does not say so.
    ``session_wait`` (default ``30.0``)
        how long a session call waits for the connection, or for its session's re-attachment, before it
        fails without having been sent.
    ``ready`` (default ``30.0``, or ``None``: wait forever)
        entering ``async with ReconnectingClient(...)`` (and the sync facade's ``with`` or first use): the
        wait for the first ready connection. Past it the client closes and raises
        :class:`~acp_client.exceptions.ACPTimeoutError` (a :class:`TimeoutError` too) whose text names the
        last attempt's cause. ``Timeouts(ready=None)`` waits until the agent answers, however long.

    Every invalid value raises :class:`~acp_client.exceptions.UsageError` at construction. Change a copy
    with :func:`dataclasses.replace`.
    """

    initialize: float | None = 10.0
    request: float | None = 30.0
    probe: float = 10.0
    strategy: float = 10.0
    replay_silence: float = 10.0
    recovery_deadline: float | None = None
    recovery_round: float | None = 60.0
    list_check: float = 40.0
    session_wait: float = 30.0
    ready: float | None = 30.0

    def __post_init__(self) -> None:
        for name in ("initialize", "request", "recovery_deadline", "recovery_round", "ready"):
            check_seconds("Timeouts", name, getattr(self, name), optional=True)
        for name in ("probe", "strategy", "replay_silence", "list_check", "session_wait"):
            check_seconds("Timeouts", name, getattr(self, name))


#: ``(object, field, factor)``: where a deprecated flat keyword's value goes (``factor`` scales a number).
Destination = tuple[str, str, float]


def fold_flat_keywords(
    caller: str,
    flat: Mapping[str, object],
    table: Mapping[str, tuple[Destination, ...]],
    objects: dict[str, _O],
    *,
    warn: bool = True,
) -> dict[str, _O]:
    """Fold deprecated flat keywords (``request_timeout=5``) into copies of the option objects they map to.

    ``table`` maps each old keyword to its destinations; ``objects`` are the option objects by the keyword
    that passes them (``"timeouts"`` ...). Each flat keyword used warns once with
    :class:`DeprecationWarning` naming its replacement (unless ``warn`` is false: a check made ahead of the
    construction that warns); an unknown one raises ``TypeError`` as Python does. Returns the new objects
    (validated again by their constructors).
    """
    changes: dict[str, dict[str, object]] = {}
    for keyword, value in flat.items():
        destinations = table.get(keyword)
        if destinations is None:
            raise TypeError(f"{caller}() got an unexpected keyword argument {keyword!r}")
        spelled = ", ".join(
            f"{group}={type(objects[group]).__name__}({field}=...)" for group, field, _ in destinations
        )
        if warn:
            warnings.warn(
                f"{caller}({keyword}=...) is deprecated and will be removed in the next release; use {spelled}",
                DeprecationWarning,
                stacklevel=3,
            )
        for group, field, factor in destinations:
            scaled = value * factor if factor != 1 and is_number(value) else value  # type: ignore[operator]
            changes.setdefault(group, {})[field] = scaled
    result = dict(objects)
    for group, fields in changes.items():
        result[group] = dataclasses.replace(result[group], **fields)  # type: ignore[type-var]
    return result

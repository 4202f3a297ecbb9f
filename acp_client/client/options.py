"""How long the client waits: :class:`Timeouts`, one frozen value object with one job per setting.

:func:`~acp_client.connect` reads ``initialize`` and ``request``; :class:`~acp_client.ReconnectingClient`
reads all of them. The link's own waits (opening it, the keepalive, the closing handshake) belong to the
transport and are fields of :class:`~acp_client.transports.TransportOptions`.

This module also holds the checks every option object of the package runs at construction (``check_*``):
each raises :class:`~acp_client.exceptions.UsageError` naming the object, the field and the accepted range.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from acp_client.exceptions import UsageError

__all__ = ["Timeouts", "check_count", "check_seconds", "fold_flat_keywords"]

_O = TypeVar("_O")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_seconds(
    owner: str, name: str, value: object, *, optional: bool = False, zero: bool = False
) -> None:
    """Raise :class:`UsageError` unless ``value`` is a finite number of seconds: positive (``zero``: or
    zero), or ``None`` when ``optional``."""
    if value is None and optional:
        return
    ok = _is_number(value) and math.isfinite(value) and (value >= 0 if zero else value > 0)  # type: ignore[operator,arg-type]
    if not ok:
        accepted = "a number of seconds >= 0" if zero else "a number of seconds > 0"
        raise UsageError(f"{owner}.{name} must be {accepted}{' or None' if optional else ''}, not {value!r}")


def check_count(owner: str, name: str, value: object, *, minimum: int = 1) -> None:
    """Raise :class:`UsageError` unless ``value`` is an int of at least ``minimum``."""
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
        raise UsageError(f"{owner}.{name} must be an int >= {minimum}, not {value!r}")


_K = TypeVar("_K")


def option_object(name: str, value: object, kind: type[_K]) -> _K:
    """``value`` as the option object ``kind`` (a default one for ``None``); anything else is a
    :class:`UsageError` naming the keyword. The one check of ``timeouts=``, ``policy=``, ``limits=`` and
    ``transport_options=`` for ``connect()`` and ``ReconnectingClient``."""
    if value is None:
        return kind()
    if isinstance(value, kind):
        return value
    raise UsageError(f"{name} must be a {kind.__name__}, not {type(value).__name__}")


def check_callables(**hooks: object) -> None:
    """Raise :class:`UsageError` for a hook that is neither a callable nor ``None``."""
    for name, hook in hooks.items():
        if hook is not None and not callable(hook):
            raise UsageError(f"{name} must be a callable or None, not {hook!r}")


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long each wait of a client may take, in float seconds (``None`` where allowed: no limit).

    Every setting bounds exactly one thing:

    ``initialize`` (default ``10.0``, or ``None``)
        the ``initialize`` handshake of each new connection.
    ``request`` (default ``30.0``, or ``None``)
        any request sent without a ``timeout=`` of its own.
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
    caller: str, flat: Mapping[str, object], table: Mapping[str, tuple[Destination, ...]], objects: dict[str, _O]
) -> dict[str, _O]:
    """Fold deprecated flat keywords (``request_timeout=5``) into copies of the option objects they map to.

    ``table`` maps each old keyword to its destinations; ``objects`` are the option objects by the keyword
    that passes them (``"timeouts"`` ...). Each flat keyword used warns once with
    :class:`DeprecationWarning` naming its replacement; an unknown one raises ``TypeError`` as Python does.
    Returns the new objects (validated again by their constructors).
    """
    changes: dict[str, dict[str, object]] = {}
    for keyword, value in flat.items():
        destinations = table.get(keyword)
        if destinations is None:
            raise TypeError(f"{caller}() got an unexpected keyword argument {keyword!r}")
        spelled = ", ".join(
            f"{group}={type(objects[group]).__name__}({field}=...)" for group, field, _ in destinations
        )
        warnings.warn(
            f"{caller}({keyword}=...) is deprecated and will be removed in the next release; use {spelled}",
            DeprecationWarning,
            stacklevel=3,
        )
        for group, field, factor in destinations:
            scaled = value * factor if factor != 1 and _is_number(value) else value  # type: ignore[operator]
            changes.setdefault(group, {})[field] = scaled
    result = dict(objects)
    for group, fields in changes.items():
        result[group] = dataclasses.replace(result[group], **fields)  # type: ignore[type-var]
    return result

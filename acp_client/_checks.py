"""The checks every public constructor runs on its keywords, in one place.

A value is refused when it is given, never later: each check raises
:class:`~acp_client.exceptions.UsageError` whose text starts with the keyword's name and says what it accepts
and what it got. ``owner`` prefixes the name for the fields of an object (``"Timeouts"`` gives
``Timeouts.request must be ...``); ``""`` leaves a plain keyword of a function or client
(``backoff must be ...``). Every layer may use them: this module needs nothing but the exceptions.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Mapping
from typing import TypeVar

from acp_client.exceptions import UsageError

__all__ = [
    "check_bool",
    "check_callable",
    "check_callables",
    "check_choice",
    "check_count",
    "check_instance",
    "check_number",
    "check_path",
    "check_seconds",
    "check_str_mapping",
    "is_number",
    "option_object",
]

_K = TypeVar("_K")


def _named(owner: str, name: str) -> str:
    return f"{owner}.{name}" if owner else name


def is_number(value: object) -> bool:
    """An ``int`` or ``float`` that is not a ``bool``."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_number(owner: str, name: str, value: object, *, minimum: float = 0.0, above: bool = False) -> None:
    """Raise :class:`UsageError` unless ``value`` is a finite number ``>= minimum`` (``above``: ``> minimum``)."""
    ok = is_number(value) and math.isfinite(value) and (value > minimum if above else value >= minimum)  # type: ignore[arg-type,operator]
    if not ok:
        raise UsageError(f"{_named(owner, name)} must be a number {'>' if above else '>='} {minimum:g}, not {value!r}")


def check_seconds(owner: str, name: str, value: object, *, optional: bool = False, zero: bool = False) -> None:
    """Raise :class:`UsageError` unless ``value`` is a finite number of seconds: positive (``zero``: or
    zero), or ``None`` when ``optional``."""
    if value is None and optional:
        return
    ok = is_number(value) and math.isfinite(value) and (value >= 0 if zero else value > 0)  # type: ignore[operator,arg-type]
    if not ok:
        accepted = "a number of seconds >= 0" if zero else "a number of seconds > 0"
        raise UsageError(f"{_named(owner, name)} must be {accepted}{' or None' if optional else ''}, not {value!r}")


def check_count(owner: str, name: str, value: object, *, minimum: int = 1) -> None:
    """Raise :class:`UsageError` unless ``value`` is an int of at least ``minimum``."""
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
        raise UsageError(f"{_named(owner, name)} must be an int >= {minimum}, not {value!r}")


def check_bool(owner: str, name: str, value: object) -> None:
    """Raise :class:`UsageError` unless ``value`` is ``True`` or ``False`` (not merely truthy)."""
    if not isinstance(value, bool):
        raise UsageError(f"{_named(owner, name)} must be True or False, not {value!r}")


def check_choice(owner: str, name: str, value: object, choices: Collection[object]) -> None:
    """Raise :class:`UsageError` unless ``value`` is one of ``choices`` (``True`` is not taken for ``1``)."""
    if not any(value == choice and type(value) is type(choice) for choice in choices):
        accepted = ", ".join(repr(choice) for choice in choices)
        raise UsageError(f"{_named(owner, name)} must be one of {accepted}, not {value!r}")


def check_callable(owner: str, name: str, value: object, *, optional: bool = False) -> None:
    """Raise :class:`UsageError` unless ``value`` is callable (or ``None`` when ``optional``)."""
    if value is None and optional:
        return
    if not callable(value):
        raise UsageError(f"{_named(owner, name)} must be a callable{' or None' if optional else ''}, not {value!r}")


def check_callables(owner: str = "", **hooks: object) -> None:
    """Raise :class:`UsageError` for a hook that is neither a callable nor ``None``."""
    for name, hook in hooks.items():
        if hook is not None and not callable(hook):
            raise UsageError(f"{_named(owner, name)} must be a callable or None, not {hook!r}")


def check_instance(
    owner: str, name: str, value: object, kind: type | tuple[type, ...], *, optional: bool = True
) -> None:
    """Raise :class:`UsageError` unless ``value`` is an instance of ``kind`` (or ``None`` when ``optional``)."""
    if value is None and optional:
        return
    if not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        spelled = " or ".join(k.__name__ for k in kinds) + (" or None" if optional else "")
        raise UsageError(f"{_named(owner, name)} must be a {spelled}, not {type(value).__name__}")


def check_str_mapping(owner: str, name: str, value: object, *, optional: bool = True) -> None:
    """Raise :class:`UsageError` unless ``value`` is a mapping of ``str`` to ``str`` (or ``None``); the
    values are never shown (they may be secrets)."""
    if value is None and optional:
        return
    if not (isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
        raise UsageError(f"{_named(owner, name)} must be a mapping of str to str{' or None' if optional else ''}")


def check_path(owner: str, name: str, value: object, *, optional: bool = False) -> None:
    """Raise :class:`UsageError` unless ``value`` is a ``str`` or ``os.PathLike`` (or ``None`` when ``optional``)."""
    if value is None and optional:
        return
    if not isinstance(value, str | os.PathLike):
        raise UsageError(f"{_named(owner, name)} must be a path{' or None' if optional else ''}, not {value!r}")


def option_object(name: str, value: object, kind: type[_K]) -> _K:
    """``value`` as the option object ``kind`` (a default one for ``None``); anything else is a
    :class:`UsageError` naming the keyword. The one check of ``timeouts=``, ``policy=``, ``limits=`` and
    ``transport_options=`` for ``connect()`` and ``ReconnectingClient``."""
    if value is None:
        return kind()
    if isinstance(value, kind):
        return value
    raise UsageError(f"{name} must be a {kind.__name__}, not {type(value).__name__}")

"""Library logging: quiet unless the application asks, structured when it does, and nothing secret in it.

Every module takes its logger from :func:`get_logger` (``acp_client.<module>``). Each call picks its route
when it is made, so the application may configure logging before or after importing ``acp_client``:

* **structlog is configured** — the application called ``structlog.configure(...)``, or a
  ``structlog.testing.capture_logs()`` block is running — *and* that configuration is not structlog's
  built-in default (pretty lines printed to **stdout**): the event goes to structlog with its key/values
  bound, so the application's processors see the full structured stream (stable snake_case event names).
  ``capture_logs`` leaves structlog marked as configured with the default setup restored; that counts as
  the default, so a test helper cannot make the library print.
* **otherwise** the event goes to the stdlib :mod:`logging` logger of the same name, as a record whose
  message is ``event key=value ...`` (rendered lazily, only if a handler emits it) and whose
  ``acp_event`` / ``acp_fields`` attributes carry the structured data. The ``acp_client`` logger has a
  :class:`logging.NullHandler`, so without any configuration nothing is written anywhere — not even
  warnings, which would otherwise reach stderr through :data:`logging.lastResort`.

The library never calls ``structlog.configure()`` or ``logging.basicConfig()``, and never uses
structlog's default setup, which would print to stdout. One line turns the stream on::

    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))  # every event, stderr
    logging.basicConfig(level=logging.DEBUG)   # or: stdlib logging (stderr)

See ``docs/topics/logging.md``.
"""

from __future__ import annotations

import inspect
import logging
import pickle
from collections.abc import Iterable, Mapping
from typing import Any

import structlog
import structlog.contextvars
import structlog.dev
import structlog.processors

from acp_client._redact import redact_url, scrub_urls

__all__ = [
    "LOGGABLE_HEADER_NAMES",
    "SECRET_HEADER_NAMES",
    "LibraryLogger",
    "get_logger",
    "loggable_headers",
    "redact_headers",
    "redact_url",
    "scrub_urls",
]

#: Header names whose values never appear in logs, reprs or error messages.
SECRET_HEADER_NAMES = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
)

#: Header names whose values a log line may show; every other value is logged as ``<redacted>`` (a custom
#: auth header such as ``X-Auth-Token``, ``Private-Token`` or ``X-Goog-Api-Key`` has a name nobody can list
#: in advance). Names starting with ``acp-`` are shown too.
LOGGABLE_HEADER_NAMES = frozenset(
    {
        "accept",
        "accept-encoding",
        "connection",
        "content-length",
        "content-type",
        "last-event-id",
        "retry-after",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
        "sec-websocket-version",
        "upgrade",
        "user-agent",
    }
)

#: The root of every logger the library uses; it carries a ``NullHandler`` (standard library manners).
ROOT_LOGGER_NAME = "acp_client"
logging.getLogger(ROOT_LOGGER_NAME).addHandler(logging.NullHandler())

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "msg": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


_ConfigKey = tuple[int, int, int, int]
#: configuration key (see :func:`_config_key`) -> whether structlog should get events
_route_cache: dict[_ConfigKey, bool] = {}


def _config_key() -> _ConfigKey:
    """Identifies structlog's current configuration: its logger factory, processor list (and its length:
    ``capture_logs`` edits the list in place) and wrapper class. ``get_config()`` hands out the configured
    objects themselves (a small dict, no copies), so this is cheap enough for every event."""
    config = structlog.get_config()
    processors = config["processors"]
    return (id(config["logger_factory"]), id(processors), len(processors), id(config["wrapper_class"]))


def _shape(processors: Iterable[Any]) -> tuple[Any, ...]:
    """Processors compared by kind: functions by identity, processor objects by type."""
    return tuple(p if inspect.isfunction(p) else type(p) for p in processors)


#: The processor chain structlog uses when nobody configured it (stable across structlog 23-26).
_DEFAULT_SHAPE = _shape(
    [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.StackInfoRenderer(),
        structlog.dev.set_exc_info,
        structlog.processors.TimeStamper(),
        structlog.dev.ConsoleRenderer(colors=False),
    ]
)


#: structlog's default wrapper class: no level filtering.
_DEFAULT_WRAPPER = structlog.make_filtering_bound_logger(logging.NOTSET)


def _is_builtin_default(config: Mapping[str, Any]) -> bool:
    """structlog's own default: its default processor chain and level filter, printing to stdout (what
    ``configure()`` with no arguments, and the end of a ``capture_logs()`` block, leave behind). Changing
    any of the three (processors, logger factory, wrapper class) is the application's own choice."""
    return (
        _prints_to_stdout(config["logger_factory"])
        and config["wrapper_class"] is _DEFAULT_WRAPPER
        and _shape(config["processors"]) == _DEFAULT_SHAPE
    )


#: How a :class:`structlog.PrintLogger` on standard output pickles: structlog pickles a print logger as the
#: name of its stream (``"stdout"`` or ``"stderr"``) and refuses any other file.
_STDOUT_PICKLE = pickle.dumps(structlog.PrintLogger())


def _prints_to_stdout(factory: object) -> bool:
    """Whether ``factory`` is structlog's print logger factory writing to standard output, asked through
    structlog's public surface only: the loggers it makes, pickled (see :data:`_STDOUT_PICKLE`)."""
    if not isinstance(factory, structlog.PrintLoggerFactory):
        return False
    try:
        return pickle.dumps(factory()) == _STDOUT_PICKLE
    except (pickle.PicklingError, TypeError):  # a file of its own: the application's choice
        return False


def _wanted(key: _ConfigKey) -> bool:
    wanted = _route_cache.get(key)
    if wanted is None:
        if len(_route_cache) > 64:
            _route_cache.clear()
        wanted = _route_cache[key] = not _is_builtin_default(structlog.get_config())
    return wanted


def structlog_wanted() -> bool:
    """Whether the application configured structlog (other than structlog's stdout default)."""
    return structlog.is_configured() and _wanted(_config_key())


class _Message:
    """A stdlib log message rendered only when a handler formats it."""

    __slots__ = ("event", "fields")

    def __init__(self, event: str, fields: dict[str, Any]) -> None:
        self.event = event
        self.fields = fields

    def __str__(self) -> str:
        if not self.fields:
            return self.event
        return self.event + " " + " ".join(f"{key}={value!r}" for key, value in self.fields.items())


class LibraryLogger:
    """What :func:`get_logger` returns: structlog's bound-logger methods, routed per call (see the module).

    Supports ``bind``/``new``/``unbind``/``try_unbind`` and the level methods ``debug``, ``info``,
    ``warning``, ``error``, ``exception`` and ``critical`` with structlog's calling convention
    ``log.info("event_name", key=value)``.
    """

    __slots__ = ("_bound", "_bound_key", "_context", "_name", "_stdlib")

    def __init__(self, name: str, context: dict[str, Any]) -> None:
        self._name = name
        self._context = context
        self._bound: Any = None  # a structlog logger bound to the configuration identified by _bound_key
        self._bound_key: _ConfigKey | None = None
        self._stdlib = logging.getLogger(name)

    def __repr__(self) -> str:
        return f"<LibraryLogger {self._name} {sorted(self._context)}>"

    # ------------------------------------------------------------------ context

    def bind(self, **values: Any) -> LibraryLogger:
        """A logger with ``values`` added to every event."""
        return LibraryLogger(self._name, {**self._context, **values})

    def new(self, **values: Any) -> LibraryLogger:
        """A logger with only ``values`` bound."""
        return LibraryLogger(self._name, dict(values))

    def unbind(self, *keys: str) -> LibraryLogger:
        """A logger without ``keys`` (``KeyError`` if one is not bound)."""
        context = dict(self._context)
        for key in keys:
            del context[key]
        return LibraryLogger(self._name, context)

    def try_unbind(self, *keys: str) -> LibraryLogger:
        """A logger without ``keys`` (missing ones are ignored)."""
        return LibraryLogger(self._name, {k: v for k, v in self._context.items() if k not in keys})

    # ------------------------------------------------------------------ emitting

    def _structlog_route(self) -> Any:
        """The bound structlog logger events go to, or ``None`` for the stdlib route."""
        if not structlog.is_configured():
            return None
        key = _config_key()
        if key != self._bound_key:
            # binding resolves the configuration once; rebound only when the configuration changes
            wanted = _wanted(key)
            self._bound = structlog.get_logger(self._name).bind(**self._context) if wanted else None
            self._bound_key = key
        return self._bound

    def is_enabled(self, method: str) -> bool:
        """Whether an event logged with ``method`` (``"info"``, ...) could reach anything: a caller that
        builds costly values for a frequent event may skip it when not. Conservative: a structlog
        configuration that cannot say (no ``is_enabled_for``) counts as enabled."""
        bound = self._structlog_route()
        if bound is not None:
            check = getattr(bound, "is_enabled_for", None)
            return check is None or bool(check(_LEVELS[method]))
        return self._stdlib.isEnabledFor(_LEVELS[method])

    def _emit(self, method: str, event: str, values: dict[str, Any]) -> None:
        bound = self._structlog_route()
        if bound is not None:
            getattr(bound, method)(event, **_scrubbed(values))
            return
        level = _LEVELS[method]
        if not self._stdlib.isEnabledFor(level):
            return
        exc_info = values.pop("exc_info", method == "exception")
        fields = _scrubbed({**self._context, **values})
        self._stdlib.log(
            level,
            _Message(event, fields),
            exc_info=exc_info,
            extra={"acp_event": event, "acp_fields": fields},
            stacklevel=3,
        )

    def debug(self, event: str, **values: Any) -> None:
        """Log ``event`` at debug level."""
        self._emit("debug", event, values)

    def info(self, event: str, **values: Any) -> None:
        """Log ``event`` at info level."""
        self._emit("info", event, values)

    def msg(self, event: str, **values: Any) -> None:
        """Log ``event`` at info level (structlog's alias)."""
        self._emit("msg", event, values)

    def warning(self, event: str, **values: Any) -> None:
        """Log ``event`` at warning level."""
        self._emit("warning", event, values)

    warn = warning

    def error(self, event: str, **values: Any) -> None:
        """Log ``event`` at error level."""
        self._emit("error", event, values)

    def exception(self, event: str, **values: Any) -> None:
        """Log ``event`` at error level with the current exception's traceback."""
        self._emit("exception", event, values)

    def critical(self, event: str, **values: Any) -> None:
        """Log ``event`` at critical level."""
        self._emit("critical", event, values)


def get_logger(name: str, **initial: Any) -> LibraryLogger:
    """The library logger for module ``name`` (``acp_client.*``) with ``initial`` bound. Never configures
    logging: without configuration it is silent (see the module docstring)."""
    return LibraryLogger(name, dict(initial))


def redact_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> dict[str, str]:
    """A copy of ``headers`` fit for logs: secret values are replaced by ``"<redacted>"``."""
    if headers is None:
        return {}
    items = headers.items() if isinstance(headers, Mapping) else headers
    return {k: ("<redacted>" if k.lower() in SECRET_HEADER_NAMES else v) for k, v in items}


def _scrubbed(values: dict[str, Any]) -> dict[str, Any]:
    """Log values with the URLs in their strings scrubbed (at every level, in both routes)."""
    for key, value in values.items():
        if type(value) is str and "://" in value:
            values[key] = scrub_urls(value)
    return values


def loggable_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> dict[str, str]:
    """A copy of ``headers`` fit for a log line: values shown only for :data:`LOGGABLE_HEADER_NAMES` and
    ``Acp-*`` names, ``"<redacted>"`` for every other."""
    if headers is None:
        return {}
    items = headers.items() if isinstance(headers, Mapping) else headers
    return {
        k: v if (k.lower() in LOGGABLE_HEADER_NAMES or k.lower().startswith("acp-")) else "<redacted>"
        for k, v in items
    }

"""Library logging: structlog loggers only, never configured here, and nothing secret in them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import structlog

__all__ = ["SECRET_HEADER_NAMES", "get_logger", "redact_headers"]

#: Header names whose values never appear in logs, reprs or error messages.
SECRET_HEADER_NAMES = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
)


def get_logger(name: str, **initial: Any) -> Any:
    """A structlog logger for module ``name``; binds ``initial`` key/values. Never configures logging."""
    return structlog.get_logger(name, **initial)


def redact_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> dict[str, str]:
    """A copy of ``headers`` fit for logs: secret values are replaced by ``"<redacted>"``."""
    if headers is None:
        return {}
    items = headers.items() if isinstance(headers, Mapping) else headers
    return {k: ("<redacted>" if k.lower() in SECRET_HEADER_NAMES else v) for k, v in items}

"""The root of the error tree (see :mod:`acp_client.exceptions`)."""

from __future__ import annotations

from typing import Any

from acp_client._redact import scrub_urls

__all__ = ["ACPError"]


class ACPError(Exception):
    """Root of every error acp-client raises on purpose.

    Its text never shows a URL's userinfo or the value of a token-like query parameter, even when it quotes
    a lower library's message (see :func:`acp_client._redact.scrub_urls`).
    """

    def __str__(self) -> str:
        return scrub_urls(super().__str__())

    def __reduce__(self) -> tuple[Any, ...]:
        # most subclasses take other arguments than the message their ``args`` hold: rebuild from the state
        return (_rebuilt, (type(self), self.args, dict(vars(self))))


def _rebuilt(cls: type[ACPError], args: tuple[Any, ...], state: dict[str, Any]) -> ACPError:
    """An unpickled error: its message and attributes, without running its ``__init__`` again."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error

"""Terminal output shared by the ``acp-client`` command and its demo: colours, error lines, exit codes.

Only the CLI imports this module; the library itself never prints.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TextIO

from acp_client._logging import redact_url

__all__ = ["EXIT_FAILURE", "EXIT_OK", "EXIT_USAGE", "Style", "error", "out", "printable", "short_id", "shown_url"]

# C0 controls (newline and tab included), DEL, C1 controls, and the bidi embeddings, overrides and isolates
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

#: Exit codes of the ``acp-client`` command.
EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class Style:
    """ANSI colours when writing to a terminal and ``NO_COLOR`` is unset; plain text otherwise."""

    _CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34", "cyan": "36"}

    def __init__(self, stream: TextIO) -> None:
        isatty = getattr(stream, "isatty", None)
        self.enabled = bool(isatty and isatty()) and not os.environ.get("NO_COLOR")

    def __call__(self, text: str, *names: str) -> str:
        """``text`` wrapped in the named colours (unchanged when colour is off)."""
        if not self.enabled or not names:
            return text
        codes = ";".join(self._CODES[name] for name in names)
        return f"\033[{codes}m{text}\033[0m"


def printable(text: object) -> str:
    """``text`` safe for a terminal: every control character is shown as an escape (``\\x1b``, ``\\n``), so
    text an agent or a store controls cannot clear the screen, set the title, move the cursor or forge lines.
    Apply it to that text *before* :class:`Style` adds its own colour codes."""
    return _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], str(text))


def shown_url(url: str) -> str:
    """``url`` as the CLI prints it: credentials redacted (userinfo, token-like query values), escaped."""
    return printable(redact_url(url))


def out(line: str) -> None:
    """One line of a command's result on stdout."""
    print(line)


def error(message: str) -> None:
    """One line on stderr; control characters in ``message`` are escaped (see :func:`printable`)."""
    print(f"acp-client: error: {printable(message)}", file=sys.stderr)


def short_id(session_id: str) -> str:
    """A session id short enough for a table column."""
    return session_id.removeprefix("sess_")[:8]

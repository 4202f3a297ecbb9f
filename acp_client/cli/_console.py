"""Terminal output shared by the ``acp-client`` command and its demo: colours, error lines, exit codes.

Only the CLI imports this module; the library itself never prints.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

__all__ = ["EXIT_FAILURE", "EXIT_OK", "EXIT_USAGE", "Style", "error", "out", "short_id"]

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


def out(line: str) -> None:
    """One line of a command's result on stdout."""
    print(line)


def error(message: str) -> None:
    """One line on stderr."""
    print(f"acp-client: error: {message}", file=sys.stderr)


def short_id(session_id: str) -> str:
    """A session id short enough for a table column."""
    return session_id.removeprefix("sess_")[:8]

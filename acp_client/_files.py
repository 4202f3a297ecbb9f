"""Files the library creates that may hold secrets (a session store, its lock, a log file): readable by their
owner only, and never reached through a symbolic link planted in their place."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["make_private_dirs", "open_private"]

#: the mode of every file the library creates (the umask can only narrow it)
PRIVATE_FILE = 0o600
#: the mode of every directory the library creates
PRIVATE_DIR = 0o700


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and any missing parents, each ``0700``; existing ones are left as they are."""
    missing = []
    current = directory
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process: theirs to keep
            path.mkdir(mode=PRIVATE_DIR)


def open_private(path: Path, flags: int) -> int:
    """``os.open`` of ``path`` with ``flags | O_CREAT | O_NOFOLLOW`` and mode ``0600``: a file created here is
    its owner's alone, and a symbolic link in its place is refused (``OSError`` with ``ELOOP``)."""
    return os.open(path, flags | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE)

"""Paths confined to a set of roots, and the blocking file reads and writes that honour them.

The check resolves the path (symlinks included) and requires the result to lie inside a root. The use then
never trusts a path string again: it opens the root and walks down one component at a time with
``O_NOFOLLOW``, so a component swapped for a symlink after the check makes the open fail instead of
leaving the roots. Writes go to a temporary file in the same (already opened) directory and are renamed
over the target: a rename replaces the directory entry and never follows what it replaces.

Everything here blocks; :class:`~acp_client.handlers.Workspace` runs it in a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from acp_client.exceptions import UsageError
from acp_client.handlers._refusal import WorkspaceRefusal

__all__ = ["Located", "Roots", "read_existing", "read_text", "select_lines", "write_text"]

_SYSTEM_PREFIXES = ("/proc", "/sys", "/dev")
# getattr: importing stays possible where these flags do not exist (a Workspace refuses to start there)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_SNIFF = 8192


@dataclass(frozen=True, slots=True)
class Located:
    """A path that passed the check: the root it lies in and its components below that root."""

    path: str
    real: str
    root: str
    parts: tuple[str, ...]


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root if root.endswith(os.sep) else root + os.sep)


class Roots:
    """The directories a workspace serves, resolved once (a root that is a symlink counts as its target)."""

    __slots__ = ("paths",)

    def __init__(self, roots: Sequence[str | os.PathLike[str]]) -> None:
        """Resolve ``roots`` (a list of paths, not one lone path); each must be an existing directory."""
        if isinstance(roots, str | bytes | os.PathLike) or not isinstance(roots, Sequence):
            raise UsageError(f"roots must be a list of directories, not {roots!r}")
        resolved: list[str] = []
        for root in roots:
            if not isinstance(root, str | os.PathLike):
                raise UsageError(f"roots must hold paths, not {root!r}")
            real = os.path.realpath(os.fspath(root))
            if not os.path.isdir(real):
                raise UsageError(f"roots: workspace root {os.fspath(root)!r} is not a directory")
            if real not in resolved:
                resolved.append(real)
        if not resolved:
            raise UsageError("roots must name at least one directory: a workspace needs a root")
        self.paths: tuple[str, ...] = tuple(resolved)

    def locate(self, path: str) -> Located:
        """Check ``path`` against the roots (the protocol's absolute path, symlinks resolved)."""
        if "\0" in path or not os.path.isabs(path):
            raise WorkspaceRefusal("not_absolute", path=path)
        real = os.path.realpath(path)
        for root in self.paths:
            if _inside(real, root):
                if any(_inside(real, prefix) for prefix in _SYSTEM_PREFIXES):
                    raise WorkspaceRefusal("system_path", path=path)
                rel = os.path.relpath(real, root)
                parts = () if rel == os.curdir else tuple(rel.split(os.sep))
                return Located(path, real, root, parts)
        raise WorkspaceRefusal("outside_roots", path=path)


def _open_parent(where: Located, *, create: bool) -> int:
    """Walk from the root to the parent directory of ``where`` without following any symlink."""
    fd = os.open(where.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in where.parts[:-1]:
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise WorkspaceRefusal("not_found", path=where.path) from None
                os.mkdir(part, 0o777, dir_fd=fd)
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if _is_symlink(part, fd):  # O_DIRECTORY|O_NOFOLLOW on a symlink fails with ENOTDIR
                    raise WorkspaceRefusal("symlink_changed", path=where.path) from None
                raise _refusal_for(exc, where.path) from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_symlink(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _refusal_for(exc: OSError, path: str) -> WorkspaceRefusal:
    if exc.errno == errno.ELOOP:
        return WorkspaceRefusal("symlink_changed", path=path)
    if exc.errno == errno.ENOENT:
        return WorkspaceRefusal("not_found", path=path)
    if exc.errno in (errno.ENOTDIR, errno.EISDIR, errno.ENXIO, errno.ENODEV):
        return WorkspaceRefusal("not_a_regular_file", path=path)
    return WorkspaceRefusal("not_found", f"cannot open the file: {exc.strerror}", path=path)


def select_lines(data: bytes, line: int | None, limit: int | None) -> bytes:
    """The bytes of lines ``line`` (1-based) to ``line + limit - 1`` of ``data``."""
    if line is None and limit is None:
        return data
    lines = data.splitlines(keepends=True)
    start = max((line or 1) - 1, 0)
    end = start + max(limit, 0) if limit is not None else None
    return b"".join(lines[start:end])


def _decode(data: bytes, path: str) -> str:
    if b"\0" in data[:_SNIFF]:
        raise WorkspaceRefusal("binary", "the file contains NUL bytes: not text", path=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise WorkspaceRefusal("binary", "the file is not valid UTF-8", path=path) from None


def _read_selected(fd: int, path: str, line: int | None, limit: int | None, max_bytes: int) -> bytes:
    """Stream the file's lines, keeping the selected ones; refuse once they pass ``max_bytes``."""
    start = max((line or 1) - 1, 0)
    kept: list[bytes] = []
    size = 0
    with os.fdopen(fd, "rb", closefd=False) as stream:
        head = stream.peek(_SNIFF)[:_SNIFF]
        if b"\0" in head:
            raise WorkspaceRefusal("binary", "the file contains NUL bytes: not text", path=path)
        for number, text in enumerate(stream):
            if number < start:
                continue
            if limit is not None and number >= start + limit:
                break
            size += len(text)
            if size > max_bytes:
                raise WorkspaceRefusal(
                    "too_large",
                    f"more than {max_bytes} bytes asked for: read fewer lines with line/limit",
                    path=path,
                )
            kept.append(text)
    return b"".join(kept)


def read_text(
    where: Located, line: int | None, limit: int | None, *, max_bytes: int, allow_hard_links: bool
) -> str:
    """Read the text of a checked path (lines ``line``.. at most ``limit``) under the workspace rules."""
    path = where.path
    if not where.parts:
        raise WorkspaceRefusal("not_a_regular_file", path=path)
    parent = _open_parent(where, create=False)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused right after, by fstat)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(where.parts[-1], flags, dir_fd=parent)
        except OSError as exc:
            raise _refusal_for(exc, path) from None
    finally:
        os.close(parent)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise WorkspaceRefusal("not_a_regular_file", path=path)
        if info.st_nlink > 1 and not allow_hard_links:
            raise WorkspaceRefusal("hard_link", path=path)
        if line is None and limit is None and info.st_size > max_bytes:
            raise WorkspaceRefusal(
                "too_large",
                f"the file has {info.st_size} bytes, the cap is {max_bytes}: read it in parts with line/limit",
                path=path,
            )
        os.set_blocking(fd, True)
        data = _read_selected(fd, path, line, limit, max_bytes)
    finally:
        os.close(fd)
    return _decode(data, path)


def read_existing(where: Located, *, max_bytes: int, allow_hard_links: bool) -> str | None:
    """The current text of a checked path for a ``before_write`` hook, or ``None`` (missing, binary, too big,
    or a hard link the workspace refuses)."""
    try:
        return read_text(where, None, None, max_bytes=max_bytes, allow_hard_links=allow_hard_links)
    except WorkspaceRefusal:
        return None


def write_text(where: Located, content: str, *, allow_hard_links: bool) -> None:
    """Replace a checked path with ``content`` atomically (temp file + rename), keeping an existing file's mode.

    The temp file is created with the existing file's permission bits (then set exactly, past the umask),
    so it is never readable more widely than the file it replaces.

    Missing parent directories inside the root are created. The walk and the target's directory entry are
    never followed: a symlink there (swapped in after the check) is refused. A file with other hard links
    is refused unless ``allow_hard_links``; allowed, it gets a new inode (the other names keep the old
    content).
    """
    path = where.path
    if not where.parts:
        raise WorkspaceRefusal("not_a_regular_file", path=path)
    name = where.parts[-1]
    parent = _open_parent(where, create=True)
    try:
        try:
            info: os.stat_result | None = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and stat.S_ISLNK(info.st_mode):
            raise WorkspaceRefusal("symlink_changed", path=path)
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise WorkspaceRefusal("not_a_regular_file", path=path)
        if info is not None and info.st_nlink > 1 and not allow_hard_links:
            raise WorkspaceRefusal("hard_link", path=path)
        temp = f".{name}.{secrets.token_hex(6)}.acp-tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        # born with the target's permission bits (the umask can only narrow them): the new text of a 0600
        # file is never readable by others through its temp file, not even while it is being written
        mode = 0o666 if info is None else stat.S_IMODE(info.st_mode) & 0o777
        fd = os.open(temp, flags, mode, dir_fd=parent)
        try:
            try:
                view = memoryview(content.encode("utf-8"))
                while view:
                    view = view[os.write(fd, view) :]
                if info is not None:
                    os.fchmod(fd, stat.S_IMODE(info.st_mode))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=parent)
            raise
    finally:
        os.close(parent)

"""The process group of a spawned stdio agent: every process the agent started is ours to end.

:func:`~acp_client.transports.stdio.open_stdio` starts the agent in a new session (``setsid``), so the agent
leads a process group whose id is its pid, and everything it forks stays in that group unless it moves
itself out (``setsid``/``setpgid``, e.g. Node's ``detached: true``). Agents re-execute themselves as a child
that keeps the stdio pipes, or start helpers (language servers, MCP servers); ending only the process we
started would leave those running after ``close()`` and, on a respawn, next to the new agent.

:class:`ProcessGroup` signals the whole group and tells whether any member still runs. "Runs" ignores
zombies: a member whose parent died is re-parented to the machine's init process, which in a container
may never reap it, and a zombie holds nothing. A ``killpg(pgid, 0)`` probe says whether the group has any
member; on Linux a running leader is then read from its ``/proc`` entry, and only a group that outlived its
leader is looked for in all of ``/proc`` (elsewhere the probe alone decides; it counts zombies too).

Interpreter exit: every group still running is registered here until its transport's ``close()`` saw it
empty; an :mod:`atexit` hook (registered with the first group) ends the registered groups when the
interpreter exits without ``aclose()``: SIGTERM to all, up to the longest bound of them, then SIGKILL. It
cannot run when this process is killed by a signal it does not handle (SIGKILL, or SIGTERM with Python's
default handler); a group then outlives us.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import sys
import threading
import time

__all__ = ["ProcessGroup"]

#: First and largest pause between two looks at the group while waiting for it to empty.
_POLL_FIRST = 0.005
_POLL_MAX = 0.1
_PROC = "/proc"
#: How long the exit hook waits for SIGKILLed groups to disappear before the interpreter goes on exiting.
_EXIT_KILL_WAIT = 1.0


class ProcessGroup:
    """A process group led by a spawned agent; ``pgid`` is the leader's pid."""

    def __init__(self, pgid: int, grace: float) -> None:
        """Track group ``pgid``; ``grace`` is how long the exit hook waits after SIGTERM before SIGKILL."""
        self.pgid = pgid
        self.grace = grace

    def signal(self, signum: int) -> bool:
        """Send ``signum`` to every member; ``False`` when the group has no member left (nothing sent)."""
        try:
            os.killpg(self.pgid, signum)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # a member changed its user: it still exists, we cannot signal it
        return True

    def running(self) -> bool:
        """``True`` while a member that is not a zombie exists.

        Cheapest look first: ``killpg(pgid, 0)`` says whether the group has any member at all (zombies
        included); on Linux a leader that still runs settles it with one read of its ``/proc`` entry, and
        only a group that outlived its leader (or whose leader is a zombie) is looked for in all of ``/proc``.
        """
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # a member changed its user: it exists; whether it runs is read below where we can
        if not (sys.platform.startswith("linux") and os.path.isdir(_PROC)):
            return True
        return _runs_in_group(self.pgid, self.pgid) or _has_member(self.pgid)

    async def wait_gone(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the group to have no running member; ``True`` when it has none.

        There is no event for "a process group emptied" (a pidfd covers one process, and only our child's
        exit is reported to us), so this looks again at growing intervals, never more than ``timeout`` in all.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pause = _POLL_FIRST
        while self.running():
            left = deadline - loop.time()
            if left <= 0:
                return False
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, _POLL_MAX)
        return True

    def register(self) -> None:
        """End this group at interpreter exit unless :meth:`unregister` is called first."""
        _registry.add(self)

    def unregister(self) -> None:
        """The group was seen empty (or was handed over): the exit hook leaves it alone."""
        _registry.discard(self)

    def __repr__(self) -> str:
        return f"<ProcessGroup {self.pgid}>"


def _stat_fields(pid: str | int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, ppid, pgrp, ...); ``None`` if gone."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so split after the last ")"
    return stat[stat.rfind(b")") + 2 :].split()


def _runs_in_group(pid: str | int, pgid: int) -> bool:
    """Whether process ``pid`` exists, is not a zombie and belongs to group ``pgid``."""
    fields = _stat_fields(pid)
    return fields is not None and len(fields) >= 3 and fields[0] not in (b"Z", b"X") and int(fields[2]) == pgid


def _has_member(pgid: int) -> bool:
    """Whether a running (not zombie) process of group ``pgid`` exists: one pass over ``/proc``, ending at
    the first one found."""
    try:
        names = os.listdir(_PROC)
    except OSError:
        return False
    return any(name.isdigit() and _runs_in_group(name, pgid) for name in names)


class _Registry:
    """Groups still running, ended by the exit hook; the hook is registered with the first group."""

    def __init__(self) -> None:
        self._groups: dict[int, ProcessGroup] = {}
        self._lock = threading.Lock()
        self._hooked = False

    def add(self, group: ProcessGroup) -> None:
        with self._lock:
            self._groups[group.pgid] = group
            if not self._hooked:
                atexit.register(self.end_all)
                self._hooked = True

    def discard(self, group: ProcessGroup) -> None:
        with self._lock:
            if self._groups.get(group.pgid) is group:
                del self._groups[group.pgid]

    def end_all(self) -> None:
        """SIGTERM every registered group, wait up to the longest grace for all to empty, SIGKILL the rest."""
        with self._lock:
            groups, self._groups = list(self._groups.values()), {}
        live = [g for g in groups if g.signal(signal.SIGTERM)]
        if not live:
            return
        deadline = time.monotonic() + max(g.grace for g in live)
        pause = _POLL_FIRST
        while live and time.monotonic() < deadline:
            time.sleep(pause)  # the interpreter is exiting: there is no event loop left to wait in
            pause = min(pause * 2, _POLL_MAX)
            live = [g for g in live if g.running()]
        for group in live:
            with contextlib.suppress(OSError):
                group.signal(signal.SIGKILL)
        deadline = time.monotonic() + _EXIT_KILL_WAIT
        while live and time.monotonic() < deadline:
            time.sleep(_POLL_FIRST)
            live = [g for g in live if g.running()]


_registry = _Registry()

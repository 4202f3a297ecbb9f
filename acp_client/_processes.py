"""Process groups the library started, and the one way it ends them: stop everything, look again, then kill.

Two parts of the library start process trees it must end: a stdio agent
(:func:`~acp_client.transports.stdio.open_stdio`) and a workspace terminal
(:class:`~acp_client.handlers.Workspace`). Each is started in a new session (``setsid``), so it leads a
process group whose id is its pid, and everything it forks stays in that group unless it moves itself out
(``setsid``/``setpgid``, e.g. Node's ``detached: true``). :class:`ProcessGroup` is that group.

Ending it (:meth:`ProcessGroup.kill`). One ``SIGKILL`` to the group and to the processes found outside it
is not enough: a process that re-forks fast (its child goes on, it exits) is always one fork ahead of a
list of pids read before the kill. So on Linux the group is frozen first: ``SIGSTOP`` to the group, then a
pass over ``/proc`` stops every process that belongs to it: a member of the group, a child of a process
already stopped, or (for a terminal) a process whose environment carries the terminal's marker, which is
how a daemon that left the group with ``setsid()`` is found (the trick Jenkins' process-tree killer uses).
Each is stopped the moment it is found, through a pidfd (which cannot point at a recycled pid; it is
closed at once, so a tree of thousands does not take as many descriptors). Passes are repeated until one
finds nothing new, at most :data:`MAX_PASSES`; a stopped process cannot fork, so nothing can appear after
that pass. Then ``SIGKILL`` goes to the group and to every stopped process (by pid: a stopped process
cannot exit by itself, so its pid is still its own), and the kill waits, bounded, until none runs. A
process already stopped that is found running again (a sibling sent it ``SIGCONT``) is stopped again and
the passes go on. A process that both left the group and scrubbed its environment (and whose parent is
gone) is not found; containing that is the host's job (a container, a cgroup).
Elsewhere only the group is killed.

Why not a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``)? It is an attribute of the whole host
process: every orphan of every child the application has (not only ours) would be re-parented to it and
would have to be reaped by someone, which asyncio does not do; Python has no binding for it (``ctypes``);
and the orphans would still have to be found and frozen one by one, which is the pass above.

"Running" ignores zombies: a member whose parent died is re-parented to the machine's init process, which
in a container may never reap it, and a zombie holds nothing. A ``killpg(pgid, 0)`` probe says whether the
group has any member; on Linux a running leader is then read from its ``/proc`` entry, and only a group
that outlived its leader is looked for in all of ``/proc`` (elsewhere the probe alone decides; it counts
zombies too).

Interpreter exit: every stdio agent's group still running is registered here until its transport's
``close()`` saw it empty; an :mod:`atexit` hook (registered with the first group) ends the registered groups
when the interpreter exits without ``aclose()``: SIGTERM to all, up to the longest bound of them, then
:meth:`ProcessGroup.kill`. It cannot run when this process is killed by a signal it does not handle
(SIGKILL, or SIGTERM with Python's default handler); a group then outlives us.
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

__all__ = ["MAX_PASSES", "ProcessGroup"]

#: How many passes over ``/proc`` :meth:`ProcessGroup.kill` makes at most while new processes of the group
#: keep appearing (each pass stops what it finds); past it, what was found is killed and ``False`` returned.
MAX_PASSES = 64

#: First and largest pause between two looks at the group while waiting for it to empty.
_POLL_FIRST = 0.005
_POLL_MAX = 0.1
_PROC = "/proc"
#: States of a process that may still fork (not stopped, not a zombie).
_RUNNING = frozenset({b"R", b"S", b"D", b"W", b"I"})
#: How long the exit hook waits for SIGKILLed groups to disappear before the interpreter goes on exiting.
_EXIT_KILL_WAIT = 1.0


class ProcessGroup:
    """A process group the library started; ``pgid`` is the leader's pid."""

    def __init__(self, pgid: int, grace: float, *, marker: str | None = None) -> None:
        """Track group ``pgid``; ``grace`` is how long the exit hook waits after SIGTERM before the kill.
        ``marker`` (``NAME=value``), when given, is an environment entry every process of the tree carries:
        :meth:`kill` ends the processes that carry it too, wherever they moved."""
        self.pgid = pgid
        self.grace = grace
        self._marker = marker.encode() if marker is not None else None

    def signal(self, signum: int) -> bool:
        """Send ``signum`` to every member; ``False`` when the group has no member left (nothing sent)."""
        try:
            os.killpg(self.pgid, signum)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # a member changed its user: it still exists, we cannot signal it
        return True

    def kill(self, wait: float) -> bool:
        """Freeze the tree, look again until nothing new appears, then SIGKILL all of it (see the module
        docstring); then wait up to ``wait`` seconds for what was found to stop running. Blocks: run it in a
        worker thread from a loop. ``False`` when processes kept appearing for :data:`MAX_PASSES` passes
        (what was found is killed all the same)."""
        if not hasattr(os, "pidfd_open") or not os.path.isdir(_PROC):
            self.signal(signal.SIGKILL)
            return True
        stopped: set[int] = set()
        settled = False
        for _ in range(MAX_PASSES):
            self.signal(signal.SIGSTOP)  # the members the pass cannot see yet (forked meanwhile) too
            if not self._stop_new(stopped):
                settled = True
                break
        self.signal(signal.SIGKILL)
        for pid in stopped:
            # by pid: a stopped process cannot exit by itself, so its pid cannot have been reused
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + wait
        pause = _POLL_FIRST
        left = [pid for pid in stopped if _runs(pid)]
        while left and time.monotonic() < deadline:
            time.sleep(min(pause, max(deadline - time.monotonic(), 0)))  # a worker thread: no loop to wait in
            pause = min(pause * 2, _POLL_MAX)
            left = [pid for pid in left if _runs(pid)]
        return settled

    def _stop_new(self, stopped: set[int]) -> bool:
        """One pass over ``/proc``: stop each running process of the tree not stopped yet, the moment it is
        found. ``True`` when it found one."""
        try:
            names = os.listdir(_PROC)
        except OSError:
            return False
        me = os.getpid()
        found = False
        for name in names:
            if not name.isdigit() or int(name) == me:
                continue
            if int(name) in stopped:
                if _state(name) in _RUNNING:  # a sibling sent it SIGCONT, or the stop has not landed yet
                    with contextlib.suppress(OSError):
                        os.kill(int(name), signal.SIGSTOP)
                    found = True
                continue
            if not self._belongs(name, stopped):
                continue
            try:  # a handle first: it cannot point at a process that replaced the one just read
                fd = os.pidfd_open(int(name))
            except OSError:  # gone meanwhile
                continue
            try:
                signal.pidfd_send_signal(fd, signal.SIGSTOP)
            except OSError:  # exited meanwhile, or not ours to signal
                continue
            finally:
                os.close(fd)  # one at a time: a tree of thousands must not take as many descriptors
            stopped.add(int(name))
            found = True
        return found

    def _belongs(self, pid: str, stopped: set[int]) -> bool:
        """Whether running process ``pid`` is of the tree: in the group, a child of a stopped process, or
        (with a marker) carrying the marker in its environment."""
        fields = _stat_fields(pid)
        if fields is None or len(fields) < 3 or fields[0] in (b"Z", b"X"):
            return False
        if int(fields[2]) == self.pgid or int(fields[1]) in stopped:
            return True
        if self._marker is None:
            return False
        try:
            with open(f"{_PROC}/{pid}/environ", "rb") as env:
                return self._marker in env.read().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            return False

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


def _state(pid: str | int) -> bytes | None:
    """The one-letter state of process ``pid`` (``R``, ``S``, ``T`` ...); ``None`` if gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def _runs(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and bool(fields) and fields[0] not in (b"Z", b"X")


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
        """SIGTERM every registered group, wait up to the longest grace for all to empty, kill the rest."""
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
                group.kill(0.0)
        deadline = time.monotonic() + _EXIT_KILL_WAIT
        while live and time.monotonic() < deadline:
            time.sleep(_POLL_FIRST)
            live = [g for g in live if g.running()]


_registry = _Registry()

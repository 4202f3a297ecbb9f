"""Terminals a workspace runs for agents: each command in its own process group, output capped.

A terminal is one child process started with ``start_new_session`` (so it leads a new process group) and
with stdout and stderr on one pipe that this module reads through the event loop. Its environment is the
host's ``env``, or by default only the allow-listed part of this process's (:data:`INHERITED_NAMES`: no
token or key of the client reaches the agent's commands), with the agent's ``env`` over it. It carries
a random cookie (``ACP_CLIENT_TERMINAL``) as the marker of its :class:`~acp_client._processes.ProcessGroup`:
ending a terminal freezes and kills the group, the children of what it froze and, on Linux, every process
whose environment still carries the cookie (a daemon that called ``setsid()`` to leave the group, however
fast it re-forks). A process that scrubs its environment *and* leaves the group escapes; containing that
is the host's job (a container, a cgroup).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field

from acp_client._logging import get_logger
from acp_client._processes import ProcessGroup
from acp_client.handlers._base import TerminalExit, TerminalOutput
from acp_client.handlers._refusal import WorkspaceRefusal

__all__ = ["COOKIE", "INHERITED_NAMES", "INHERITED_PREFIXES", "TerminalPool", "inherited_environment"]

#: The environment variable that marks every process started for one terminal.
COOKIE = "ACP_CLIENT_TERMINAL"
#: What a terminal takes from this process's environment by default: what a command needs to find its
#: programs, its home, its user, its locale, its terminal type and its time zone, and nothing that usually
#: holds a credential (tokens, API keys, ``SSH_AUTH_SOCK``, proxy URLs with a password ...).
INHERITED_NAMES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR"})
#: ... and every variable whose name starts with one of these (the locale categories).
INHERITED_PREFIXES = ("LC_",)


def inherited_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of ``environ`` (:data:`INHERITED_NAMES`, :data:`INHERITED_PREFIXES`)."""
    return {k: v for k, v in environ.items() if k in INHERITED_NAMES or k.startswith(INHERITED_PREFIXES)}
#: How long ending a terminal waits for the processes it killed to exit.
KILL_WAIT = 5.0
#: After the command exits, how long its output may still take to arrive (a daemon holding the pipe open
#: would otherwise make the wait endless).
DRAIN_GRACE = 1.0

_log = get_logger("acp_client.handlers.terminals")


def _complete_prefix(data: bytes) -> bytes:
    """``data`` without an incomplete UTF-8 sequence at its end (the rest of it has not arrived yet)."""
    for back in range(1, min(len(data), 4) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue
        need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
        return data if back >= need else data[:-back]
    return data


class _Pipe(asyncio.Protocol):
    """Feeds what the command writes into its terminal's buffer."""

    def __init__(self, terminal: _Terminal) -> None:
        self._terminal = terminal

    def data_received(self, data: bytes) -> None:
        self._terminal.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._terminal.eof.set()


@dataclass(eq=False, slots=True)
class _Terminal:
    terminal_id: str
    session_id: str
    process: asyncio.subprocess.Process
    group: ProcessGroup
    limit: int
    buffer: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    eof: asyncio.Event = field(default_factory=asyncio.Event)
    pipe: asyncio.ReadTransport | None = None

    def feed(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > self.limit:
            del self.buffer[: len(self.buffer) - self.limit]
            self.truncated = True

    def exit(self) -> TerminalExit | None:
        code = self.process.returncode
        if code is None:
            return None
        if code < 0:
            try:
                return TerminalExit(None, signal.Signals(-code).name)
            except ValueError:
                return TerminalExit(None, str(-code))
        return TerminalExit(code, None)

    def output(self) -> TerminalOutput:
        data = bytes(self.buffer)
        if self.truncated:  # the buffer's start may cut a character: begin at the next whole one
            skip = 0
            while skip < min(len(data), 3) and data[skip] & 0xC0 == 0x80:
                skip += 1
            data = data[skip:]
        exited = self.exit()
        if exited is None or not self.eof.is_set():
            data = _complete_prefix(data)
        text = data.decode("utf-8", errors="replace")
        if exited is None:
            return TerminalOutput(text, self.truncated)
        return TerminalOutput(text, self.truncated, exited.exit_code, exited.signal)


class TerminalPool:
    """The open terminals of one workspace, by id; owns their processes and their pipes."""

    def __init__(
        self, *, max_terminals: int, max_output_bytes: int, base_env: Mapping[str, str] | None, inherit_env: bool
    ) -> None:
        """``base_env`` is the environment the agent's ``env`` is merged over; ``None``: the allow-listed part
        of this process's environment, read at each start (all of it with ``inherit_env``)."""
        self.max_terminals = max_terminals
        self.max_output_bytes = max_output_bytes
        self._base_env = dict(base_env) if base_env is not None else None
        self._inherit_env = inherit_env
        self._terminals: dict[str, _Terminal] = {}
        self._starting = 0

    def __len__(self) -> int:
        return len(self._terminals)

    def ids(self, session_id: str | None = None) -> list[str]:
        """The open terminals' ids (of one session, or all)."""
        return [t.terminal_id for t in self._terminals.values() if session_id in (None, t.session_id)]

    def pid(self, terminal_id: str) -> int:
        """The process id (and process group id) of a terminal's command."""
        return self._terminals[terminal_id].process.pid

    async def create(
        self,
        session_id: str,
        command: str,
        args: list[str],
        env: Mapping[str, str],
        cwd: str,
        output_byte_limit: int | None,
    ) -> str:
        """Start ``command`` with ``args`` in ``cwd`` (already confined) and return the terminal id."""
        if len(self._terminals) + self._starting >= self.max_terminals:
            raise WorkspaceRefusal(
                "too_many_terminals", f"{self.max_terminals} terminals are open: release one first"
            )
        limit = self.max_output_bytes
        if output_byte_limit is not None and 0 <= output_byte_limit < limit:
            limit = output_byte_limit
        cookie = secrets.token_hex(16)
        if self._base_env is not None:
            merged = dict(self._base_env)
        else:
            merged = dict(os.environ) if self._inherit_env else inherited_environment(os.environ)
        merged.update(env)
        merged[COOKIE] = cookie
        self._starting += 1
        read_end, write_end = os.pipe()
        try:
            try:
                process = await asyncio.create_subprocess_exec(
                    command,
                    *args,
                    cwd=cwd,
                    env=merged,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=write_end,
                    stderr=write_end,
                    start_new_session=True,
                )
            except OSError as exc:
                os.close(read_end)
                raise WorkspaceRefusal("spawn_failed", f"cannot start {command!r}: {exc.strerror}") from None
            finally:
                os.close(write_end)
        finally:
            self._starting -= 1
        group = ProcessGroup(process.pid, 0.0, marker=f"{COOKIE}={cookie}")
        terminal = _Terminal(f"term_{secrets.token_hex(8)}", session_id, process, group, limit)
        self._terminals[terminal.terminal_id] = terminal
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await loop.connect_read_pipe(lambda: _Pipe(terminal), os.fdopen(read_end, "rb", 0))
        except BaseException:
            await self._end(terminal)
            raise
        terminal.pipe = transport
        return terminal.terminal_id

    def _get(self, session_id: str, terminal_id: str) -> _Terminal:
        terminal = self._terminals.get(terminal_id)
        if terminal is None or terminal.session_id != session_id:
            raise WorkspaceRefusal("unknown_terminal", f"no open terminal {terminal_id!r} in this session")
        return terminal

    def output(self, session_id: str, terminal_id: str) -> TerminalOutput:
        """What the command wrote so far (the last ``limit`` bytes) and its exit status once it exited."""
        return self._get(session_id, terminal_id).output()

    async def wait(self, session_id: str, terminal_id: str) -> TerminalExit:
        """Wait for the command to exit, then for the rest of its output (at most :data:`DRAIN_GRACE`
        seconds: a daemon it left behind may keep the pipe open)."""
        terminal = self._get(session_id, terminal_id)
        await terminal.process.wait()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DRAIN_GRACE):
                await terminal.eof.wait()
        exited = terminal.exit()
        assert exited is not None
        return exited

    async def kill(self, session_id: str, terminal_id: str) -> None:
        """End the command's whole process group (and cookie holders); the terminal stays readable."""
        await self._kill(self._get(session_id, terminal_id))

    async def release(self, session_id: str, terminal_id: str) -> None:
        """Kill what still runs and forget the terminal (its id is invalid afterwards)."""
        await self._end(self._get(session_id, terminal_id))

    async def end_session(self, session_id: str) -> None:
        """Kill and release every terminal of ``session_id``."""
        for terminal in [t for t in self._terminals.values() if t.session_id == session_id]:
            await self._end(terminal)

    async def end_all(self) -> None:
        """Kill and release every open terminal."""
        for terminal in list(self._terminals.values()):
            await self._end(terminal)

    async def _kill(self, terminal: _Terminal) -> None:
        if not await asyncio.to_thread(terminal.group.kill, KILL_WAIT):
            _log.warning("terminal_kept_forking", terminal_id=terminal.terminal_id, pgid=terminal.group.pgid)
        await terminal.process.wait()

    async def _end(self, terminal: _Terminal) -> None:
        if self._terminals.get(terminal.terminal_id) is not terminal:
            return
        try:
            await self._kill(terminal)
        finally:
            self._terminals.pop(terminal.terminal_id, None)
            if terminal.pipe is not None:
                terminal.pipe.close()

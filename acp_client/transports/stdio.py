"""The stdio transport: the client spawns the agent and talks newline-delimited JSON over its stdin/stdout.

One line is one frame (ACP: "one JSON-RPC message per line, messages MUST NOT contain embedded newlines").
Nothing is split or joined: the transport hands each line to the caller as it is, minus the line ending.

Decisions, each mirrored on the WebSocket transport so that both behave alike:

* **An over-long line** (more than ``max_frame_bytes`` before its newline) is not skipped: the link is
  declared dead and ``recv`` raises :class:`~acp_client.exceptions.ConnectionLost` (the WebSocket transport
  does the same with close code 1009). Skipping would leave the request it answered waiting forever.
* **A line that is not valid UTF-8** kills the link the same way (WebSocket: close code 1007).
* **Blank lines** carry no message; they are skipped and counted in ``stats.empty_discarded``. A trailing
  ``\\r`` is removed, so agents that write ``\\r\\n`` work.
* **stderr** is read by a background task owned by the transport (started by :func:`spawn_stdio`, never by
  a constructor) and every line is logged as the event ``agent_stderr`` at info level (silent unless the
  application turned logging on); the last :data:`STDERR_TAIL_LINES` lines, each cut to
  :data:`STDERR_LINE_CHARS` characters, are kept in :attr:`StdioTransport.stderr_tail`. With
  ``stderr_to_log=False`` the agent's stderr is inherited from this process instead.
* **End of stdout** means the agent is gone: ``recv`` raises ``ConnectionLost`` whose ``reason`` is
  ``"process exited with code N"`` (N negative: killed by signal -N), with ``exit_code`` and
  ``stderr_tail`` set (the stderr pump is given a moment to read what the agent wrote before it exited).
* **A program that cannot be started** (missing, not executable) raises
  :class:`~acp_client.exceptions.AgentNotFound` with the OS error; retrying would not help.
* **The agent's whole process tree is ours.** :func:`open_stdio` starts the agent in a new session, so it
  leads its own process group, and everything it forks (a re-executed copy of itself that keeps the stdio
  pipes, helpers it starts) belongs to that group unless it leaves it on purpose (``setsid``).
  ``close()`` closes the agent's stdin and gives the group ``close_timeout / 2`` seconds to exit by itself,
  then sends SIGTERM to the group, waits another ``close_timeout / 2``, then kills it (frozen with SIGSTOP
  first, so a member that re-forks fast cannot stay a fork ahead; see :mod:`acp_client._processes`), and
  always reaps the agent. It returns once no member of the group runs (zombies re-parented to an init that
  does not reap them are not counted), so a client that respawns its agent after ``close()`` never has the
  old tree next to the new one. The group is ended even when the agent itself exited and left children.
* **Interpreter exit without close()**: the groups of transports not closed are ended by an :mod:`atexit`
  hook (SIGTERM, up to ``close_timeout / 2``, then the kill); see :mod:`acp_client._processes`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import shlex
import signal
from collections.abc import Mapping, Sequence

from acp_client._logging import get_logger
from acp_client._processes import ProcessGroup
from acp_client.exceptions import AgentNotFound, ConnectError, ConnectionLost, UsageError
from acp_client.transports._agent_env import agent_environment
from acp_client.transports.base import DEFAULT_MAX_FRAME_BYTES, TransportStats
from acp_client.transports.options import TransportOptions

__all__ = ["STDERR_LINE_CHARS", "STDERR_TAIL_LINES", "StdioTransport", "open_stdio", "spawn_stdio"]

_log = get_logger(__name__)

#: How many stderr lines :attr:`StdioTransport.stderr_tail` keeps.
STDERR_TAIL_LINES = 20
#: Longer stderr lines are cut to this many characters in the tail (and end with ``"…"``).
STDERR_LINE_CHARS = 500
#: OS errors of ``exec`` that retrying cannot fix (missing program, no permission, not an executable).
_NOT_STARTABLE = (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError)
_ENOEXEC = 8
#: How long ``recv`` waits, after stdout ended, for the exit status before reporting without it.
_EXIT_STATUS_GRACE = 1.0
#: How long ``close`` lets the stderr pump drain after the agent exited.
_STDERR_DRAIN_TIMEOUT = 1.0


class StdioTransport:
    """Newline-delimited text frames over a pair of byte streams, usually an agent subprocess's stdio.

    Build one with :func:`spawn_stdio` (client side: spawns the agent) or :meth:`from_streams` (any pair
    of asyncio streams, e.g. an agent's own stdin/stdout). Implements :class:`~acp_client.transports.Transport`.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        process: asyncio.subprocess.Process | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        close_timeout: float = 5.0,
        description: str = "stdio",
    ) -> None:
        """Wrap streams; starts nothing. Prefer :func:`spawn_stdio` or :meth:`from_streams`."""
        self._reader = reader
        self._writer = writer
        self._process = process
        self._group: ProcessGroup | None = None
        self._max_frame_bytes = max_frame_bytes
        self._close_timeout = close_timeout
        self._description = description
        self._lost: ConnectionLost | None = None
        self._closing = False
        self._close_task: asyncio.Task[None] | None = None
        self._stderr_task: asyncio.Task[None] | None = None
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.stats = TransportStats()
        """Live counters of frames moved and discarded (see :class:`TransportStats`)."""

    @classmethod
    def from_streams(
        cls,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        description: str = "stdio",
    ) -> StdioTransport:
        """A transport over existing streams (no subprocess), e.g. for the agent side of a stdio link.

        The reader's own ``limit`` also bounds a line; create it with ``limit >= max_frame_bytes``.
        ``close()`` closes ``writer`` only.
        """
        return cls(reader, writer, max_frame_bytes=max_frame_bytes, description=description)

    def _own_group(self, group: ProcessGroup) -> None:
        # called by open_stdio right after the spawn: the agent leads ``group``, and close() ends all of it
        self._group = group
        group.register()

    def _start_stderr_pump(self, stderr: asyncio.StreamReader) -> None:
        self._stderr_task = asyncio.get_running_loop().create_task(
            self._pump_stderr(stderr), name=f"acp-client stderr {self._description}"
        )

    # ------------------------------------------------------------------ properties

    @property
    def description(self) -> str:
        """``stdio:<program name>`` (arguments are left out: they may hold secrets)."""
        return self._description

    @property
    def closed(self) -> bool:
        """``True`` once ``close()`` was called or the agent's output ended."""
        return self._closing or self._lost is not None

    @property
    def pid(self) -> int | None:
        """The agent's process id, or ``None`` when there is no subprocess."""
        return self._process.pid if self._process is not None else None

    @property
    def returncode(self) -> int | None:
        """The agent's exit status once it has exited (negative: killed by that signal), else ``None``."""
        return self._process.returncode if self._process is not None else None

    @property
    def stderr_tail(self) -> tuple[str, ...]:
        """The last lines the agent wrote to stderr (when captured), oldest first; bounded in count
        (:data:`STDERR_TAIL_LINES`) and length (:data:`STDERR_LINE_CHARS` characters per line)."""
        return tuple(self._stderr_tail)

    # ------------------------------------------------------------------ I/O

    async def send(self, frame: str) -> None:
        """Write ``frame`` as one line. Raises ``ConnectionLost`` if the agent is gone.

        A frame that contains a newline would be two frames on the wire: that raises ``UsageError``.
        """
        if "\n" in frame:
            raise UsageError("a stdio frame must not contain a newline (serialize JSON without indentation)")
        if self._lost is not None:
            raise self._copy_lost()
        if self._closing:
            raise ConnectionLost("the stdio transport was closed", reason="closed by the client")
        if self._process is not None and self._process.returncode is not None:
            raise self._set_lost(await self._eof_reason())
        data = frame.encode() + b"\n"
        try:
            self._writer.write(data)
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            raise self._set_lost(await self._eof_reason()) from exc
        self.stats.frames_out += 1
        self.stats.bytes_out += len(data) - 1

    async def recv(self) -> str:
        """Next line from the agent, without its line ending. Raises ``ConnectionLost`` at end of output."""
        while True:
            if self._lost is not None:
                raise self._copy_lost()
            if self._closing:
                raise ConnectionLost("the stdio transport was closed", reason="closed by the client")
            try:
                raw = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                if self._closing:
                    raise ConnectionLost("the stdio transport was closed", reason="closed by the client") from None
                if not exc.partial:
                    raise self._set_lost(await self._eof_reason()) from None
                raw = exc.partial  # the last line had no newline; it is still a frame
            except asyncio.LimitOverrunError:
                raise self._set_lost(
                    f"the agent wrote a line longer than max_frame_bytes ({self._max_frame_bytes} bytes)"
                ) from None
            except (ConnectionError, OSError) as exc:
                raise self._set_lost(f"reading from the agent failed: {exc}") from exc
            line = raw.rstrip(b"\n").rstrip(b"\r")
            if len(line) > self._max_frame_bytes:
                raise self._set_lost(
                    f"the agent wrote a line longer than max_frame_bytes ({self._max_frame_bytes} bytes)"
                )
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise self._set_lost("the agent wrote a line that is not valid UTF-8") from exc
            if not text.strip():
                self.stats.empty_discarded += 1
                continue
            self.stats.frames_in += 1
            self.stats.bytes_in += len(line)
            return text

    async def close(self) -> None:
        """Close stdin, let the agent exit, then terminate, kill and reap it. Idempotent and bounded."""
        if self._close_task is None:
            self._closing = True
            self._close_task = asyncio.get_running_loop().create_task(
                self._close_impl(), name=f"acp-client close {self._description}"
            )
        await asyncio.shield(self._close_task)

    # ------------------------------------------------------------------ internals

    async def _close_impl(self) -> None:
        half = self._close_timeout / 2
        self._writer.close()
        # the pipe may already be broken (agent dead) or stuck (agent not reading): neither matters here
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(half):
                await self._writer.wait_closed()
        proc = self._process
        if proc is not None:
            # Stop reading stdout: asyncio's Process.wait() only returns once every pipe is disconnected, and
            # an agent whose unread output filled the pipe (or the stream buffer) would never get there.
            stdout_pipe = _pipe_transport(proc, 1)
            if stdout_pipe is not None:
                stdout_pipe.close()
            if self._group is not None:
                await self._end_group(self._group, half)
            else:
                await self._end_process(proc, half)
            _log.debug("agent_exited", transport=self._description, pid=proc.pid, returncode=proc.returncode)
        if self._stderr_task is not None:
            # let the pump log what the agent wrote before it exited, then stop it
            await asyncio.wait([self._stderr_task], timeout=_STDERR_DRAIN_TIMEOUT)
            self._stderr_task.cancel()
            await asyncio.wait([self._stderr_task])
        if proc is not None:
            # pipes the agent left undrained keep asyncio's subprocess transport open; close it explicitly
            subprocess_transport = _subprocess_transport(proc)
            if subprocess_transport is not None:
                subprocess_transport.close()
        _log.debug("transport_closed", transport=self._description, stats=self.stats.as_dict())

    async def _end_group(self, group: ProcessGroup, half: float) -> None:
        """stdin is closed: let the group exit, then SIGTERM it, then SIGKILL it, each step bounded."""
        proc = self._process
        assert proc is not None
        if not await group.wait_gone(half):
            _log.debug("agent_group_terminate", transport=self._description, pgid=group.pgid)
            group.signal(signal.SIGTERM)
            if not await group.wait_gone(half):
                _log.info("agent_group_kill", transport=self._description, pgid=group.pgid)
                if not await asyncio.to_thread(group.kill, 0.0):  # the wait is wait_gone's, below
                    _log.warning("agent_group_kept_forking", transport=self._description, pgid=group.pgid)
                if not await group.wait_gone(max(half, 1.0)):
                    _log.error("agent_group_survived", transport=self._description, pgid=group.pgid)
                    return  # left registered: the exit hook tries again
        group.unregister()
        # every member is gone; the leader's exit status arrives once asyncio has reaped it
        if not await self._wait_exit(max(half, 1.0)) and proc.returncode is None:
            _log.error("agent_not_reaped", transport=self._description, pid=proc.pid)

    async def _end_process(self, proc: asyncio.subprocess.Process, half: float) -> None:
        """stdin is closed: let the agent exit, then terminate it, then kill it (no group of its own)."""
        if not await self._wait_exit(half):
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            if not await self._wait_exit(half):
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                if not await self._wait_exit(max(half, 1.0)):
                    _log.error("agent_not_reaped", transport=self._description, pid=proc.pid)

    async def _wait_exit(self, timeout: float) -> bool:
        assert self._process is not None
        try:
            async with asyncio.timeout(timeout):
                await self._process.wait()
        except TimeoutError:
            return False
        return True

    async def _eof_reason(self) -> str:
        proc = self._process
        if proc is None:
            return "end of input"
        if proc.returncode is None and not await self._wait_exit(_EXIT_STATUS_GRACE):
            return "the agent closed its stdout"
        assert proc.returncode is not None
        if self._stderr_task is not None and not self._stderr_task.done():
            # what the agent wrote just before exiting ("FATAL: ...") belongs in the error: let the pump read it
            await asyncio.wait([self._stderr_task], timeout=_STDERR_DRAIN_TIMEOUT)
        _log.info("agent_exited", transport=self._description, pid=proc.pid, returncode=proc.returncode)
        return self._exit_reason(proc.returncode)

    @staticmethod
    def _exit_reason(returncode: int) -> str:
        return f"process exited with code {returncode}"

    def _set_lost(self, reason: str) -> ConnectionLost:
        if self._lost is None:
            tail = self.stderr_tail
            last = f"; its last stderr line: {tail[-1]}" if tail else ""
            self._lost = ConnectionLost(
                f"the stdio link to the agent was lost: {reason}{last}",
                reason=reason,
                exit_code=self.returncode,
                stderr_tail=tail,
            )
            _log.info("transport_lost", transport=self._description, reason=reason, exit_code=self.returncode)
        return self._copy_lost()

    def _copy_lost(self) -> ConnectionLost:
        assert self._lost is not None
        return self._lost.with_request_sent(False)

    async def _pump_stderr(self, stderr: asyncio.StreamReader) -> None:
        pid = self.pid
        while True:
            try:
                raw = await stderr.readline()
            except ValueError:
                # longer than the stream limit: asyncio dropped it; say so rather than hide it
                _log.warning("agent_stderr_line_too_long", transport=self._description, pid=pid)
                continue
            except OSError as exc:
                _log.debug("agent_stderr_failed", transport=self._description, pid=pid, error=str(exc))
                return
            if not raw:
                return
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            self._stderr_tail.append(line if len(line) <= STDERR_LINE_CHARS else line[: STDERR_LINE_CHARS - 1] + "…")
            _log.info("agent_stderr", transport=self._description, pid=pid, line=line)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        pid = f" pid={self.pid}" if self._process is not None else ""
        return f"<StdioTransport {self._description}{pid} {state}>"


def _subprocess_transport(proc: asyncio.subprocess.Process) -> asyncio.SubprocessTransport | None:
    # asyncio.subprocess.Process keeps its SubprocessTransport private; it is the only handle on the pipes
    transport = getattr(proc, "_transport", None)
    return transport if isinstance(transport, asyncio.SubprocessTransport) else None


def _pipe_transport(proc: asyncio.subprocess.Process, fd: int) -> asyncio.BaseTransport | None:
    transport = _subprocess_transport(proc)
    return transport.get_pipe_transport(fd) if transport is not None else None


async def spawn_stdio(
    command: Sequence[str] | str,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    stderr_to_log: bool = True,
    close_timeout: float = 5.0,
) -> StdioTransport:
    """Start the agent ``command`` and return a transport over its stdin/stdout.

    ``command`` is an argument list (``[sys.executable, "agent.py"]``) or a string split with
    :func:`shlex.split` (use a list for paths with spaces); no shell is involved. ``env`` replaces the
    environment like :mod:`subprocess` does (pass ``{**os.environ, "KEY": "v"}`` to add to it); ``None``
    inherits it. Either way, when the application configured OTLP, the agent also gets the OTLP endpoint,
    protocol and a service name of its own, unless ``env`` sets them, and never the OTLP credentials it
    would inherit (``OTEL_EXPORTER_OTLP_HEADERS`` ...): see ``docs/topics/observability.md``.
    ``max_frame_bytes`` bounds one line from the agent. With ``stderr_to_log`` the agent's
    stderr lines become ``agent_stderr`` log events, else stderr is inherited. ``close_timeout`` bounds
    ``close()`` (see the module docstring).

    Raises :class:`~acp_client.exceptions.AgentNotFound` (a :class:`~acp_client.exceptions.ConnectError`)
    if the program is missing or cannot be executed, ``ConnectError`` for any other failure to start it.
    The keywords are gathered into one :class:`~acp_client.transports.TransportOptions` (which checks
    them) and handed to :func:`open_stdio`; a client spawns its agents with that function directly.
    """
    options = TransportOptions(
        stdio_env=env, stdio_cwd=cwd, max_frame_bytes=max_frame_bytes, close_timeout=close_timeout
    )
    return await open_stdio(command, options, stderr_to_log=stderr_to_log)


async def open_stdio(
    command: Sequence[str] | str, options: TransportOptions, *, stderr_to_log: bool = True
) -> StdioTransport:
    """Start the agent ``command`` with a client's shared :class:`TransportOptions` (``stdio_env``,
    ``stdio_cwd``, ``max_frame_bytes``, ``close_timeout``), read where used; see :func:`spawn_stdio`."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if not argv:
        raise UsageError("an agent command is needed to spawn a stdio agent")
    description = f"stdio:{os.path.basename(argv[0])}"
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE if stderr_to_log else None,
            env=agent_environment(argv, options.stdio_env),  # with the application's OTLP settings
            cwd=options.stdio_cwd,
            limit=options.max_frame_bytes,
            start_new_session=True,  # the agent leads its own process group: close() ends all of it
        )
    except OSError as exc:
        if isinstance(exc, _NOT_STARTABLE) or exc.errno == _ENOEXEC:
            raise AgentNotFound(argv[0], exc) from exc
        raise ConnectError(f"could not start the agent {argv[0]!r}: {exc}") from exc
    assert process.stdin is not None and process.stdout is not None
    transport = StdioTransport(
        process.stdout,
        process.stdin,
        process=process,
        max_frame_bytes=options.max_frame_bytes,
        close_timeout=options.close_timeout,
        description=description,
    )
    transport._own_group(ProcessGroup(process.pid, options.close_timeout / 2))
    if process.stderr is not None:
        transport._start_stderr_pump(process.stderr)
    _log.debug("agent_spawned", transport=description, pid=process.pid)
    return transport

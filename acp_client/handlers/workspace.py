"""A ready :class:`ClientHandlers`: the agent's file system and terminals, confined to a workspace.

See ``docs/howto/give-an-agent-your-workspace.md`` for the threat model: what is refused and why, and what
stays the host's job.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from acp_client._checks import check_bool, check_callables, check_count, check_str_mapping
from acp_client.exceptions import UsageError
from acp_client.handlers._base import ClientHandlers, PermissionOption, PermissionRequest, TerminalExit, TerminalOutput
from acp_client.handlers._paths import Roots, read_existing, read_text, select_lines, write_text
from acp_client.handlers._permission import PermissionPolicy, deny, permission_policy
from acp_client.handlers._refusal import WorkspaceRefusal
from acp_client.handlers._terminals import TerminalPool

__all__ = ["BeforeWrite", "BufferLookup", "PendingWrite", "Workspace"]

_ASKABLE = frozenset({"write", "terminal"})
_GATE_OPTIONS = (
    PermissionOption("allow_once", "Allow", "allow_once"),
    PermissionOption("reject_once", "Reject", "reject_once"),
)


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """A write the agent asked for, shown to ``before_write`` before anything touches the disk.

    ``path`` is the path the agent sent, ``real_path`` the checked one (symlinks resolved); ``previous`` is
    the file's current text (``None`` if it does not exist or is not readable text).
    """

    session_id: str
    path: str
    real_path: str
    content: str
    previous: str | None


#: ``async (path) -> text | None``: the editor's unsaved buffer for a (checked, resolved) path, if any.
BufferLookup = Callable[[str], Awaitable[str | None]]
#: ``async (write) -> handled``: ``True`` when the host applied the write itself (to its buffer) and the
#: workspace must not write the file; ``False`` to let it write. Raise :class:`WorkspaceRefusal` to refuse.
BeforeWrite = Callable[[PendingWrite], Awaitable[bool]]


class Workspace(ClientHandlers):
    """``ClientHandlers`` that serve ``fs/*`` and ``terminal/*`` inside a set of root directories.

    * Paths must be absolute and resolve (symlinks included) inside a root; reads and writes walk down
      from the root without following any symlink, so a swap after the check is refused, never followed.
    * Reads honour ``line``/``limit``, are capped at ``max_read_bytes``, refuse binary files and anything
      that is not a regular file; ``buffers`` supplies the editor's unsaved text.
    * A regular file with other hard links is refused for reads and writes (a hard link to a file outside
      the roots cannot be told from a file inside them), unless ``allow_hard_links=True``.
    * Writes are atomic (temp file + rename, the mode kept), go through ``before_write``, and are refused
      when the workspace or the session is read-only.
    * Terminals run in their own process group in a confined ``cwd``, output capped, at most
      ``max_terminals`` at once, with an allow-listed environment (``env``, ``inherit_env``); kill and
      release end the whole group. A session's terminals end when the
      session ends (:meth:`session_ended`), all of them when the client closes (:meth:`client_closed`).
    * ``permission`` answers the agent's permission requests and is asked before each write and each
      terminal, unless ``ask_before`` leaves that kind out. The default policy denies. It is a policy
      callable (:func:`~acp_client.handlers.ask`, your own) or the name of a documented one: ``"deny"``,
      ``"allow_reads"``; any other value is refused when the workspace is made.

    Every refusal is a :class:`WorkspaceRefusal` (``-32602`` with ``data.rule``). The workspace also serves
    v2 agents through the ``_acp-client/`` extension methods (``serves_v2_extension``).
    """

    serves_v2_extension = True

    def __init__(
        self,
        roots: Sequence[str | os.PathLike[str]],
        *,
        permission: PermissionPolicy | str = deny,
        ask_before: Collection[str] = ("write", "terminal"),
        read_only: bool = False,
        max_read_bytes: int = 1_000_000,
        allow_hard_links: bool = False,
        buffers: BufferLookup | None = None,
        before_write: BeforeWrite | None = None,
        max_terminals: int = 8,
        max_output_bytes: int = 1_000_000,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = False,
    ) -> None:
        """Serve ``roots`` (existing directories: the session ``cwd`` and its ``additionalDirectories``).

        ``env`` is the environment terminals start from (the agent's ``env`` is merged over it). ``None``
        means the allow-listed part of this process's environment (``PATH``, ``HOME``, ``USER``,
        ``LOGNAME``, ``SHELL``, ``LANG``, ``LANGUAGE``, ``LC_*``, ``TERM``, ``TZ``, ``TMPDIR``): the client's
        tokens and keys never reach a command the agent runs. ``inherit_env=True`` passes all of this
        process's environment instead (an explicit choice; not together with ``env``).
        """
        if os.name != "posix" or os.open not in os.supports_dir_fd:
            raise UsageError("Workspace needs a POSIX system (it opens paths relative to directory handles)")
        if isinstance(ask_before, str) or not isinstance(ask_before, Collection):
            raise UsageError(f"Workspace.ask_before must be a collection of 'write' and 'terminal', not {ask_before!r}")
        check_bool("Workspace", "inherit_env", inherit_env)
        if inherit_env and env is not None:
            raise UsageError("Workspace: pass env= or inherit_env=True, not both: env is the whole base environment")
        unknown = set(ask_before) - _ASKABLE
        if unknown:
            raise UsageError(f"Workspace.ask_before takes 'write' and 'terminal', not {sorted(unknown, key=repr)}")
        check_bool("Workspace", "read_only", read_only)
        check_count("Workspace", "max_read_bytes", max_read_bytes)
        check_bool("Workspace", "allow_hard_links", allow_hard_links)
        check_callables("Workspace", buffers=buffers, before_write=before_write)
        check_count("Workspace", "max_terminals", max_terminals)
        check_count("Workspace", "max_output_bytes", max_output_bytes)
        check_str_mapping("Workspace", "env", env)
        self.roots = Roots(roots)
        self.permission = permission_policy(permission, name="Workspace.permission")
        self.ask_before = frozenset(ask_before)
        self.read_only = read_only
        self.max_read_bytes = max_read_bytes
        self.allow_hard_links = allow_hard_links
        self.buffers = buffers
        self.before_write = before_write
        self._terminals = TerminalPool(
            max_terminals=max_terminals, max_output_bytes=max_output_bytes, base_env=env, inherit_env=inherit_env
        )
        self._session_roots: dict[str, Roots] = {}
        self._read_only_sessions: set[str] = set()

    # ------------------------------------------------------------------ per-session settings

    def confine(
        self,
        session_id: str,
        cwd: str | os.PathLike[str],
        additional_directories: Sequence[str | os.PathLike[str]] = (),
    ) -> None:
        """Narrow one session to its own ``cwd`` and ``additional_directories`` (each inside the roots)."""
        narrowed = Roots([cwd, *additional_directories])
        for path in narrowed.paths:
            self.roots.locate(path)  # raises WorkspaceRefusal when outside the workspace
        self._session_roots[session_id] = narrowed

    def set_read_only(self, session_id: str, read_only: bool = True) -> None:
        """Make one session read-only (writes and terminals refused), or writable again."""
        if read_only:
            self._read_only_sessions.add(session_id)
        else:
            self._read_only_sessions.discard(session_id)

    def roots_for(self, session_id: str) -> tuple[str, ...]:
        """The resolved roots a session is confined to."""
        return self._roots(session_id).paths

    def terminal_ids(self, session_id: str | None = None) -> list[str]:
        """The open terminals (of one session, or all)."""
        return self._terminals.ids(session_id)

    def terminal_pid(self, terminal_id: str) -> int:
        """The process (and process group) id of an open terminal's command."""
        return self._terminals.pid(terminal_id)

    def _roots(self, session_id: str) -> Roots:
        return self._session_roots.get(session_id, self.roots)

    def _check_writable(self, session_id: str, path: str | None = None) -> None:
        if self.read_only or session_id in self._read_only_sessions:
            raise WorkspaceRefusal("read_only", path=path)

    async def _allowed(self, session_id: str, kind: str, title: str, tool: Mapping[str, object]) -> None:
        if kind not in self.ask_before:
            return
        tool_call = {"toolCallId": f"workspace_{secrets.token_hex(6)}", "title": title, **tool}
        request = PermissionRequest(
            session_id=session_id,
            options=_GATE_OPTIONS,
            tool_call=tool_call,
            title=title,
            description=f"The agent asks the workspace to {title[0].lower()}{title[1:]}.",
            raw={"sessionId": session_id, "toolCall": tool_call, "workspaceAction": kind},
        )
        choice = await self.permission(request)
        chosen = next((o for o in _GATE_OPTIONS if o.option_id == choice), None)
        if chosen is None or not chosen.kind.startswith("allow"):
            raise WorkspaceRefusal("permission_denied", f"the host did not allow: {title}")

    # ------------------------------------------------------------------ ClientHandlers

    async def request_permission(self, request: PermissionRequest) -> str | None:
        """Answer the agent's request with the ``permission`` policy (an unknown option id → *cancelled*)."""
        choice = await self.permission(request)
        return choice if any(o.option_id == choice for o in request.options) else None

    async def read_text_file(self, session_id: str, path: str, *, line: int | None, limit: int | None) -> str:
        """Serve the unsaved buffer when the host has one, else the file, under the workspace rules."""
        where = await asyncio.to_thread(self._roots(session_id).locate, path)
        if self.buffers is not None:
            text = await self.buffers(where.real)
            if text is not None:
                data = select_lines(text.encode("utf-8"), line, limit)
                if len(data) > self.max_read_bytes:
                    raise WorkspaceRefusal("too_large", path=path)
                return data.decode("utf-8")
        return await asyncio.to_thread(
            read_text,
            where,
            line,
            limit,
            max_bytes=self.max_read_bytes,
            allow_hard_links=self.allow_hard_links,
        )

    async def write_text_file(self, session_id: str, path: str, content: str) -> None:
        """Check, ask, show ``before_write``, then replace the file atomically.

        The path is checked once, before the permission prompt, which names the resolved path (no ``..``,
        no symlink); the write then walks the checked path without following symlinks, so whatever is
        swapped in while the user decides is refused.
        """
        self._check_writable(session_id, path)
        where = await asyncio.to_thread(self._roots(session_id).locate, path)
        # the user is asked about the file that will be written (resolved), never the agent's spelling of it
        await self._allowed(
            session_id, "write", f"Write {where.real}", {"kind": "edit", "locations": [{"path": where.real}]}
        )
        if self.before_write is not None:
            previous = await asyncio.to_thread(
                read_existing, where, max_bytes=self.max_read_bytes, allow_hard_links=self.allow_hard_links
            )
            if await self.before_write(PendingWrite(session_id, path, where.real, content, previous)):
                return
        await asyncio.to_thread(write_text, where, content, allow_hard_links=self.allow_hard_links)

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        *,
        args: list[str],
        env: dict[str, str],
        cwd: str | None,
        output_byte_limit: int | None,
    ) -> str:
        """Start ``command`` (no shell) in a confined ``cwd`` (default: the session's first root)."""
        self._check_writable(session_id)
        roots = self._roots(session_id)
        directory = roots.paths[0] if cwd is None else (await asyncio.to_thread(roots.locate, cwd)).real
        if not await asyncio.to_thread(os.path.isdir, directory):
            raise WorkspaceRefusal("not_found", "cwd is not a directory", path=cwd)
        title = "Run " + " ".join([command, *args])
        tool = {"kind": "execute", "rawInput": {"command": command, "args": list(args), "cwd": directory}}
        await self._allowed(session_id, "terminal", title, tool)
        return await self._terminals.create(session_id, command, args, env, directory, output_byte_limit)

    async def terminal_output(self, session_id: str, terminal_id: str) -> TerminalOutput:
        """The captured output (the last ``outputByteLimit`` bytes) and the exit status once exited."""
        return self._terminals.output(session_id, terminal_id)

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str) -> TerminalExit:
        """Wait until the command exits."""
        return await self._terminals.wait(session_id, terminal_id)

    async def kill_terminal(self, session_id: str, terminal_id: str) -> None:
        """Kill the command's whole process group; the terminal stays readable until released."""
        await self._terminals.kill(session_id, terminal_id)

    async def release_terminal(self, session_id: str, terminal_id: str) -> None:
        """Kill whatever still runs and forget the terminal."""
        await self._terminals.release(session_id, terminal_id)

    async def session_ended(self, session_id: str) -> None:
        """Kill and release the session's terminals and drop its settings."""
        self._session_roots.pop(session_id, None)
        self._read_only_sessions.discard(session_id)
        await self._terminals.end_session(session_id)

    async def client_closed(self) -> None:
        """Kill and release every terminal (the workspace stays usable for a new client)."""
        await self._terminals.end_all()

    async def aclose(self) -> None:
        """The same as :meth:`client_closed`, for a host that owns the workspace directly."""
        await self._terminals.end_all()

    async def __aenter__(self) -> Workspace:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

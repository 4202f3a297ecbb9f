"""The hostile table of issue 22: each request an agent could use to leave the workspace, and its answer."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from acp_client.exceptions import UsageError
from acp_client.handlers import PendingWrite, PermissionRequest, Workspace, WorkspaceRefusal
from acp_client.handlers._terminals import INHERITED_NAMES
from tests.conftest import bound

S = "sess_1"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The workspace root (resolved), beside an ``outside`` directory holding a secret."""
    (tmp_path / "root").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("the secret\n", encoding="utf-8")
    (tmp_path / "root" / "notes.txt").write_text("one\ntwo\nthree\n", encoding="utf-8")
    return (tmp_path / "root").resolve()


@pytest.fixture
async def workspace(root: Path) -> AsyncIterator[Workspace]:
    """A workspace over ``root`` that asks nobody (the permission gate has tests of its own)."""
    async with Workspace([root], ask_before=(), max_read_bytes=10_000, max_terminals=8) as ws:
        yield ws


async def refused(rule: str, call: object) -> WorkspaceRefusal:
    """Await ``call`` and require a refusal under ``rule`` (the JSON-RPC error an agent sees)."""
    assert asyncio.iscoroutine(call)
    with pytest.raises(WorkspaceRefusal) as caught:
        async with asyncio.timeout(bound(10)):
            await call
    error = caught.value
    assert (error.code, error.rule, error.data["rule"]) == (-32602, rule, rule)
    assert error.message.startswith(f"refused ({rule}): ")
    return error


async def read(ws: Workspace, path: Path | str, line: int | None = None, limit: int | None = None) -> str:
    return await ws.read_text_file(S, str(path), line=line, limit=limit)


# ---------------------------------------------------------------------------------------------- paths


async def test_dot_dot_traversal_is_refused(workspace: Workspace, root: Path) -> None:
    error = await refused("outside_roots", read(workspace, f"{root}/../outside/secret.txt"))
    assert error.data["path"] == f"{root}/../outside/secret.txt"
    await refused("outside_roots", workspace.write_text_file(S, f"{root}/../outside/new.txt", "x"))
    assert not (root.parent / "outside" / "new.txt").exists()


async def test_absolute_path_outside_is_refused(workspace: Workspace, root: Path) -> None:
    await refused("outside_roots", read(workspace, root.parent / "outside" / "secret.txt"))
    await refused("outside_roots", read(workspace, "/etc/passwd"))


async def test_relative_path_is_refused(workspace: Workspace) -> None:
    await refused("not_absolute", read(workspace, "notes.txt"))


async def test_lines_and_limit_are_honoured(workspace: Workspace, root: Path) -> None:
    assert await read(workspace, root / "notes.txt", line=2, limit=1) == "two\n"
    assert await read(workspace, root / "notes.txt", line=2) == "two\nthree\n"


async def test_symlink_out_is_refused_for_reads_and_writes(workspace: Workspace, root: Path) -> None:
    (root / "link.txt").symlink_to(root.parent / "outside" / "secret.txt")
    (root / "linkdir").symlink_to(root.parent / "outside")
    await refused("outside_roots", read(workspace, root / "link.txt"))
    await refused("outside_roots", read(workspace, root / "linkdir" / "secret.txt"))
    await refused("outside_roots", workspace.write_text_file(S, str(root / "link.txt"), "owned"))
    await refused("outside_roots", workspace.write_text_file(S, str(root / "linkdir" / "x.txt"), "owned"))
    assert (root.parent / "outside" / "secret.txt").read_text(encoding="utf-8") == "the secret\n"
    assert not (root.parent / "outside" / "x.txt").exists()


async def test_symlink_inside_the_roots_is_followed(workspace: Workspace, root: Path) -> None:
    (root / "alias.txt").symlink_to(root / "notes.txt")
    assert await read(workspace, root / "alias.txt", limit=1) == "one\n"


async def test_symlink_swapped_in_before_a_read_is_refused(root: Path) -> None:
    # the editor's buffer lookup runs between the check and the open: swap the file for a symlink there
    victim = root / "notes.txt"

    async def swap(path: str) -> None:
        victim.unlink()
        victim.symlink_to(root.parent / "outside" / "secret.txt")

    async with Workspace([root], buffers=swap) as ws:
        await refused("symlink_changed", read(ws, victim))


async def test_directory_swapped_for_a_symlink_while_the_user_decides_is_refused(root: Path) -> None:
    (root / "src").mkdir()

    async def swap_then_allow(request: PermissionRequest) -> str | None:
        (root / "src").rmdir()
        (root / "src").symlink_to(root.parent / "outside")
        option = request.option("allow_once")
        return option.option_id if option else None

    async with Workspace([root], permission=swap_then_allow) as ws:
        await refused("symlink_changed", ws.write_text_file(S, str(root / "src" / "secret.txt"), "owned"))
    assert (root.parent / "outside" / "secret.txt").read_text(encoding="utf-8") == "the secret\n"


def replace_with_symlink(path: str, target: Path) -> None:
    os.unlink(path)
    os.symlink(target, path)


async def test_file_swapped_for_a_symlink_before_a_write_is_refused(root: Path) -> None:
    async def swap(write: PendingWrite) -> bool:
        replace_with_symlink(write.real_path, root.parent / "outside" / "secret.txt")
        return False

    async with Workspace([root], ask_before=(), before_write=swap) as ws:
        await refused("symlink_changed", ws.write_text_file(S, str(root / "notes.txt"), "owned"))
    assert (root.parent / "outside" / "secret.txt").read_text(encoding="utf-8") == "the secret\n"


async def test_a_hard_link_to_a_file_outside_is_refused_by_default(workspace: Workspace, root: Path) -> None:
    # a hard link is the outside file itself under a name inside the root: nothing tells them apart
    secret = root.parent / "outside" / "secret.txt"
    os.link(secret, root / "hard.txt")
    await refused("hard_link", read(workspace, root / "hard.txt"))
    await refused("hard_link", workspace.write_text_file(S, str(root / "hard.txt"), "replaced"))
    assert secret.read_text(encoding="utf-8") == "the secret\n"
    assert os.stat(secret).st_nlink == 2  # the write was refused, not done through a new inode


async def test_hard_links_served_on_request_and_a_write_never_reaches_the_other_name(root: Path) -> None:
    secret = root.parent / "outside" / "secret.txt"
    os.link(secret, root / "hard.txt")
    shown: list[str | None] = []

    async def before_write(write: PendingWrite) -> bool:
        shown.append(write.previous)
        return False

    async with Workspace([root], ask_before=(), allow_hard_links=True, before_write=before_write) as ws:
        assert await read(ws, root / "hard.txt") == "the secret\n"
        await ws.write_text_file(S, str(root / "hard.txt"), "replaced")
    assert shown == ["the secret\n"]
    assert (root / "hard.txt").read_text(encoding="utf-8") == "replaced"
    assert secret.read_text(encoding="utf-8") == "the secret\n"  # the rename gave the name a new inode


async def test_huge_file_is_refused_unless_read_in_parts(workspace: Workspace, root: Path) -> None:
    (root / "huge.txt").write_text("x" * 99 + "\n" * 1 + "y" * 20_000 + "\n", encoding="utf-8")
    error = await refused("too_large", read(workspace, root / "huge.txt"))
    assert "line/limit" in error.data["reason"]
    assert await read(workspace, root / "huge.txt", line=1, limit=1) == "x" * 99 + "\n"
    await refused("too_large", read(workspace, root / "huge.txt", line=2, limit=1))


async def test_binary_file_is_refused(workspace: Workspace, root: Path) -> None:
    (root / "a.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    (root / "latin1.txt").write_bytes("café".encode("latin-1"))
    await refused("binary", read(workspace, root / "a.bin"))
    await refused("binary", read(workspace, root / "latin1.txt"))


async def test_fifo_is_refused_without_blocking(workspace: Workspace, root: Path) -> None:
    os.mkfifo(root / "pipe")
    await refused("not_a_regular_file", read(workspace, root / "pipe"))
    await refused("not_a_regular_file", workspace.write_text_file(S, str(root / "pipe"), "x"))
    await refused("not_a_regular_file", read(workspace, root))


async def test_proc_self_environ_is_refused(workspace: Workspace, root: Path) -> None:
    await refused("outside_roots", read(workspace, "/proc/self/environ"))
    (root / "env").symlink_to("/proc/self/environ")
    await refused("outside_roots", read(workspace, root / "env"))
    async with Workspace(["/"]) as everything:  # even a host that serves "/" never serves /proc
        await refused("system_path", read(everything, "/proc/self/environ"))


async def test_write_through_a_dangling_symlink_is_refused(workspace: Workspace, root: Path) -> None:
    (root / "dangling.txt").symlink_to(root.parent / "outside" / "planted.txt")
    await refused("outside_roots", workspace.write_text_file(S, str(root / "dangling.txt"), "owned"))
    assert not (root.parent / "outside" / "planted.txt").exists()


async def test_writes_are_atomic_keep_the_mode_and_create_parents(workspace: Workspace, root: Path) -> None:
    script = root / "run.sh"
    script.write_text("old\n", encoding="utf-8")
    script.chmod(0o750)
    await workspace.write_text_file(S, str(script), "new\n")
    assert script.read_text(encoding="utf-8") == "new\n"
    assert script.stat().st_mode & 0o777 == 0o750
    await workspace.write_text_file(S, str(root / "a" / "b" / "c.txt"), "deep")
    assert (root / "a" / "b" / "c.txt").read_text(encoding="utf-8") == "deep"
    assert [name for name in os.listdir(root) if name.endswith(".acp-tmp")] == []


class TempModes:
    """The permission bits of each file whose mode is set (``os.fchmod``, seen through the ``os.chmod`` audit
    event, before the change): for a workspace write, what its temp file was while the text went into it."""

    watching: list[int] | None = None

    @classmethod
    def hook(cls, event: str, args: tuple[object, ...]) -> None:
        if event == "os.chmod" and cls.watching is not None and isinstance(args[0], int):
            cls.watching.append(stat.S_IMODE(os.fstat(args[0]).st_mode))


sys.addaudithook(TempModes.hook)  # inert until a test sets ``watching``


async def test_a_private_file_is_never_rewritten_through_a_wider_temp_file(workspace: Workspace, root: Path) -> None:
    # another local user watching the directory must never be able to open the new text of a 0600 file
    private = root / "token.txt"
    private.write_text("old secret\n", encoding="utf-8")
    private.chmod(0o600)
    TempModes.watching = modes = []
    try:
        await workspace.write_text_file(S, str(private), "new secret\n")
    finally:
        TempModes.watching = None
    assert modes == [0o600]  # the temp file held the new text with these bits, before its mode was set
    assert private.read_text(encoding="utf-8") == "new secret\n"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600


# ---------------------------------------------------------------------------------------------- terminals

DAEMONS = textwrap.dedent(
    """
    import os, sys, time
    pids = []
    for leave_group in (False, True):
        pid = os.fork()
        if pid == 0:
            if leave_group:
                os.setsid()  # a daemon: its own session, out of the terminal's process group
            time.sleep(300)
            os._exit(0)
        pids.append(pid)
    with open(sys.argv[1], "w") as fifo:
        fifo.write(" ".join(map(str, pids)) + "\\n")
    if sys.argv[2] == "stay":
        time.sleep(300)
    """
)


async def spawned_pids(fifo: Path) -> list[int]:
    """Read the pids the command writes into ``fifo`` (opened first, so the command cannot miss it)."""
    loop = asyncio.get_running_loop()
    read_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    hold = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # no EOF before the command writes
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", 0)
    )
    try:
        async with asyncio.timeout(bound(10)):
            line = await reader.readline()
    finally:
        transport.close()
        os.close(hold)
    return [int(p) for p in line.split()]


def gone(pid: int) -> bool:
    """The process no longer runs (no entry, or a zombie waiting for its new parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("ending", ["kill", "release"])
async def test_a_forked_daemon_is_gone_after_kill_and_after_release(
    workspace: Workspace, root: Path, tmp_path: Path, ending: str
) -> None:
    fifo = tmp_path / "pids"
    os.mkfifo(fifo)
    stay = "stay" if ending == "kill" else "exit"
    tid = await workspace.create_terminal(
        S, sys.executable, args=["-c", DAEMONS, str(fifo), stay], env={}, cwd=None, output_byte_limit=None
    )
    leader = workspace.terminal_pid(tid)
    pids = await spawned_pids(fifo)
    assert len(pids) == 2 and not any(gone(p) for p in pids)
    if ending == "kill":
        await workspace.kill_terminal(S, tid)
        assert (await workspace.terminal_output(S, tid)).signal == "SIGKILL"  # still readable after a kill
        await workspace.release_terminal(S, tid)
    else:
        assert (await workspace.wait_for_terminal_exit(S, tid)).exit_code == 0  # the leader left its children
        assert not any(gone(p) for p in pids)
        await workspace.release_terminal(S, tid)
    assert gone(leader)
    assert [p for p in pids if not gone(p)] == []
    await refused("unknown_terminal", workspace.terminal_output(S, tid))


SPAWNER = textwrap.dedent(
    """
    import os, sys, time
    if os.fork() == 0:
        os.setsid()  # out of the terminal's group, and forking as fast as it can, each child its own session
        for count in range(1, 3000):
            if os.fork() == 0:
                os.setsid()
                os.execv("/bin/sleep", ["sleep", "300"])
            if count == 50:  # a list of pids taken now is stale before the kill reaches its first entry
                with open(sys.argv[1], "w") as fifo:
                    fifo.write(f"{os.getpid()}\\n")
        os._exit(0)
    if sys.argv[2] == "stay":
        time.sleep(300)
    """
)


def carrying(entry: bytes) -> list[int]:
    """The running processes whose environment holds ``entry`` (``NAME=value``)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as env:
                if entry in env.read().split(b"\0") and not gone(int(name)):
                    found.append(int(name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("ending", ["kill", "release"])
async def test_a_daemon_that_forks_fast_leaves_nothing_after_kill_and_after_release(
    workspace: Workspace, tmp_path: Path, ending: str
) -> None:
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    mark = f"HOSTILE_MARK={os.urandom(8).hex()}".encode()
    try:
        tid = await workspace.create_terminal(
            S,
            sys.executable,
            args=["-c", SPAWNER, str(fifo), "stay" if ending == "kill" else "exit"],
            env={"HOSTILE_MARK": mark.decode().partition("=")[2]},
            cwd=None,
            output_byte_limit=None,
        )
        await spawned_pids(fifo)  # the spawner runs
        if ending == "kill":
            await workspace.kill_terminal(S, tid)
        else:
            await workspace.wait_for_terminal_exit(S, tid)
        await workspace.release_terminal(S, tid)
        assert carrying(mark) == []
    finally:
        for pid in carrying(mark):  # what survived (a sleep each) does not fork: one kill ends it
            os.kill(pid, signal.SIGKILL)


async def test_output_past_the_limit_is_cut_from_the_start_on_a_character_boundary(workspace: Workspace) -> None:
    tid = await workspace.create_terminal(
        S,
        sys.executable,
        args=["-c", "import sys; sys.stdout.buffer.write('é'.encode() * 100 + b'END')"],
        env={},
        cwd=None,
        output_byte_limit=52,  # 52 bytes: 'END' plus 49 bytes, which cut the first 'é' in half
    )
    assert (await workspace.wait_for_terminal_exit(S, tid)).exit_code == 0
    out = await workspace.terminal_output(S, tid)
    assert out.truncated is True and out.exit_code == 0
    assert out.output == "é" * 24 + "END"
    await workspace.release_terminal(S, tid)


async def test_a_thousand_terminals_meet_the_cap(workspace: Workspace) -> None:
    async def one() -> str:
        return await workspace.create_terminal(
            S, "sleep", args=["300"], env={}, cwd=None, output_byte_limit=None
        )

    results = await asyncio.gather(*(one() for _ in range(1000)), return_exceptions=True)
    started = [r for r in results if isinstance(r, str)]
    refusals = [r for r in results if isinstance(r, WorkspaceRefusal)]
    assert len(started) == 8 and len(refusals) == 992
    assert {r.rule for r in refusals} == {"too_many_terminals"}
    pids = [workspace.terminal_pid(t) for t in started]
    await workspace.release_terminal(S, started[0])
    assert len(workspace.terminal_ids()) == 7
    await one()  # a released slot is free again
    await workspace.aclose()
    assert workspace.terminal_ids() == [] and all(gone(p) for p in pids)


async def test_terminal_cwd_is_confined_and_env_merged(workspace: Workspace, root: Path) -> None:
    await refused(
        "outside_roots",
        workspace.create_terminal(S, "pwd", args=[], env={}, cwd=str(root.parent), output_byte_limit=None),
    )
    (root / "sub").mkdir()
    tid = await workspace.create_terminal(
        S,
        sys.executable,
        args=["-c", "import os; print(os.getcwd(), os.environ['GREETING'], 'PATH' in os.environ)"],
        env={"GREETING": "hi"},
        cwd=str(root / "sub"),
        output_byte_limit=None,
    )
    await workspace.wait_for_terminal_exit(S, tid)
    assert (await workspace.terminal_output(S, tid)).output == f"{root / 'sub'} hi True\n"
    await refused("unknown_terminal", workspace.terminal_output("another_session", tid))
    await workspace.release_terminal(S, tid)
    await refused(
        "spawn_failed",
        workspace.create_terminal(S, "/no/such/program", args=[], env={}, cwd=None, output_byte_limit=None),
    )


async def environment_of_a_terminal(ws: Workspace, env: dict[str, str]) -> dict[str, str]:
    """What ``env -0``, run by the agent (asking for ``env``), prints as its environment."""
    tid = await ws.create_terminal(S, "/usr/bin/env", args=["-0"], env=env, cwd=None, output_byte_limit=None)
    assert (await ws.wait_for_terminal_exit(S, tid)).exit_code == 0
    output = (await ws.terminal_output(S, tid)).output
    await ws.release_terminal(S, tid)
    return dict(item.partition("=")[::2] for item in output.split("\0") if item)


async def test_a_terminal_never_sees_the_clients_secrets_unless_the_host_opts_in(
    workspace: Workspace, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the client holds a key; the agent runs a command (the user approved "env") that prints its environment
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-clients-key")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/run/user/agent.sock")
    monkeypatch.setenv("LC_TIME", "C")
    seen = await environment_of_a_terminal(workspace, {"GREETING": "hi"})
    assert not any("sk-the-clients-key" in value for value in seen.values())
    assert "OPENAI_API_KEY" not in seen and "SSH_AUTH_SOCK" not in seen
    assert seen["PATH"] == os.environ["PATH"] and seen["LC_TIME"] == "C" and seen["GREETING"] == "hi"
    assert set(seen) - {"ACP_CLIENT_TERMINAL", "GREETING"} <= {*INHERITED_NAMES, "LC_TIME", *os.environ}
    async with Workspace([root], ask_before=(), inherit_env=True) as everything:
        assert (await environment_of_a_terminal(everything, {}))["OPENAI_API_KEY"] == "sk-the-clients-key"
    async with Workspace([root], ask_before=(), env={"PATH": os.environ["PATH"]}) as given:
        assert set(await environment_of_a_terminal(given, {})) == {"PATH", "ACP_CLIENT_TERMINAL"}


def test_the_full_environment_is_an_explicit_valid_choice(root: Path) -> None:
    with pytest.raises(UsageError, match="inherit_env"):
        Workspace([root], inherit_env="yes")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="not both"):
        Workspace([root], env={}, inherit_env=True)
    with pytest.raises(UsageError, match="env must be"):
        Workspace([root], env={"PATH": 1})  # type: ignore[dict-item]


async def test_session_ended_kills_its_terminals_only(workspace: Workspace) -> None:
    mine = await workspace.create_terminal(S, "sleep", args=["300"], env={}, cwd=None, output_byte_limit=None)
    other = await workspace.create_terminal("sess_2", "sleep", args=["300"], env={}, cwd=None, output_byte_limit=None)
    mine_pid, other_pid = workspace.terminal_pid(mine), workspace.terminal_pid(other)
    await workspace.session_ended(S)
    assert gone(mine_pid) and not gone(other_pid)
    assert workspace.terminal_ids() == [other]
    await workspace.client_closed()
    assert gone(other_pid) and workspace.terminal_ids() == []

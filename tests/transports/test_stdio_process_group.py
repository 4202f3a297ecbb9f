"""The stdio agent's whole process tree is ended: on ``close()``, on a respawn, and at interpreter exit.

The agent is ``tree_agent.py``: it can re-execute itself as a child that keeps the stdio pipes, start a
helper that holds no pipe, ignore SIGTERM, and refuse to exit when its stdin ends. Each process of the tree
writes its pid to a file; "gone" means no such pid runs any more (a zombie left to an init that does not
reap counts as gone: it holds nothing).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from acp_client import ConnectionDropped, ReconnectingClient, RecoveryPolicy, Timeouts
from acp_client.transports import StdioTransport, Transport, spawn_stdio
from tests.conftest import bound, recorder

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads process states from /proc")

TREE_AGENT = Path(__file__).with_name("tree_agent.py")
WAIT = bound(10.0)
CLOSE_TIMEOUT = 0.6  # SIGTERM after 0.3 s, SIGKILL 0.3 s later


def tree_command(pids: Path, *options: str) -> list[str]:
    return [sys.executable, str(TREE_AGENT), "--pids", str(pids), *options]


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def read_pids(path: Path, count: int) -> list[int]:
    """The pids the tree wrote: each process writes its own (and the helper's) before it serves, so once
    the agent answered, all ``count`` are there."""
    pids = [int(line) for line in path.read_text().split()]
    assert len(pids) == count, pids
    return pids


async def spawn_ready(command: list[str]) -> StdioTransport:
    transport = await spawn_stdio(command, close_timeout=CLOSE_TIMEOUT)
    assert await asyncio.wait_for(transport.recv(), WAIT) == "ready"
    return transport


async def test_close_ends_a_child_that_keeps_the_stdio_pipes(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    transport = await spawn_ready(tree_command(pids_file, "--reexec", "--stay"))
    leader, child = read_pids(pids_file, 2)
    assert transport.pid == leader and os.getpgid(child) == leader
    await transport.send("hello")
    assert await asyncio.wait_for(transport.recv(), WAIT) == "hello"  # the child answers
    await asyncio.wait_for(transport.close(), WAIT)
    # no waiting needed: close() returns only once the group has no running member
    assert not running(leader) and not running(child)
    assert transport.returncode is not None


async def test_close_kills_a_tree_that_ignores_sigterm(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    transport = await spawn_ready(tree_command(pids_file, "--reexec", "--helper", "--ignore-term", "--stay"))
    pids = read_pids(pids_file, 3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(transport.close(), WAIT)
    # stdin EOF (ignored), SIGTERM to the group (ignored), SIGKILL to the group: two half-bounds and a bit
    assert loop.time() - started < bound(CLOSE_TIMEOUT + 1.0)
    assert [pid for pid in pids if running(pid)] == []
    assert transport.returncode == -signal.SIGKILL


async def test_close_ends_helpers_left_by_an_agent_that_exited_by_itself(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    transport = await spawn_ready(tree_command(pids_file, "--helper", "--ignore-term"))
    leader, helper = read_pids(pids_file, 2)
    await asyncio.wait_for(transport.close(), WAIT)
    assert transport.returncode == 0  # the agent exited on stdin EOF; its helper did not, and was killed
    assert not running(leader) and not running(helper)


async def test_a_respawn_starts_only_once_the_old_tree_is_gone(tmp_path: Path) -> None:
    # generation n writes its pids to pids-n; the factory checks, when called for the next generation,
    # that nothing of the previous tree runs any more
    spawned: list[Path] = []
    seen_alive_at_respawn: list[int] = []

    async def factory() -> Transport:
        if spawned:
            previous = [int(p) for p in spawned[-1].read_text().split()]
            seen_alive_at_respawn.extend(pid for pid in previous if running(pid))
        path = tmp_path / f"pids-{len(spawned)}"
        spawned.append(path)
        command = tree_command(path, "--acp", "--reexec", "--helper", "--ignore-term")
        return await spawn_stdio(command, close_timeout=CLOSE_TIMEOUT)

    client = ReconnectingClient(
        factory,
        timeouts=Timeouts(initialize=bound(20), request=bound(20)),
        policy=RecoveryPolicy(start_jitter=0.0, stable_after=0.0),
    )
    rec = recorder(client)
    await client.start()
    try:
        await client.wait_ready(timeout=WAIT)
        leader, child, helper = read_pids(spawned[0], 3)
        # the agent process that talks dies; its parent (which waited for it) exits with it; the helper,
        # holding no pipe and ignoring SIGTERM, would live on next to the new agent if nobody ended it
        os.kill(child, signal.SIGKILL)
        await rec.wait(lambda e: isinstance(e, ConnectionDropped), timeout=WAIT)
        await client.wait_ready(timeout=WAIT)
        assert len(spawned) == 2
        assert seen_alive_at_respawn == []
        assert not running(leader) and not running(child) and not running(helper)
        assert all(running(pid) for pid in read_pids(spawned[1], 3))
    finally:
        await rec.close()
        await client.aclose()
    assert [pid for pid in read_pids(spawned[1], 3) if running(pid)] == []


EXIT_WITHOUT_CLOSE = """
    import asyncio, sys
    from acp_client.transports import spawn_stdio

    async def main() -> None:
        transport = await spawn_stdio(sys.argv[1:], close_timeout=0.6)
        assert await asyncio.wait_for(transport.recv(), 10) == "ready"
        print("started", flush=True)
        # returns without close(): asyncio.run ends, then the interpreter exits

    asyncio.run(main())
"""


def test_interpreter_exit_without_close_ends_the_tree(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    command = tree_command(pids_file, "--reexec", "--helper", "--ignore-term", "--stay")
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", textwrap.dedent(EXIT_WITHOUT_CLOSE), *command],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["started"]
    pids = read_pids(pids_file, 3)
    # the exit hook waited for the group to empty after SIGKILL; look again for a bounded moment in case
    # the kernel is still tearing a process down
    deadline = time.monotonic() + bound(2.0)
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [pid for pid in pids if running(pid)] == []


async def test_spawned_agent_leads_its_own_session(tmp_path: Path) -> None:
    transport = await spawn_ready(tree_command(tmp_path / "pids"))
    try:
        pid = transport.pid
        assert pid is not None
        assert os.getpgid(pid) == pid and os.getsid(pid) == pid
        assert os.getpgid(0) != pid
    finally:
        await asyncio.wait_for(transport.close(), WAIT)


"""The stdio transport against real subprocesses (``sys.executable -c``)."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import textwrap
from collections.abc import AsyncIterator

import pytest
from structlog.testing import capture_logs

from acp_client.exceptions import ConnectError, ConnectionLost, UsageError
from acp_client.transports import StdioTransport, Transport, spawn_stdio
from tests.conftest import bound

WAIT = bound(5.0)  # upper bound on any wait for something that must happen

ECHO = textwrap.dedent(
    """
    import sys
    sys.stderr.write("echo agent ready\\n")
    sys.stderr.flush()
    for line in sys.stdin:
        sys.stdout.write(line)
        sys.stdout.flush()
    """
)


def python(script: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(script)]


def assert_reaped(pid: int) -> None:
    if os.path.isdir("/proc"):
        assert not os.path.exists(f"/proc/{pid}"), f"process {pid} is still there (zombie?)"


@pytest.fixture
async def echo() -> AsyncIterator[StdioTransport]:
    transport = await spawn_stdio(python(ECHO))
    try:
        yield transport
    finally:
        await asyncio.wait_for(transport.close(), WAIT)


async def test_round_trip(echo: StdioTransport) -> None:
    assert isinstance(echo, Transport)
    frames = ['{"jsonrpc":"2.0","id":1,"method":"initialize"}', '{"text":"grüße"}']
    for frame in frames:
        await echo.send(frame)
    for frame in frames:
        assert await asyncio.wait_for(echo.recv(), WAIT) == frame
    assert echo.stats.frames_out == 2 and echo.stats.frames_in == 2
    assert echo.description == f"stdio:{os.path.basename(sys.executable)}"
    assert echo.pid is not None and f"pid={echo.pid}" in repr(echo)


async def test_blank_lines_are_skipped_and_counted(echo: StdioTransport) -> None:
    await echo.send("")
    await echo.send("after blank")
    assert await asyncio.wait_for(echo.recv(), WAIT) == "after blank"
    assert echo.stats.empty_discarded == 1


async def test_frame_with_newline_is_refused(echo: StdioTransport) -> None:
    with pytest.raises(UsageError):
        await echo.send('{"a":\n1}')


async def test_stderr_goes_to_the_log_and_close_reaps() -> None:
    with capture_logs() as logs:
        transport = await spawn_stdio(python(ECHO))
        pid = transport.pid
        assert pid is not None
        await transport.send("ping")
        assert await asyncio.wait_for(transport.recv(), WAIT) == "ping"
        await asyncio.wait_for(transport.close(), WAIT)
    stderr_events = [e for e in logs if e["event"] == "agent_stderr"]
    assert [e["line"] for e in stderr_events] == ["echo agent ready"]
    assert stderr_events[0]["pid"] == pid and stderr_events[0]["log_level"] == "info"
    assert list(transport.stderr_tail) == ["echo agent ready"]
    assert transport.returncode == 0  # it exited on stdin EOF, no signal needed
    assert transport.closed
    assert_reaped(pid)
    with pytest.raises(ConnectionLost):
        await transport.recv()
    with pytest.raises(ConnectionLost):
        await transport.send("x")
    gc.collect()  # an unclosed subprocess transport would warn (an error under -W error) here


async def test_killed_agent_makes_recv_raise_quickly(echo: StdioTransport) -> None:
    receiver = asyncio.create_task(echo.recv())
    assert echo.pid is not None
    os.kill(echo.pid, signal.SIGKILL)
    with pytest.raises(ConnectionLost) as lost:
        await asyncio.wait_for(receiver, WAIT)
    assert lost.value.reason == f"process exited with code {-signal.SIGKILL}"
    assert echo.closed
    with pytest.raises(ConnectionLost):
        await echo.send("into the void")


async def test_exit_code_is_the_reason() -> None:
    transport = await spawn_stdio(python("import sys; sys.stdin.readline(); sys.exit(3)"))
    try:
        await transport.send("bye")
        with pytest.raises(ConnectionLost) as lost:
            await asyncio.wait_for(transport.recv(), WAIT)
        assert lost.value.reason == "process exited with code 3"
        assert transport.returncode == 3
    finally:
        await asyncio.wait_for(transport.close(), WAIT)


async def test_last_line_without_newline_is_a_frame() -> None:
    transport = await spawn_stdio(python("import sys; sys.stdout.write('tail'); sys.stdout.flush()"))
    try:
        assert await asyncio.wait_for(transport.recv(), WAIT) == "tail"
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(transport.recv(), WAIT)
    finally:
        await asyncio.wait_for(transport.close(), WAIT)


async def test_close_kills_an_agent_that_ignores_eof_and_sigterm() -> None:
    stubborn = """
        import signal, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sys.stdout.write("ready\\n"); sys.stdout.flush()
        sys.stdin.read()
        while True:
            time.sleep(1)
    """
    transport = await spawn_stdio(python(stubborn), close_timeout=0.4)
    assert await asyncio.wait_for(transport.recv(), WAIT) == "ready"  # SIGTERM is ignored from here on
    pid = transport.pid
    assert pid is not None
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(transport.close(), WAIT)
    assert loop.time() - started < bound(0.4 + 1.0)
    assert transport.returncode == -signal.SIGKILL
    assert_reaped(pid)


async def test_close_is_idempotent_and_concurrent(echo: StdioTransport) -> None:
    await asyncio.wait_for(asyncio.gather(echo.close(), echo.close()), WAIT)
    await echo.close()
    assert echo.closed


async def test_over_long_line_kills_the_link() -> None:
    transport = await spawn_stdio(
        python("print('x' * 5000, flush=True); print('ok', flush=True)"), max_frame_bytes=1024
    )
    try:
        with pytest.raises(ConnectionLost) as lost:
            await asyncio.wait_for(transport.recv(), WAIT)
        assert lost.value.reason is not None and "max_frame_bytes (1024 bytes)" in lost.value.reason
        with pytest.raises(ConnectionLost):  # it stays dead
            await transport.recv()
    finally:
        await asyncio.wait_for(transport.close(), WAIT)


async def test_line_of_exactly_max_frame_bytes_passes() -> None:
    transport = await spawn_stdio(python("print('y' * 1024, flush=True)"), max_frame_bytes=1024)
    try:
        assert await asyncio.wait_for(transport.recv(), WAIT) == "y" * 1024
    finally:
        await asyncio.wait_for(transport.close(), WAIT)


async def test_invalid_utf8_kills_the_link() -> None:
    script = "import sys; sys.stdout.buffer.write(b'\\xff\\xfe\\n'); sys.stdout.flush(); sys.stdin.read()"
    transport = await spawn_stdio(python(script))
    try:
        with pytest.raises(ConnectionLost) as lost:
            await asyncio.wait_for(transport.recv(), WAIT)
        assert lost.value.reason == "the agent wrote a line that is not valid UTF-8"
    finally:
        await asyncio.wait_for(transport.close(), WAIT)


async def test_missing_program_is_a_connect_error(tmp_path: os.PathLike[str]) -> None:
    with pytest.raises(ConnectError):
        await spawn_stdio([os.path.join(tmp_path, "no-such-agent")])


async def test_empty_command_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        await spawn_stdio([])


async def test_string_command_is_split_and_env_cwd_apply(tmp_path: os.PathLike[str]) -> None:
    script = "import os, sys; print(os.environ['ACP_TEST_VAR'] + ' ' + os.getcwd(), flush=True)"
    command = f"{sys.executable} -c {script!r}"
    expected = f"hi {os.path.realpath(tmp_path)}"  # noqa: ASYNC240 - a path computation, no I/O worth a thread
    transport = await spawn_stdio(command, env={**os.environ, "ACP_TEST_VAR": "hi"}, cwd=tmp_path)
    try:
        assert await asyncio.wait_for(transport.recv(), WAIT) == expected
    finally:
        await asyncio.wait_for(transport.close(), WAIT)


async def test_stderr_not_captured_when_disabled() -> None:
    with capture_logs() as logs:
        transport = await spawn_stdio(python("import sys; sys.stdin.read()"), stderr_to_log=False)
        await asyncio.wait_for(transport.close(), WAIT)
    assert not [e for e in logs if e["event"] == "agent_stderr"]


async def test_from_streams_over_a_loopback_socket() -> None:
    async def echo_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(echo_handler, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        transport = StdioTransport.from_streams(reader, writer, description="stdio:socket")
        await transport.send("over a socket")
        assert await asyncio.wait_for(transport.recv(), WAIT) == "over a socket"
        await asyncio.wait_for(transport.close(), WAIT)
        assert transport.pid is None and transport.returncode is None
    finally:
        server.close()
        await asyncio.wait_for(server.wait_closed(), WAIT)


async def test_close_wakes_a_pending_recv(echo: StdioTransport) -> None:
    receiver = asyncio.create_task(echo.recv())
    done, _ = await asyncio.wait([receiver], timeout=0.05)
    assert not done
    await asyncio.wait_for(echo.close(), WAIT)
    with pytest.raises(ConnectionLost) as lost:
        await asyncio.wait_for(receiver, WAIT)
    assert lost.value.reason == "closed by the client"

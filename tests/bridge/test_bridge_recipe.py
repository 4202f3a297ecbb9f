"""The try-it-by-hand recipe of ``examples/editor_bridge.md`` works as written (issue 34 §5).

The recipe is read from the page: ``acp-client serve-reference`` and ``acp-client bridge`` run as the real
commands, each in a process of its own, and the ``initialize`` line the page says to type is written to the
bridge's stdin. The v2 line (and the v1 line against ``--also-v1``) is answered with a result; a v1 line to
a v2-only agent is refused with ``protocol_mismatch``, and the log then says the connection accepts only 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

from tests.bridge.bridge_kit import ROOT, bridge_argv, bridge_env
from tests.conftest import bound

PAGE = ROOT / "examples" / "editor_bridge.md"
_PORT = "8765"


def _recipe() -> tuple[list[str], str, list[str], str]:
    """(serve-reference options, the v2 line, the v1 serve-reference options, the v1 line) from the page."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("To try it by hand", 1)[1]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    lines = [line.strip() for line in block.strip().splitlines()]
    serve = lines[0].split("#", 1)[0].replace("&", "").split()
    assert serve[:2] == ["acp-client", "serve-reference"], lines[0]
    assert lines[1].startswith("acp-client bridge ws://127.0.0.1:8765/acp"), lines[1]
    v2_line = lines[2]
    after = section.split("```", 2)[2]
    v1_serve = re.search(r"`(acp-client serve-reference [^`]*)`", after)
    v1_line = re.search(r"`(\{\"jsonrpc\"[^`]*)`", after)
    assert v1_serve is not None and v1_line is not None, after[:400]
    return serve[2:], v2_line, v1_serve.group(1).split()[2:], v1_line.group(1)


def _free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    try:
        async with asyncio.timeout(bound(15)):
            await proc.wait()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise


@contextlib.asynccontextmanager
async def _serve_reference(options: list[str]) -> AsyncIterator[str]:
    port = _free_port()
    argv = [sys.executable, "-m", "acp_client.cli", "serve-reference", *[port if o == _PORT else o for o in options]]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL, env=bridge_env(), cwd=str(ROOT)
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(bound(20)):
            url = (await proc.stdout.readline()).decode().strip()
        assert url == f"ws://127.0.0.1:{port}/acp", url
        yield url
    finally:
        await _stop(proc)


async def _initialize_through_bridge(url: str, line: str) -> tuple[dict[str, Any], str]:
    """Type ``line`` into ``acp-client bridge URL``; its answer and its stderr."""
    proc = await asyncio.create_subprocess_exec(
        *bridge_argv(url),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=bridge_env(),
        cwd=str(ROOT),
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(line.encode() + b"\n")
        await proc.stdin.drain()
        async with asyncio.timeout(bound(20)):
            answer = json.loads(await proc.stdout.readline())
        proc.stdin.close()
        async with asyncio.timeout(bound(20)):
            err = (await proc.stderr.read()).decode()
    finally:
        await _stop(proc)
    return answer, err


async def test_the_v2_recipe_is_answered() -> None:
    serve, v2_line, _, _ = _recipe()
    async with _serve_reference(serve) as url:
        answer, err = await _initialize_through_bridge(url, v2_line)
    assert "error" not in answer, (answer, err)
    assert answer["result"]["protocolVersion"] == 2


async def test_the_v1_recipe_against_also_v1_is_answered() -> None:
    _, _, v1_serve, v1_line = _recipe()
    assert "--also-v1" in v1_serve
    async with _serve_reference(v1_serve) as url:
        answer, err = await _initialize_through_bridge(url, v1_line)
    assert "error" not in answer, (answer, err)
    assert answer["result"]["protocolVersion"] == 1


async def test_v1_to_a_v2_only_agent_is_refused_and_the_log_agrees() -> None:
    serve, _, _, v1_line = _recipe()
    async with _serve_reference(serve) as url:
        answer, err = await _initialize_through_bridge(url, v1_line)
    assert answer["error"]["data"]["acpClient/bridge"]["reason"] == "protocol_mismatch", answer
    assert "offered protocol version 1, the agent answered 2; this connection accepts 1" in err, err
    assert "accepts 1 or 2" not in err, err

"""The wire log (issue 34 §3): one JSON line per frame and per lifecycle event, over real loopback links.

Every test reads the log after ``aclose()``, which writes what was queued and closes the file: no sleeps.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import stat
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from acp_client import (
    ClientState,
    ConnectionDropped,
    ReconnectingClient,
    StateChanged,
    TransportOptions,
    UsageError,
    WireLog,
    connect,
    sync,
)
from acp_client.client.wire_log import WireRecorder, redact_payload
from acp_client.testing import AgentThread, FaultProxy
from tests.client.test_hostile_input import hostile_agent
from tests.conftest import Link, bound, over_links, running_client

#: each test that takes ``link`` runs over WebSocket and Streamable HTTP (HTTP/1.1)
link = over_links("ws", "http1")

SECRET = "s3cr3t-t0ken-value"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def frames(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in log if "dir" in line]


async def test_a_line_per_frame_with_its_fields_and_no_payload_by_default(
    link: Link, version: int, tmp_path: Path
) -> None:
    path = tmp_path / "wire.jsonl"
    async with link.agent(version) as agent:
        async with running_client(link.url(agent), **link.options, wire_log=path) as (client, _):
            session = await client.new_session("/tmp")
            await session.prompt("hello")
            generation = client.generation
            stats = client.wire_log_stats
        assert stats is not None
    log = lines(path)
    sent = frames(log)
    assert {line["dir"] for line in sent} == {"in", "out"}
    for line in sent:
        assert set(line) >= {"t", "gen", "dir", "kind", "bytes"}
        assert line["gen"] == generation
        assert line["bytes"] > 0
        assert "payload" not in line
    by_method = {(line["dir"], line["kind"], line.get("method")) for line in sent}
    assert ("out", "request", "initialize") in by_method
    assert ("in", "response", "initialize") in by_method  # the answer names the method it answers
    assert ("out", "request", "session/new") in by_method
    assert ("out", "request", "session/prompt") in by_method
    assert ("in", "notification", "session/update") in by_method
    new = next(line for line in sent if line.get("method") == "session/new" and line["dir"] == "out")
    answer = next(line for line in sent if line["kind"] == "response" and line["id"] == new["id"])
    assert answer["method"] == "session/new"
    prompt = next(line for line in sent if line.get("method") == "session/prompt")
    assert prompt["session"] == session.id
    assert any(line.get("event") == "connection_open" and line["gen"] == generation for line in log)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


async def test_payloads_when_asked_with_secrets_redacted(version: int, tmp_path: Path) -> None:
    link = Link("ws")
    path = tmp_path / "wire.jsonl"
    servers = [
        {
            "type": "http",
            "name": "tools",
            "url": f"https://user:{SECRET}@tools.example/mcp?token={SECRET}",
            "headers": [{"name": "Authorization", "value": f"Bearer {SECRET}"}],
        }
    ]
    options = TransportOptions(headers={"Authorization": f"Bearer {SECRET}"})
    async with (
        link.agent(version) as agent,
        running_client(link.url(agent), transport_options=options, wire_log=WireLog(path, payloads=True)) as (
            client,
            _,
        ),
    ):
        session = await client.new_session("/tmp", mcp_servers=servers)
        current = client.current
        assert current is not None
        await current.connection.request(
            "session/status", {"sessionId": session.id, "_meta": {"authToken": SECRET, "trace": "kept"}}
        )
    text = path.read_text(encoding="utf-8")
    assert SECRET not in text
    log = lines(path)
    new = next(line for line in frames(log) if line.get("method") == "session/new" and line["dir"] == "out")
    server = new["payload"]["params"]["mcpServers"][0]
    assert server["headers"][0] == {"name": "Authorization", "value": "<redacted>"}
    assert "<redacted>@tools.example" in server["url"]
    status = next(line for line in frames(log) if line.get("method") == "session/status" and line["dir"] == "out")
    assert status["payload"]["params"]["_meta"] == {"authToken": "<redacted>", "trace": "kept"}


async def test_a_reconnect_is_marked_with_a_new_generation(link: Link, version: int, tmp_path: Path) -> None:
    path = tmp_path / "wire.jsonl"
    async with (
        link.agent(version) as agent,
        FaultProxy("127.0.0.1", agent.port) as proxy,
        running_client(link.via(proxy), **link.options, wire_log=path) as (client, events),
    ):
        session = await client.new_session("/tmp")
        first = client.generation
        await proxy.cut_all()
        await events.wait(lambda e: isinstance(e, ConnectionDropped), timeout=bound(5))
        await events.wait(
            lambda e: isinstance(e, StateChanged) and e.new is ClientState.READY and e.generation > first,
            timeout=bound(10),
        )
        second = client.generation
        await session.prompt("after")
    log = lines(path)
    closed = [line for line in log if line.get("event") == "connection_closed"]
    assert any(line["gen"] == first for line in closed)
    assert any(line.get("event") == "connection_dropped" and line["gen"] == first for line in log)
    assert any(line.get("event") == "connection_open" and line["gen"] == second for line in log)
    assert any(line.get("event") == "recovery_round_finished" and line["gen"] == second for line in log)
    assert any(line.get("method") == "session/prompt" and line["gen"] == second for line in frames(log))
    assert any(line.get("method") == "session/new" and line["gen"] == first for line in frames(log))


async def test_rotation_at_the_bound_keeps_the_backups(tmp_path: Path) -> None:
    link = Link("ws")
    path = tmp_path / "wire.jsonl"
    wire_log = WireLog(path, max_bytes=1024, backups=2)
    lax = os.umask(0)  # a lax umask cannot widen the files: they are made 0600 whatever it says
    try:
        async with link.agent(2) as agent, running_client(link.url(agent), wire_log=wire_log) as (client, _):
            session = await client.new_session("/tmp")
            for n in range(10):
                await session.prompt(f"turn {n}")
    finally:
        os.umask(lax)
    check_rotated(tmp_path, ["wire.jsonl", "wire.jsonl.1", "wire.jsonl.2"], 1024)


def check_rotated(folder: Path, names: list[str], bound: int) -> None:
    assert sorted(p.name for p in folder.iterdir()) == names
    for p in folder.iterdir():
        assert p.stat().st_size <= bound
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
        for line in p.read_text(encoding="utf-8").splitlines():
            json.loads(line)  # whole lines only


class FullDisk(io.StringIO):
    """A stream whose writes fail like a full disk."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def write(self, text: str) -> int:
        self.calls += 1
        raise OSError(28, "No space left on device")


async def test_a_failing_disk_stops_the_log_not_the_client(tmp_path: Path) -> None:
    link = Link("ws")
    stream = FullDisk()
    with capture_logs() as logs:
        async with link.agent(2) as agent, running_client(link.url(agent), wire_log=stream) as (client, _):
            session = await client.new_session("/tmp")
            for n in range(5):
                result = await session.prompt(f"turn {n}")  # the link keeps working
                assert result.stop_reason == "end_turn"
    stats = client.wire_log_stats  # read once the client closed: the log's writer has had every frame
    assert stats is not None and stats["errors"] == 1 and stats["lines"] == 0
    assert stream.calls == 1  # stopped after the first failure
    warnings = [entry for entry in logs if entry["event"] == "wire_log_failed"]
    assert len(warnings) == 1 and warnings[0]["log_level"] == "warning"
    assert "No space left" in warnings[0]["error"]


def test_the_keyword_is_checked_at_construction() -> None:
    with pytest.raises(UsageError, match="wire_log"):
        ReconnectingClient("ws://127.0.0.1:1/acp", wire_log=42)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="max_bytes"):
        WireLog("x.jsonl", max_bytes=10)
    with pytest.raises(UsageError, match="target"):
        WireLog(3)  # type: ignore[arg-type]


def test_redaction_rules() -> None:
    value = {
        "params": {
            "_meta": {"token": SECRET, "apiKey": SECRET, "traceparent": "00-abc"},
            "env": [{"name": "OPENAI_API_KEY", "value": SECRET}],
            "headers": {"X-Auth-Token": SECRET, "Accept": "text/plain"},
            "note": f"see https://u:{SECRET}@h.example/p",
            "auth": f"Bearer {SECRET}",
            "usage": {"inputTokens": 12},
        }
    }
    shown = json.dumps(redact_payload(value))
    assert SECRET not in shown
    assert '"inputTokens": 12' in shown and "00-abc" in shown and "text/plain" in shown


def test_recorder_starts_no_thread_until_a_line(tmp_path: Path) -> None:
    recorder = WireRecorder(WireLog(tmp_path / "w.jsonl"))
    assert not (tmp_path / "w.jsonl").exists()
    assert recorder.stats == {"lines": 0, "dropped": 0, "errors": 0}


@pytest.mark.parametrize("protocol", [1, 2])
async def test_stdio_frames_are_logged(protocol: int, tmp_path: Path) -> None:
    path = tmp_path / "wire.jsonl"
    command = [sys.executable, "-m", "acp_client.testing.reference_agent", "--stdio", "--protocol", str(protocol)]
    async with running_client(command, protocol_version=protocol, wire_log=path) as (client, _):
        session = await client.new_session("/tmp")
        await session.prompt("over stdio")
    log = lines(path)
    opened = next(line for line in log if line.get("event") == "connection_open")
    assert opened["peer"].startswith("stdio:")
    methods = {(line["dir"], line.get("method")) for line in frames(log)}
    assert {("out", "initialize"), ("out", "session/new"), ("out", "session/prompt")} <= methods
    assert ("in", "session/update") in methods


def test_the_blocking_client_takes_the_keyword(tmp_path: Path) -> None:
    path = tmp_path / "wire.jsonl"
    with AgentThread(2) as agent, sync.ReconnectingClient(agent.agent.url, wire_log=path) as client:
        session = client.new_session("/tmp")
        session.prompt("blocking")
        stats = client.wire_log_stats
    assert stats is not None and stats["errors"] == 0
    assert any(line.get("method") == "session/prompt" for line in frames(lines(path)))


async def test_connect_writes_to_a_stream_it_never_closes(link: Link, version: int) -> None:
    stream = io.StringIO()
    async with link.agent(version) as agent, connect(link.url(agent), **link.options, wire_log=stream) as client:
        session = await client.new_session("/tmp")
        await session.prompt("one connection")
    assert not stream.closed
    log = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert {line.get("event") for line in log} >= {"connection_open", "connection_closed"}
    assert all(line["gen"] is None for line in log)  # a client of one connection has no generations
    assert any(line.get("method") == "session/prompt" for line in frames(log))


class StalledDisk(io.StringIO):
    """A stream whose first write blocks until released, like a disk that stalls."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def write(self, text: str) -> int:
        if not self.release.wait(timeout=bound(30)):
            raise OSError(5, "stalled for good")
        return super().write(text)


async def test_a_stalled_disk_never_stalls_the_link(tmp_path: Path) -> None:
    link = Link("ws")
    stream = StalledDisk()
    async with link.agent(2) as agent:
        client = ReconnectingClient(agent.url, wire_log=WireLog(stream, queue=4))
        try:
            await client.start()
            await client.wait_ready(timeout=bound(10))
            session = await client.new_session("/tmp")
            for n in range(5):  # the link works on while the writer is stuck in its first write
                await session.prompt(f"turn {n}")
            stats = client.wire_log_stats
            assert stats is not None and stats["dropped"] > 0 and stats["lines"] == 0
        finally:
            stream.release.set()
            await client.aclose()
    stats = client.wire_log_stats
    assert stats is not None and stats["lines"] > 0 and stats["errors"] == 0
    assert len(stream.getvalue().splitlines()) == stats["lines"]


async def test_hostile_frames_are_described_and_never_stop_the_log(tmp_path: Path) -> None:
    path = tmp_path / "wire.jsonl"
    wire_log = WireLog(path, payloads=True, payload_limit=10_000)
    options = TransportOptions(max_frame_bytes=4 * 1024 * 1024)
    async with hostile_agent() as url, connect(url, transport_options=options, wire_log=wire_log) as client:
        session = await asyncio.wait_for(client.new_session("/w"), bound(30))
        result = await asyncio.wait_for(session.prompt("go"), bound(30))
        assert result.stop_reason == "end_turn"
        read = client.connection.stats["frames_in"]
    log = frames(lines(path))
    assert len([line for line in log if line["dir"] == "in"]) == read  # every frame the client read, described
    kinds = {line["kind"] for line in log if line["dir"] == "in"}
    assert {"invalid", "batch", "notification", "response"} <= kinds
    big = next(line for line in log if line.get("method") == "_big")
    assert "payload" not in big and big["payload_omitted"].startswith(f"{big['bytes']} bytes > payload_limit")
    assert any(line["kind"] == "response" and line.get("method") == "session/prompt" for line in log)

"""The official-SDK interop harness works, and the SDK's wire behaviour is what QUIRKS.md says.

Nothing from acp_client is used: a raw client writes JSON strings (a WebSocket from
``websockets.asyncio.client.connect``, or lines on an asyncio subprocess's stdin) and reads frames back. Most
tests run over both transports (the ``agent_link`` fixture): a "new connection" is a new socket to the same
server, or a new agent process sharing the same session store.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import bound

#: Bound on every single wait for a frame, a process or a handshake (seconds).
RECV_TIMEOUT = bound(10.0)
SDK_VERSION = "0.12.1"
CWD = str(Path(__file__).parent)

INITIALIZE_V1 = {
    "protocolVersion": 1,
    "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
    "clientInfo": {"name": "raw-test-client", "version": "0"},
}
#: What the official agent answers to initialize, byte for byte (the SDK drops every unset default).
EXPECTED_INITIALIZE_RESULT = {
    "protocolVersion": 1,
    "agentCapabilities": {"loadSession": True, "sessionCapabilities": {"resume": {}, "close": {}}},
    "agentInfo": {"name": "acp-client-interop-official", "title": "Official SDK interop agent", "version": SDK_VERSION},
}


# --------------------------------------------------------------------------- a raw JSON-RPC client

#: "allocate the next integer id" (``None`` is a legitimate id to send)
AUTO: Any = object()


@dataclass
class Reply:
    """The answer to one request and the notifications that arrived before it."""

    message: dict[str, Any]
    notifications: list[dict[str, Any]] = field(default_factory=list)

    @property
    def result(self) -> Any:
        assert "error" not in self.message, self.message
        return self.message["result"]

    @property
    def error(self) -> dict[str, Any]:
        assert "result" not in self.message, self.message
        error: dict[str, Any] = self.message["error"]
        return error

    @property
    def updates(self) -> list[dict[str, Any]]:
        assert all(n["method"] == "session/update" for n in self.notifications), self.notifications
        return [n["params"]["update"] for n in self.notifications]


class RawPeer:
    """JSON text out, parsed frames in; the transport is in the subclass."""

    transport = ""

    def __init__(self) -> None:
        self._next_id = 0

    async def send_text(self, text: str) -> None:
        raise NotImplementedError

    async def recv_text(self) -> str:
        """The next frame's text; ``EOFError`` once the agent is gone."""
        raise NotImplementedError

    async def send(self, message: Any) -> None:
        await self.send_text(json.dumps(message))

    async def recv(self) -> dict[str, Any]:
        async with asyncio.timeout(RECV_TIMEOUT):
            text = await self.recv_text()
        frame: dict[str, Any] = json.loads(text)
        return frame

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def start(self, method: str, params: Any = None, *, id_: Any = AUTO, omit_params: bool = False) -> Any:
        """Send a request and return its id without waiting for the answer."""
        id_ = self.new_id() if id_ is AUTO else id_
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
        if not omit_params:
            message["params"] = params
        await self.send(message)
        return id_

    async def answer(self, id_: Any) -> Reply:
        """Collect notifications until the response for ``id_``; the agent sends no requests to us here."""
        notifications: list[dict[str, Any]] = []
        while True:
            frame = await self.recv()
            assert "result" in frame or "error" in frame or "id" not in frame, f"agent->client request: {frame}"
            if "id" not in frame:
                notifications.append(frame)
                continue
            assert frame["id"] == id_, f"expected the answer to {id_!r}, got {frame}"
            return Reply(frame, notifications)

    async def call(self, method: str, params: Any = None, *, id_: Any = AUTO, omit_params: bool = False) -> Reply:
        return await self.answer(await self.start(method, params, id_=id_, omit_params=omit_params))

    async def notify(self, method: str, params: Any) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    # ------------------------------------------------------------------ ACP steps

    async def initialize(self, version: int = 1) -> dict[str, Any]:
        result: dict[str, Any] = (await self.call("initialize", {**INITIALIZE_V1, "protocolVersion": version})).result
        return result

    async def new_session(self) -> str:
        session_id: str = (await self.call("session/new", {"cwd": CWD, "mcpServers": []})).result["sessionId"]
        return session_id

    async def prompt(self, session_id: str, text: str) -> Reply:
        return await self.call("session/prompt", prompt_params(session_id, text))


class WsPeer(RawPeer):
    transport = "ws"

    def __init__(self, ws: ClientConnection) -> None:
        super().__init__()
        self.ws = ws

    async def send_text(self, text: str) -> None:
        await self.ws.send(text)

    async def recv_text(self) -> str:
        try:
            data = await self.ws.recv()
        except ConnectionClosed as exc:
            raise EOFError(f"websocket closed: {exc}") from exc
        assert isinstance(data, str), "the agent sent a binary frame"
        return data


class StdioPeer(RawPeer):
    transport = "stdio"

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        super().__init__()
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self._stdin = proc.stdin
        self._stdout = proc.stdout

    async def send_text(self, text: str) -> None:
        assert "\n" not in text
        self._stdin.write(text.encode() + b"\n")
        await self._stdin.drain()

    async def recv_text(self) -> str:
        line = await self._stdout.readline()
        if not line:
            raise EOFError(f"the agent closed stdout (exit code {self.proc.returncode})")
        return line.decode()


def prompt_params(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


def load_params(session_id: str) -> dict[str, Any]:
    return {"sessionId": session_id, "cwd": CWD, "mcpServers": []}


def chunk(kind: str, session_id: str, text: str) -> dict[str, Any]:
    """A session/update notification exactly as the official SDK serialises a text chunk."""
    update = {"content": {"text": text, "type": "text"}, "sessionUpdate": kind}
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": update}}


@contextlib.asynccontextmanager
async def open_ws(url: str) -> AsyncIterator[WsPeer]:
    async with connect(url, open_timeout=RECV_TIMEOUT, close_timeout=RECV_TIMEOUT) as ws:
        yield WsPeer(ws)


async def stop_process(proc: asyncio.subprocess.Process) -> int:
    """Close stdin (the SDK's stdio agent exits on EOF), wait with a bound, kill as a last resort."""
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        async with asyncio.timeout(RECV_TIMEOUT):
            await proc.wait()
    except TimeoutError:
        proc.kill()
        await proc.wait()
    if proc.stdout is not None:
        await proc.stdout.read()
    if proc.stdin is not None:
        with contextlib.suppress(ConnectionError):
            await proc.stdin.wait_closed()
    assert proc.returncode is not None
    return proc.returncode


@contextlib.asynccontextmanager
async def spawn_stdio(argv: list[str], stderr_path: Path) -> AsyncIterator[StdioPeer]:
    with stderr_path.open("ab") as stderr:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr
        )
        try:
            yield StdioPeer(proc)
        finally:
            await stop_process(proc)


@dataclass
class AgentLink:
    """Opens raw connections to one official agent; all of them are closed when the test ends."""

    transport: str
    connect: Callable[[], Awaitable[RawPeer]]


@pytest.fixture(params=["ws", "stdio"])
async def agent_link(
    request: pytest.FixtureRequest,
    start_official_ws_agent: Callable[..., Awaitable[Any]],
    official_stdio_agent_command: list[str],
    tmp_path: Path,
) -> AsyncIterator[AgentLink]:
    async with contextlib.AsyncExitStack() as stack:
        if request.param == "ws":
            server = await start_official_ws_agent()

            async def connect_ws() -> RawPeer:
                return await stack.enter_async_context(open_ws(server.url))

            yield AgentLink("ws", connect_ws)
        else:

            async def connect_stdio() -> RawPeer:
                return await stack.enter_async_context(
                    spawn_stdio(official_stdio_agent_command, tmp_path / "stdio-agent.stderr")
                )

            yield AgentLink("stdio", connect_stdio)


# --------------------------------------------------------------------------- initialize


async def test_initialize_answers_v1_with_only_what_was_set(agent_link: AgentLink) -> None:
    peer = await agent_link.connect()
    # promptCapabilities, mcpCapabilities and authMethods have defaults in the SDK's models, but it serialises
    # with exclude_unset: they are absent, and the client must apply the schema defaults itself
    assert await peer.initialize(1) == EXPECTED_INITIALIZE_RESULT


async def test_initialize_offered_v2_answers_v1(agent_link: AgentLink) -> None:
    peer = await agent_link.connect()
    assert (await peer.initialize(2))["protocolVersion"] == 1


async def test_initialize_can_be_repeated_and_is_lenient_about_the_version_type(agent_link: AgentLink) -> None:
    peer = await agent_link.connect()
    assert await peer.initialize(1) == EXPECTED_INITIALIZE_RESULT
    reply = await peer.call("initialize", {"protocolVersion": "1"})  # pydantic lax mode coerces "1"
    assert reply.result == EXPECTED_INITIALIZE_RESULT
    reply = await peer.call("initialize", {"protocolVersion": 70000})
    assert reply.error["code"] == -32602  # InitializeRequest bounds it to 0..65535


async def test_echo_protocol_version_agent_answers_the_offer(start_official_ws_agent: Any) -> None:
    # the SDK's own examples answer `protocol_version=protocol_version`: a v2 offer gets "2" from a v1 agent
    server = await start_official_ws_agent("--echo-protocol-version")
    async with open_ws(server.url) as peer:
        assert (await peer.initialize(2))["protocolVersion"] == 2


async def test_ws_upgrade_carries_a_connection_id(official_ws_agent: str) -> None:
    async with open_ws(official_ws_agent) as peer:
        response = peer.ws.response
        assert response is not None
        assert len(response.headers["Acp-Connection-Id"]) == 32


# --------------------------------------------------------------------------- sessions and prompts


async def test_prompt_streams_updates_before_its_response(agent_link: AgentLink) -> None:
    peer = await agent_link.connect()
    await peer.initialize()
    session_id = await peer.new_session()
    assert session_id.startswith("sess_")

    reply = await peer.prompt(session_id, "one two  three")
    assert reply.message == {"jsonrpc": "2.0", "id": reply.message["id"], "result": {"stopReason": "end_turn"}}
    assert reply.notifications == [
        chunk("agent_message_chunk", session_id, "one "),
        chunk("agent_message_chunk", session_id, "two  "),
        chunk("agent_message_chunk", session_id, "three"),
    ]


async def test_many_updates_keep_their_order(agent_link: AgentLink) -> None:
    peer = await agent_link.connect()
    await peer.initialize()
    session_id = await peer.new_session()
    words = [f"w{i}" for i in range(200)]
    reply = await peer.prompt(session_id, " ".join(words))
    assert [u["content"]["text"].strip() for u in reply.updates] == words
    assert reply.result == {"stopReason": "end_turn"}


async def test_load_on_a_new_connection_replays_the_transcript_before_answering(agent_link: AgentLink) -> None:
    first = await agent_link.connect()
    await first.initialize()
    session_id = await first.new_session()
    await first.prompt(session_id, "hello there")
    await first.prompt(session_id, "again")

    second = await agent_link.connect()
    await second.initialize()
    reply = await second.call("session/load", load_params(session_id))
    assert reply.result == {}  # LoadSessionResponse with nothing set: "{}", never null
    assert reply.notifications == [
        chunk("user_message_chunk", session_id, "hello there"),
        chunk("agent_message_chunk", session_id, "hello "),
        chunk("agent_message_chunk", session_id, "there"),
        chunk("user_message_chunk", session_id, "again"),
        chunk("agent_message_chunk", session_id, "again"),
    ]
    # and the session goes on
    assert (await second.prompt(session_id, "more")).result == {"stopReason": "end_turn"}


async def test_load_on_the_same_connection_replays_too(agent_link: AgentLink) -> None:
    peer = await agent_link.connect()
    await peer.initialize()
    session_id = await peer.new_session()
    await peer.prompt(session_id, "x")
    reply = await peer.call("session/load", load_params(session_id))
    assert [u["sessionUpdate"] for u in reply.updates] == ["user_message_chunk", "agent_message_chunk"]


async def test_cancel_ends_a_waiting_turn_with_cancelled(agent_link: AgentLink) -> None:
    peer = await agent_link.connect()
    await peer.initialize()
    session_id = await peer.new_session()
    prompt_id = await peer.start("session/prompt", prompt_params(session_id, "/wait for it"))
    for expected in ("/wait ", "for ", "it"):  # the echo arrives, then the turn stays open
        assert await peer.recv() == chunk("agent_message_chunk", session_id, expected)
    await peer.notify("session/cancel", {"sessionId": session_id})
    reply = await peer.answer(prompt_id)
    assert reply.result == {"stopReason": "cancelled"}
    assert reply.notifications == []


# --------------------------------------------------------------------------- refusals and errors


@pytest.mark.parametrize("method", ["session/resume", "session/close"])
async def test_advertised_resume_and_close_are_method_not_found(agent_link: AgentLink, method: str) -> None:
    peer = await agent_link.connect()
    init = await peer.initialize()
    assert method.removeprefix("session/") in init["agentCapabilities"]["sessionCapabilities"]  # advertised...
    session_id = await peer.new_session()
    reply = await peer.call(method, {"sessionId": session_id, "cwd": CWD, "mcpServers": []})
    # ...and refused: the SDK's router gates both as "unstable" and AcpServer has no switch to allow them
    assert reply.error == {"code": -32601, "message": "Method not found", "data": {"method": method}}
    # the session is untouched
    assert (await peer.prompt(session_id, "still here")).result == {"stopReason": "end_turn"}


async def test_resume_and_close_work_over_stdio_with_the_unstable_switch(
    official_stdio_agent_command: list[str], tmp_path: Path
) -> None:
    async with spawn_stdio([*official_stdio_agent_command, "--unstable"], tmp_path / "unstable.stderr") as first:
        await first.initialize()
        session_id = await first.new_session()
        await first.prompt(session_id, "before")
    async with spawn_stdio([*official_stdio_agent_command, "--unstable"], tmp_path / "unstable.stderr") as second:
        await second.initialize()
        reply = await second.call("session/resume", {"sessionId": session_id, "cwd": CWD, "mcpServers": []})
        assert reply.result == {}
        assert reply.notifications == []  # resume does not replay
        assert (await second.call("session/close", {"sessionId": session_id})).result == {}
        reply = await second.call("session/resume", {"sessionId": "sess_unknown", "cwd": CWD})
        assert reply.error == {"code": -32002, "message": "Resource not found", "data": {"uri": "sess_unknown"}}


async def test_status_is_method_not_found(agent_link: AgentLink) -> None:
    peer = await agent_link.connect()
    await peer.initialize()
    session_id = await peer.new_session()
    reply = await peer.call("session/status", {"sessionId": session_id})
    assert reply.error == {"code": -32601, "message": "Method not found", "data": {"method": "session/status"}}


async def test_status_advertised_through_raw_json_is_still_method_not_found(start_official_ws_agent: Any) -> None:
    server = await start_official_ws_agent("--advertise-status")
    async with open_ws(server.url) as peer:
        init = await peer.initialize()
        assert init["agentCapabilities"]["sessionCapabilities"] == {"resume": {}, "close": {}, "status": {}}
        reply = await peer.call("session/status", {"sessionId": await peer.new_session()})
        assert reply.error["code"] == -32601


async def test_unknown_session_is_minus_32002_with_data_uri(agent_link: AgentLink) -> None:
    peer = await agent_link.connect()
    await peer.initialize()
    expected = {"code": -32002, "message": "Resource not found", "data": {"uri": "sess_nope"}}
    assert (await peer.call("session/prompt", prompt_params("sess_nope", "hi"))).error == expected
    assert (await peer.call("session/load", load_params("sess_nope"))).error == expected


async def test_invalid_params_carry_pydantic_errors(agent_link: AgentLink) -> None:
    peer = await agent_link.connect()
    await peer.initialize()
    # mcpServers is required by the SDK on session/new and session/load
    reply = await peer.call("session/new", {"cwd": CWD})
    assert reply.error["code"] == -32602 and reply.error["message"] == "Invalid params"
    assert reply.error["data"]["errors"][0]["loc"] == ["mcpServers"]
    # params omitted or null
    assert (await peer.call("session/new", omit_params=True)).error["code"] == -32602
    assert (await peer.call("session/prompt", None)).error["code"] == -32602


async def test_unknown_and_extension_methods_are_method_not_found(agent_link: AgentLink) -> None:
    peer = await agent_link.connect()
    await peer.initialize()
    for method in ("session/list", "session/set_mode", "authenticate", "_acp_client/ping", "no/such"):
        reply = await peer.call(method, {})
        assert reply.error == {"code": -32601, "message": "Method not found", "data": {"method": method}}


async def test_envelope_checks_are_lenient(agent_link: AgentLink) -> None:
    peer = await agent_link.connect()
    # no "jsonrpc" member: answered anyway
    await peer.send({"id": 41, "method": "session/status", "params": {}})
    assert (await peer.answer(41)).error["code"] == -32601
    # ids JSON-RPC forbids or discourages are echoed, not refused with -32600
    for odd_id in (True, None, 1.5, "x"):
        reply = await peer.call("session/status", {}, id_=odd_id)
        assert reply.message["id"] == odd_id and reply.error["code"] == -32601


# --------------------------------------------------------------------------- frames the SDK does not answer


async def test_ws_agent_ignores_invalid_json_and_batches(official_ws_agent: str) -> None:
    async with open_ws(official_ws_agent) as peer:
        await peer.initialize()
        for text in ("not json", "[]", '[{"jsonrpc":"2.0","id":90,"method":"session/status","params":{}}]', "42"):
            await peer.send_text(text)
        # were anything answered, it would arrive before the answer to this later request
        reply = await peer.call("session/status", {}, id_="sentinel")
        assert reply.error["code"] == -32601
        assert reply.notifications == []


@pytest.mark.parametrize(
    ("line", "type_name"),
    [('[{"jsonrpc":"2.0","id":90,"method":"session/status","params":{}}]', "list"), ("42", "int")],
)
async def test_stdio_agent_skips_invalid_json_but_dies_on_json_that_is_not_an_object(
    official_stdio_agent_command: list[str], tmp_path: Path, line: str, type_name: str
) -> None:
    stderr_path = tmp_path / "batch.stderr"
    async with spawn_stdio(official_stdio_agent_command, stderr_path) as peer:
        await peer.initialize()
        await peer.send_text("not json")
        await peer.send_text("")
        assert (await peer.call("session/status", {}, id_="sentinel")).error["code"] == -32601
        await peer.send_text(line)
        with pytest.raises(EOFError):
            await peer.recv()
        async with asyncio.timeout(RECV_TIMEOUT):
            assert await peer.proc.wait() == 1
    assert f"AttributeError: '{type_name}' object has no attribute 'get'" in stderr_path.read_text()


# --------------------------------------------------------------------------- connections, restarts, crashes


async def test_ws_sessions_outlive_the_socket_and_need_no_reattach(official_ws_agent: str) -> None:
    async with open_ws(official_ws_agent) as first:
        await first.initialize()
        session_id = await first.new_session()
        await first.start("session/prompt", prompt_params(session_id, "/wait"))
        assert (await first.recv())["method"] == "session/update"
    # the socket closed mid-turn: the SDK cancels the turn's handler with the connection
    async with open_ws(official_ws_agent) as second:
        await second.initialize()
        # no session/load first, and the SDK serves the prompt anyway (clients must reattach regardless)
        assert (await second.prompt(session_id, "hi")).result == {"stopReason": "end_turn"}


async def test_graceful_restart_closes_with_1012_and_keeps_port_and_sessions(official_ws_agent_server: Any) -> None:
    server = official_ws_agent_server
    async with open_ws(server.url) as peer:
        await peer.initialize()
        session_id = await peer.new_session()
        await peer.prompt(session_id, "kept")
        await server.stop()
        with pytest.raises(EOFError):
            await peer.recv()
        assert peer.ws.close_code == 1012  # uvicorn's "service restart"
    await server.start()
    async with open_ws(server.url) as peer:
        await peer.initialize()
        reply = await peer.call("session/load", load_params(session_id))
        assert [u["content"]["text"] for u in reply.updates] == ["kept", "kept"]


async def test_killed_agent_drops_sockets_with_1006_and_can_be_restarted(official_ws_agent_server: Any) -> None:
    server = official_ws_agent_server
    async with open_ws(server.url) as peer:
        await peer.initialize()
        session_id = await peer.new_session()
        first_pid = server.pid
        assert await server.kill() == -9
        with pytest.raises(EOFError):
            await peer.recv()
        assert peer.ws.close_code == 1006  # no close frame
    await server.start()
    assert server.pid != first_pid and server.starts == 2
    async with open_ws(server.url) as peer:
        await peer.initialize()
        assert (await peer.call("session/load", load_params(session_id))).result == {}


async def test_harness_leaves_no_process_task_or_thread_behind(
    start_official_ws_agent: Any, official_stdio_agent_command: list[str], tmp_path: Path
) -> None:
    threads_before = set(threading.enumerate())
    server = await start_official_ws_agent()
    async with open_ws(server.url) as peer:
        await peer.initialize()
    assert await server.stop() == 0
    await server.aclose()
    async with spawn_stdio(official_stdio_agent_command, tmp_path / "leak.stderr") as peer:
        await peer.initialize()
        stdio_proc = peer.proc
    assert stdio_proc.returncode == 0
    assert not server.running
    # asyncio's child watcher waits for each child in a short-lived thread: it ends once the child is reaped
    for thread in set(threading.enumerate()) - threads_before:
        thread.join(RECV_TIMEOUT)
    assert set(threading.enumerate()) <= threads_before
    assert asyncio.all_tasks() == {asyncio.current_task()}


def test_official_agent_module_is_importable() -> None:
    """The agent module can be imported (for its ASGI app) without starting anything."""
    name = "_acp_client_interop_official_agent"
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("official_agent.py"))
    assert spec is not None and spec.loader is not None
    official_agent = importlib.util.module_from_spec(spec)
    sys.modules[name] = official_agent  # dataclasses look their module up while the class is created
    try:
        spec.loader.exec_module(official_agent)
    finally:
        del sys.modules[name]
    app = official_agent.build_app()
    assert callable(app)
    assert official_agent.echo_chunks("a  b c") == ["a  ", "b ", "c"]
    assert "".join(official_agent.echo_chunks(" x y ")) == " x y "

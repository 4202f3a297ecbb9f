"""``acp-client bridge``: the official SDK's client (or a raw line-level editor) drives the bridge as its agent
over real pipes; the remote is the reference agent over WebSocket, behind a FaultProxy."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, text_block
from acp.schema import (
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    ReadTextFileResponse,
    WriteTextFileResponse,
)

from acp_client.bridge import BridgeOptions
from acp_client.bridge._view import EditorView, reconcile
from acp_client.testing import FaultProxy, ReferenceAgent
from tests.bridge.bridge_kit import META_KEY, Editor, RawEditor, chunk_texts, error_reason, official_editor
from tests.conftest import bound

FAST = ("--ping-interval", "0.5", "--ping-timeout", "0.5", "--connect-timeout", "10")
CAPS = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=False, write_text_file=False), terminal=False)
INFO = Implementation(name="test-editor", version="1.0")


@pytest.fixture
async def agent_v1() -> AsyncIterator[ReferenceAgent]:
    async with ReferenceAgent(1) as running:
        yield running


@pytest.fixture
async def proxy_v1(agent_v1: ReferenceAgent) -> AsyncIterator[FaultProxy]:
    async with FaultProxy("127.0.0.1", agent_v1.port) as running:
        yield running


# ---------------------------------------------------------------------------- reconciliation (no I/O)


def _chunk(text: str, message_id: str | None = None, kind: str = "agent_message_chunk") -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    if message_id is not None:
        update["messageId"] = message_id
    return update


def test_options_never_show_secrets() -> None:
    options = BridgeOptions("wss://agent.example/acp?token=s3cret", headers=(("Authorization", "Bearer s3cret"),))
    assert "s3cret" not in repr(options)
    assert "wss://agent.example/acp" in repr(options)


def test_reconcile_sends_only_the_missed_tail_of_a_message() -> None:
    view = EditorView()
    view.add_prompt([{"type": "text", "text": "stream"}])
    for text in ("chunk 1 ", "chunk 2 "):
        view.apply(_chunk(text, "a1"))
    replay = [_chunk("stream", "u1", "user_message_chunk"), _chunk("chunk 1 chunk 2 chunk 3 ", "a1")]
    result = reconcile(view, replay, 1)
    assert result.gap is None
    assert result.updates == [_chunk("chunk 3 ", "a1")]
    # the agent's history is the reference now: the same replay again brings nothing new
    assert reconcile(view, replay, 1).updates == []


def test_reconcile_compares_id_less_messages_as_one_stream() -> None:
    view = EditorView()
    for prompt, words in (("a b", ["a ", "b"]), ("c d", ["c ", "d"])):
        view.add_prompt([{"type": "text", "text": prompt}])
        for word in words:
            view.apply(_chunk(word))
    # with the user's messages (the official Python agent) ...
    replay = [_chunk("a b", kind="user_message_chunk"), _chunk("a "), _chunk("b")]
    replay += [_chunk("c d", kind="user_message_chunk"), _chunk("c "), _chunk("d")]
    replay += [_chunk("e f", kind="user_message_chunk"), _chunk("e "), _chunk("f")]
    result = reconcile(view, replay, 1)
    assert result.gap is None
    assert "".join(u["content"]["text"] for u in result.updates) == "e f"  # the unseen turn; no user message
    # ... or without them, every agent chunk one after the other (the TypeScript agent)
    view = EditorView()
    for prompt, word in (("1", "b1"), ("2", "b2")):
        view.add_prompt([{"type": "text", "text": prompt}])
        view.apply(_chunk(word))
    result = reconcile(view, [_chunk("b1"), _chunk("b2"), _chunk("b3")], 1)
    assert result.gap is None
    assert [u["content"]["text"] for u in result.updates] == ["b3"]


def test_reconcile_reports_a_rewritten_or_shorter_history_as_a_gap() -> None:
    view = EditorView()
    view.apply(_chunk("hello world", "a1"))
    assert reconcile(view, [_chunk("hello there", "a1")], 2).gap == "history_differs"
    view = EditorView()
    view.apply(_chunk("one", "a1"))
    view.apply(_chunk("two", "a2"))
    assert reconcile(view, [_chunk("one", "a1")], 2).gap == "history_shorter"
    assert reconcile(EditorView(known=False), [_chunk("x", "a1")], 2).gap == "history_unknown"
    view = EditorView()
    view.apply(_chunk("one two"))
    assert reconcile(view, [_chunk("one")], 1).gap == "history_shorter"  # without ids too


def test_reconcile_sends_changed_tool_calls_and_state_only_when_different() -> None:
    view = EditorView()
    view.apply({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read", "status": "pending"})
    view.apply({"sessionUpdate": "available_commands_update", "availableCommands": []})
    replay = [
        {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read", "status": "completed"},
        {"sessionUpdate": "tool_call", "toolCallId": "t2", "title": "Edit"},
        {"sessionUpdate": "available_commands_update", "availableCommands": []},
        {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"},
    ]
    result = reconcile(view, replay, 1)
    assert result.updates == [
        {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"},
        {"sessionUpdate": "tool_call", "toolCallId": "t2", "title": "Edit"},
        {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"},
    ]


# ---------------------------------------------------------------------------- the official client, v1


async def test_lifecycle_through_the_bridge(agent_v1: ReferenceAgent, tmp_path: Path) -> None:
    async with official_editor(agent_v1.url, *FAST, stderr=tmp_path / "bridge.err") as (conn, editor, process):
        init = await conn.initialize(protocol_version=1, client_capabilities=CAPS, client_info=INFO)
        assert init.protocol_version == 1
        assert init.agent_info is not None and init.agent_info.name == "acp-client-reference-agent"
        assert init.agent_capabilities is not None and init.agent_capabilities.load_session
        assert (init.field_meta or {})[META_KEY]["reconnects"] is True
        new = await conn.new_session(cwd="/work", mcp_servers=[])
        assert new.modes is not None  # the agent's whole answer, not just the id
        answer = await conn.prompt(session_id=new.session_id, prompt=[text_block("echo: hello")])
        assert answer.stop_reason == "end_turn"
        assert editor.agent_chunks(new.session_id) == ["hello"]  # before the prompt's answer
        answer = await conn.prompt(session_id=new.session_id, prompt=[text_block("permission")])
        assert editor.permission_requests == [new.session_id]  # the agent's request reached the editor
        assert editor.agent_chunks(new.session_id)[-1] == "permission granted"
        with pytest.raises(RequestError) as unknown:
            await conn.prompt(session_id="sess_nope", prompt=[text_block("hi")])
        assert unknown.value.code == -32002
        await conn.close_session(session_id=new.session_id)
    assert process.returncode == 0


class FileEditor(Editor):
    """An editor with a file system (``fs`` capabilities): the remote agent's fs requests land here."""

    def __init__(self) -> None:
        super().__init__()
        self.files = {"/work/notes.txt": "remember the milk"}

    async def read_text_file(self, path: str, session_id: str, **kwargs: Any) -> ReadTextFileResponse:
        return ReadTextFileResponse(content=self.files[path])

    async def write_text_file(self, content: str, path: str, session_id: str, **kwargs: Any) -> WriteTextFileResponse:
        self.files[path] = content
        return WriteTextFileResponse()


async def test_fs_requests_of_the_agent_are_answered_by_the_editor(agent_v1: ReferenceAgent, tmp_path: Path) -> None:
    editor = FileEditor()
    fs = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=False)
    async with official_editor(agent_v1.url, *FAST, stderr=tmp_path / "bridge.err", editor=editor) as (conn, _, _p):
        await conn.initialize(protocol_version=1, client_capabilities=fs, client_info=INFO)
        sid = (await conn.new_session(cwd="/work", mcp_servers=[])).session_id
        await conn.prompt(session_id=sid, prompt=[text_block("read /work/notes.txt")])
        await conn.prompt(session_id=sid, prompt=[text_block("write /work/todo.txt buy bread")])
        await conn.prompt(session_id=sid, prompt=[text_block("run ls")])  # no terminal advertised: refused
    said = editor.agent_chunks(sid)
    assert said[0] == "read /work/notes.txt: remember the milk\n"  # each tool result is one line
    assert said[1] == "wrote /work/todo.txt\n"
    assert editor.files["/work/todo.txt"] == "buy bread"
    assert said[2].startswith("run ls failed")  # the editor's capabilities were forwarded as they were


async def test_a_cut_with_two_sessions_loses_and_repeats_nothing(
    agent_v1: ReferenceAgent, proxy_v1: FaultProxy, tmp_path: Path
) -> None:
    async with official_editor(proxy_v1.url(), *FAST, stderr=tmp_path / "bridge.err") as (conn, editor, _):
        await conn.initialize(protocol_version=1, client_capabilities=CAPS, client_info=INFO)
        first = (await conn.new_session(cwd="/work/a", mcp_servers=[])).session_id
        second = (await conn.new_session(cwd="/work/b", mcp_servers=[])).session_id
        await conn.prompt(session_id=second, prompt=[text_block("echo: second before")])
        streaming = asyncio.ensure_future(conn.prompt(session_id=first, prompt=[text_block("stream 40 every 0.05")]))
        await editor.wait_for(lambda: len(editor.agent_chunks(first)) >= 5, "the first streamed chunks")
        await proxy_v1.cut_all()
        # the prompt in flight at the cut ends with a clear error, not a hang
        with pytest.raises(RequestError) as cut:
            async with asyncio.timeout(bound(10)):
                await streaming
        assert error_reason(cut.value) == "connection_lost"
        assert cut.value.data[META_KEY]["requestSent"] is True
        # the agent finished the turn meanwhile; the bridge recovered the session and sent only what was missed
        everything = "".join(chunk_texts(40))
        await editor.wait_for(lambda: len("".join(editor.agent_chunks(first))) >= len(everything), "the rest")
        await agent_v1.wait_for(lambda: agent_v1.sessions[first].turn is None)
        answer = await conn.prompt(session_id=first, prompt=[text_block("echo: first after")])
        assert answer.stop_reason == "end_turn"
        answer = await conn.prompt(session_id=second, prompt=[text_block("echo: second after")])
        assert answer.stop_reason == "end_turn"
        assert "".join(editor.agent_chunks(first)) == "".join(chunk_texts(40)) + "first after"
        assert editor.agent_chunks(second) == ["second before", "second after"]
        assert editor.notices(first, "gap") == [] and editor.notices(second, "gap") == []
        assert proxy_v1.connections_accepted >= 2


async def test_a_prompt_in_flight_on_a_half_open_link_ends_within_the_liveness_bound(
    agent_v1: ReferenceAgent, proxy_v1: FaultProxy, tmp_path: Path
) -> None:
    async with official_editor(proxy_v1.url(), *FAST, stderr=tmp_path / "bridge.err") as (conn, editor, _):
        await conn.initialize(protocol_version=1, client_capabilities=CAPS, client_info=INFO)
        sid = (await conn.new_session(cwd="/work", mcp_servers=[])).session_id
        turn = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("stream 200 every 0.05")]))
        await editor.wait_for(lambda: len(editor.agent_chunks(sid)) >= 3, "streaming")
        proxy_v1.blackhole_all()  # no FIN, no RST: only the bridge's ping notices (0.5 s + 0.5 s)
        with pytest.raises(RequestError) as lost:
            async with asyncio.timeout(bound(10)):
                await turn
        assert error_reason(lost.value) == "connection_lost"
        proxy_v1.restore()
        await conn.cancel(session_id=sid)  # waits for the session to be back, then stops the running turn
        await agent_v1.wait_for(lambda: agent_v1.sessions[sid].turn is None, timeout=bound(10))
        answer = await conn.prompt(session_id=sid, prompt=[text_block("echo: back")])
        assert answer.stop_reason == "end_turn"
        assert editor.agent_chunks(sid)[-1] == "back"
        text = "".join(editor.agent_chunks(sid)[:-1])
        sent = [f"chunk {i} " for i in range(1, 201)]
        assert text == "".join(sent[: text.count("chunk ")])  # a prefix of the stream, nothing twice


async def test_requests_during_an_outage_wait_then_fail_clearly(
    agent_v1: ReferenceAgent, proxy_v1: FaultProxy, tmp_path: Path
) -> None:
    options = (*FAST, "--outage-timeout", "1")
    async with official_editor(proxy_v1.url(), *options, stderr=tmp_path / "bridge.err") as (conn, editor, _):
        await conn.initialize(protocol_version=1, client_capabilities=CAPS, client_info=INFO)
        sid = (await conn.new_session(cwd="/work", mcp_servers=[])).session_id
        proxy_v1.set_listener("refuse")
        await proxy_v1.cut_all()
        with pytest.raises(RequestError) as waited:
            async with asyncio.timeout(bound(10)):
                await conn.prompt(session_id=sid, prompt=[text_block("echo: during")])
        assert error_reason(waited.value) == "outage_timeout"
        assert "unreachable for 1 s" in str(waited.value)
        proxy_v1.restore()
        await proxy_v1.wait_for_connections(2, timeout=bound(15))
        # requests succeed again once the session is back (each waits at most the 1 s bound for it)
        for _ in range(20):
            try:
                answer = await conn.prompt(session_id=sid, prompt=[text_block("echo: after")])
                break
            except RequestError as exc:
                assert error_reason(exc) == "outage_timeout"
        assert answer.stop_reason == "end_turn"
        assert editor.agent_chunks(sid) == ["after"]


async def test_a_session_the_restarted_agent_forgot_ends_with_a_clear_error(
    agent_v1: ReferenceAgent, proxy_v1: FaultProxy, tmp_path: Path
) -> None:
    async with official_editor(proxy_v1.url(), *FAST, stderr=tmp_path / "bridge.err") as (conn, editor, _):
        await conn.initialize(protocol_version=1, client_capabilities=CAPS, client_info=INFO)
        kept = (await conn.new_session(cwd="/work/kept", mcp_servers=[])).session_id
        gone = (await conn.new_session(cwd="/work/gone", mcp_servers=[])).session_id
        for sid in (kept, gone):
            await conn.prompt(session_id=sid, prompt=[text_block("echo: before")])
        agent_v1.forget_session(gone)
        await agent_v1.restart(keep_sessions=True)
        await editor.wait_for(lambda: editor.notices(gone, "lost"), "the notice that the session is gone")
        with pytest.raises(RequestError) as forgotten:
            await conn.prompt(session_id=gone, prompt=[text_block("echo: hello?")])
        assert forgotten.value.code == -32002
        assert error_reason(forgotten.value) == "session_forgotten"
        answer = await conn.prompt(session_id=kept, prompt=[text_block("echo: after")])
        assert answer.stop_reason == "end_turn"
        assert editor.agent_chunks(kept) == ["before", "after"]  # restored by replay, nothing repeated


async def test_the_store_keeps_sessions_across_a_bridge_restart(agent_v1: ReferenceAgent, tmp_path: Path) -> None:
    store = tmp_path / "bridge.sqlite"
    options = (*FAST, "--store", str(store))
    async with official_editor(agent_v1.url, *options, stderr=tmp_path / "one.err") as (conn, _, process):
        await conn.initialize(protocol_version=1, client_capabilities=CAPS, client_info=INFO)
        sid = (await conn.new_session(cwd="/work", mcp_servers=[])).session_id
        await conn.prompt(session_id=sid, prompt=[text_block("echo: remembered")])
    assert process.returncode == 0
    with sqlite3.connect(store) as db:
        assert [row[0] for row in db.execute("SELECT session_id FROM acp_sessions")] == [sid]
    async with official_editor(agent_v1.url, *options, stderr=tmp_path / "two.err") as (conn, editor, process):
        await conn.initialize(protocol_version=1, client_capabilities=CAPS, client_info=INFO)
        await conn.load_session(session_id=sid, cwd="/work", mcp_servers=[])
        assert editor.agent_chunks(sid) == ["remembered"]  # the history, replayed for the editor's load
        answer = await conn.prompt(session_id=sid, prompt=[text_block("echo: again")])
        assert answer.stop_reason == "end_turn"
        assert editor.agent_chunks(sid) == ["remembered", "again"]
    assert process.returncode == 0


async def test_a_new_bridge_without_a_store_loads_a_session_it_never_saw(
    agent_v1: ReferenceAgent, tmp_path: Path
) -> None:
    async with official_editor(agent_v1.url, *FAST, stderr=tmp_path / "one.err") as (conn, _, _p):
        await conn.initialize(protocol_version=1, client_capabilities=CAPS, client_info=INFO)
        sid = (await conn.new_session(cwd="/work", mcp_servers=[])).session_id
        await conn.prompt(session_id=sid, prompt=[text_block("echo: first life")])
    async with official_editor(agent_v1.url, *FAST, stderr=tmp_path / "two.err") as (conn, editor, _p):
        await conn.initialize(protocol_version=1, client_capabilities=CAPS, client_info=INFO)
        await conn.load_session(session_id=sid, cwd="/work", mcp_servers=[])
        # the replay arrived before the client had a handle for the session: caught on the wire, in order
        assert editor.agent_chunks(sid) == ["first life"]
        await conn.prompt(session_id=sid, prompt=[text_block("echo: second life")])
        assert editor.agent_chunks(sid) == ["first life", "second life"]


async def test_an_unreachable_remote_fails_initialize_and_exits_non_zero(tmp_path: Path) -> None:
    async with FaultProxy("127.0.0.1", 9) as proxy:  # nothing behind it, and then not even listening
        proxy.set_listener("refuse")
        async with RawEditor.spawn(proxy.url(), stderr=tmp_path / "bridge.err") as editor:
            # the default --connect-timeout is 5 s: the answer comes within it (plus slack for a slow machine)
            answer = await editor.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}}, timeout=8)
            assert answer["error"]["code"] == -32603
            assert answer["error"]["data"][META_KEY]["reason"] == "unreachable"
            message = answer["error"]["message"]
            assert message.startswith(f"cannot reach the remote agent at {proxy.url()}: no ready connection within 5 s")
            assert "last attempt: " in message, message  # the cause, for the editor to show
            code = await editor.close()
    assert code == 1
    assert "cannot reach the remote agent at ws://127.0.0.1:" in (tmp_path / "bridge.err").read_text()
    assert editor.non_jsonrpc == []


async def test_a_store_that_cannot_be_opened_fails_initialize_and_exits(tmp_path: Path) -> None:
    (tmp_path / "a-directory").mkdir()
    async with ReferenceAgent(1) as agent:
        store = ("--store", str(tmp_path / "a-directory"))
        async with RawEditor.spawn(agent.url, *store, stderr=tmp_path / "bridge.err") as editor:
            answer = await editor.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            assert answer["error"]["data"][META_KEY]["reason"] == "start_failed"
            code = await editor.close()
    assert code == 1
    assert "cannot start" in (tmp_path / "bridge.err").read_text()


async def test_header_values_can_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_TEST_TOKEN", "t0ken")
    async with ReferenceAgent(2) as agent:
        header = ("--header", "Authorization: Bearer ${BRIDGE_TEST_TOKEN}")
        async with RawEditor.spawn(agent.url, *header, stderr=tmp_path / "bridge.err") as editor:
            init = await editor.request("initialize", {"protocolVersion": 2, "info": {"name": "raw", "version": "1"}})
            assert "result" in init
            assert await editor.close() == 0
        assert agent.handshakes[-1].headers.get("Authorization") == "Bearer t0ken"
        missing = ("--header", "Authorization: Bearer ${BRIDGE_TEST_UNSET}")
        async with RawEditor.spawn(agent.url, *missing, stderr=tmp_path / "missing.err") as editor:
            assert await editor.close() == 2
        assert "BRIDGE_TEST_UNSET" in (tmp_path / "missing.err").read_text()


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("http//nope", "http//nope"),
        ("127.0.0.1:8765/acp", "127.0.0.1:8765/acp"),  # was shown as "://127.0.0.1:8765/acp"
        ("me:s3cret@127.0.0.1:8765/acp?token=t0k", "127.0.0.1:8765/acp"),  # never the secrets
    ],
)
async def test_a_bad_url_is_a_usage_error(tmp_path: Path, given: str, shown: str) -> None:
    async with RawEditor.spawn(given, stderr=tmp_path / "bridge.err") as editor:
        code = await editor.close()
    assert code == 2
    text = (tmp_path / "bridge.err").read_text()
    assert f"bad URL {shown}:" in text
    assert "s3cret" not in text and "t0k" not in text


# ---------------------------------------------------------------------------- raw editor: stdout and v2


async def test_stdout_carries_only_json_rpc_and_bad_input_gets_errors(tmp_path: Path) -> None:
    async with ReferenceAgent(2) as agent:
        stderr = tmp_path / "bridge.err"
        async with RawEditor.spawn(agent.url, *FAST, "--log-level", "debug", stderr=stderr) as editor:
            early = await editor.request("session/new", {"cwd": "/work"})
            assert early["error"]["code"] == -32600  # initialize first
            await editor.send_line(b"{not json")
            parse_errors = lambda: [m for m in editor.messages if m.get("error", {}).get("code") == -32700]  # noqa: E731
            await editor.wait_for(parse_errors, "the parse error")
            init = await editor.request(
                "initialize", {"protocolVersion": 2, "capabilities": {}, "info": {"name": "raw", "version": "1"}}
            )
            assert init["result"]["protocolVersion"] == 2
            again = await editor.request("initialize", {"protocolVersion": 2})
            assert again["error"]["code"] == -32600
            bad = await editor.request("session/new", {"cwd": 42})
            assert bad["error"]["code"] == -32602
            unknown = await editor.request("_vendor/unknown", {})
            assert unknown["error"]["code"] == -32601  # the agent's own answer, passed through
            new = await editor.request("session/new", {"cwd": "/work"})
            sid = new["result"]["sessionId"]
            accepted = await editor.prompt(sid, "echo: hi")
            receipt = accepted["result"]["messageId"]  # the agent's insertion receipt, passed through
            assert accepted["result"] == {"messageId": receipt}
            await editor.wait_for(lambda: editor.states(sid)[-2:] == ["running", "idle"], "the end of the v2 turn")
            echoes = [u["messageId"] for u in editor.updates(sid) if u.get("sessionUpdate") == "user_message"]
            assert echoes == [receipt]
            assert editor.agent_text(sid) == "hi"
            assert await editor.close() == 0
        assert editor.non_jsonrpc == []
        assert "bridge_started" in stderr.read_text()  # logs went to stderr, at debug level


async def test_v2_cut_mid_stream_replays_nothing_twice(tmp_path: Path) -> None:
    async with ReferenceAgent(2) as agent, FaultProxy("127.0.0.1", agent.port) as proxy:
        async with RawEditor.spawn(proxy.url(), *FAST, stderr=tmp_path / "bridge.err") as editor:
            await editor.request("initialize", {"protocolVersion": 2, "info": {"name": "raw", "version": "1"}})
            sids = [(await editor.request("session/new", {"cwd": f"/work/{n}"}))["result"]["sessionId"] for n in "ab"]
            await editor.prompt(sids[1], "echo: b")
            await editor.prompt(sids[0], "stream 40 every 0.05")
            await editor.wait_for(lambda: editor.agent_text(sids[0]).count("chunk") >= 5, "streaming")
            await proxy.cut_all()

            def idle_after_running() -> bool:
                states = editor.states(sids[0])
                return "running" in states and states[-1] == "idle"

            await editor.wait_for(idle_after_running, "the end of the interrupted turn")
            assert editor.agent_text(sids[0]) == "".join(chunk_texts(40))
            answer = await editor.prompt(sids[1], "echo: b2")
            assert set(answer["result"]) == {"messageId"}
            await editor.wait_for(lambda: editor.agent_text(sids[1]) == "bb2", "the second session's answer")
            markers = [(u.get("_meta") or {}).get(META_KEY) for sid in sids for u in editor.updates(sid)]
            assert [m for m in markers if m] == []  # no gap notice: nothing was missed
            assert await editor.close() == 0
        assert editor.non_jsonrpc == []


async def test_streamable_http_remote(tmp_path: Path) -> None:
    async with ReferenceAgent(2) as agent:
        async with RawEditor.spawn(agent.http_url, stderr=tmp_path / "bridge.err") as editor:
            init = await editor.request("initialize", {"protocolVersion": 2, "info": {"name": "raw", "version": "1"}})
            assert init["result"]["protocolVersion"] == 2
            sid = (await editor.request("session/new", {"cwd": "/work"}))["result"]["sessionId"]
            assert set((await editor.prompt(sid, "echo: over http"))["result"]) == {"messageId"}
            await editor.wait_for(lambda: editor.states(sid)[-2:] == ["running", "idle"], "the end of the turn")
            assert editor.agent_text(sid) == "over http"
            assert await editor.close() == 0
        assert editor.non_jsonrpc == []


async def test_v2_forgotten_session_and_a_turn_whose_end_the_agent_cannot_report(tmp_path: Path) -> None:
    # no state snapshot on resume and no session/status: after the cut nobody can say whether the turn ended
    async with ReferenceAgent(2, resume_snapshot=False) as agent, FaultProxy("127.0.0.1", agent.port) as proxy:
        agent.set_capability("status", False)
        async with RawEditor.spawn(proxy.url(), *FAST, stderr=tmp_path / "bridge.err") as editor:
            await editor.request("initialize", {"protocolVersion": 2, "info": {"name": "raw", "version": "1"}})
            busy, gone = [
                (await editor.request("session/new", {"cwd": f"/w/{n}"}))["result"]["sessionId"] for n in "ab"
            ]
            await editor.prompt(gone, "echo: soon gone")
            await editor.prompt(busy, "sleep 30")
            await editor.wait_for(lambda: editor.states(busy)[-1:] == ["running"], "the turn to run")
            agent.forget_session(gone)
            await proxy.cut_all()

            def synthetic_idle() -> list[dict[str, Any]]:
                return [u for u in editor.updates(busy) if (u.get("_meta") or {}).get(META_KEY, {}).get("synthetic")]

            await editor.wait_for(synthetic_idle, "an idle state the editor can end the turn on")
            assert synthetic_idle()[0]["state"] == "idle"

            def notices() -> list[dict[str, Any]]:
                return [(u.get("_meta") or {}).get(META_KEY, {}) for u in editor.updates(busy)]

            await editor.wait_for(lambda: {"gap": True, "reason": "state_unknown"} in notices(), "the gap notice")
            answer = await editor.prompt(gone, "echo: hello?")
            assert answer["error"]["code"] == -32002
            assert answer["error"]["data"][META_KEY]["reason"] == "session_forgotten"
            lost = [(u.get("_meta") or {}).get(META_KEY, {}) for u in editor.updates(gone)]
            assert any(marker.get("lost") for marker in lost)
            assert await editor.close() == 0
        assert editor.non_jsonrpc == []

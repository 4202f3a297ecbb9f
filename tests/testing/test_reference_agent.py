"""The shipped reference agent, driven by a raw WebSocket client sending JSON strings (not our client)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from acp_client.testing import AgentError, PromptTurn, ReferenceAgent

#: bound for every wait in this module (seconds)
T = 5.0
CWD = "/home/user/project"


class Raw:
    """A minimal JSON-RPC peer over a raw websockets connection."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.next_id = 100

    async def send(self, message: dict[str, Any] | str) -> None:
        await self.ws.send(message if isinstance(message, str) else json.dumps(message))

    async def recv(self, timeout: float = T) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            data = json.loads(await self.ws.recv())
        assert isinstance(data, dict)
        return data

    async def request(self, method: str, params: Any = None) -> int:
        self.next_id += 1
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        await self.send(msg)
        return self.next_id

    async def notify(self, method: str, params: Any) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def until_response(self, id_: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Read until the response to ``id_``; returns it and every other message before it, in order."""
        before: list[dict[str, Any]] = []
        while True:
            msg = await self.recv()
            if msg.get("id") == id_ and "method" not in msg:
                return msg, before
            before.append(msg)

    async def call(self, method: str, params: Any = None) -> dict[str, Any]:
        response, _ = await self.until_response(await self.request(method, params))
        return response

    async def initialize(self, version: int = 2) -> dict[str, Any]:
        if version >= 2:
            params = {"protocolVersion": version, "capabilities": {}, "info": {"name": "raw", "version": "0"}}
        else:
            params = {
                "protocolVersion": version,
                "clientCapabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            }
        response = await self.call("initialize", params)
        return response["result"]  # type: ignore[no-any-return]

    async def new_session(self, cwd: str = CWD) -> str:
        response = await self.call("session/new", {"cwd": cwd, "mcpServers": []})
        return response["result"]["sessionId"]  # type: ignore[no-any-return]

    async def prompt(self, session_id: str, text: str) -> int:
        return await self.request(
            "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        )

    async def updates_until(self, predicate: Any) -> list[dict[str, Any]]:
        """Read session/update payloads until ``predicate(update)``; returns them all (the last one included)."""
        seen: list[dict[str, Any]] = []
        while True:
            msg = await self.recv()
            if msg.get("method") == "session/update":
                seen.append(msg["params"]["update"])
                if predicate(seen[-1]):
                    return seen


@asynccontextmanager
async def raw(agent: ReferenceAgent, version: int | None = 2, **kwargs: Any) -> AsyncIterator[Raw]:
    kwargs.setdefault("ping_interval", None)
    async with connect(agent.url, open_timeout=T, close_timeout=1, **kwargs) as ws:
        client = Raw(ws)
        if version is not None:
            await client.initialize(version)
        yield client


def kinds(updates: list[dict[str, Any]]) -> list[str]:
    return [u["sessionUpdate"] for u in updates]


def is_idle(update: dict[str, Any]) -> bool:
    return update.get("sessionUpdate") == "state_update" and update.get("state") == "idle"


# ---------------------------------------------------------------------------- initialize


async def test_v1_initialize_shape() -> None:
    async with ReferenceAgent(1) as agent, raw(agent, None) as c:
        result = await c.initialize(1)
        assert result["protocolVersion"] == 1
        caps = result["agentCapabilities"]
        assert caps["loadSession"] is True
        assert set(caps["sessionCapabilities"]) >= {"list", "resume", "close", "delete", "status"}
        assert result["agentInfo"]["name"]
        assert result["authMethods"] == []
        assert "capabilities" not in result and "info" not in result


async def test_v2_initialize_shape() -> None:
    async with ReferenceAgent(2) as agent, raw(agent, None) as c:
        result = await c.initialize(2)
        assert result["protocolVersion"] == 2
        assert result["capabilities"]["session"]["status"] == {}
        assert result["capabilities"]["session"]["delete"] == {}
        assert result["info"]["version"]
        assert "agentCapabilities" not in result


@pytest.mark.parametrize(
    ("latest", "supported", "offered", "answered"),
    [(2, (1, 2), 1, 1), (2, (1, 2), 2, 2), (1, None, 2, 1), (2, None, 1, 2), (2, (1, 2), 7, 2)],
)
async def test_version_negotiation(latest: int, supported: Any, offered: int, answered: int) -> None:
    async with ReferenceAgent(latest, supported_versions=supported) as agent, raw(agent, None) as c:
        result = await c.initialize(offered)
        assert result["protocolVersion"] == answered
        assert ("agentCapabilities" in result) == (answered == 1)


async def test_acp_connection_id_header_and_handshake_record() -> None:
    async with ReferenceAgent(2, set_cookie="affinity=a1") as agent, raw(agent, None) as c:
        assert c.ws.response is not None
        assert c.ws.response.headers["Acp-Connection-Id"] == agent.connection_ids[0]
        assert c.ws.response.headers["Set-Cookie"] == "affinity=a1"
        assert agent.handshakes[-1].status == 101


# ---------------------------------------------------------------------------- prompt turns


async def test_v1_stream_turn_updates_then_stop_reason() -> None:
    async with ReferenceAgent(1) as agent, raw(agent, 1) as c:
        sid = await c.new_session()
        response, before = await c.until_response(await c.prompt(sid, "stream 5"))
        assert response["result"] == {"stopReason": "end_turn"}
        updates = [m["params"]["update"] for m in before]
        assert kinds(updates) == ["agent_message_chunk"] * 5
        assert [u["content"]["text"] for u in updates] == [f"chunk {i} " for i in range(1, 6)]
        assert len({u["messageId"] for u in updates}) == 1
        record = agent.sessions[sid]
        assert [m.role for m in record.transcript] == ["user", "agent"]
        assert record.transcript[1].text == "".join(f"chunk {i} " for i in range(1, 6))


async def test_v2_stream_turn_lifecycle_order() -> None:
    async with ReferenceAgent(2) as agent, raw(agent) as c:
        sid = await c.new_session()
        response, before = await c.until_response(await c.prompt(sid, "stream 5"))
        assert response["result"] == {"messageId": response["result"]["messageId"]}  # the insertion receipt
        assert before == []  # accepted before anything else
        updates = await c.updates_until(is_idle)
        assert kinds(updates) == ["user_message", "state_update"] + ["agent_message_chunk"] * 5 + ["state_update"]
        assert updates[0]["content"] == [{"type": "text", "text": "stream 5"}]
        assert updates[0]["messageId"].startswith("msg_user_")
        assert updates[0]["messageId"] == response["result"]["messageId"]  # the echo names the receipt's id
        assert updates[1]["state"] == "running"
        assert all(u["messageId"] for u in updates[2:7])
        assert updates[-1] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
        assert agent.count("session/prompt", session_id=sid) == 1


async def test_echo_thought_and_plain_text() -> None:
    async with ReferenceAgent(2) as agent, raw(agent) as c:
        sid = await c.new_session()
        await c.prompt(sid, "thought: hmm; still thinking\necho: hello; world")
        updates = await c.updates_until(is_idle)
        texts = [(u["sessionUpdate"], u["content"]["text"]) for u in updates if "chunk" in u["sessionUpdate"]]
        assert texts == [("agent_thought_chunk", "hmm; still thinking"), ("agent_message_chunk", "hello; world")]
        await c.prompt(sid, "just some words")
        updates = await c.updates_until(is_idle)
        assert [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"] == [
            "just some words"
        ]


async def test_fail_rejects_prompt_without_acceptance() -> None:
    async with ReferenceAgent(2) as agent, raw(agent) as c:
        sid = await c.new_session()
        response, before = await c.until_response(await c.prompt(sid, "fail -32000 nope"))
        assert response["error"]["code"] == -32000
        assert response["error"]["message"] == "nope"
        assert before == []
        assert agent.sessions[sid].state == "idle"
        assert agent.sessions[sid].transcript == []
    async with ReferenceAgent(1) as agent, raw(agent, 1) as c:
        sid = await c.new_session()
        response, before = await c.until_response(await c.prompt(sid, "stream 2; fail"))
        assert response["error"]["code"] == -32603
        assert len(before) == 2


async def test_v1_cancel_mid_sleep() -> None:
    async with ReferenceAgent(1) as agent, raw(agent, 1) as c:
        sid = await c.new_session()
        pid = await c.prompt(sid, "sleep 30")
        await agent.wait_for(lambda: agent.sessions[sid].state == "running", T)
        await c.notify("session/cancel", {"sessionId": sid})
        response, _ = await c.until_response(pid)
        assert response["result"] == {"stopReason": "cancelled"}
        assert agent.sessions[sid].state == "idle"


async def test_v2_cancel_mid_stream_reports_idle_cancelled() -> None:
    async with ReferenceAgent(2) as agent, raw(agent) as c:
        sid = await c.new_session()
        await c.prompt(sid, "stream 1000 every 0.05")
        await c.updates_until(lambda u: u["sessionUpdate"] == "agent_message_chunk")
        await c.notify("session/cancel", {"sessionId": sid})
        updates = await c.updates_until(is_idle)
        assert updates[-1]["stopReason"] == "cancelled"
        assert len([u for u in updates if u["sessionUpdate"] == "agent_message_chunk"]) < 999


async def test_cancel_request_answers_minus_32800() -> None:
    async with ReferenceAgent(1) as agent, raw(agent, 1) as c:
        sid = await c.new_session()
        pid = await c.prompt(sid, "sleep 30")
        await agent.wait_for(lambda: agent.sessions[sid].state == "running", T)
        await c.notify("$/cancel_request", {"requestId": pid})
        response, _ = await c.until_response(pid)
        assert response["error"]["code"] == -32800
        # the agent is still healthy afterwards
        response, _ = await c.until_response(await c.prompt(sid, "echo: ok"))
        assert response["result"] == {"stopReason": "end_turn"}


async def test_on_prompt_hook() -> None:
    async def hook(turn: PromptTurn) -> str:
        await turn.say(f"[{turn.text}]")
        await turn.update({"sessionUpdate": "plan", "entries": []})
        return "max_tokens"

    async with ReferenceAgent(1, on_prompt=hook) as agent, raw(agent, 1) as c:
        sid = await c.new_session()
        response, before = await c.until_response(await c.prompt(sid, "x"))
        assert response["result"] == {"stopReason": "max_tokens"}
        assert [m["params"]["update"]["sessionUpdate"] for m in before] == ["agent_message_chunk", "plan"]

    async def rejecting(turn: PromptTurn) -> None:
        raise AgentError(-32602, "bad prompt")

    async with ReferenceAgent(2, on_prompt=rejecting) as agent, raw(agent) as c:
        sid = await c.new_session()
        response, _ = await c.until_response(await c.prompt(sid, "x"))
        assert response["error"] == {"code": -32602, "message": "bad prompt"}


# ---------------------------------------------------------------------------- permission


async def test_v2_permission_round_trip() -> None:
    async with ReferenceAgent(2) as agent, raw(agent) as c:
        sid = await c.new_session()
        await c.prompt(sid, "permission; echo: after")
        while True:
            msg = await c.recv()
            if msg.get("method") == "session/request_permission":
                break
        params = msg["params"]
        assert params["sessionId"] == sid and params["title"]
        assert params["subject"]["type"] == "tool_call"
        assert [o["optionId"] for o in params["options"]] == ["allow-once", "reject-once"]
        assert agent.sessions[sid].state == "requires_action"
        status = await c.call("session/status", {"sessionId": sid})
        assert status["result"] == {"status": "active", "state": {"state": "requires_action"}}
        await c.send(
            {
                "jsonrpc": "2.0",
                "id": msg["id"],
                "result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}},
            }
        )
        updates = await c.updates_until(is_idle)
        assert {"sessionUpdate": "state_update", "state": "running"} in updates
        texts = [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"]
        assert texts == ["permission granted", "after"]
        assert updates[-1]["stopReason"] == "end_turn"


async def test_v1_permission_cancelled_outcome() -> None:
    async with ReferenceAgent(1) as agent, raw(agent, 1) as c:
        sid = await c.new_session()
        pid = await c.prompt(sid, "permission; echo: never")
        while True:
            msg = await c.recv()
            if msg.get("method") == "session/request_permission":
                break
        assert msg["params"]["toolCall"]["toolCallId"]
        assert "subject" not in msg["params"]
        await c.send({"jsonrpc": "2.0", "id": msg["id"], "result": {"outcome": {"outcome": "cancelled"}}})
        response, before = await c.until_response(pid)
        assert response["result"] == {"stopReason": "cancelled"}
        assert all(m["params"]["update"]["sessionUpdate"] != "agent_message_chunk" for m in before)


async def test_permission_is_reissued_after_reattach() -> None:
    async with ReferenceAgent(2) as agent:
        async with raw(agent) as c1:
            sid = await c1.new_session()
            await c1.prompt(sid, "permission")
            while (await c1.recv()).get("method") != "session/request_permission":
                pass
        await agent.wait_for_connections(0, T)
        assert agent.sessions[sid].state == "requires_action"
        async with raw(agent) as c2:
            rid = await c2.request("session/resume", {"sessionId": sid, "cwd": CWD})
            _response, before = await c2.until_response(rid)
            assert before[-1]["params"]["update"] == {"sessionUpdate": "state_update", "state": "requires_action"}
            msg = await c2.recv()
            assert msg["method"] == "session/request_permission"
            await c2.send(
                {
                    "jsonrpc": "2.0",
                    "id": msg["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}},
                }
            )
            updates = await c2.updates_until(is_idle)
            assert updates[-1]["stopReason"] == "end_turn"


# ---------------------------------------------------------------------------- status, restart, forget


async def test_status_active_inactive_unknown() -> None:
    async with ReferenceAgent(1) as agent:
        async with raw(agent, 1) as c:
            sid = await c.new_session()
            assert (await c.call("session/status", {"sessionId": sid}))["result"] == {"status": "active"}
        await agent.wait_for_connections(0, T)
        assert agent.sessions[sid].status == "active"  # its connection died: still in memory
        await agent.restart(keep_sessions=True)
        async with raw(agent, 1) as c:
            assert (await c.call("session/status", {"sessionId": sid}))["result"] == {"status": "inactive"}
            assert agent.forget_session(sid)
            error = (await c.call("session/status", {"sessionId": sid}))["error"]
            assert error == {"code": -32002, "message": "Resource not found", "data": {"sessionId": sid}}


async def test_status_is_side_effect_free_and_v2_reports_state() -> None:
    async with ReferenceAgent(2) as agent, raw(agent) as c1, raw(agent) as c2:
        sid = await c1.new_session()
        result = (await c2.call("session/status", {"sessionId": sid}))["result"]
        assert result == {"status": "active", "state": {"state": "idle"}}
        assert agent.sessions[sid].connection_id == agent.connection_ids[0]
        # c2 did not get attached by asking
        response, _ = await c2.until_response(await c2.prompt(sid, "echo: x"))
        assert response["error"]["code"] == -32602


async def test_restart_without_sessions_forgets_everything() -> None:
    async with ReferenceAgent(2) as agent:
        async with raw(agent) as c:
            sid = await c.new_session()
            await agent.restart(keep_sessions=False)
            with pytest.raises(ConnectionClosed):
                await c.recv()
            assert c.ws.close_code == 1012
        async with raw(agent) as c:
            assert (await c.call("session/status", {"sessionId": sid}))["error"]["code"] == -32002
            assert (await c.call("session/resume", {"sessionId": sid, "cwd": CWD}))["error"]["code"] == -32002


async def test_status_override() -> None:
    async with ReferenceAgent(2) as agent, raw(agent) as c:
        agent.status_override["sess_x"] = "hibernating"
        agent.status_override["sess_y"] = AgentError(-32603, "boom")
        assert (await c.call("session/status", {"sessionId": "sess_x"}))["result"] == {"status": "hibernating"}
        assert (await c.call("session/status", {"sessionId": "sess_y"}))["error"]["code"] == -32603


# ---------------------------------------------------------------------------- resume and load


async def _conversation(agent: ReferenceAgent, version: int) -> tuple[str, list[str]]:
    """A session with two finished turns; returns its id and the message ids of its transcript."""
    async with raw(agent, version) as c:
        sid = await c.new_session()
        for text in ("echo: Paris", "stream 2"):
            _response, _ = await c.until_response(await c.prompt(sid, text))
            if version >= 2:
                await c.updates_until(is_idle)
    await agent.wait_for_connections(0, T)
    return sid, [m.message_id for m in agent.sessions[sid].transcript]


async def test_v2_resume_replays_messages_then_snapshot_then_response() -> None:
    async with ReferenceAgent(2) as agent:
        sid, ids = await _conversation(agent, 2)
        async with raw(agent) as c:
            rid = await c.request("session/resume", {"sessionId": sid, "cwd": CWD, "replayFrom": {"type": "start"}})
            response, before = await c.until_response(rid)
            assert set(response["result"]) == {"availableCommands", "configOptions"}  # v2 alpha.6/7
            updates = [m["params"]["update"] for m in before]
            assert kinds(updates) == ["user_message", "agent_message", "user_message", "agent_message", "state_update"]
            assert [u["messageId"] for u in updates[:4]] == ids
            assert updates[1]["content"] == [{"type": "text", "text": "Paris"}]
            assert updates[3]["content"] == [{"type": "text", "text": "chunk 1 chunk 2 "}]
            assert updates[-1] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
            assert agent.sessions[sid].connection_id == agent.connection_ids[0]


async def test_v2_resume_replay_as_chunks_and_without_snapshot() -> None:
    async with ReferenceAgent(2, replay_as="chunks", resume_snapshot=False) as agent:
        sid, _ids = await _conversation(agent, 2)
        async with raw(agent) as c:
            rid = await c.request("session/resume", {"sessionId": sid, "cwd": CWD, "replayFrom": {"type": "start"}})
            _, before = await c.until_response(rid)
            updates = [m["params"]["update"] for m in before]
            assert kinds(updates) == ["user_message_chunk", "agent_message_chunk"] * 2
            assert updates[1]["content"] == {"type": "text", "text": "Paris"}


async def test_v2_resume_without_replay_sends_only_snapshot() -> None:
    async with ReferenceAgent(2) as agent:
        sid, _ = await _conversation(agent, 2)
        async with raw(agent) as c:
            _, before = await c.until_response(await c.request("session/resume", {"sessionId": sid, "cwd": CWD}))
            assert [m["params"]["update"]["sessionUpdate"] for m in before] == ["state_update"]
            bad = await c.call("session/resume", {"sessionId": sid, "cwd": CWD, "replayFrom": {"type": "message"}})
            assert bad["error"]["code"] == -32602


async def test_v2_resume_of_running_turn_snapshot_says_running_and_live_updates_follow() -> None:
    async with ReferenceAgent(2) as agent:
        async with raw(agent) as c1:
            sid = await c1.new_session()
            await c1.prompt(sid, "sleep 30; echo: done")
            await c1.updates_until(lambda u: u.get("state") == "running")
        async with raw(agent) as c2:
            rid = await c2.request("session/resume", {"sessionId": sid, "cwd": CWD, "replayFrom": {"type": "start"}})
            _, before = await c2.until_response(rid)
            assert before[-1]["params"]["update"] == {"sessionUpdate": "state_update", "state": "running"}
            await c2.notify("session/cancel", {"sessionId": sid})
            updates = await c2.updates_until(is_idle)
            assert updates[-1]["stopReason"] == "cancelled"


async def test_v1_load_replays_then_responds() -> None:
    async with ReferenceAgent(1) as agent:
        sid, ids = await _conversation(agent, 1)
        async with raw(agent, 1) as c:
            rid = await c.request("session/load", {"sessionId": sid, "cwd": CWD, "mcpServers": []})
            response, before = await c.until_response(rid)
            assert response["result"] == {}
            updates = [m["params"]["update"] for m in before]
            assert kinds(updates) == ["user_message_chunk", "agent_message_chunk"] * 2
            assert [u["messageId"] for u in updates] == ids
            # v1 resume: no replay
            response, before = await c.until_response(await c.request("session/resume", {"sessionId": sid, "cwd": CWD}))
            assert response["result"] == {} and before == []
            # attached again: prompting works
            response, _ = await c.until_response(await c.prompt(sid, "echo: again"))
            assert response["result"]["stopReason"] == "end_turn"


async def test_v1_load_null_result_and_errors() -> None:
    async with ReferenceAgent(1, load_result_null=True) as agent, raw(agent, 1) as c:
        sid = await c.new_session()
        assert (await c.call("session/load", {"sessionId": sid, "cwd": CWD, "mcpServers": []}))["result"] is None
        wrong_cwd = await c.call("session/load", {"sessionId": sid, "cwd": "/elsewhere", "mcpServers": []})
        assert wrong_cwd["error"]["code"] == -32602
        unknown = await c.call("session/load", {"sessionId": "sess_nope", "cwd": CWD, "mcpServers": []})
        assert unknown["error"] == {"code": -32002, "message": "Resource not found", "data": {"sessionId": "sess_nope"}}


# ---------------------------------------------------------------------------- capabilities and quirks


async def test_hidden_capabilities_answer_method_not_found() -> None:
    caps = {"loadSession": False, "sessionCapabilities.status": False, "resume": False, "list": False}
    async with ReferenceAgent(1, capabilities=caps) as agent, raw(agent, None) as c:
        result = await c.initialize(1)
        assert result["agentCapabilities"]["loadSession"] is False
        assert set(result["agentCapabilities"]["sessionCapabilities"]) == {
            "close",
            "delete",
            "additionalDirectories",
            "archive",
        }
        sid = await c.new_session()
        for method, params in [
            ("session/load", {"sessionId": sid, "cwd": CWD, "mcpServers": []}),
            ("session/status", {"sessionId": sid}),
            ("session/resume", {"sessionId": sid, "cwd": CWD}),
            ("session/list", {}),
        ]:
            assert (await c.call(method, params))["error"]["code"] == -32601, method
        agent.set_capability("status", True)
        assert (await c.call("session/status", {"sessionId": sid}))["result"] == {"status": "active"}


async def test_v2_hidden_status_and_delete() -> None:
    caps = {"capabilities.session.status": False, "delete": False}
    async with ReferenceAgent(2, capabilities=caps) as agent, raw(agent, None) as c:
        session_caps = (await c.initialize(2))["capabilities"]["session"]
        assert "status" not in session_caps and "delete" not in session_caps
        assert (await c.call("session/delete", {"sessionId": "x"}))["error"]["code"] == -32601
    with pytest.raises(ValueError, match="unknown capability"):
        ReferenceAgent(2, capabilities={"teleport": True})


async def test_advertised_but_method_not_found_quirks() -> None:
    kw = {"status_answers_method_not_found": True, "resume_answers_method_not_found": True}
    async with ReferenceAgent(2, **kw) as agent, raw(agent, None) as c:
        assert "status" in (await c.initialize(2))["capabilities"]["session"]
        sid = await c.new_session()
        assert (await c.call("session/status", {"sessionId": sid}))["error"]["code"] == -32601
        assert (await c.call("session/resume", {"sessionId": sid, "cwd": CWD}))["error"]["code"] == -32601


# ---------------------------------------------------------------------------- other methods


async def test_list_paging_and_filter() -> None:
    async with ReferenceAgent(1, list_page_size=2) as agent, raw(agent, 1) as c:
        ids = [await c.new_session() for _ in range(5)]
        other = await c.new_session("/srv/other")
        seen: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            params = {"cwd": CWD} | ({"cursor": cursor} if cursor else {})
            result = (await c.call("session/list", params))["result"]
            pages += 1
            seen += [s["sessionId"] for s in result["sessions"]]
            assert all(s["cwd"] == CWD and s["updatedAt"] for s in result["sessions"])
            cursor = result.get("nextCursor")
            if cursor is None:
                break
        assert seen == ids and pages == 3
        everything = (await c.call("session/list", {}))["result"]
        assert len(everything["sessions"]) == 2 and "nextCursor" in everything
        assert other not in seen
        assert (await c.call("session/list", {"cursor": "garbage!"}))["error"]["code"] == -32602


async def test_close_makes_inactive_and_delete_makes_unknown() -> None:
    async with ReferenceAgent(2) as agent, raw(agent) as c:
        sid = await c.new_session()
        pid = await c.prompt(sid, "sleep 30")
        await c.until_response(pid)
        await agent.wait_for(lambda: agent.sessions[sid].state == "running", T)
        assert (await c.call("session/close", {"sessionId": sid}))["result"] == {}
        assert agent.sessions[sid].turn is None
        assert (await c.call("session/status", {"sessionId": sid}))["result"] == {"status": "inactive"}
        assert (await c.call("session/delete", {"sessionId": sid}))["result"] == {}
        assert (await c.call("session/delete", {"sessionId": sid}))["result"] == {}  # silently again
        assert (await c.call("session/status", {"sessionId": sid}))["error"]["code"] == -32002


async def test_set_mode_and_config_option() -> None:
    async with ReferenceAgent(1) as agent, raw(agent, 1) as c:
        sid = await c.new_session()
        response, before = await c.until_response(
            await c.request("session/set_mode", {"sessionId": sid, "modeId": "plan"})
        )
        assert response["result"] == {}
        assert before[0]["params"]["update"] == {"sessionUpdate": "current_mode_update", "currentModeId": "plan"}
        result = await c.call("session/set_config_option", {"sessionId": sid, "configId": "model", "value": "smart"})
        assert result["result"]["configOptions"][0]["currentValue"] == "smart"
        bad = await c.call("session/set_config_option", {"sessionId": sid, "configId": "model", "value": "huge"})
        assert bad["error"]["code"] == -32602
        assert agent.sessions[sid].mode_id == "plan"


async def test_auth_required_until_login() -> None:
    async with ReferenceAgent(2, require_auth=True) as agent, raw(agent, None) as c:
        result = await c.initialize(2)
        assert result["authMethods"] == [{"type": "agent", "methodId": "agent-login", "name": "Agent login"}]
        assert (await c.call("session/new", {"cwd": CWD}))["error"]["code"] == -32000
        assert (await c.call("auth/login", {"methodId": "nope"}))["error"]["code"] == -32602
        assert (await c.call("auth/login", {"methodId": "agent-login"}))["result"] == {}
        assert "sessionId" in (await c.call("session/new", {"cwd": CWD}))["result"]
        assert (await c.call("auth/logout", {}))["result"] == {}
        assert (await c.call("session/new", {"cwd": CWD}))["error"]["code"] == -32000
        assert (await c.call("authenticate", {"methodId": "agent-login"}))["error"]["code"] == -32601  # v1 name


async def test_robust_against_bad_input() -> None:
    async with ReferenceAgent(2) as agent, raw(agent, None) as c:
        before_init = await c.call("session/new", {"cwd": CWD})
        assert before_init["error"]["code"] == -32600
        await c.send("{not json")
        assert (await c.recv())["error"]["code"] == -32700
        await c.send('{"jsonrpc":"2.0","id":5,"method":7}')
        assert (await c.recv()) == {"jsonrpc": "2.0", "id": 5, "error": {"code": -32600, "message": "Invalid request"}}
        await c.ws.send(b"\x00binary is ignored")
        await c.initialize(2)
        await c.notify("_vendor/unknown", {"x": 1})  # ignored
        unknown = await c.call("_vendor/thing", {})
        assert unknown["error"]["code"] == -32601
        assert (await c.call("session/prompt", [1, 2]))["error"]["code"] == -32602
        assert (await c.call("session/new", {"cwd": "relative"}))["error"]["code"] == -32602
        assert len(agent.invalid_frames) == 2
        assert agent.count("_vendor/unknown") == 1


# ---------------------------------------------------------------------------- faults


async def test_drop_all_connections_close_and_abort() -> None:
    async with ReferenceAgent(2) as agent:
        async with raw(agent) as c:
            sid = await c.new_session()
            assert await agent.drop_all_connections(code=1011) == 1
            with pytest.raises(ConnectionClosed):
                await c.recv()
            assert c.ws.close_code == 1011
        assert agent.connections == 0
        assert agent.sessions[sid].status == "active"
        async with raw(agent) as c:
            await agent.drop_all_connections(abort=True)
            with pytest.raises(ConnectionClosed):
                await c.recv()
            assert c.ws.close_code == 1006  # no closing handshake
        assert agent.connections == 0


async def test_drop_command_mid_turn_then_resume_sees_the_rest() -> None:
    async with ReferenceAgent(2) as agent:
        async with raw(agent) as c1:
            sid = await c1.new_session()
            await c1.prompt(sid, "echo: before\ndrop\npermission")
            with pytest.raises(ConnectionClosed):
                while True:
                    await c1.recv()
        await agent.wait_for(lambda: agent.sessions[sid].state == "requires_action", T)
        assert agent.dropped_updates > 0
        async with raw(agent) as c2:
            rid = await c2.request("session/resume", {"sessionId": sid, "cwd": CWD, "replayFrom": {"type": "start"}})
            _, before = await c2.until_response(rid)
            replayed = [m["params"]["update"] for m in before]
            assert replayed[1]["content"] == [{"type": "text", "text": "before"}]


async def test_stall_stops_pongs_so_keepalive_fails() -> None:
    async with ReferenceAgent(2) as agent, raw(agent, ping_interval=0.1, ping_timeout=0.3) as c:
        sid = await c.new_session()
        agent.stall()
        assert agent.stalled
        with pytest.raises(ConnectionClosed) as info:
            await c.recv(timeout=T)
        # the client's keepalive ping timed out: it sent 1011 and, the agent reading nothing, got no close back
        assert info.value.sent is not None and info.value.sent.code == 1011
        assert info.value.rcvd is None
        agent.unstall()
        assert agent.sessions[sid].status == "active"


async def test_stall_holds_answers_until_unstall() -> None:
    async with ReferenceAgent(2) as agent, raw(agent) as c:
        agent.stall()
        rid = await c.request("session/new", {"cwd": CWD})
        with pytest.raises(TimeoutError):
            await c.recv(timeout=0.2)  # bounded negative check: nothing is answered while stalled
        assert agent.count("session/new") == 0
        agent.unstall()
        response, _ = await c.until_response(rid)
        assert "sessionId" in response["result"]


async def test_reject_handshake_with_retry_after() -> None:
    async with ReferenceAgent(2) as agent:
        agent.reject_handshake(503, retry_after=2, times=1)
        with pytest.raises(InvalidStatus) as info:
            async with connect(agent.url, open_timeout=T):
                pass
        assert info.value.response.status_code == 503
        assert info.value.response.headers["Retry-After"] == "2"
        async with raw(agent) as c:  # only once
            await c.new_session()
        agent.reject_handshake(401)
        for _ in range(2):
            with pytest.raises(InvalidStatus) as info:
                async with connect(agent.url, open_timeout=T):
                    pass
            assert info.value.response.status_code == 401
        agent.accept_handshakes()
        async with raw(agent):
            pass
        assert agent.rejected_handshakes == 3


async def test_close_after_initialize_flaps() -> None:
    async with ReferenceAgent(2) as agent:
        agent.close_after_initialize(0.05, code=1001)
        async with raw(agent) as c:
            with pytest.raises(ConnectionClosed):
                await c.recv()
            assert c.ws.close_code == 1001


async def test_wrong_path_is_404_and_wait_timeouts_raise() -> None:
    async with ReferenceAgent(2) as agent:
        with pytest.raises(InvalidStatus) as info:
            async with connect(agent.url.replace("/acp", "/nope"), open_timeout=T):
                pass
        assert info.value.response.status_code == 404
        with pytest.raises(TimeoutError):
            await agent.wait_for_method("session/new", timeout=0.05)


async def test_no_task_left_after_exit() -> None:
    baseline = asyncio.all_tasks()
    agent = ReferenceAgent(2)
    async with agent, raw(agent) as c:
        sid = await c.new_session()
        await c.prompt(sid, "sleep 30")
        await agent.wait_for(lambda: agent.sessions[sid].state == "running", T)
        agent.stall()
        assert len(asyncio.all_tasks()) > len(baseline)
    assert asyncio.all_tasks() == baseline
    with pytest.raises(RuntimeError):
        async with agent:
            pass


# ---------------------------------------------------------------------------- standalone


def _env() -> dict[str, str]:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


async def test_standalone_websocket_prints_only_the_url() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "acp_client.testing.reference_agent",
        "--port",
        "0",
        "--protocol",
        "1",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(15):
            url = (await proc.stdout.readline()).decode().strip()
        assert url.startswith("ws://127.0.0.1:") and url.endswith("/acp")
        async with connect(url, open_timeout=T) as ws:
            c = Raw(ws)
            assert (await c.initialize(1))["protocolVersion"] == 1
        proc.terminate()
        async with asyncio.timeout(15):
            out, _ = await proc.communicate()
        assert proc.returncode == 0
        assert out == b""
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_standalone_stdio() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "acp_client.testing.reference_agent",
        "--stdio",
        "--protocol",
        "2",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        lines = [
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": 2, "info": {"name": "s", "version": "0"}},
            },
            {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": CWD}},
        ]
        for line in lines:
            proc.stdin.write(json.dumps(line).encode() + b"\n")
        await proc.stdin.drain()
        async with asyncio.timeout(15):
            first = json.loads(await proc.stdout.readline())
            second = json.loads(await proc.stdout.readline())
        assert first["result"]["protocolVersion"] == 2
        assert second["result"]["sessionId"].startswith("sess_")
        proc.stdin.close()  # EOF ends the one connection and the process
        async with asyncio.timeout(15):
            rest, _ = await proc.communicate()
        assert proc.returncode == 0 and rest == b""
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


# ---------------------------------------------------------------------------- attachment, batches, parser


async def test_updates_go_only_to_the_attached_connection() -> None:
    async with ReferenceAgent(1) as agent, raw(agent, 1) as c1, raw(agent, 1) as c2:
        sid = await c1.new_session()
        await c2.call("session/load", {"sessionId": sid, "cwd": CWD, "mcpServers": []})
        assert agent.sessions[sid].connection_id == agent.connection_ids[1]
        assert await agent.send_update(sid, {"sessionUpdate": "session_info_update", "title": "t"})
        msg = await c2.recv()
        assert msg["params"]["update"]["sessionUpdate"] == "session_info_update"
        _, before = await c1.until_response(await c1.request("session/status", {"sessionId": sid}))
        assert before == []
        response, _ = await c1.until_response(await c1.prompt(sid, "echo: x"))
        assert response["error"]["code"] == -32602  # c1 lost the attachment


async def test_batch_entries_are_each_answered() -> None:
    async with ReferenceAgent(2) as agent, raw(agent) as c:
        sid = await c.new_session()
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "session/status", "params": {"sessionId": sid}},
            {"jsonrpc": "2.0", "method": "_ignored", "params": {}},
            {"jsonrpc": "2.0", "id": 2, "method": "session/status", "params": {"sessionId": "sess_unknown"}},
        ]
        await c.send(json.dumps(batch))
        answers = {m["id"]: m for m in [await c.recv(), await c.recv()]}
        assert answers[1]["result"]["status"] == "active"
        assert answers[2]["error"]["code"] == -32002


def test_parse_script() -> None:
    from acp_client.testing.agent._turns import ScriptStep, parse_script

    assert parse_script("stream 3 every 0.5; sleep 1\npermission; stop max_tokens") == [
        ScriptStep("stream", count=3, seconds=0.5),
        ScriptStep("sleep", seconds=1.0),
        ScriptStep("permission"),
        ScriptStep("stop", text="max_tokens"),
    ]
    assert parse_script("fail -32002 gone away") == [ScriptStep("fail", code=-32002, text="gone away")]
    assert parse_script("drop 1001; abort") == [ScriptStep("drop", code=1001), ScriptStep("abort")]
    assert parse_script("sleep forever") == [ScriptStep("echo", text="sleep forever")]
    assert parse_script("stream -1") == [ScriptStep("echo", text="stream -1")]
    assert parse_script("") == []

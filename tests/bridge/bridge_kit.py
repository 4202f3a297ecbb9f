"""Helpers for the bridge tests: the bridge as a real subprocess, driven by the official SDK's client or by
a raw line-level editor (for v2 and for checking every byte the bridge writes on stdout)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from acp import RequestError, spawn_agent_process
from acp.client.connection import ClientSideConnection
from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

from tests.conftest import bound

ROOT = Path(__file__).resolve().parents[2]
META_KEY = "acpClient/bridge"


def bridge_argv(url: str, *options: str) -> list[str]:
    """The argv of ``acp-client bridge URL OPTIONS`` run from this checkout."""
    return [sys.executable, "-m", "acp_client.cli", "bridge", url, *options]


def bridge_env() -> dict[str, str]:
    """The environment for the bridge subprocess: this checkout first on the path, unbuffered stderr."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


class Editor:
    """The official SDK's client, as an editor: records every ``session/update``, answers permission
    requests with the first option (or *cancelled* when ``deny`` is set)."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []
        self.permission_requests: list[str] = []
        self.deny = False
        self._changed = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self._changed.set()

    async def request_permission(
        self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any
    ) -> RequestPermissionResponse:
        self.permission_requests.append(session_id)
        self._changed.set()
        if self.deny:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=options[0].option_id))

    # ------------------------------------------------------------------ reading what arrived

    def of(self, session_id: str) -> list[Any]:
        """The updates of one session, in order."""
        return [u for sid, u in self.updates if sid == session_id]

    @staticmethod
    def bridge_meta(update: Any) -> dict[str, Any]:
        """The bridge's ``_meta`` marker of an update (empty for the agent's own updates)."""
        meta = getattr(update, "field_meta", None) or {}
        marker = meta.get(META_KEY) if isinstance(meta, dict) else None
        return marker if isinstance(marker, dict) else {}

    def agent_chunks(self, session_id: str) -> list[str]:
        """The texts of the agent's message chunks (the bridge's own notices left out)."""
        return [
            u.content.text
            for u in self.of(session_id)
            if u.session_update == "agent_message_chunk" and not self.bridge_meta(u) and hasattr(u.content, "text")
        ]

    def notices(self, session_id: str, key: str) -> list[dict[str, Any]]:
        """The bridge's notices in a session whose marker has ``key`` (``gap``, ``lost``)."""
        return [self.bridge_meta(u) for u in self.of(session_id) if self.bridge_meta(u).get(key)]

    async def wait_for(self, predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
        """Wait (bounded) until ``predicate()`` holds, re-checked on every update."""
        try:
            async with asyncio.timeout(bound(timeout)):
                while not predicate():
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"gave up waiting for {what}; updates: {self.updates[-5:]}") from None


@contextlib.asynccontextmanager
async def official_editor(
    url: str, *options: str, stderr: Path, editor: Editor | None = None
) -> AsyncIterator[tuple[ClientSideConnection, Editor, asyncio.subprocess.Process]]:
    """The bridge spawned by the official SDK's ``spawn_agent_process`` (its stderr goes to a file)."""
    client = editor or Editor()
    argv = bridge_argv(url, *options)
    with stderr.open("ab") as err:
        async with spawn_agent_process(
            client,
            argv[0],
            *argv[1:],
            env=bridge_env(),
            cwd=str(ROOT),
            # the SDK waits this long for the bridge to exit once stdin closes before it sends SIGTERM (2 s by
            # default: too short on a loaded machine, and the tests assert a clean exit)
            transport_kwargs={"stderr": err, "shutdown_timeout": bound(15)},
        ) as (conn, process):
            yield conn, client, process


def error_reason(exc: RequestError) -> str | None:
    """The bridge's ``data["acpClient/bridge"]["reason"]`` of an error, if any."""
    data = exc.data if isinstance(exc.data, dict) else {}
    marker = data.get(META_KEY)
    return marker.get("reason") if isinstance(marker, dict) else None


class RawEditor:
    """A line-level editor: writes raw lines to the bridge, reads and parses every stdout line.

    Every line the bridge writes must be one JSON-RPC 2.0 object (``non_jsonrpc`` keeps any that is not).
    """

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.messages: list[dict[str, Any]] = []
        self.non_jsonrpc: list[bytes] = []
        self._changed = asyncio.Event()
        self._next_id = 100
        self._reader = asyncio.get_running_loop().create_task(self._read())
        self.answer_permissions = True

    @classmethod
    @contextlib.asynccontextmanager
    async def spawn(cls, url: str, *options: str, stderr: Path) -> AsyncIterator[RawEditor]:
        with stderr.open("ab") as err:
            process = await asyncio.create_subprocess_exec(
                *bridge_argv(url, *options),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                env=bridge_env(),
                cwd=str(ROOT),
            )
            editor = cls(process)
            try:
                yield editor
            finally:
                await editor.close()

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            try:
                message = json.loads(line)
            except ValueError:
                self.non_jsonrpc.append(line)
                continue
            if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
                self.non_jsonrpc.append(line)
                continue
            self.messages.append(message)
            if message.get("method") == "session/request_permission" and self.answer_permissions:
                option = message["params"]["options"][0]["optionId"]
                outcome = {"outcome": {"outcome": "selected", "optionId": option}}
                await self.send({"jsonrpc": "2.0", "id": message["id"], "result": outcome})
            self._changed.set()
        self._changed.set()

    async def send_line(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line if line.endswith(b"\n") else line + b"\n")
        await self.process.stdin.drain()

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_line(json.dumps(message).encode())

    async def wait_for(self, predicate: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
        try:
            async with asyncio.timeout(bound(timeout)):
                while not (found := predicate()):
                    if self._reader.done():
                        raise AssertionError(f"the bridge closed stdout while waiting for {what}")
                    self._changed.clear()
                    await self._changed.wait()
                return found
        except TimeoutError:
            raise AssertionError(f"gave up waiting for {what}; last messages: {self.messages[-5:]}") from None

    def response(self, id_: Any) -> dict[str, Any] | None:
        return next((m for m in self.messages if m.get("id") == id_ and "method" not in m), None)

    async def request(self, method: str, params: Any, timeout: float = 10.0) -> dict[str, Any]:
        """Send a request and wait for its response object (``result`` or ``error``)."""
        self._next_id += 1
        id_ = self._next_id
        await self.send({"jsonrpc": "2.0", "id": id_, "method": method, "params": params})
        answer: dict[str, Any] = await self.wait_for(lambda: self.response(id_), f"the answer to {method}", timeout)
        return answer

    async def prompt(self, session_id: str, text: str) -> dict[str, Any]:
        """``session/prompt`` with one text block; returns the response object."""
        return await self.request(
            "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        )

    def states(self, session_id: str) -> list[str | None]:
        """The v2 ``state_update`` states of a session, in order."""
        return [u.get("state") for u in self.updates(session_id) if u.get("sessionUpdate") == "state_update"]

    def updates(self, session_id: str) -> list[dict[str, Any]]:
        return [
            m["params"]["update"]
            for m in self.messages
            if m.get("method") == "session/update" and m["params"].get("sessionId") == session_id
        ]

    def agent_text(self, session_id: str) -> str:
        """The concatenated text of the agent's message chunks, the bridge's notices left out."""
        return "".join(
            u["content"].get("text", "")
            for u in self.updates(session_id)
            if u.get("sessionUpdate") == "agent_message_chunk" and META_KEY not in (u.get("_meta") or {})
        )

    async def close(self, timeout: float = 10.0) -> int:
        """Close stdin; wait (bounded) for the bridge to exit; returns its exit code."""
        if self.process.stdin is not None and not self.process.stdin.is_closing():
            self.process.stdin.close()
        try:
            async with asyncio.timeout(bound(timeout)):
                code = await self.process.wait()
        except TimeoutError:
            self.process.kill()
            code = await self.process.wait()
        await asyncio.wait({self._reader}, timeout=bound(timeout))
        return code


def chunk_texts(count: int) -> list[str]:
    """What ``stream N`` of the reference agent sends: ``chunk 1 ``, ``chunk 2 ``, ..."""
    return [f"chunk {i} " for i in range(1, count + 1)]


def contiguous(texts: Sequence[str]) -> str:
    return "".join(texts)

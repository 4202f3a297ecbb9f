"""A small ACP agent written with the official Python SDK (``agent-client-protocol[http]==0.12.1``).

It is the interop peer of acp-client's tests: everything on the wire comes from the official SDK (its
router, its pydantic models, its JSON-RPC connection, its ASGI app), so whatever it does is what a real
Python-SDK agent does. The agent itself only does what a test needs:

* ``initialize`` answers protocol version ``min(offered, acp.PROTOCOL_VERSION)`` (or echoes the offer, as the
  SDK's own examples do, with ``--echo-protocol-version``) and advertises ``loadSession`` plus
  ``sessionCapabilities.resume`` and ``.close``. Served over WebSocket, the SDK still answers ``-32601`` to
  ``session/resume``/``session/close``: its router gates them as unstable and ``AcpServer`` offers no switch.
* ``session/new`` creates a session in a store shared by every connection of the process (optionally a JSON
  file, so sessions outlive a restart of the agent).
* ``session/prompt`` echoes the prompt's text as one ``agent_message_chunk`` per word (whitespace kept, so the
  chunks join to the prompt text), then ends with ``end_turn``. A prompt whose first word is ``/wait`` keeps
  the turn open after the echo until ``session/cancel`` (then ``cancelled``) or :data:`WAIT_LIMIT` seconds.
* ``session/load`` replays the stored transcript (``user_message_chunk`` then the agent's chunks, per turn) as
  ``session/update`` notifications before it answers.
* ``/read PATH``, ``/write PATH TEXT`` and ``/run COMMAND ARG...`` (after the echo) call the client through
  the SDK (``read_text_file``, ``write_text_file``, the terminal calls) and add one chunk with the answer
  (`` => read: ...``, `` => written``, `` => exit N: OUTPUT``) or `` => error CODE RULE``.
* An unknown session gets the SDK's own ``RequestError.resource_not_found(session_id)``: ``-32002`` with
  ``data: {"uri": <sessionId>}`` (not ``data.sessionId``).

Run it::

    python tests/interop/official_agent.py --stdio                  # newline-delimited JSON on stdin/stdout
    python tests/interop/official_agent.py --ws-port 0              # WebSocket on 127.0.0.1, prints READY <port>
    python tests/interop/official_agent.py --ws-fd 5 --exit-on-stdin-eof   # on an inherited listening socket

or import it and call :func:`build_app` for the ASGI app.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import os
import re
import socket
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import uvicorn
from acp import (
    PROTOCOL_VERSION,
    Agent,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    run_agent,
    update_agent_message_text,
    update_user_message_text,
)
from acp.http.asgi import AcpAsgiApp, create_asgi_app
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    CloseSessionResponse,
    Implementation,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionResumeCapabilities,
)

__all__ = ["AGENT_NAME", "WAIT_LIMIT", "AgentOptions", "InteropAgent", "SessionStore", "build_app", "echo_chunks"]

AGENT_NAME = "acp-client-interop-official"
#: How long a ``/wait`` turn stays open without a ``session/cancel`` before it ends by itself (seconds).
WAIT_LIMIT = 60.0
#: The line the WebSocket mode prints on stdout once uvicorn accepts connections.
READY_PREFIX = "READY "

_WORDS = re.compile(r"\s*\S+\s*|\s+")


def echo_chunks(text: str) -> list[str]:
    """The agent_message_chunk texts the agent streams for a prompt text: one per word, joining to ``text``."""
    return _WORDS.findall(text)


@dataclass(frozen=True)
class AgentOptions:
    """Behaviour switches, all off by default."""

    #: Answer ``initialize`` with the offered version, as the SDK's examples do (even an offered 2).
    echo_protocol_version: bool = False
    #: Also advertise ``sessionCapabilities.status`` (not expressible with the SDK's models: sent as raw JSON).
    advertise_status: bool = False


class SessionStore:
    """Sessions shared by every connection of one agent process; kept in a JSON file when ``path`` is set."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._sessions: dict[str, dict[str, Any]] = {}
        if path is not None and path.exists():
            self._sessions = json.loads(path.read_text(encoding="utf-8"))

    def create(self, cwd: str) -> str:
        session_id = f"sess_{uuid.uuid4().hex}"
        self._sessions[session_id] = {"cwd": cwd, "turns": []}
        self._save()
        return session_id

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def turns(self, session_id: str) -> list[dict[str, Any]]:
        turns: list[dict[str, Any]] = self._sessions[session_id]["turns"]
        return turns

    def add_turn(self, session_id: str, user_text: str, agent_chunks: list[str]) -> None:
        self.turns(session_id).append({"user": user_text, "agent": agent_chunks})
        self._save()

    def _save(self) -> None:
        if self._path is None:
            return
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._sessions), encoding="utf-8")
        os.replace(tmp, self._path)


def _text_of(blocks: list[Any]) -> str:
    parts: list[str] = []
    for block in blocks:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            parts.append(text)
    return "".join(parts)


def _sdk_version() -> str:
    return importlib.metadata.version("agent-client-protocol")


class InteropAgent:
    """One per connection (the SDK's ASGI app calls the factory for every WebSocket)."""

    def __init__(self, store: SessionStore, options: AgentOptions = AgentOptions()) -> None:
        self._store = store
        self._options = options
        self._conn: Client | None = None
        self._cancels: dict[str, asyncio.Event] = {}

    def on_connect(self, conn: Client) -> None:
        self._conn = conn

    @property
    def conn(self) -> Client:
        if self._conn is None:
            raise RuntimeError("the SDK did not call on_connect")
        return self._conn

    def _known(self, session_id: str) -> None:
        if session_id not in self._store:
            raise RequestError.resource_not_found(session_id)

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse | dict[str, Any]:
        version = protocol_version if self._options.echo_protocol_version else min(protocol_version, PROTOCOL_VERSION)
        response = InitializeResponse(
            protocol_version=version,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                session_capabilities=SessionCapabilities(
                    resume=SessionResumeCapabilities(),
                    close=SessionCloseCapabilities(),
                ),
            ),
            agent_info=Implementation(name=AGENT_NAME, title="Official SDK interop agent", version=_sdk_version()),
        )
        if not self._options.advertise_status:
            return response
        # The SDK's SessionCapabilities has no `status` field (it would be dropped), so send raw JSON; the
        # SDK's connection passes a dict result through unchanged.
        raw = response.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)
        raw["agentCapabilities"]["sessionCapabilities"]["status"] = {}
        return raw

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        return NewSessionResponse(session_id=self._store.create(cwd))

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[Any] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        self._known(session_id)
        for turn in self._store.turns(session_id):
            await self.conn.session_update(session_id=session_id, update=update_user_message_text(turn["user"]))
            for chunk in turn["agent"]:
                await self.conn.session_update(session_id=session_id, update=update_agent_message_text(chunk))
        return LoadSessionResponse()

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> ResumeSessionResponse:
        # reachable only over stdio with --unstable: the SDK's router refuses it otherwise
        self._known(session_id)
        return ResumeSessionResponse()

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse:
        self._known(session_id)
        if (event := self._cancels.get(session_id)) is not None:
            event.set()
        return CloseSessionResponse()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        self._known(session_id)
        text = _text_of(prompt)
        chunks = echo_chunks(text)
        cancelled = asyncio.Event()
        self._cancels[session_id] = cancelled
        sent: list[str] = []
        try:
            for chunk in chunks:
                if cancelled.is_set():
                    break
                await self.conn.session_update(session_id=session_id, update=update_agent_message_text(chunk))
                sent.append(chunk)
            tool = await self._tool(session_id, text)
            if tool is not None:
                await self.conn.session_update(session_id=session_id, update=update_agent_message_text(tool))
                sent.append(tool)
            if text.split()[:1] == ["/wait"] and not cancelled.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(cancelled.wait(), WAIT_LIMIT)
        finally:
            if self._cancels.get(session_id) is cancelled:
                del self._cancels[session_id]
            self._store.add_turn(session_id, text, sent)
        return PromptResponse(stop_reason="cancelled" if cancelled.is_set() else "end_turn")

    async def _tool(self, session_id: str, text: str) -> str | None:
        """``/read PATH``, ``/write PATH TEXT``, ``/run COMMAND ARG...``: the SDK's own client calls."""
        words = text.split()
        if not words or words[0] not in ("/read", "/write", "/run") or len(words) < 2:
            return None
        try:
            if words[0] == "/read":
                read = await self.conn.read_text_file(session_id=session_id, path=words[1])
                return f" => read: {read.content}"
            if words[0] == "/write":
                await self.conn.write_text_file(session_id=session_id, path=words[1], content=" ".join(words[2:]))
                return " => written"
            created = await self.conn.create_terminal(session_id=session_id, command=words[1], args=words[2:])
            exited = await self.conn.wait_for_terminal_exit(session_id=session_id, terminal_id=created.terminal_id)
            output = await self.conn.terminal_output(session_id=session_id, terminal_id=created.terminal_id)
            await self.conn.release_terminal(session_id=session_id, terminal_id=created.terminal_id)
            return f" => exit {exited.exit_code}: {output.output}"
        except RequestError as exc:
            rule = exc.data.get("rule") if isinstance(exc.data, dict) else None
            return f" => error {exc.code} {rule}"

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        if (event := self._cancels.get(session_id)) is not None:
            event.set()


def build_app(store: SessionStore | None = None, options: AgentOptions = AgentOptions()) -> AcpAsgiApp:
    """The SDK's ASGI app (Streamable HTTP + WebSocket on any path) serving one :class:`InteropAgent` per connection."""
    shared = store if store is not None else SessionStore()

    # InteropAgent implements the part of the SDK's Agent protocol a test needs; the router answers -32601
    # for the rest, so the cast is only for the type checker
    def factory(conn: Any) -> Agent:
        return cast("Agent", InteropAgent(shared, options))

    return create_asgi_app(factory)


class _ReadyServer(uvicorn.Server):
    """uvicorn's server, announcing on stdout when it accepts connections (uvicorn has no started event)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1]
            sys.stdout.write(f"{READY_PREFIX}{port}\n")
            sys.stdout.flush()


async def _exit_on_stdin_eof(server: uvicorn.Server) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while await reader.read(65536):
            pass
    finally:
        transport.close()
    server.should_exit = True


async def _serve_ws(sock: socket.socket, app: AcpAsgiApp, *, exit_on_stdin_eof: bool) -> None:
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        ws="websockets-sansio",
        timeout_graceful_shutdown=2,
    )
    server = _ReadyServer(config)
    watcher = asyncio.ensure_future(_exit_on_stdin_eof(server)) if exit_on_stdin_eof else None
    try:
        await server.serve(sockets=[sock])
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true", help="serve one client on stdin/stdout")
    mode.add_argument("--ws-port", type=int, help="serve WebSocket on 127.0.0.1:PORT (0 picks a free port)")
    mode.add_argument("--ws-fd", type=int, help="serve WebSocket on this inherited listening socket")
    parser.add_argument("--store", type=Path, help="keep sessions in this JSON file (survives restarts)")
    parser.add_argument("--unstable", action="store_true", help="stdio only: let the SDK route session/resume, close")
    parser.add_argument("--echo-protocol-version", action="store_true", help="answer the offered protocol version")
    parser.add_argument("--advertise-status", action="store_true", help="also advertise sessionCapabilities.status")
    parser.add_argument("--exit-on-stdin-eof", action="store_true", help="WebSocket modes: stop when stdin closes")
    args = parser.parse_args(argv)

    store = SessionStore(args.store)
    options = AgentOptions(echo_protocol_version=args.echo_protocol_version, advertise_status=args.advertise_status)
    if args.stdio:
        agent = cast("Agent", InteropAgent(store, options))
        asyncio.run(run_agent(agent, use_unstable_protocol=args.unstable))
        return
    if args.ws_fd is not None:
        sock = socket.socket(fileno=args.ws_fd)
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", args.ws_port))
        sock.listen(128)
    with sock:
        asyncio.run(_serve_ws(sock, build_app(store, options), exit_on_stdin_eof=args.exit_on_stdin_eof))


if __name__ == "__main__":
    main()

"""Agent→client requests of the remote agent, answered by the editor.

:class:`EditorHandlers` is the :class:`~acp_client.handlers.ClientHandlers` the bridge's reconnecting client
uses: it advertises exactly the client capabilities the editor advertised to the bridge, and forwards every
request (permission, ``fs/*``, ``terminal/*``, elicitation) to the editor over the bridge's stdio, returning
the editor's answer. A ``fs/*`` or ``terminal/*`` request whose capability the editor did not advertise, or
an ``elicitation/create`` in a mode it did not advertise, is answered ``-32601`` and never forwarded. An
error from the editor goes back to the agent with the same code. If the agent cancels the request
(``$/cancel_request``) or its connection drops, the forwarded request is abandoned and the editor gets a
``$/cancel_request`` of its own.
"""

from __future__ import annotations

import copy
from typing import Any, Protocol

from acp_client.exceptions import ConnectionLost, InternalError, MethodNotFound, RPCError
from acp_client.handlers import ClientHandlers, ElicitationRequest, PermissionRequest, TerminalExit, TerminalOutput

__all__ = ["EditorHandlers", "EditorRequester"]


class EditorRequester(Protocol):
    """What the handlers need from the editor link."""

    async def request(self, method: str, params: Any) -> Any:
        """Send a request to the editor and return its result."""
        ...


def _object(value: Any, method: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InternalError(-32603, "Internal error", {"reason": f"the editor answered {method} with a non-object"})
    return value


class EditorHandlers(ClientHandlers):
    """Forward the remote agent's requests to the editor; advertise the editor's own capabilities."""

    def __init__(self, editor: EditorRequester, capabilities: dict[str, Any]) -> None:
        self._editor = editor
        self._capabilities = capabilities

    def client_capabilities(self, protocol_version: int) -> dict[str, Any]:
        """Exactly what the editor advertised to the bridge (a copy)."""
        return copy.deepcopy(self._capabilities)

    def needs_v1_only_capabilities(self) -> bool:
        """``True`` when the editor offers ``fs`` or ``terminal`` (only a v1-shaped initialize carries them)."""
        fs = self._capabilities.get("fs")
        fs_any = isinstance(fs, dict) and any(fs.get(k) is True for k in ("readTextFile", "writeTextFile"))
        return fs_any or self._capabilities.get("terminal") is True

    def elicitation_modes(self) -> tuple[str, ...]:
        """The elicitation modes the editor advertised."""
        modes = self._capabilities.get("elicitation")
        return tuple(m for m in ("form", "url") if isinstance(modes, dict) and modes.get(m) is not None)

    def _require(self, method: str) -> None:
        """Refuse, with -32601, a method whose capability the editor did not advertise: it is never
        forwarded (an agent must not reach ``fs/read_text_file ~/.ssh/id_rsa`` through an editor that
        offered no file system)."""
        fs = self._capabilities.get("fs")
        fs = fs if isinstance(fs, dict) else {}
        offered = {
            "fs/read_text_file": fs.get("readTextFile") is True,
            "fs/write_text_file": fs.get("writeTextFile") is True,
        }.get(method, self._capabilities.get("terminal") is True if method.startswith("terminal/") else True)
        if not offered:
            reason = "the editor did not advertise this capability"
            raise MethodNotFound(-32601, "Method not found", {"method": method, "reason": reason})

    async def _ask(self, method: str, params: Any) -> Any:
        self._require(method)
        try:
            return await self._editor.request(method, params)
        except RPCError:
            raise  # the editor's own error, passed on with its code
        except ConnectionLost:
            raise InternalError(-32603, "Internal error", {"reason": "the editor is gone"}) from None

    async def request_permission(self, request: PermissionRequest) -> str | None:
        """Ask the editor; its ``selected`` option goes back to the agent, anything else is *cancelled*."""
        answer = _object(await self._ask("session/request_permission", request.raw), "session/request_permission")
        outcome = answer.get("outcome")
        if isinstance(outcome, dict) and outcome.get("outcome") == "selected":
            option = outcome.get("optionId")
            if isinstance(option, str):
                return option
        return None

    async def read_text_file(self, session_id: str, path: str, *, line: int | None, limit: int | None) -> str:
        """Forward ``fs/read_text_file``."""
        params: dict[str, Any] = {"sessionId": session_id, "path": path}
        if line is not None:
            params["line"] = line
        if limit is not None:
            params["limit"] = limit
        content = _object(await self._ask("fs/read_text_file", params), "fs/read_text_file").get("content")
        if not isinstance(content, str):
            raise InternalError(-32603, "Internal error", {"reason": "the editor answered without content"})
        return content

    async def write_text_file(self, session_id: str, path: str, content: str) -> None:
        """Forward ``fs/write_text_file``."""
        await self._ask("fs/write_text_file", {"sessionId": session_id, "path": path, "content": content})

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        *,
        args: list[str],
        env: dict[str, str],
        cwd: str | None,
        output_byte_limit: int | None,
    ) -> str:
        """Forward ``terminal/create``."""
        params: dict[str, Any] = {
            "sessionId": session_id,
            "command": command,
            "args": args,
            "env": [{"name": k, "value": v} for k, v in env.items()],
        }
        if cwd is not None:
            params["cwd"] = cwd
        if output_byte_limit is not None:
            params["outputByteLimit"] = output_byte_limit
        terminal_id = _object(await self._ask("terminal/create", params), "terminal/create").get("terminalId")
        if not isinstance(terminal_id, str):
            raise InternalError(-32603, "Internal error", {"reason": "the editor answered without terminalId"})
        return terminal_id

    async def terminal_output(self, session_id: str, terminal_id: str) -> TerminalOutput:
        """Forward ``terminal/output``."""
        params = {"sessionId": session_id, "terminalId": terminal_id}
        answer = _object(await self._ask("terminal/output", params), "terminal/output")
        status = answer.get("exitStatus")
        status = status if isinstance(status, dict) else {}
        code, signal = status.get("exitCode"), status.get("signal")
        return TerminalOutput(
            output=str(answer.get("output", "")),
            truncated=answer.get("truncated") is True,
            exit_code=code if isinstance(code, int) else None,
            signal=signal if isinstance(signal, str) else None,
        )

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str) -> TerminalExit:
        """Forward ``terminal/wait_for_exit``."""
        params = {"sessionId": session_id, "terminalId": terminal_id}
        answer = _object(await self._ask("terminal/wait_for_exit", params), "terminal/wait_for_exit")
        code, signal = answer.get("exitCode"), answer.get("signal")
        return TerminalExit(
            exit_code=code if isinstance(code, int) else None, signal=signal if isinstance(signal, str) else None
        )

    async def kill_terminal(self, session_id: str, terminal_id: str) -> None:
        """Forward ``terminal/kill``."""
        await self._ask("terminal/kill", {"sessionId": session_id, "terminalId": terminal_id})

    async def release_terminal(self, session_id: str, terminal_id: str) -> None:
        """Forward ``terminal/release``."""
        await self._ask("terminal/release", {"sessionId": session_id, "terminalId": terminal_id})

    async def create_elicitation(self, request: ElicitationRequest) -> dict[str, Any]:
        """Forward ``elicitation/create`` as received when the editor advertised its ``mode``; the editor's
        answer goes back unchanged. Else ``-32601``, never forwarded."""
        advertised = self._capabilities.get("elicitation")
        if not (isinstance(advertised, dict) and advertised.get(request.mode) is not None):  # custom modes too
            reason = f"the editor did not advertise this capability (elicitation mode {request.mode!r})"
            raise MethodNotFound(-32601, "Method not found", {"method": "elicitation/create", "reason": reason})
        return _object(await self._ask("elicitation/create", request.raw), "elicitation/create")

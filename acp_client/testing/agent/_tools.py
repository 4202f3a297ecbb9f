"""The reference agent's file-system and terminal commands: they exercise the client's handlers.

Mini-language commands (see :mod:`acp_client.testing.agent._turns`):

==========================  =================================================================================
``read PATH``               ``fs/read_text_file``; says ``read PATH: CONTENT``
``write PATH TEXT``         ``fs/write_text_file`` with the rest of the command as content; says ``wrote PATH``
``run COMMAND [ARG ...]``   ``terminal/create``, ``terminal/wait_for_exit``, ``terminal/output``,
                            ``terminal/release``; says ``ran COMMAND: exit N`` and the output
``kill COMMAND [ARG ...]``  ``terminal/create``, then at once ``terminal/kill``, ``terminal/wait_for_exit``,
                            ``terminal/output``, ``terminal/release``; says ``killed COMMAND: signal S``
                            (or ``exit N`` if it ended first) and the output
==========================  =================================================================================

Each result is said as one line (a newline is added unless it ends with one). In protocol v1 these are the
spec's methods, sent only when the client advertised the capability
(``fs.readTextFile``, ``fs.writeTextFile``, ``terminal``). v2 removed them: there the agent sends the same
requests as the client's extension methods (``_acp-client/fs/read_text_file`` …), and only when the client
advertised them under ``capabilities._meta["acp-client"]`` (as :class:`acp_client.handlers.Workspace`
does). Otherwise, or when the client answers with an error, the agent says why (``read PATH failed: ...``)
and the turn goes on: a test asserts on the text.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from acp_client.testing.agent._errors import PeerError, PeerGone

if TYPE_CHECKING:
    from acp_client.testing.agent._turns import PromptTurn

__all__ = ["TOOL_COMMANDS", "run_tool"]

#: Command word → the client capability it needs (a dotted path in the client's capabilities).
TOOL_COMMANDS = {"read": "fs.readTextFile", "write": "fs.writeTextFile", "run": "terminal", "kill": "terminal"}
#: Where a v2 client advertises the extension, and the prefix of its methods.
_EXTENSION_KEY = "acp-client"
_EXTENSION_PREFIX = "_acp-client/"


class _Refused(Exception):
    """The tool cannot run: the reason is said to the user instead."""


def _advertised(turn: PromptTurn, capability: str) -> bool:
    value: Any = turn.connection.client_capabilities
    if turn.protocol_version >= 2:
        value = value.get("_meta") if isinstance(value, dict) else None
        value = value.get(_EXTENSION_KEY) if isinstance(value, dict) else None
    for part in capability.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value is True


async def _ask(turn: PromptTurn, method: str, params: dict[str, Any]) -> Any:
    connection = turn.session.connection
    if connection is None or connection.closed:
        raise _Refused("no live connection")
    if turn.protocol_version >= 2:
        method = _EXTENSION_PREFIX + method
    _, fut = await connection.start_request(method, {"sessionId": turn.session_id, **params})
    try:
        return await fut
    except PeerError as exc:
        raise _Refused(f"[{exc.code}] {exc.message}") from None
    except PeerGone:
        raise _Refused("the connection closed") from None


async def _say(turn: PromptTurn, text: str) -> None:
    """Say ``text`` as one line (a newline is added unless it ends with one), so results do not run on."""
    await turn.say(text if text.endswith("\n") else text + "\n")


async def run_tool(turn: PromptTurn, command: str, words: list[str]) -> None:
    """Play one tool command (``read``, ``write``, ``run``, ``kill``) with its argument words in ``turn``."""
    target = words[0] if words else ""
    try:
        if not _advertised(turn, TOOL_COMMANDS[command]):
            where = "capabilities._meta.acp-client." if turn.protocol_version >= 2 else ""
            raise _Refused(f"the client did not advertise {where}{TOOL_COMMANDS[command]}")
        if command == "read":
            result = await _ask(turn, "fs/read_text_file", {"path": target})
            content = result.get("content") if isinstance(result, dict) else None
            await _say(turn, f"read {target}: {content}")
        elif command == "write":
            await _ask(turn, "fs/write_text_file", {"path": target, "content": " ".join(words[1:])})
            await _say(turn, f"wrote {target}")
        else:
            created = await _ask(turn, "terminal/create", {"command": target, "args": words[1:]})
            terminal_id = created.get("terminalId") if isinstance(created, dict) else None
            if not isinstance(terminal_id, str):
                raise _Refused("terminal/create answered without a terminalId")
            try:
                if command == "kill":
                    await _ask(turn, "terminal/kill", {"terminalId": terminal_id})
                exited = await _ask(turn, "terminal/wait_for_exit", {"terminalId": terminal_id})
                output = await _ask(turn, "terminal/output", {"terminalId": terminal_id})
            finally:
                with contextlib.suppress(_Refused):  # already released or the link is gone: nothing to free
                    await _ask(turn, "terminal/release", {"terminalId": terminal_id})
            code = exited.get("exitCode") if isinstance(exited, dict) else None
            signal = exited.get("signal") if isinstance(exited, dict) else None
            text = output.get("output") if isinstance(output, dict) else None
            status = f"signal {signal}" if code is None and signal else f"exit {code}"
            verb = "killed" if command == "kill" else "ran"
            await _say(turn, f"{verb} {target}: {status}\n{text or ''}")
    except _Refused as refused:
        await _say(turn, f"{command} {target} failed: {refused}")

"""The prompt mini-language of the reference agent: a prompt's text is parsed into :class:`ScriptStep` s, which
:func:`~acp_client.testing.agent._turns.run_script` runs as a turn.

The prompt's text is a script. Commands are separated by ``;`` or newlines; ``echo:`` and ``thought:`` take
the rest of their line verbatim (``;`` included). A prompt that is not a valid script is echoed back whole.

=========================  ==================================================================================
``echo: TEXT``             one agent message chunk with ``TEXT``
``thought: TEXT``          one agent thought chunk with ``TEXT``
``stream N``               ``N`` agent message chunks (``"chunk 1 "``, ``"chunk 2 "``, …)
``stream N every S``       the same, ``S`` seconds apart (cancellable)
``sleep S``                work for ``S`` seconds (float); ``session/cancel`` ends it → ``cancelled``
``permission``             ask the client with ``session/request_permission`` (v2: ``requires_action`` while
                           waiting); ``allow…`` option → "permission granted" and go on; ``reject…`` option →
                           "permission denied" and end the turn; outcome ``cancelled`` → stop ``cancelled``
``fail [CODE [MESSAGE]]``  a JSON-RPC error (default ``-32603``). First command: the prompt is rejected (v1 and
                           v2). Later: v1 answers the prompt with the error; v2 (already accepted) ends the turn
                           with ``idle`` / ``stopReason: "error"`` and the error object (schema alpha.8)
``stop REASON``            end the turn now with that stop reason (``max_tokens``, ``refusal``, …)
``drop [CODE]``            close the session's connection (WebSocket close ``CODE``, default 1011); the turn
                           runs on, its updates are dropped until a connection re-attaches the session
``abort``                  the same with a TCP reset
``read PATH``              ``fs/read_text_file`` → "read PATH: CONTENT" (see :mod:`._tools`; in v2 the
                           ``_acp-client/`` extension methods, when the client advertised them)
``write PATH TEXT``        ``fs/write_text_file`` with ``TEXT`` → "wrote PATH"
``run COMMAND [ARG ...]``  a client terminal runs it → "ran COMMAND: exit N" and its output
``kill COMMAND [ARG…]``     a client terminal starts it, kills it at once → "killed COMMAND: signal S"
=========================  ==================================================================================

A turn ends with ``end_turn`` unless said otherwise, or ``cancelled`` once ``session/cancel`` arrived.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from acp_client.testing.agent._errors import INTERNAL_ERROR
from acp_client.testing.agent._tools import TOOL_COMMANDS

__all__ = ["ScriptStep", "parse_script"]

_MAX_STREAM = 100_000


@dataclass(frozen=True, slots=True)
class ScriptStep:
    """One parsed command of the prompt mini-language."""

    kind: str
    text: str = ""
    count: int = 0
    seconds: float = 0.0
    code: int = 0


def _number(word: str) -> float | None:
    try:
        value = float(word)
    except ValueError:
        return None
    return value if value >= 0 and math.isfinite(value) else None


def _command(segment: str) -> ScriptStep | None:
    words = segment.split()
    head, args = words[0].lower(), words[1:]
    if head == "stream" and args and args[0].isdigit() and int(args[0]) <= _MAX_STREAM:
        if len(args) == 1:
            return ScriptStep("stream", count=int(args[0]))
        if len(args) == 3 and args[1].lower() == "every" and (every := _number(args[2])) is not None:
            return ScriptStep("stream", count=int(args[0]), seconds=every)
        return None
    if head == "sleep" and len(args) == 1 and (seconds := _number(args[0])) is not None:
        return ScriptStep("sleep", seconds=seconds)
    if head == "permission" and not args:
        return ScriptStep("permission")
    if head == "fail":
        if not args:
            return ScriptStep("fail", code=INTERNAL_ERROR)
        try:
            code = int(args[0])
        except ValueError:
            return None
        return ScriptStep("fail", code=code, text=" ".join(args[1:]))
    if head == "stop" and len(args) == 1:
        return ScriptStep("stop", text=args[0])
    if head == "drop" and len(args) <= 1:
        if args and not args[0].isdigit():
            return None
        return ScriptStep("drop", code=int(args[0]) if args else 1011)
    if head == "abort" and not args:
        return ScriptStep("abort")
    if head in TOOL_COMMANDS and args and (head != "write" or len(args) >= 2):
        return ScriptStep("tool", text=" ".join(words))
    return None


def parse_script(text: str) -> list[ScriptStep]:
    """Parse a prompt into steps; text that is not a valid script becomes one ``echo`` of the whole text."""
    steps: list[ScriptStep] = []
    for line in text.splitlines():
        rest = line.strip()
        while rest:
            lowered = rest.lower()
            if lowered.startswith(("echo:", "thought:")):
                head, _, body = rest.partition(":")
                steps.append(ScriptStep("echo" if head.lower() == "echo" else "thought", text=body.strip()))
                break
            segment, _, rest = rest.partition(";")
            rest = rest.strip()
            segment = segment.strip()
            if not segment:
                continue
            step = _command(segment)
            if step is None:
                return [ScriptStep("echo", text=text.strip())]
            steps.append(step)
    return steps

"""A transient fault at the moment recovery asks a real stdio agent for one session.

:class:`Trap` wraps each transport a test's factory spawns (:meth:`Trap.wrap`). Once armed, the first
``session/resume`` or ``session/load`` request for ``session_id`` that the client sends meets the fault,
then the trap is spent and every later frame passes untouched:

* ``"kill"``: the agent is SIGKILLed just before the request is written (it crashes mid-recovery);
* ``"error"``: the request is not forwarded and the client receives ``error`` as its answer, as if the
  agent had failed inside (``-32603``, a transient internal error).

Everything else is the real agent over its real pipes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any, Literal

from acp_client.transports.stdio import StdioTransport

RECOVERY_METHODS = ("session/resume", "session/load")
TRANSIENT_ERROR: dict[str, Any] = {"code": -32603, "message": "Internal error", "data": {"details": "try again"}}


class Trap:
    """One fault for the first recovery request of ``session_id`` after :meth:`arm`."""

    def __init__(self, kind: Literal["kill", "error"], error: dict[str, Any] | None = None) -> None:
        self.kind = kind
        self.error = error or TRANSIENT_ERROR
        self.session_id: str | None = None
        self.sprung: list[str] = []  # the methods that met the fault (at most one)

    def arm(self, session_id: str) -> None:
        self.session_id = session_id

    def wrap(self, inner: StdioTransport) -> TrappedTransport:
        return TrappedTransport(inner, self)

    def springs_on(self, frame: str) -> dict[str, Any] | None:
        """The request in ``frame`` when it is the one to fault (and the trap is spent from now on)."""
        if self.session_id is None or self.sprung:
            return None
        try:
            message = json.loads(frame)
        except ValueError:
            return None
        if not isinstance(message, dict) or message.get("method") not in RECOVERY_METHODS:
            return None
        params = message.get("params")
        if not isinstance(params, dict) or params.get("sessionId") != self.session_id:
            return None
        self.sprung.append(str(message["method"]))
        return message


class TrappedTransport:
    """A stdio transport with a :class:`Trap` on its outgoing frames (implements ``Transport``)."""

    def __init__(self, inner: StdioTransport, trap: Trap) -> None:
        self._inner = inner
        self._trap = trap
        self._injected: asyncio.Queue[str] = asyncio.Queue()

    @property
    def pid(self) -> int | None:
        return self._inner.pid

    @property
    def returncode(self) -> int | None:
        return self._inner.returncode

    @property
    def closed(self) -> bool:
        return self._inner.closed

    @property
    def description(self) -> str:
        return self._inner.description

    async def send(self, frame: str) -> None:
        request = self._trap.springs_on(frame)
        if request is not None and self._trap.kind == "error":
            answer = {"jsonrpc": "2.0", "id": request["id"], "error": self._trap.error}
            self._injected.put_nowait(json.dumps(answer))
            return
        if request is not None and self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)
        await self._inner.send(frame)

    async def recv(self) -> str:
        if not self._injected.empty():
            return self._injected.get_nowait()
        injected = asyncio.ensure_future(self._injected.get())
        received = asyncio.ensure_future(self._inner.recv())
        try:
            await asyncio.wait({injected, received}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (injected, received):
                task.cancel()
            await asyncio.wait({injected, received})
        if received.done() and not received.cancelled():
            if injected.done() and not injected.cancelled():
                self._injected.put_nowait(injected.result())  # both arrived: keep the injected one for next time
            return received.result()  # raises ConnectionLost when the agent is gone
        return injected.result()

    async def close(self) -> None:
        await self._inner.close()

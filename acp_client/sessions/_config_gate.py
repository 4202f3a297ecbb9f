"""The gate that holds a session's prompts while a restore sets its desired config again.

One object per session that needs it (made when the first restore sets config again), written by the
recovery through the session's owner interface and read by ``Session.prompt()``: while a restore is
setting the mode and config options the application chose, a new prompt waits (within its own timeout);
when some could not be set, the next prompt raises :class:`~acp_client.exceptions.ConfigNotRestored` once,
before anything is sent.
"""

from __future__ import annotations

import asyncio

from acp_client.exceptions import ACPTimeoutError, ConfigNotRestored

__all__ = ["ConfigGate"]


class ConfigGate:
    """Holds prompts while a restore sets the desired config again; keeps what it could not set."""

    __slots__ = ("_error", "_open", "_session_id")

    def __init__(self, session_id: str) -> None:
        self._session_id = session_id
        #: resolved when the restore's config work ended; ``None`` when none is running
        self._open: asyncio.Future[None] | None = None
        #: the settings the last restore could not set: raised once by the next prompt
        self._error: ConfigNotRestored | None = None

    @property
    def restoring(self) -> bool:
        """``True`` while a restore is setting the desired config again."""
        return self._open is not None and not self._open.done()

    def close(self) -> None:
        """A restore is about to set the desired config again: prompts wait from now on."""
        if not self.restoring:
            self._open = asyncio.get_running_loop().create_future()

    def open(self, failures: dict[str, str]) -> None:
        """The restore's config work ended; ``failures`` (setting -> error text) are raised once by the next
        prompt as :class:`ConfigNotRestored`."""
        gate, self._open = self._open, None
        if gate is not None and not gate.done():
            gate.set_result(None)
        if failures:
            self._error = ConfigNotRestored(self._session_id, failures)

    async def settle(self, timeout: float | None) -> float | None:
        """Before a prompt: wait (within ``timeout``) while the gate is closed; raise the last restore's
        :class:`ConfigNotRestored` once if it failed. Returns what is left of ``timeout``."""
        gate = self._open
        if gate is not None:
            loop = asyncio.get_running_loop()
            started = loop.time()
            try:
                await asyncio.wait_for(asyncio.shield(gate), timeout)
            except TimeoutError:
                raise ACPTimeoutError(f"session {self._session_id}: its config was still being restored") from None
            timeout = None if timeout is None else max(0.0, timeout - (loop.time() - started))
        error, self._error = self._error, None
        if error is not None:
            raise error
        return timeout

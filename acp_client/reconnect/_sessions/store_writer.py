"""Writes session records to the store without ever letting a store fault become a recovery fault.

A save or delete that raises (read-only file, full disk, a broken custom store, Redis away) is reported
once per session as :class:`~acp_client.reconnect.SessionStoreFailed` and retried later with backoff (a
tenacity schedule, see :meth:`StoreWriter._retry_loop`); the session itself is unaffected. A pending save
of a session that is then deleted is dropped, so a retry can never bring a forgotten session back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tenacity import AsyncRetrying, retry_if_result, stop_never

from acp_client._logging import get_logger
from acp_client.reconnect._backoff import Backoff, Clock
from acp_client.reconnect._events import Event, SessionStoreFailed
from acp_client.sessions import SessionRecord, SessionStore

__all__ = ["StoreWriter"]

log = get_logger("acp_client.reconnect")


class StoreWriter:
    """The only writer of one client's :class:`~acp_client.sessions.SessionStore`."""

    def __init__(
        self,
        store: SessionStore,
        *,
        emit: Callable[[Event], None],
        generation: Callable[[], int],
        backoff: Backoff,
        clock: Clock,
        keep_mcp_secrets: bool = True,
    ) -> None:
        self.store = store
        self._keep_mcp_secrets = keep_mcp_secrets
        self._emit = emit
        self._generation = generation
        self._backoff = backoff
        self._clock = clock
        # session id -> the write still owed: a record to save, or None to delete
        self._pending: dict[str, SessionRecord | None] = {}
        self._reported: set[str] = set()
        self._retry: asyncio.Task[None] | None = None
        self._streak = 1  # retry passes in a row that wrote nothing: the backoff's exponent
        self.failures = 0

    @property
    def pending(self) -> int:
        """How many sessions have a write still owed to the store."""
        return len(self._pending)

    async def save(self, record: SessionRecord) -> bool:
        """Save ``record`` (without its MCP server secrets when the client supplies them at recovery
        time); ``False`` if it failed (reported, retried later)."""
        stored = record if self._keep_mcp_secrets else record.without_mcp_secrets()
        return await self._write(record.session_id, stored)

    async def delete(self, session_id: str) -> bool:
        """Delete ``session_id``; ``False`` if it failed (reported, retried later)."""
        return await self._write(session_id, None)

    async def _write(self, session_id: str, record: SessionRecord | None) -> bool:
        self._pending.pop(session_id, None)  # the newest intent replaces an older owed write
        try:
            if record is None:
                await self.store.delete(session_id)
            else:
                await self.store.save(record)
        except asyncio.CancelledError:
            self._pending[session_id] = record
            raise
        except Exception as exc:
            self.failures += 1
            self._pending[session_id] = record
            if session_id not in self._reported:
                self._reported.add(session_id)
                operation = "delete" if record is None else "save"
                text = f"{type(exc).__name__}: {exc}"
                self._emit(SessionStoreFailed(session_id, operation, text, self._generation()))
            self._schedule()
            return False
        self._reported.discard(session_id)
        return True

    def _schedule(self) -> None:
        if self._retry is None or self._retry.done():
            self._retry = asyncio.get_running_loop().create_task(self._retry_loop(), name="acp-store-retry")

    async def _retry_loop(self) -> None:
        """Retry the owed writes until none is left. tenacity drives the schedule: one attempt is a pass over
        the owed writes, retried while any is still owed, never stopped (the client's close cancels it);
        the wait is our :class:`Backoff` for the number of passes in a row that wrote nothing (a pass that
        wrote something starts the count again), and the sleep is the client's injectable clock."""
        self._streak = 1
        await self._clock.sleep(self._backoff.delay(self._streak))  # it just failed: not again at once
        retrying = AsyncRetrying(
            sleep=self._clock.sleep,
            wait=lambda _state: self._backoff.delay(self._streak),
            retry=retry_if_result(bool),
            stop=stop_never,
        )
        await retrying(self._retry_pass)

    async def _retry_pass(self) -> bool:
        """Try every owed write once; ``True`` while some are still owed."""
        wrote = False
        for session_id, record in list(self._pending.items()):
            if self._pending.get(session_id, ...) is not record:
                continue  # replaced by a newer write meanwhile
            if await self._write(session_id, record):
                wrote = True
        self._streak = 1 if wrote else self._streak + 1
        return bool(self._pending)

    async def flush(self) -> None:
        """Try every owed write once now (e.g. before closing)."""
        for session_id, record in list(self._pending.items()):
            if self._pending.get(session_id, ...) is record:
                await self._write(session_id, record)

    async def aclose(self) -> None:
        """Stop retrying, try the owed writes once more, and close the store."""
        retry, self._retry = self._retry, None
        if retry is not None:
            retry.cancel()
            await asyncio.wait({retry})
        await self.flush()
        try:
            await self.store.close()
        except Exception:
            log.warning("acp.session_store_close_failed", exc_info=True)

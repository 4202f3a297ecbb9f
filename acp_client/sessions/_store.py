"""Session records and where they are kept between connections and between processes."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["MemorySessionStore", "SQLiteSessionStore", "SessionRecord", "SessionStore"]


@dataclass(slots=True)
class SessionRecord:
    """Everything needed to re-attach a session on a new connection or in a new process.

    ``additional_directories`` is the full list last sent (ACP requires it in full on every load/resume;
    ``None`` means the session never used the capability). ``last_state`` is the last known v2 foreground
    state, ``None`` when unknown. ``meta`` is free space for the application (JSON-serialisable).
    """

    session_id: str
    cwd: str
    mcp_servers: list[dict[str, Any]] = field(default_factory=list)
    additional_directories: list[str] | None = None
    protocol_version: int = 2
    last_state: str | None = None
    title: str | None = None
    created_at: float = field(default_factory=time.time)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The record as JSON text."""
        # a shallow field map: asdict() deep-copies every list and dict first, for nothing
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return json.dumps(fields, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SessionRecord:
        """Read a record written by :meth:`to_json`; unknown keys (from newer versions) are ignored."""
        data = json.loads(text)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@runtime_checkable
class SessionStore(Protocol):
    """Where session records live. Implementations must be safe to call from the event loop."""

    async def load_all(self) -> list[SessionRecord]:
        """Every stored record."""
        ...

    async def save(self, record: SessionRecord) -> None:
        """Insert or replace the record for ``record.session_id``."""
        ...

    async def delete(self, session_id: str) -> None:
        """Remove a record; removing a missing one is not an error."""
        ...

    async def close(self) -> None:
        """Release resources."""
        ...


class MemorySessionStore:
    """The default store: records live as long as the process (copies, so callers cannot alias them)."""

    def __init__(self) -> None:
        self._records: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<MemorySessionStore {len(self._records)} sessions>"

    async def load_all(self) -> list[SessionRecord]:
        """Every stored record."""
        return [SessionRecord.from_json(text) for text in self._records.values()]

    async def save(self, record: SessionRecord) -> None:
        """Insert or replace a record."""
        self._records[record.session_id] = record.to_json()

    async def delete(self, session_id: str) -> None:
        """Remove a record if present."""
        self._records.pop(session_id, None)

    async def close(self) -> None:
        """Nothing to release."""


class SQLiteSessionStore:
    """Records in a SQLite file (stdlib ``sqlite3``), so a restarted IDE or notebook kernel loses nothing.

    All database work runs on one private worker thread, off the event loop. Several processes may share
    the file (SQLite locks it); each write is its own transaction.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._executor: ThreadPoolExecutor | None = None
        self._db: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"<SQLiteSessionStore {str(self.path)!r}>"

    async def _run(self, fn: Any, *args: Any) -> Any:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="acp-sqlite")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS acp_sessions (session_id TEXT PRIMARY KEY, record TEXT NOT NULL)")
            self._db = db
        return self._db

    def _load_all(self) -> list[SessionRecord]:
        rows = self._conn().execute("SELECT record FROM acp_sessions ORDER BY rowid").fetchall()
        return [SessionRecord.from_json(row[0]) for row in rows]

    def _save(self, session_id: str, text: str) -> None:
        self._conn().execute(
            "INSERT INTO acp_sessions(session_id, record) VALUES (?, ?) "
            "ON CONFLICT(session_id) DO UPDATE SET record = excluded.record",
            (session_id, text),
        )

    def _delete(self, session_id: str) -> None:
        self._conn().execute("DELETE FROM acp_sessions WHERE session_id = ?", (session_id,))

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    async def load_all(self) -> list[SessionRecord]:
        """Every stored record, oldest first."""
        result: list[SessionRecord] = await self._run(self._load_all)
        return result

    async def save(self, record: SessionRecord) -> None:
        """Insert or replace a record."""
        await self._run(self._save, record.session_id, record.to_json())

    async def delete(self, session_id: str) -> None:
        """Remove a record if present."""
        await self._run(self._delete, session_id)

    async def close(self) -> None:
        """Close the database and stop the worker thread."""
        if self._executor is not None:
            await self._run(self._close)
            self._executor.shutdown(wait=True)  # idle by now: joins its thread at once
            self._executor = None

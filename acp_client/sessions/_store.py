"""Session records and where they are kept between connections and between processes."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from acp_client._checks import check_path
from acp_client._files import make_private_dirs, open_private
from acp_client._logging import get_logger
from acp_client.exceptions import StoreError, StoreLocked

if TYPE_CHECKING:
    import sqlite3

log = get_logger("acp_client.sessions.store")

__all__ = ["MemorySessionStore", "SQLiteSessionStore", "SessionRecord", "SessionStore"]


@dataclass(slots=True)
class SessionRecord:
    """Everything needed to re-attach a session on a new connection or in a new process.

    ``additional_directories`` is the full list last sent (ACP requires it in full on every load/resume;
    ``None`` means the session never used the capability). ``last_state`` is the last known v2 foreground
    state, ``None`` when unknown. ``meta`` is free space for the application (JSON-serialisable).
    ``closed`` marks a tombstone: the application closed or deleted the session, and the close may not have
    reached the agent yet. A closed record is never resumed, loaded or probed again, by this process or one
    that loads the store later; it is removed once the close is confirmed (or when a later start finds it).
    ``prompts`` is the session's prompt ledger as the store keeps it (``PromptEntry.to_dict()`` of the last
    ``PROMPT_LEDGER_SIZE`` prompts: ids, content digests, states; never the content). ``desired_config`` is
    the mode and config options the application set (``{"mode": id, "options": {configId: value}}``), set
    again after a restore; ``None`` when it set none. Both are left out of the JSON while empty, so records
    of sessions that use neither are written exactly as before.
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
    closed: bool = False
    prompts: list[dict[str, Any]] = field(default_factory=list)
    desired_config: dict[str, Any] | None = None

    def to_json(self) -> str:
        """The record as JSON text."""
        # a shallow field map: asdict() deep-copies every list and dict first, for nothing
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        if not self.prompts:
            del fields["prompts"]
        if self.desired_config is None:
            del fields["desired_config"]
        return json.dumps(fields, separators=(",", ":"), sort_keys=True)

    def without_mcp_secrets(self) -> SessionRecord:
        """A copy whose MCP servers keep their names, commands, URLs and the *names* of their ``env`` and
        ``headers`` entries, with every value blanked (``""``): what a store keeps when the application
        supplies the values at recovery time instead (``ReconnectingClient(mcp_secrets=...)``)."""
        servers = []
        for server in self.mcp_servers:
            copy = dict(server)
            for key in ("env", "headers"):
                entries = copy.get(key)
                if isinstance(entries, list):
                    copy[key] = [
                        {**entry, "value": ""} if isinstance(entry, dict) and "value" in entry else entry
                        for entry in entries
                    ]
            servers.append(copy)
        return dataclasses.replace(self, mcp_servers=servers, meta=dict(self.meta))

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


#: a record as :class:`MemorySessionStore` keeps it: immutable fields shared with the saved record, and the
#: mutable ones (MCP servers, meta) as JSON text, or ``None`` when empty (the common case)
_Packed = tuple[
    str,
    str,
    "str | None",
    "tuple[str, ...] | None",
    int,
    "str | None",
    "str | None",
    float,
    "str | None",
    bool,
    "str | None",
]


def _pack(record: SessionRecord) -> _Packed:
    dirs = record.additional_directories
    return (
        record.session_id,
        record.cwd,
        json.dumps(record.mcp_servers, separators=(",", ":")) if record.mcp_servers else None,
        tuple(dirs) if dirs is not None else None,
        record.protocol_version,
        record.last_state,
        record.title,
        record.created_at,
        json.dumps(record.meta, separators=(",", ":")) if record.meta else None,
        record.closed,
        _pack_extra(record),
    )


def _pack_extra(record: SessionRecord) -> str | None:
    """The ledger and the desired config as one JSON text, ``None`` when both are empty (the common case)."""
    if not record.prompts and record.desired_config is None:
        return None
    return json.dumps({"p": record.prompts, "d": record.desired_config}, separators=(",", ":"))


def _unpack(packed: _Packed) -> SessionRecord:
    session_id, cwd, servers, dirs, version, last_state, title, created_at, meta, closed, extra = packed
    more = json.loads(extra) if extra is not None else {"p": [], "d": None}
    return SessionRecord(
        session_id=session_id,
        cwd=cwd,
        mcp_servers=json.loads(servers) if servers is not None else [],
        additional_directories=list(dirs) if dirs is not None else None,
        protocol_version=version,
        last_state=last_state,
        title=title,
        created_at=created_at,
        meta=json.loads(meta) if meta is not None else {},
        closed=closed,
        prompts=more["p"],
        desired_config=more["d"],
    )


class MemorySessionStore:
    """The default store: records live as long as the process (copies, so callers cannot alias them).

    A record is kept as a tuple that shares its strings with the saved record and holds the mutable parts
    as JSON text, so a saved record costs little more than its id (a client may hold 100,000 sessions).
    """

    def __init__(self) -> None:
        self._records: dict[str, _Packed] = {}

    def __repr__(self) -> str:
        return f"<MemorySessionStore {len(self._records)} sessions>"

    async def load_all(self) -> list[SessionRecord]:
        """Every stored record."""
        return [_unpack(packed) for packed in self._records.values()]

    async def save(self, record: SessionRecord) -> None:
        """Insert or replace a record."""
        self._records[record.session_id] = _pack(record)

    async def delete(self, session_id: str) -> None:
        """Remove a record if present."""
        self._records.pop(session_id, None)

    async def close(self) -> None:
        """Nothing to release."""


class SQLiteSessionStore:
    """Records in a SQLite file (stdlib ``sqlite3``), so a restarted IDE or notebook kernel loses nothing.

    All database work runs on one private worker thread, off the event loop. **Writes are batched:** the
    saves and deletes made in one event-loop turn (and those made while the previous batch was on the
    thread) go to the thread together and are committed as one transaction, so recovering 1,000 sessions
    costs a few thread hand-offs and commits, not 1,000. Each call still answers for its own session: it
    returns once the transaction holding its write has committed (a returned save is as durable as before),
    and if the batch's transaction fails, its writes are retried one transaction each, so only the sessions
    whose own write fails see the error. Writes to one session apply in call order (the newest of several
    in one batch wins). A crash loses at most the writes whose calls had not returned yet, as before.

    **One owner at a time.** The first use takes an exclusive advisory lock (``fcntl.flock``) on a sidecar
    file next to the database (``<name>.lock``, holding the owner's pid), kept until :meth:`close`. A second
    process, or a second store object in the same process, gets :class:`~acp_client.exceptions.StoreLocked`
    instead of silently re-attaching the first one's sessions. Hand a file over by closing the first store
    (``ReconnectingClient.aclose()`` does); the lock also goes away when its process dies. Several worker
    processes that serve sessions together need :class:`~acp_client.sessions.RedisSessionStore` and its
    leases. On platforms without ``fcntl`` (Windows) no lock is taken.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        check_path("SQLiteSessionStore", "path", path)
        self.path = Path(path)
        self._executor: ThreadPoolExecutor | None = None
        self._db: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        #: rows that could not be read back (damaged JSON), skipped and logged
        self.discarded = 0
        #: write transactions committed (the writes of one batch share one)
        self.transactions = 0
        # session id -> JSON text to save, or None to delete: the batch that goes to the thread next
        self._batch: dict[str, str | None] = {}
        # answered when the next batch has landed: session id -> the error its write met (absent: written)
        self._batch_landed: asyncio.Future[dict[str, Exception]] | None = None
        self._in_flight: asyncio.Future[dict[str, Exception]] | None = None  # the batch on the thread

    def __repr__(self) -> str:
        return f"<SQLiteSessionStore {str(self.path)!r}>"

    @property
    def lock_path(self) -> Path:
        """The sidecar file whose advisory lock says which process owns the database."""
        return self.path.with_name(self.path.name + ".lock")

    def _lock(self) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no advisory locks, documented
            return
        try:
            fd = open_private(self.lock_path, os.O_RDWR)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StoreError(f"{self.lock_path} is a symbolic link: refusing to follow it") from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            try:
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or None
            finally:
                os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise StoreLocked(str(self.path), holder) from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        self._lock_fd = fd

    async def _run(self, fn: Any, *args: Any) -> Any:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="acp-sqlite")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            in_memory = str(self.path) == ":memory:"
            if not in_memory:
                make_private_dirs(self.path.parent)
            if self._lock_fd is None and not in_memory:
                self._lock()
            if not in_memory and not self.path.exists():
                # created 0600 before SQLite opens it: its -wal and -shm files take the database's mode
                os.close(open_private(self.path, os.O_RDWR))
            import sqlite3  # only programs that keep a SQLite store import it

            db = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS acp_sessions (session_id TEXT PRIMARY KEY, record TEXT NOT NULL)")
            self._db = db
        return self._db

    def _load_all(self) -> list[SessionRecord]:
        rows = self._conn().execute("SELECT session_id, record FROM acp_sessions ORDER BY rowid").fetchall()
        records = []
        for session_id, text in rows:
            try:
                records.append(SessionRecord.from_json(text))
            except (ValueError, TypeError) as exc:  # a damaged row must not cost the other sessions
                self.discarded += 1
                log.warning("acp.store_record_discarded", session_id=session_id, error=str(exc))
        return records

    _UPSERT = (
        "INSERT INTO acp_sessions(session_id, record) VALUES (?, ?) "
        "ON CONFLICT(session_id) DO UPDATE SET record = excluded.record"
    )
    _DELETE = "DELETE FROM acp_sessions WHERE session_id = ?"

    def _write_batch(self, batch: list[tuple[str, str | None]]) -> dict[str, Exception]:
        """On the thread: commit ``batch`` as one transaction; if that fails, each write in its own, so one
        bad write costs only its session. Answers the errors by session id."""
        try:
            db = self._conn()
            db.execute("BEGIN IMMEDIATE")
        except Exception as exc:  # no database or no write lock: every write of the batch meets it alike
            return dict.fromkeys((session_id for session_id, _ in batch), exc)
        try:
            db.executemany(self._UPSERT, [(sid, text) for sid, text in batch if text is not None])
            db.executemany(self._DELETE, [(sid,) for sid, text in batch if text is None])
            db.execute("COMMIT")
        except Exception as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            if len(batch) == 1:
                return {batch[0][0]: exc}
        else:
            self.transactions += 1
            return {}
        errors: dict[str, Exception] = {}
        for session_id, text in batch:  # which write failed is not known: each in a transaction of its own
            try:
                if text is None:
                    db.execute(self._DELETE, (session_id,))
                else:
                    db.execute(self._UPSERT, (session_id, text))
                self.transactions += 1
            except Exception as exc:
                errors[session_id] = exc
        return errors

    async def _write(self, session_id: str, text: str | None) -> None:
        """Add one write to the next batch and wait until its batch has landed."""
        self._batch[session_id] = text  # a newer write of the same session replaces the older one
        landed = self._batch_landed
        if landed is None:
            loop = asyncio.get_running_loop()
            landed = self._batch_landed = loop.create_future()
            if self._in_flight is None:
                loop.call_soon(self._dispatch)  # after the rest of this turn has added its writes
            # else: sent when the batch on the thread lands (see _landed)
        # shielded: a cancelled caller must not cancel the others' batch (its write may still land)
        errors = await asyncio.shield(landed)
        error = errors.get(session_id)
        if error is not None:
            # one error may answer several sessions (no database): each raise starts a fresh traceback
            raise error.with_traceback(None)

    def _dispatch(self) -> None:
        landed, self._batch_landed = self._batch_landed, None
        batch, self._batch = list(self._batch.items()), {}
        if landed is None:
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="acp-sqlite")
        loop = asyncio.get_running_loop()
        in_flight = self._in_flight = loop.run_in_executor(self._executor, self._write_batch, batch)
        in_flight.add_done_callback(lambda done: self._landed(done, landed))

    def _landed(self, done: asyncio.Future[dict[str, Exception]], landed: asyncio.Future[dict[str, Exception]]) -> None:
        self._in_flight = None
        if not landed.done():
            if done.cancelled():
                landed.cancel()
            elif (exc := done.exception()) is not None:
                landed.set_exception(exc)
                landed.add_done_callback(lambda f: f.exception())  # seen even if every caller went away
            else:
                landed.set_result(done.result())
        if self._batch_landed is not None:
            self._dispatch()  # the writes made while this batch was on the thread

    async def _drain(self) -> None:
        """Wait until no write is waiting for or on the thread."""
        while (waiting := self._in_flight or self._batch_landed) is not None:
            await asyncio.wait({waiting})

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    async def load_all(self) -> list[SessionRecord]:
        """Every stored record, oldest first."""
        await self._drain()  # sees every write made before it
        result: list[SessionRecord] = await self._run(self._load_all)
        return result

    async def save(self, record: SessionRecord) -> None:
        """Insert or replace a record (batched with the other writes of this event-loop turn)."""
        await self._write(record.session_id, record.to_json())

    async def delete(self, session_id: str) -> None:
        """Remove a record if present (batched like :meth:`save`)."""
        await self._write(session_id, None)

    async def close(self) -> None:
        """Wait for the writes already made, then close the database and stop the worker thread."""
        await self._drain()
        if self._executor is not None:
            await self._run(self._close)
            self._executor.shutdown(wait=True)  # idle by now: joins its thread at once
            self._executor = None

"""The wire log: one JSON line per frame a client sends or receives, and one per lifecycle event.

:class:`WireLog` says where and how (a path or a text stream; payloads or not; the rotation bound).
:class:`WireRecorder` is its one owner at run time: the file, the writer thread, the queue of lines and the
counters. A :class:`~acp_client.client.connection.Connection` made with a recorder reads and writes its
frames through :func:`tap`, a thin wrapper over its transport that hands every frame to the recorder with
the connection's generation; without one the connection talks to its transport directly (no cost).

The event loop only queues ``(time, direction, generation, frame)``; a daemon thread decodes, classifies,
redacts and writes, so a slow disk never stalls the loop. A full queue drops lines (counted); a write that
fails is logged once at WARNING, counted, and ends the wire log: the link is never failed by its log.

Line shapes (``docs/topics/observability.md``)::

    {"t": "2026-12-05T13:02:58.123456Z", "gen": 1, "dir": "out", "kind": "request", "method": "session/new",
     "id": 2, "bytes": 88}
    {"t": "...", "gen": 1, "event": "connection_closed", "reason": "closed by the peer", "close_code": 1006}
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeAlias, cast

from acp_client._checks import check_bool, check_count
from acp_client._files import PRIVATE_FILE, open_private
from acp_client._logging import LOGGABLE_HEADER_NAMES, get_logger, loggable_headers, scrub_urls
from acp_client.exceptions import UsageError
from acp_client.transports.base import BatchTransport, Decoded, Transport

__all__ = ["WireLog", "WireLogOption", "WireRecorder", "as_wire_log", "check_wire_log", "redact_payload", "tap"]

log = get_logger("acp_client.wire_log")

#: What ``wire_log=`` accepts: a :class:`WireLog`, a path (payload-free lines, the default bounds), an open
#: text stream (written, flushed, never closed by the client), or ``None`` (no wire log).
WireLogOption: TypeAlias = "WireLog | str | os.PathLike[str] | IO[str] | None"

REDACTED = "<redacted>"
_STOP = object()


@dataclass(frozen=True, slots=True)
class WireLog:
    """Where a client writes its wire log, and how.

    ``target``: a file path (created ``0600``, appended to, rotated) or an open text stream (anything with
    ``write``; flushed after each batch of lines, never closed or rotated by the client). ``payloads``
    (default ``False``): also write each frame's JSON as ``"payload"``, with secrets redacted (see
    :func:`redact_payload`); off, a line holds only the frame's shape (kind, method, id, size).
    ``max_bytes`` (default 10 MiB): a file is rotated before a line would take it past this size.
    ``backups`` (default 3): rotated files kept, ``FILE.1`` the newest (``0``: the file is started anew).
    ``payload_limit`` (default 64 KiB): a frame larger than this many bytes is logged without its payload
    (``"payload_omitted"`` says why). ``queue`` (default 10,000): lines waiting for the writer thread;
    past it lines are dropped and counted in :attr:`WireRecorder.stats`.
    """

    target: str | os.PathLike[str] | IO[str]
    payloads: bool = False
    max_bytes: int = 10 * 2**20
    backups: int = 3
    payload_limit: int = 64 * 2**10
    queue: int = 10_000

    def __post_init__(self) -> None:
        target = self.target
        if isinstance(target, str | os.PathLike):
            if not os.fspath(target):
                raise UsageError("WireLog.target must be a file path or a text stream, not an empty path")
        elif not callable(getattr(target, "write", None)):
            raise UsageError(f"WireLog.target must be a file path or a text stream, not {type(target).__name__}")
        check_bool("WireLog", "payloads", self.payloads)
        check_count("WireLog", "max_bytes", self.max_bytes, minimum=1024)
        check_count("WireLog", "backups", self.backups, minimum=0)
        check_count("WireLog", "payload_limit", self.payload_limit, minimum=0)
        check_count("WireLog", "queue", self.queue, minimum=1)

    def __repr__(self) -> str:
        shown = os.fspath(self.target) if isinstance(self.target, str | os.PathLike) else type(self.target).__name__
        return f"WireLog({str(shown)!r}, payloads={self.payloads}, max_bytes={self.max_bytes}, backups={self.backups})"


def check_wire_log(name: str, value: object) -> None:
    """Raise :class:`UsageError` naming ``name`` unless ``value`` is a :data:`WireLogOption`."""
    as_wire_log(name, value)


def as_wire_log(name: str, value: object) -> WireLog | None:
    """``value`` (a :data:`WireLogOption`) as a :class:`WireLog`; a :class:`UsageError` naming ``name``
    for anything else."""
    if value is None or isinstance(value, WireLog):
        return value
    if isinstance(value, str | os.PathLike) or callable(getattr(value, "write", None)):
        try:
            return WireLog(value)  # type: ignore[arg-type]
        except UsageError as exc:
            raise UsageError(f"{name}: {exc}") from None
    raise UsageError(f"{name} must be a WireLog, a file path or a text stream, or None, not {type(value).__name__}")


# ---------------------------------------------------------------------- redaction

#: object keys whose string (or object) values are credentials; numbers are kept (``inputTokens``)
_SECRET_KEY = re.compile(
    r"token|secret|passw|pwd|api[-_]?key|authorization|cookie|credential|private[-_]?key|access[-_]?key|bearer",
    re.IGNORECASE,
)
_SCHEME_VALUE = re.compile(r"^\s*(bearer|basic|token|digest)\s+\S", re.IGNORECASE)


def redact_payload(value: Any, key: str = "") -> Any:
    """A copy of a JSON value fit for the wire log. Redacted (``"<redacted>"``):

    - the value of every key that names a credential (``token``, ``accessToken``, ``apiKey``, ``password``,
      ``secret``, ``authorization``, ``cookie``, ``credentials`` ... at any depth, ``_meta`` included),
      unless it is a number, a boolean or null;
    - the ``value`` of every ``{"name", "value"}`` pair (MCP server headers and environments, a terminal's
      environment) unless ``name`` is a header :data:`~acp_client._logging.LOGGABLE_HEADER_NAMES` shows;
    - the values of a ``headers`` object, as :func:`~acp_client._logging.loggable_headers` does;
    - a string that starts like an ``Authorization`` value (``Bearer x``, ``Basic x``);
    - in every other string, the userinfo and token-like query values of each URL in it
      (:func:`~acp_client._logging.scrub_urls`).
    """
    if isinstance(value, dict):
        if "name" in value and "value" in value and len(value) <= 3 and isinstance(value.get("name"), str):
            shown = value["name"].lower() in LOGGABLE_HEADER_NAMES
            return {k: (v if k != "value" or shown else REDACTED) for k, v in value.items()}
        if key.lower() == "headers" and all(isinstance(v, str) for v in value.values()):
            return loggable_headers(value)
        out: dict[str, Any] = {}
        for k, v in value.items():
            if _SECRET_KEY.search(k) and not (v is None or isinstance(v, bool | int | float)):
                out[k] = REDACTED
            else:
                out[k] = redact_payload(v, k)
        return out
    if isinstance(value, list):
        return [redact_payload(item, key) for item in value]
    if isinstance(value, str):
        if _SCHEME_VALUE.match(value):
            return REDACTED
        return scrub_urls(value)
    return value


# ---------------------------------------------------------------------- lines


def _kind(message: object) -> tuple[str, dict[str, Any]]:
    """The kind of one decoded JSON-RPC message and the fields of its line (method, id, code, session)."""
    if not isinstance(message, dict):
        return "invalid", {}
    fields: dict[str, Any] = {}
    method = message.get("method")
    if "id" in message:
        fields["id"] = message["id"]
    if isinstance(method, str):
        fields["method"] = method
        kind = "request" if "id" in message else "notification"
        params = message.get("params")
        if isinstance(params, dict) and isinstance(params.get("sessionId"), str):
            fields["session"] = params["sessionId"]
    elif "error" in message:
        kind = "error"
        error = message["error"]
        if isinstance(error, dict) and isinstance(error.get("code"), int):
            fields["code"] = error["code"]
    elif "result" in message:
        kind = "response"
    else:
        kind = "invalid"
    return kind, fields


class _Stamps:
    """UTC times as ``2026-12-05T13:02:58.123456Z``; the part up to the second is made once per second."""

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def __call__(self, t: float) -> str:
        second = int(t)
        if second != self._second:
            self._second, self._prefix = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._prefix}.{int((t - second) * 1e6):06d}Z"


class _Inbox:
    """The lines on their way to the writer thread, at most ``bound``: the loop appends to a deque (no lock
    to take) and wakes the writer only when it sleeps."""

    def __init__(self, bound: int) -> None:
        self._items: collections.deque[Any] = collections.deque()
        self._bound = bound
        self._wake = threading.Event()
        self._sleeping = False

    def put(self, item: object) -> bool:
        """Queue ``item`` (``False``: the inbox is full, nothing was queued)."""
        items = self._items
        if len(items) >= self._bound:
            return False
        items.append(item)
        if self._sleeping:
            self._wake.set()
        return True

    def put_stop(self) -> None:
        """Queue the end (never refused: a close is never lost to a full inbox)."""
        self._items.append(_STOP)
        self._wake.set()

    def take(self, most: int = 512) -> list[Any]:
        """(The writer thread) wait until something is queued; take up to ``most`` items, in order."""
        items = self._items
        while not items:
            self._sleeping = True  # said before looking again: a put after the look sees it and wakes us
            if not items:
                self._wake.wait(0.5)
                self._wake.clear()
            self._sleeping = False
        take = items.popleft
        return [take() for _ in range(min(most, len(items)))]


class _Methods:
    """Which method each request id of each generation and direction was sent with, so the answer's line can
    name it (bounded: the oldest are forgotten first)."""

    def __init__(self, bound: int = 10_000) -> None:
        self._by_id: dict[tuple[Any, str, Any], str] = {}
        self._bound = bound

    def sent(self, gen: Any, direction: str, id_: Any, method: str) -> None:
        if len(self._by_id) >= self._bound:
            del self._by_id[next(iter(self._by_id))]
        self._by_id[(gen, direction, id_)] = method

    def answered(self, gen: Any, direction: str, id_: Any) -> str | None:
        asked = "in" if direction == "out" else "out"
        with contextlib.suppress(TypeError):  # an unhashable id from a hostile peer
            return self._by_id.pop((gen, asked, id_), None)
        return None


class WireRecorder:
    """The run-time owner of one :class:`WireLog`: its file (or stream), its writer thread (started with the
    first line, never in ``__init__``), its queue and its counters. One per client; every connection of a
    :class:`~acp_client.ReconnectingClient` writes through the same one."""

    def __init__(self, options: WireLog) -> None:
        self.options = options
        self._inbox = _Inbox(options.queue)
        self._stamp = _Stamps()  # the writer thread's own
        self._thread: threading.Thread | None = None  # the writer while it runs; None before and after
        self._stopped = False  # a write failed (or a close timed out): nothing more is written
        self._out: IO[str] | None = None
        self._size = 0
        self._methods = _Methods()
        #: ``lines`` written, ``dropped`` (queue full), ``errors`` (failed writes); ``unloggable`` once a frame
        #: could not be described (it gets a line of kind ``"unloggable"``)
        self.stats: dict[str, int] = {"lines": 0, "dropped": 0, "errors": 0}
        #: the error that stopped the wire log, if one did
        self.error: str | None = None

    def __repr__(self) -> str:
        return f"<WireRecorder {self.options!r} {self.stats}>"

    # ------------------------------------------------------------------ the loop's side (cheap)

    def frame(self, direction: str, generation: int | None, frame: str | Decoded) -> None:
        """Queue one frame (``"in"`` or ``"out"``) of the connection of ``generation``."""
        self._put((time.time(), direction, generation, frame))

    def event(self, name: str, generation: int | None, **fields: Any) -> None:
        """Queue one lifecycle line (``connection_open``, ``state_changed`` ...)."""
        self._put((time.time(), None, generation, (name, fields)))

    def _put(self, item: tuple[Any, ...]) -> None:
        if self._stopped:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="acp-wire-log", daemon=True)
            self._thread.start()
        if not self._inbox.put(item):
            self.stats["dropped"] += 1

    async def aclose(self, timeout: float = 5.0) -> None:
        """Write what is queued, close the file (a stream is flushed, not closed) and stop the thread
        (waited for at most ``timeout`` seconds, off the event loop). A line queued afterwards starts it
        again, appending (a client that initializes again on a fresh connection keeps its log)."""
        import asyncio

        thread, self._thread = self._thread, None
        if thread is not None and thread.is_alive():
            await asyncio.to_thread(self._finish, thread, timeout)

    def _finish(self, thread: threading.Thread, timeout: float) -> None:
        self._inbox.put_stop()
        thread.join(timeout)
        if thread.is_alive():  # a disk that hangs: never two writers on one file
            self._stopped = True
            self.stats["errors"] += 1
            log.warning("wire_log_failed", error=f"the writer did not finish within {timeout:g} s")

    # ------------------------------------------------------------------ the writer thread

    def _run(self) -> None:
        try:
            self._open()
            while True:
                batch = self._inbox.take()
                stop = any(entry is _STOP for entry in batch)
                self._write([self._safe_line(entry) for entry in batch if entry is not _STOP])
                if stop:
                    break
        except Exception as exc:  # a full disk, a stream that raises: count, say once, stop; never the link
            self._stopped = True
            self.stats["errors"] += 1
            self.error = f"{type(exc).__name__}: {exc}"
            log.warning("wire_log_failed", error=self.error, target=repr(self.options))
        finally:
            self._close()

    def _safe_line(self, item: tuple[Any, ...]) -> str:
        """:meth:`_line`, or for a frame it cannot describe (nested too deep to walk ...) a line that says so:
        a frame the agent shaped never stops the log."""
        try:
            return self._line(item)
        except Exception as exc:
            self.stats["unloggable"] = self.stats.get("unloggable", 0) + 1
            t, direction, generation, _ = item
            line = {"t": self._stamp(t), "gen": generation, "dir": direction, "kind": "unloggable"}
            return json.dumps({**line, "error": type(exc).__name__})

    def _line(self, item: tuple[Any, ...]) -> str:
        t, direction, generation, body = item
        if direction is None:
            name, fields = body
            line = {"t": self._stamp(t), "gen": generation, "event": name, **fields}
            return json.dumps(line, default=str, ensure_ascii=False)
        # a decoded frame's value belongs to the client, which may still be reading it: decode the text anew
        text = body if isinstance(body, str) else body[0]
        size = len(text.encode("utf-8", "surrogatepass"))
        try:
            message = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
            message = None
        line = {"t": self._stamp(t), "gen": generation, "dir": direction}
        if isinstance(message, list):
            line["kind"], line["count"] = "batch", len(message)
        else:
            kind, fields = _kind(message)
            line["kind"] = kind
            self._note_method(generation, direction, kind, fields)
            line.update(fields)
        line["bytes"] = size
        if self.options.payloads and message is not None:
            if size > self.options.payload_limit:
                line["payload_omitted"] = f"{size} bytes > payload_limit {self.options.payload_limit}"
            else:
                line["payload"] = redact_payload(message)
        return json.dumps(line, default=str, ensure_ascii=False)

    def _note_method(self, generation: Any, direction: str, kind: str, fields: dict[str, Any]) -> None:
        id_ = fields.get("id")
        if kind == "request":
            with contextlib.suppress(TypeError):
                self._methods.sent(generation, direction, id_, fields["method"])
        elif kind in ("response", "error") and id_ is not None:
            method = self._methods.answered(generation, direction, id_)
            if method is not None:
                fields["method"] = method

    def _open(self) -> None:
        target = self.options.target
        if not isinstance(target, str | os.PathLike):
            self._out = target
            return
        path = Path(target)
        fd = open_private(path, os.O_WRONLY | os.O_APPEND)
        with contextlib.suppress(OSError):  # an existing file of looser mode: ours, so narrowed
            os.fchmod(fd, PRIVATE_FILE)
        self._size = os.fstat(fd).st_size
        self._out = open(fd, "a", encoding="utf-8", errors="surrogateescape")  # noqa: SIM115 - closed by _close

    def _write(self, lines: list[str]) -> None:
        out = self._out
        assert out is not None
        rotating = isinstance(self.options.target, str | os.PathLike)
        for line in lines:
            data = line + "\n"
            if rotating:
                size = len(data.encode("utf-8", "surrogateescape"))
                if self._size and self._size + size > self.options.max_bytes:
                    self._rotate()
                    out = self._out
                    assert out is not None
                self._size += size
            out.write(data)
            self.stats["lines"] += 1
        out.flush()

    def _rotate(self) -> None:
        """``FILE`` becomes ``FILE.1`` (``FILE.1`` becomes ``FILE.2`` ...; the oldest beyond ``backups`` is
        removed) and a new, private ``FILE`` is started."""
        path = Path(os.fspath(self.options.target))  # type: ignore[arg-type]
        self._close()
        backups = self.options.backups
        for n in range(backups, 0, -1):
            older = path.with_name(f"{path.name}.{n}")
            newer = path if n == 1 else path.with_name(f"{path.name}.{n - 1}")
            if newer.exists():
                os.replace(newer, older)
        if backups == 0:
            path.unlink(missing_ok=True)
        self._open()

    def _close(self) -> None:
        out, self._out = self._out, None
        if out is None:
            return
        if isinstance(self.options.target, str | os.PathLike):
            out.close()
        else:
            with contextlib.suppress(Exception):
                out.flush()


# ---------------------------------------------------------------------- the tap


class _Tapped:
    """A transport whose every frame is also handed to a :class:`WireRecorder` (see :func:`tap`)."""

    __slots__ = ("_in", "_inner", "_out")

    def __init__(self, inner: Transport, recorder: WireRecorder, generation: int | None) -> None:
        self._inner = inner
        frame = recorder.frame
        self._in: Callable[[str | Decoded], None] = lambda f: frame("in", generation, f)
        self._out: Callable[[str], None] = lambda f: frame("out", generation, f)

    async def send(self, frame: str) -> None:
        self._out(frame)
        await self._inner.send(frame)

    async def recv(self) -> str:
        frame = await self._inner.recv()
        self._in(frame)
        return frame

    async def close(self) -> None:
        await self._inner.close()

    @property
    def closed(self) -> bool:
        return self._inner.closed

    @property
    def description(self) -> str:
        return self._inner.description


class _TappedBatch(_Tapped):
    """:class:`_Tapped` for a transport that hands over its frames in batches."""

    __slots__ = ()

    async def recv_batch(self) -> list[str | Decoded]:
        frames = await cast(BatchTransport, self._inner).recv_batch()
        for frame in frames:
            self._in(frame)
        return frames


def tap(transport: Transport, recorder: WireRecorder | None, generation: int | None) -> Transport:
    """``transport`` itself without a recorder; with one, a wrapper that hands each frame it sends or
    receives to ``recorder`` (tagged with ``generation``) and moves it unchanged."""
    if recorder is None:
        return transport
    kind = _TappedBatch if isinstance(transport, BatchTransport) else _Tapped
    return kind(transport, recorder, generation)

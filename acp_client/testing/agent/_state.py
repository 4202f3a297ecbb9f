"""Reference agent sessions kept in a directory, so that a restarted agent *process* restores them.

``acp-client serve-reference --state-dir DIR`` (or ``serve_forever(state_dir=...)``) loads
``DIR/sessions.json`` at start — every session in it comes back *inactive* (known, not in memory), exactly
as after :meth:`ReferenceAgent.restart` — and rewrites the file (atomically: a temporary file, then a
rename) whenever a session changes, and once more at shutdown. So a client that reconnects to the new
process sees ``session/status`` answer ``inactive`` and restores its sessions with ``session/load`` or
``session/resume``, transcript replay included.

What is kept: id, cwd, MCP servers, additional directories, transcript, title, timestamps, mode, config
and the last stop reason. Running turns are not (a restart ends them).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp_client._files import make_private_dirs
from acp_client._logging import get_logger
from acp_client.testing.agent._sessions import AgentSessionRecord, TranscriptMessage

if TYPE_CHECKING:
    from acp_client.testing.reference_agent import ReferenceAgent

__all__ = ["STATE_FILE", "AgentStateDir"]

_log = get_logger(__name__)

#: The file inside the state directory.
STATE_FILE = "sessions.json"
_FORMAT = 1
#: Bound on each wait for the next change (the loop simply checks again afterwards).
_IDLE_CHECK = 60.0


def _to_json(record: AgentSessionRecord) -> dict[str, Any]:
    return {
        "sessionId": record.session_id,
        "cwd": record.cwd,
        "mcpServers": record.mcp_servers,
        "additionalDirectories": record.additional_directories,
        "title": record.title,
        "createdAt": record.created_at,
        "updatedAt": record.updated_at,
        "modeId": record.mode_id,
        "config": record.config,
        "stopReason": record.stop_reason,
        "transcript": [{"messageId": m.message_id, "role": m.role, "content": m.content} for m in record.transcript],
    }


def _from_json(data: dict[str, Any]) -> AgentSessionRecord:
    record = AgentSessionRecord(
        session_id=str(data["sessionId"]),
        cwd=str(data["cwd"]),
        mcp_servers=list(data.get("mcpServers") or []),
        additional_directories=[str(d) for d in data.get("additionalDirectories") or []],
        transcript=[
            TranscriptMessage(str(m["messageId"]), m["role"], list(m.get("content") or []))
            for m in data.get("transcript") or []
            if m.get("role") in ("user", "agent", "thought")
        ],
        title=data.get("title"),
        mode_id=str(data.get("modeId") or "default"),
        config={str(k): str(v) for k, v in (data.get("config") or {"model": "fast"}).items()},
        stop_reason=data.get("stopReason"),
    )
    record.created_at = str(data.get("createdAt") or record.created_at)
    record.updated_at = str(data.get("updatedAt") or record.updated_at)
    record.unload()  # a new process: known, not in memory
    return record


class AgentStateDir:
    """Loads and saves a :class:`ReferenceAgent`'s sessions in ``directory`` (created if missing)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / STATE_FILE
        self._saved: str | None = None

    def restore(self, agent: ReferenceAgent) -> int:
        """Add the saved sessions to ``agent`` as inactive ones; returns how many were restored."""
        make_private_dirs(self.directory)  # the state holds session data: 0700
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return 0
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError(f"{self.path} is not a reference agent state file (format {_FORMAT})")
        restored = 0
        for entry in data.get("sessions") or []:
            record = _from_json(entry)
            agent.sessions.setdefault(record.session_id, record)
            restored += 1
        self._saved = text
        _log.info("reference_agent_state_restored", path=str(self.path), sessions=restored)
        return restored

    def _render(self, agent: ReferenceAgent) -> str:
        sessions = [_to_json(record) for record in agent.sessions.values()]
        return json.dumps({"format": _FORMAT, "sessions": sessions}, indent=1, sort_keys=True)

    def save(self, agent: ReferenceAgent) -> bool:
        """Write the sessions if they changed since the last save; ``True`` when the file was written."""
        text = self._render(agent)
        if text == self._saved:
            return False
        make_private_dirs(self.directory)  # the state holds session data: 0700
        fd, tmp = tempfile.mkstemp(prefix=".sessions-", suffix=".json", dir=self.directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._saved = text
        return True

    def _fingerprint(self, agent: ReferenceAgent) -> tuple[Any, ...]:
        """Cheap to compute on every change notification; differs whenever something worth saving did."""
        return tuple(
            (
                r.session_id,
                r.updated_at,
                len(r.transcript),
                sum(len(m.content) for m in r.transcript[-1:]),
                len(r.transcript[-1].text) if r.transcript else 0,
                r.state,
                r.stop_reason,
                r.title,
                r.mode_id,
                tuple(sorted(r.config.items())),
            )
            for r in agent.sessions.values()
        )

    async def keep_saved(self, agent: ReferenceAgent) -> None:
        """Save after every change until cancelled (the caller saves once more at shutdown)."""
        while True:
            self.save(agent)
            seen = self._fingerprint(agent)
            with contextlib.suppress(TimeoutError):
                await agent.wait_for(lambda seen=seen: self._fingerprint(agent) != seen, timeout=_IDLE_CHECK)  # type: ignore[misc]

"""The one error a :class:`~acp_client.handlers.Workspace` answers with when it refuses a request."""

from __future__ import annotations

from typing import Any

from acp_client.exceptions import InvalidParams

__all__ = ["RULES", "WorkspaceRefusal"]

#: Every rule a workspace can refuse a request under, with what it means (the how-to lists them too).
RULES: dict[str, str] = {
    "not_absolute": "the protocol requires an absolute path",
    "outside_roots": "the path (symlinks resolved) is outside the workspace roots",
    "system_path": "paths under /proc, /sys and /dev are never served",
    "not_found": "no such file",
    "not_a_regular_file": "only regular files are read or written (not directories, FIFOs, devices, sockets)",
    "symlink_changed": "a path component became a symlink between the check and the use",
    "hard_link": "the file has other hard links (served only with allow_hard_links=True)",
    "too_large": "the text asked for is larger than the workspace's read cap",
    "binary": "the file is not UTF-8 text",
    "read_only": "the workspace (or this session) is read-only",
    "permission_denied": "the host's permission policy said no",
    "write_rejected": "the host's before_write hook rejected the write",
    "too_many_terminals": "the cap on concurrent terminals is reached",
    "unknown_terminal": "no open terminal with that id in this session",
    "spawn_failed": "the command could not be started",
}


class WorkspaceRefusal(InvalidParams):
    """A request the workspace will not serve, answered ``-32602`` with ``data.rule`` naming the rule.

    ``rule`` is one of :data:`RULES`; ``data`` carries ``rule``, ``reason`` and, when a path is involved,
    the ``path`` as the agent sent it. Hooks (``before_write``, ``buffers``) may raise it themselves.
    """

    def __init__(self, rule: str, reason: str | None = None, *, path: str | None = None) -> None:
        """Refuse under ``rule`` (one of :data:`RULES`); ``reason`` defaults to the rule's description."""
        self.rule = rule
        text = reason or RULES.get(rule, rule)
        data: dict[str, Any] = {"rule": rule, "reason": text}
        if path is not None:
            data["path"] = path
        super().__init__(-32602, f"refused ({rule}): {text}", data)

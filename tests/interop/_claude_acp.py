"""The Claude agent for ACP (npm ``@agentclientprotocol/claude-agent-acp``) for interop tests, run offline.

``python -m tests.interop._claude_acp`` installs it (see ``_npm.py``) and prints the binary, the time and size.
It runs without credentials: new/resume/load/list/close work, a prompt answers ``-32000`` "Authentication
required" (see the claude-agent-acp section of QUIRKS.md). As root the bundled Claude Code refuses to start
unless ``IS_SANDBOX=1``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from acp_client.transports.stdio import StdioTransport, spawn_stdio
from tests.interop._npm import NpmPackage, base_env

PACKAGE = NpmPackage("@agentclientprotocol/claude-agent-acp", "0.101.0", "claude-agent-acp", "claude-agent-acp")

#: Claude Code's own switches for what it would fetch or send at launch (telemetry, error reports, the
#: auto-updater, release notes and other "non-essential" calls).
OFFLINE_ENV = {
    "IS_SANDBOX": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}


def agent_env(home: Path) -> dict[str, str]:
    """A private HOME, no credentials, the offline switches."""
    return {**base_env(home), **OFFLINE_ENV}


@pytest.fixture(scope="session")
def claude_acp_bin() -> Path:
    """The ``claude-agent-acp`` launcher (installed on first use)."""
    return PACKAGE.fixture_value()


async def spawn_claude_acp(binary: Path, home: Path, cwd: Path, prefix: list[str] | None = None) -> StdioTransport:
    """``claude-agent-acp`` over stdio in HOME ``home`` and working directory ``cwd``; ``prefix`` (see
    :func:`tests.interop._opencode.offline_prefix`) runs it with no network but loopback."""
    return await spawn_stdio([*(prefix or []), str(binary)], env=agent_env(home), cwd=cwd, close_timeout=10.0)


if __name__ == "__main__":
    sys.exit(PACKAGE.main())

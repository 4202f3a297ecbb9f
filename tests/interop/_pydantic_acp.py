"""pydantic-acp (PyPI) with a pydantic-ai ``TestModel`` for the interop tests: installed once, run offline.

``python -m tests.interop._pydantic_acp`` installs it into ``pypi/pydantic-acp-<version>`` under the cache
folder (``.ci/run`` does this before the tests) and prints the venv's interpreter; the session fixture
``pydantic_acp_python`` does the same when the tests run on their own. The agent is
``pydantic_acp_agent.py`` (about 20 lines), run by that interpreter: pydantic-acp needs only Python 3.11.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from acp_client.transports.stdio import StdioTransport, spawn_stdio
from tests.interop._opencode import in_ci
from tests.interop._pyvenv import PythonAgentUnavailable, venv_with

PYDANTIC_ACP_VERSION = "1.10.0"
#: pydantic-acp 1.10.0 accepts pydantic-ai-slim 2.9 to 2.52; pinned to the newest it accepts.
REQUIREMENTS = (f"pydantic-acp=={PYDANTIC_ACP_VERSION}", "pydantic-ai-slim==2.52.0")
CHECK = (
    f"import importlib.metadata as m; assert m.version('pydantic-acp') == '{PYDANTIC_ACP_VERSION}'; "
    "import pydantic_acp, pydantic_ai.models.test"
)
AGENT_SCRIPT = Path(__file__).with_name("pydantic_acp_agent.py")


def install() -> Path:
    """Install pydantic-acp unless present; return the venv's interpreter."""
    return venv_with(f"pydantic-acp-{PYDANTIC_ACP_VERSION}", Path(sys.executable), REQUIREMENTS, CHECK)


@pytest.fixture(scope="session")
def pydantic_acp_python() -> Path:
    """pydantic-acp's interpreter (installed on first use). Skips when it cannot be installed, except in CI."""
    try:
        return install()
    except PythonAgentUnavailable as exc:
        if in_ci():
            pytest.fail(f"pydantic-acp could not be installed in CI: {exc}", pytrace=False)
        pytest.skip(f"pydantic-acp is not available: {exc}")


def agent_env(home: Path) -> dict[str, str]:
    """The whole environment of the agent: a private HOME, ``PATH``, and nothing else of ours."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}


def pydantic_acp_command(
    python: Path, store: Path, *, unstable: bool = False, prefix: list[str] | None = None
) -> list[str]:
    flags = ["--unstable"] if unstable else []
    return [*(prefix or []), str(python), str(AGENT_SCRIPT), "--store", str(store), *flags]


async def spawn_pydantic_acp(
    python: Path, home: Path, cwd: Path, store: Path, *, unstable: bool = False, prefix: list[str] | None = None
) -> StdioTransport:
    """The pydantic-acp agent over stdio; its sessions live in ``store`` (a folder)."""
    command = pydantic_acp_command(python, store, unstable=unstable, prefix=prefix)
    return await spawn_stdio(command, env=agent_env(home), cwd=cwd, close_timeout=10.0)


def main() -> int:
    """Install (or find) pydantic-acp and print its interpreter; exit 1 with the reason if that fails."""
    try:
        print(install())  # noqa: T201 - the one line of output is the result
    except PythonAgentUnavailable as exc:
        print(f"pydantic-acp is not available: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

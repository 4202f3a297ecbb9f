"""acpx (npm ``acpx``), a headless ACP client people script with, for the bridge interop tests.

``python -m tests.interop._acpx`` installs it (see ``_npm.py``) and prints the binary, the time and size.
acpx restarts its agent for every prompt and then resumes or loads the session it remembers (in its HOME),
falling back to a new session on ``-32002``; the tests give it ``acp-client bridge`` as its agent.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.interop._npm import NpmPackage, base_env

PACKAGE = NpmPackage("acpx", "0.19.1", "acpx", "acpx")


def client_env(home: Path) -> dict[str, str]:
    """A private HOME for acpx (its session records live there), nothing of ours but PATH."""
    return base_env(home)


@pytest.fixture(scope="session")
def acpx_bin() -> Path:
    """The ``acpx`` launcher (installed on first use)."""
    return PACKAGE.fixture_value()


if __name__ == "__main__":
    sys.exit(PACKAGE.main())

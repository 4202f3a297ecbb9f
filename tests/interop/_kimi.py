"""kimi-cli (PyPI ``kimi-cli``) for the interop tests: installed once into the cache folder, run offline.

``python -m tests.interop._kimi`` installs it (``.ci/run`` does this before the tests) and prints the path
of its interpreter; the session fixture ``kimi_python`` does the same when the tests run on their own.

kimi-cli needs Python >= 3.12. Where the machine has none, the interpreter is Debian's python3.13 unpacked
into the cache (``_pyvenv.debian_python``); the agent's virtualenv is ``pypi/kimi-cli-<version>``. The agent
is ``python -m kimi_cli.cli acp`` with a private HOME that holds a config choosing kimi's built-in ``_echo``
provider (it answers each prompt with the prompt's text, no network) and a made-up OAuth token file (kimi
refuses ``session/new`` with AUTH_REQUIRED without one; nothing ever checks the token offline).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from acp_client.transports.stdio import StdioTransport, spawn_stdio
from tests.interop._opencode import in_ci
from tests.interop._pyvenv import PythonAgentUnavailable, debian_python, python_runs, venv_with

KIMI_VERSION = "1.52.0"
REQUIREMENTS = (f"kimi-cli=={KIMI_VERSION}",)
CHECK = f"import importlib.metadata as m; assert m.version('kimi-cli') == '{KIMI_VERSION}'"

CONFIG = """default_model = "echo"

[providers.echo]
type = "_echo"
base_url = "http://127.0.0.1:9"
api_key = "made-up"

[models.echo]
provider = "echo"
model = "echo"
max_context_size = 100000
"""


def interpreter() -> Path:
    """A Python >= 3.12 to build the venv with: this one if it is new enough, else Debian's 3.13."""
    if sys.version_info >= (3, 12):
        return Path(sys.executable)
    for name in ("python3.13", "python3.12"):
        found = shutil.which(name)  # may be a pyenv shim without that version behind it: try it
        if found and python_runs(Path(found), "import sys, venv; assert sys.version_info >= (3, 12)"):
            return Path(found)
    return debian_python()


def install() -> Path:
    """Install kimi-cli (and an interpreter for it) unless present; return the venv's interpreter."""
    return venv_with(f"kimi-cli-{KIMI_VERSION}", interpreter(), REQUIREMENTS, CHECK)


@pytest.fixture(scope="session")
def kimi_python() -> Path:
    """kimi-cli's interpreter (installed on first use). Skips when it cannot be installed, except under CI."""
    try:
        return install()
    except PythonAgentUnavailable as exc:
        if in_ci():
            pytest.fail(f"kimi-cli could not be installed in CI: {exc}", pytrace=False)
        pytest.skip(f"kimi-cli is not available: {exc}")


def prepare_home(home: Path) -> None:
    """kimi's share folder (``~/.kimi``) with the echo-provider config and a made-up token file."""
    share = home / ".kimi"
    (share / "credentials").mkdir(parents=True, exist_ok=True)
    (share / "config.toml").write_text(CONFIG)
    token = {
        "access_token": "made-up-access-token",
        "refresh_token": "made-up-refresh-token",
        "expires_at": time.time() + 10 * 365 * 86400,  # never due: no refresh is attempted
        "scope": "",
        "token_type": "Bearer",
        "expires_in": 0,
    }
    (share / "credentials" / "kimi-code.json").write_text(json.dumps(token))


def agent_env(home: Path) -> dict[str, str]:
    """The whole environment of the agent: a private HOME, ``PATH``, and nothing else of ours."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "NO_COLOR": "1"}


def kimi_command(python: Path, prefix: list[str] | None = None) -> list[str]:
    return [*(prefix or []), str(python), "-m", "kimi_cli.cli", "acp"]


async def spawn_kimi(python: Path, home: Path, cwd: Path, prefix: list[str] | None = None) -> StdioTransport:
    """``kimi acp`` over stdio with ``home`` (prepared by :func:`prepare_home`) and working folder ``cwd``."""
    return await spawn_stdio(kimi_command(python, prefix), env=agent_env(home), cwd=cwd, close_timeout=10.0)


def main() -> int:
    """Install (or find) kimi-cli and print its interpreter; exit 1 with the reason if that fails."""
    try:
        print(install())  # noqa: T201 - the one line of output is the result
    except PythonAgentUnavailable as exc:
        print(f"kimi-cli is not available: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

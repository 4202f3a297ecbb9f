"""The official TypeScript SDK (npm ``@agentclientprotocol/sdk``) for the Streamable HTTP interop tests.

Installed once with ``npm install --ignore-scripts`` into ``$ACP_TESTS_CACHE`` or ``tests/.cache``
(git-ignored), under ``npm/acp-sdk-<version>``; afterwards the tests run it offline (it has no runtime
dependencies). ``python -m tests.interop._ts_sdk`` installs it and prints the folder. The session fixture
``ts_sdk_dir`` does the same; it skips when npm or the registry is unavailable, but fails when ``CI`` is set.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SDK_VERSION = "2.4.0"
PACKAGE = f"@agentclientprotocol/sdk@{SDK_VERSION}"
REPO = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT = 300.0


class SdkUnavailable(RuntimeError):
    """npm is missing or the package cannot be installed."""


def in_ci() -> bool:
    """``CI`` is set to something true."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def install_prefix() -> Path:
    root = Path(os.environ.get("ACP_TESTS_CACHE") or REPO / "tests" / ".cache")
    return root / "npm" / f"acp-sdk-{SDK_VERSION}"


def _installed(prefix: Path) -> bool:
    manifest = prefix / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json"
    try:
        return bool(json.loads(manifest.read_text())["version"] == SDK_VERSION)
    except (OSError, ValueError, KeyError):
        return False


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def install() -> Path:
    """Install the SDK into the cache folder unless it is there; return the folder (the one to pass to
    ``ts_http_agent.mjs``)."""
    prefix = install_prefix()
    with _locked(prefix.parent / ".acp-sdk.install.lock"):
        if _installed(prefix):
            return prefix
        npm = shutil.which("npm")
        if npm is None or shutil.which("node") is None:
            raise SdkUnavailable("node/npm are not on PATH")
        prefix.mkdir(parents=True, exist_ok=True)
        command = [npm, "install", "--prefix", str(prefix), "--ignore-scripts", "--no-audit", "--no-fund", PACKAGE]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False)
        except subprocess.TimeoutExpired as exc:
            raise SdkUnavailable(f"npm install {PACKAGE} took more than {INSTALL_TIMEOUT} s") from exc
        if done.returncode != 0 or not _installed(prefix):
            raise SdkUnavailable(f"npm install {PACKAGE} failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return prefix


@pytest.fixture(scope="session")
def ts_sdk_dir() -> Path:
    """The folder holding ``node_modules/@agentclientprotocol/sdk`` (installed on first use)."""
    try:
        return install()
    except SdkUnavailable as exc:
        if in_ci():
            pytest.fail(f"{PACKAGE} could not be installed in CI: {exc}", pytrace=False)
        pytest.skip(f"{PACKAGE} is not available: {exc}")


def main() -> int:
    """Install (or find) the SDK and print its folder; exit 1 with the reason if that fails."""
    try:
        print(install())  # noqa: T201 - the one line of output is the result
    except SdkUnavailable as exc:
        print(f"{PACKAGE} is not available: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

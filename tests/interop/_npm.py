"""Pinned npm packages for the interop tests: installed once into a cache folder, then run offline.

Each package has a module of its own (``_claude_acp.py``, ``_qwen.py``, ``_acpx.py``) that names the version,
the binary and the environment that keeps the program off the network; this module does the installing.

Where: ``$ACP_TESTS_CACHE`` or ``tests/.cache`` (git-ignored), under ``npm/<folder>-<version>``. The install runs
``npm install --ignore-scripts`` (no third-party install script runs) under a file lock, so that two pytest
workers never install into one folder at once. ``python -m tests.interop._<name>`` installs one package and
prints its binary (``.ci/run`` does this before the tests, and prints the time and size); the session fixtures
do the same when the tests run on their own. If npm or the registry is unreachable the tests skip locally, but
fail when ``CI`` is set: CI must run them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT = 600.0


class NpmUnavailable(RuntimeError):
    """npm is missing, the registry is unreachable, or the installed package is not the pinned one."""


def in_ci() -> bool:
    """``CI`` is set to something true."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def cache_root() -> Path:
    return Path(os.environ.get("ACP_TESTS_CACHE") or REPO / "tests" / ".cache")


@dataclass(frozen=True)
class NpmPackage:
    """One pinned npm package and the executable it ships (``bin`` is the name under ``node_modules/.bin``)."""

    name: str
    version: str
    folder: str
    bin: str

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def prefix(self) -> Path:
        return cache_root() / "npm" / f"{self.folder}-{self.version}"

    @property
    def binary(self) -> Path:
        return self.prefix / "node_modules" / ".bin" / self.bin

    def installed(self) -> bool:
        manifest = self.prefix / "node_modules" / self.name / "package.json"
        try:
            version_ok = json.loads(manifest.read_text())["version"] == self.version
        except (OSError, ValueError, KeyError):
            return False
        return bool(version_ok) and self.binary.exists()

    def install(self) -> Path:
        """Install the package unless the pinned version is there; return the binary."""
        with _locked(cache_root() / "npm" / f".{self.folder}.install.lock"):
            if self.installed():
                return self.binary
            npm = shutil.which("npm")
            if npm is None or shutil.which("node") is None:
                raise NpmUnavailable("node/npm are not on PATH")
            self.prefix.mkdir(parents=True, exist_ok=True)
            command = [npm, "install", "--prefix", str(self.prefix), "--ignore-scripts", "--no-audit", "--no-fund"]
            try:
                done = subprocess.run(
                    [*command, self.spec], capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
                )
            except subprocess.TimeoutExpired as exc:
                raise NpmUnavailable(f"npm install {self.spec} took more than {INSTALL_TIMEOUT} s") from exc
            if done.returncode != 0 or not self.installed():
                raise NpmUnavailable(f"npm install {self.spec} failed ({done.returncode}):\n{done.stderr[-4000:]}")
            return self.binary

    def fixture_value(self) -> Path:
        """The binary, for a session fixture: skips when it cannot be installed, except under CI."""
        try:
            return self.install()
        except NpmUnavailable as exc:
            if in_ci():
                pytest.fail(f"{self.spec} could not be installed in CI: {exc}", pytrace=False)
            pytest.skip(f"{self.spec} is not available: {exc}")

    def main(self) -> int:
        """Install (or find) the package; print the binary, the seconds it took and the folder's size."""
        started = time.monotonic()
        try:
            binary = self.install()
        except NpmUnavailable as exc:
            print(f"{self.spec} is not available: {exc}", file=sys.stderr)  # noqa: T201
            return 1
        size = sum(p.stat().st_size for p in self.prefix.rglob("*") if p.is_file() and not p.is_symlink())
        took = time.monotonic() - started
        print(f"{binary}  ({took:.1f} s, {size / 1e6:.0f} MB)")  # noqa: T201 - the one line of output is the result
        return 0


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def base_env(home: Path) -> dict[str, str]:
    """A whole environment for a Node program: a private HOME (XDG folders under it) and nothing of ours but
    ``PATH`` (no credentials, no proxy settings)."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "NO_COLOR": "1",
        "NO_UPDATE_NOTIFIER": "1",
        "NPM_CONFIG_UPDATE_NOTIFIER": "false",
        "NPM_CONFIG_OFFLINE": "true",
    }

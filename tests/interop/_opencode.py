"""The opencode agent (npm ``opencode-ai``) for interop tests: installed once into a cache folder, run offline.

``python -m tests.interop._opencode`` installs it (``.ci/run`` does this before the tests) and prints the path
of the binary; the session fixture ``opencode_bin`` does the same when the tests run on their own.

Where: ``$ACP_TESTS_CACHE`` or ``tests/.cache`` (git-ignored), under ``npm/opencode-ai-<version>``. The install
runs ``npm install --ignore-scripts``: the package's postinstall only copies the platform binary next to its
launcher, and the binary itself arrives as the optional dependency ``opencode-<os>-<arch>[-baseline][-musl]``,
so no third-party install script runs. Once installed, nothing is fetched again: the binary is a
self-contained executable and the tests start it with an environment that turns its network features off.

If npm or the registry is unreachable the tests skip locally, but fail when ``CI`` is set: CI must run them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from acp_client.transports.stdio import StdioTransport, spawn_stdio

OPENCODE_VERSION = "1.18.33"
PACKAGE = f"opencode-ai@{OPENCODE_VERSION}"
REPO = Path(__file__).resolve().parents[2]
#: Bound on ``npm install`` (two ~180 MB platform packages on x64 Linux) and on ``opencode --version``.
INSTALL_TIMEOUT = 900.0
VERSION_TIMEOUT = 60.0

#: opencode's own switches for what it would otherwise fetch or start at launch (found in the binary's
#: strings and checked by running it in a network namespace that has only loopback; see QUIRKS.md).
OFFLINE_ENV = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
    "NO_COLOR": "1",
}


class OpencodeUnavailable(RuntimeError):
    """npm is missing, the registry is unreachable, or the installed binary does not run."""


def in_ci() -> bool:
    """``CI`` is set to something true (GitHub Actions, GitLab and most others set ``CI=true``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def cache_root() -> Path:
    return Path(os.environ.get("ACP_TESTS_CACHE") or REPO / "tests" / ".cache")


def install_prefix() -> Path:
    return cache_root() / "npm" / f"opencode-ai-{OPENCODE_VERSION}"


def agent_env(home: Path) -> dict[str, str]:
    """A whole environment for the agent: a private HOME (and XDG folders under it), no credentials of ours
    (nothing else from ``os.environ`` but ``PATH``), and the offline switches."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        **OFFLINE_ENV,
    }


def _candidates(prefix: Path) -> list[Path]:
    """Where the binary may be: the platform packages npm picked for this machine, then the launcher copy."""
    system = {"linux": "linux", "darwin": "darwin"}.get(sys.platform, sys.platform)
    machine = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower(), platform.machine().lower()
    )
    modules = prefix / "node_modules"
    names = [f"opencode-{system}-{machine}{suffix}" for suffix in ("", "-baseline", "-musl", "-baseline-musl")]
    return [modules / name / "bin" / "opencode" for name in names] + [modules / "opencode-ai" / "bin" / "opencode.exe"]


def _runs(binary: Path, scratch: Path) -> bool:
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return False
    home = scratch / "version-home"
    home.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            [str(binary), "--version"],
            env=agent_env(home),
            cwd=scratch,
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return done.returncode == 0 and done.stdout.strip() == OPENCODE_VERSION


def _find(prefix: Path) -> Path | None:
    return next((c for c in _candidates(prefix) if _runs(c, prefix)), None)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # two pytest processes must not install into one folder at once
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def install() -> Path:
    """Install ``opencode-ai`` into the cache folder unless a working copy is there; return the binary.

    Raises :class:`OpencodeUnavailable` with npm's output when it cannot be installed or does not run.
    """
    prefix = install_prefix()
    with _locked(cache_root() / "npm" / ".install.lock"):
        found = _find(prefix)
        if found is not None:
            return found
        npm = shutil.which("npm")
        if npm is None:
            raise OpencodeUnavailable("npm is not on PATH")
        prefix.mkdir(parents=True, exist_ok=True)
        command = [npm, "install", "--prefix", str(prefix), "--ignore-scripts", "--no-audit", "--no-fund", PACKAGE]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False)
        except subprocess.TimeoutExpired as exc:
            raise OpencodeUnavailable(f"npm install {PACKAGE} took more than {INSTALL_TIMEOUT} s") from exc
        if done.returncode != 0:
            raise OpencodeUnavailable(f"npm install {PACKAGE} failed ({done.returncode}):\n{done.stderr[-4000:]}")
        found = _find(prefix)
        if found is None:
            listing = sorted(p.name for p in (prefix / "node_modules").glob("*"))
            raise OpencodeUnavailable(
                f"npm installed {PACKAGE} but no platform binary runs here; node_modules holds {listing}"
            )
        return found


@pytest.fixture(scope="session")
def opencode_bin() -> Path:
    """The opencode binary (installed on first use). Skips when it cannot be installed, except under CI."""
    try:
        return install()
    except OpencodeUnavailable as exc:
        if in_ci():
            pytest.fail(f"opencode-ai could not be installed in CI: {exc}", pytrace=False)
        pytest.skip(f"opencode-ai is not available: {exc}")


async def spawn_opencode(binary: Path, home: Path, cwd: Path) -> StdioTransport:
    """``opencode acp`` over stdio, with ``home`` as its HOME and ``cwd`` (an existing folder) as its working
    directory (``home`` must exist too)."""
    return await spawn_stdio([str(binary), "acp"], env=agent_env(home), cwd=cwd, close_timeout=10.0)


#: Runs a program in a new network namespace with only loopback up (``unshare -n`` leaves ``lo`` down, and
#: opencode needs loopback). argv: the program and its arguments.
_LOOPBACK_ONLY = """
import fcntl, os, socket, struct, sys
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    flags = struct.unpack("16sh", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sh", b"lo", 0)))[1]
    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))
os.execv(sys.argv[1], sys.argv[1:])
"""


def offline_prefix() -> list[str] | None:
    """argv prefix running a command with no network but loopback, or ``None`` when this machine cannot
    (``unshare`` missing, or not allowed: it needs root or user namespaces)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    prefix = [unshare, "-n", sys.executable, "-c", _LOOPBACK_ONLY]
    try:
        done = subprocess.run([*prefix, "/bin/true"], capture_output=True, timeout=VERSION_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return prefix if done.returncode == 0 else None


async def spawn_opencode_offline(prefix: list[str], binary: Path, home: Path, cwd: Path) -> StdioTransport:
    """Like :func:`spawn_opencode`, in a network namespace with only loopback (see :func:`offline_prefix`)."""
    return await spawn_stdio([*prefix, str(binary), "acp"], env=agent_env(home), cwd=cwd, close_timeout=10.0)


def main() -> int:
    """Install (or find) the binary and print its path; exit 1 with the reason if that fails."""
    try:
        print(install())  # noqa: T201 - the one line of output is the result
    except OpencodeUnavailable as exc:
        print(f"opencode-ai is not available: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

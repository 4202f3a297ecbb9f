"""Run a notebook in a real Jupyter kernel (nbclient + ipykernel), in a child process of its own.

Why a child process: nbclient drives the kernel from an asyncio loop of its own, and zmq and jupyter_client
log through the test process's loggers. Run inside a pytest worker, that loop met the suite's own checks on
loops and logs (tests/conftest.py), and under load a leftover of it failed a test that had passed. In a child
process, the kernel, the agents the cells start and nbclient's loop live and die together: on a timeout the
test kills the whole process group.

The kernel talks over IPC sockets (files in a private temporary folder) instead of TCP: jupyter_client picks
TCP ports by binding and releasing them, and several kernels starting at once (pytest-xdist workers) can be
handed the same port.

    python -m tests.project._notebook IN.ipynb OUT.ipynb --cell-timeout SECONDS
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_notebook(notebook: Any, cwd: Path, *, startup_timeout: float, cell_timeout: float, total_timeout: float) -> Any:
    """Execute ``notebook`` (an nbformat node) with ``cwd`` as the kernel's working folder and return the executed
    notebook. Every wait is bounded: the kernel's start by ``startup_timeout``, each cell by ``cell_timeout``,
    the whole run by ``total_timeout`` seconds (past it the runner, its kernel and everything the cells started
    are killed).

    Raises ``AssertionError`` naming the failing cell and its traceback when a cell raises, and on a timeout."""
    import nbformat

    source = cwd / "_notebook_in.ipynb"
    executed = cwd / "_notebook_out.ipynb"
    nbformat.write(notebook, source)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("PYTEST_ADDOPTS", None)
    argv = [sys.executable, "-m", "tests.project._notebook", str(source), str(executed)]
    argv += ["--cell-timeout", str(cell_timeout), "--startup-timeout", str(startup_timeout)]
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=total_timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()  # the runner kills its kernel's process group (the cells' agents too), then exits
            try:
                stdout, stderr = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                stdout, stderr = proc.communicate(timeout=10)
            raise AssertionError(
                f"the notebook did not finish within {total_timeout:g} s\n{stdout}\n{stderr}"
            ) from None
        finally:
            _kill_group(proc.pid)
    assert proc.returncode == 0, f"the notebook failed (exit code {proc.returncode})\n{stdout}\n{stderr}"
    return nbformat.read(executed, as_version=4)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _kill_kernel(client: Any) -> None:
    """Kill the kernel's process group (the kernel and what its cells started), which jupyter_client starts in
    a session of its own, out of reach of a kill of this runner's group."""
    provisioner = getattr(getattr(client, "km", None), "provisioner", None)
    pgid = getattr(provisioner, "pgid", None)
    if pgid:
        _kill_group(pgid)


def _execute(source: Path, executed: Path, cell_timeout: float, startup_timeout: float) -> int:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    from traitlets.config import Config

    notebook = nbformat.read(source, as_version=4)
    with tempfile.TemporaryDirectory(prefix="acp-kernel-") as sockets:
        config = Config({"KernelManager": {"transport": "ipc", "ip": str(Path(sockets) / "k")}})
        client = NotebookClient(
            notebook,
            config=config,
            kernel_name="python3",
            timeout=int(cell_timeout),
            startup_timeout=int(startup_timeout),
            shutdown_kernel="immediate",  # SIGKILL to the kernel's process group: the cells' agents go too
            resources={"metadata": {"path": str(source.parent)}},
        )

        def on_sigterm(_signum: int, _frame: object) -> None:  # the test's bound on the whole run passed
            _kill_kernel(client)
            os._exit(124)

        signal.signal(signal.SIGTERM, on_sigterm)
        try:
            client.execute()
        except CellExecutionError as exc:
            sys.stderr.write(f"{exc}\n")
            return 1
        finally:
            _kill_kernel(client)  # nbclient shuts it down; this is for a kernel that did not go
            nbformat.write(notebook, executed)
    return 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("source", type=Path)
    parser.add_argument("executed", type=Path)
    parser.add_argument("--cell-timeout", type=float, required=True)
    parser.add_argument("--startup-timeout", type=float, required=True)
    args = parser.parse_args()
    sys.exit(_execute(args.source, args.executed, args.cell_timeout, args.startup_timeout))


if __name__ == "__main__":
    main()

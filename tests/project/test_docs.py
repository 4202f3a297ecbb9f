"""The code samples in docs/ cannot rot: the self-contained ones run, every other one must at least parse.

Conventions in the Markdown sources (the HTML comments are invisible on the rendered site):

- ``<!-- runnable -->`` on the line before a ```` ```python ```` fence: the block is a complete script. It is
  run as ``python sample.py`` in a fresh temporary directory, in a subprocess of its own session, with a
  timeout; it must exit 0 without a traceback. Mark only samples that start everything they need themselves
  (a ``ReferenceAgent`` on 127.0.0.1, or the reference agent's process).
- ``<!-- runnable: pytest -->``: the block is a test module; it is saved as ``test_sample.py`` and run with
  ``python -m pytest``; every test in it must pass.
- ``<!-- file: NAME -->``: the block is written as ``NAME`` into the directory of every runnable sample of
  the same page (for a sample that runs a script shown earlier on the page).
- ``<!-- notebook -->``: the block is a notebook cell, shown as a user types it (top-level ``await``, never
  ``asyncio.run()``). The cells of a page, in order, form one notebook, executed as written in a real Jupyter
  kernel (nbclient + ipykernel, tests/project/_notebook.py) in a fresh temporary directory; no cell may raise.
- **Shown output**: a ```` ```text ```` block that directly follows a runnable script or a notebook cell
  (nothing but blank lines between) is what the script or the cell prints, and the run's stdout must match
  it line by line. ``...`` inside a line stands for any text (ids, ports, timings); a line that is only
  ``...`` stands for any number of lines. A runnable script or cell that prints something must show it this
  way, so no page can claim an output the code does not produce.

Every other ``python`` block (fragments, samples that need a real agent) is compiled with top-level
``await`` allowed, so at least its syntax stays valid. Runnable samples may bind loopback only.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import bound
from tests.project._notebook import run_notebook

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

#: Wall-clock bound of one sample (scaled by ACP_TESTS_TIMEOUT_FACTOR); samples normally take a few seconds.
SAMPLE_TIMEOUT = 60.0

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>runnable|file|notebook)\s*(?::\s*(?P<arg>[\w.\-]+))?\s*-->\s*$")
# a host other than loopback given to a server or a client in a runnable sample
_NON_LOOPBACK = re.compile(
    r"""(?:host\s*=\s*|--host["']?\s*,\s*|--host\s+)["']?(?!127\.0\.0\.1|localhost)(?P<host>[\w.:\-]+)"""
)


@dataclass(frozen=True)
class Block:
    """One fenced ``python`` block of a Markdown page."""

    page: Path
    line: int  # 1-based line of the opening fence
    code: str
    kind: str | None  # "runnable", "file", "notebook" or None
    arg: str | None  # "pytest" for runnable test modules; the file name for "file"
    output: str | None = None  # the ```text block shown right after a runnable script, if any
    end: int = 0  # index of the line after the closing fence

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(DOCS)}:{self.line}"


def _blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        indent, fence, info = match["indent"], match["fence"], match["info"].strip()
        start = index
        body: list[str] = []
        index += 1
        while index < len(lines):
            closing = _FENCE.match(lines[index])
            if closing and closing["fence"].startswith(fence[0] * len(fence)) and not closing["info"].strip():
                break
            line = lines[index]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            index += 1
        index += 1
        language = info.split()[0] if info else ""
        shows_output = blocks and blocks[-1].kind in ("runnable", "notebook") and blocks[-1].output is None
        if language == "text" and shows_output:
            between = lines[blocks[-1].end : start]
            if all(not line.strip() for line in between):
                blocks[-1] = dataclasses.replace(blocks[-1], output="\n".join(body) + "\n")
            continue
        if language not in ("python", "py", "python3"):
            continue
        previous = start - 1
        while previous >= 0 and not lines[previous].strip():
            previous -= 1
        marker = _MARKER.match(lines[previous]) if previous >= 0 else None
        kind = marker["kind"] if marker else None
        arg = marker["arg"] if marker else None
        blocks.append(Block(page, start + 1, "\n".join(body) + "\n", kind, arg, end=index))
    return blocks


def _all_blocks() -> list[Block]:
    return [block for page in sorted(DOCS.rglob("*.md")) for block in _blocks(page)]


BLOCKS = _all_blocks()
RUNNABLE = [b for b in BLOCKS if b.kind == "runnable"]
OTHER = [b for b in BLOCKS if b.kind is None]
CELLS = [b for b in BLOCKS if b.kind == "notebook"]
NOTEBOOK_PAGES = sorted({b.page for b in CELLS})


def output_pattern(shown: str) -> re.Pattern[str]:
    """A regular expression for a shown output: ``...`` in a line is any text, a ``...`` line any lines."""
    parts = []
    for line in shown.rstrip().splitlines():
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(piece) for piece in line.rstrip().split("...")) + r"[ \t]*\n")
    return re.compile("".join(parts))


def output_matches(shown: str, printed: str) -> bool:
    """Whether ``printed`` (a run's stdout) is what ``shown`` says, trailing blanks aside."""
    text = "\n".join(line.rstrip() for line in printed.rstrip().splitlines()) + "\n" if printed.strip() else ""
    return output_pattern(shown).fullmatch(text) is not None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in its own process group; on timeout kill the whole group (agents it spawned too)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["NO_COLOR"] = "1"
    env.pop("PYTEST_ADDOPTS", None)
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
            stdout, stderr = proc.communicate(timeout=bound(SAMPLE_TIMEOUT))
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            stdout, stderr = proc.communicate(timeout=bound(10))
            pytest.fail(f"timed out after {bound(SAMPLE_TIMEOUT):g} s\nstdout:\n{stdout}\nstderr:\n{stderr}")
        finally:
            # the sample, and whatever it spawned and forgot to stop, never outlive the test
            _kill_group(proc.pid)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def test_the_docs_have_runnable_samples() -> None:
    assert len(RUNNABLE) >= 10, [b.id for b in RUNNABLE]
    pages = {b.page.relative_to(DOCS).as_posix() for b in RUNNABLE}
    assert {"index.md", "tutorial.md"} <= pages


def test_file_markers_name_plain_files() -> None:
    for block in BLOCKS:
        if block.kind == "file":
            assert block.arg and "/" not in block.arg and not block.arg.startswith("."), block.id
        if block.kind == "runnable":
            assert block.arg in (None, "pytest"), f"{block.id}: unknown runnable mode {block.arg!r}"


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.id)
def test_runnable_sample_binds_loopback_only(block: Block) -> None:
    assert "0.0.0.0" not in block.code, f"{block.id}: runnable samples bind 127.0.0.1 only"
    hosts = [m["host"] for m in _NON_LOOPBACK.finditer(block.code)]
    assert hosts == [], f"{block.id}: runnable samples bind 127.0.0.1 only, found {hosts}"


@pytest.mark.parametrize("block", OTHER, ids=lambda b: b.id)
def test_fragment_parses(block: Block) -> None:
    try:
        compile(block.code, block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except SyntaxError as exc:
        pytest.fail(f"{block.id}: {exc}")


@pytest.mark.timeout(bound(SAMPLE_TIMEOUT + 30))  # above the sample's own bound, so that one fires first
@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.id)
def test_runnable_sample_runs(block: Block, tmp_path: Path) -> None:
    for other in BLOCKS:
        if other.kind == "file" and other.page == block.page and other.arg:
            (tmp_path / other.arg).write_text(other.code, encoding="utf-8")
    if block.arg == "pytest":
        script = tmp_path / "test_sample.py"
        argv = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_default_fixture_loop_scope=function",
            "--rootdir",
            str(tmp_path),
            str(script),
        ]
    else:
        script = tmp_path / "sample.py"
        argv = [sys.executable, str(script)]
    script.write_text(block.code, encoding="utf-8")
    done = _run(argv, tmp_path)
    report = f"{block.id}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, report
    assert "Traceback" not in done.stderr, report
    if block.arg == "pytest":
        return
    if block.output is None:
        assert not done.stdout.strip(), f"{block.id} prints, but the page shows no ```text output after it\n{report}"
    else:
        assert output_matches(block.output, done.stdout), f"{block.id}: the shown output differs\n{report}"


@pytest.mark.parametrize(
    ("shown", "printed", "matches"),
    [
        ("a\nb\n", "a\nb\n", True),
        ("a\nb\n", "a\nc\n", False),
        ("id: ...\n", "id: sess_123\n", True),
        ("first\n...\nlast\n", "first\nx\ny\nlast\n", True),
        ("first\n...\nlast\n", "first\nlast\n", True),
        ("first\nlast\n", "first\nextra\nlast\n", False),
        ("a\n", "a\nmore\n", False),
        ("x (1.5)\n", "x (1.5)  \n\n", True),
    ],
)
def test_output_matching(shown: str, printed: str, matches: bool) -> None:
    assert output_matches(shown, printed) is matches


def test_shown_outputs_follow_runnable_scripts() -> None:
    shown = [b for b in RUNNABLE if b.output is not None]
    assert len(shown) >= 10, [b.id for b in shown]
    assert all(b.arg is None for b in shown), "a pytest sample's output is pytest's, not shown"


def test_the_notebook_pages_have_cells() -> None:
    assert DOCS / "topics" / "threading.md" in NOTEBOOK_PAGES


@pytest.mark.parametrize("block", CELLS, ids=lambda b: b.id)
def test_notebook_cells_run_on_the_kernels_loop(block: Block) -> None:
    """A cell is what a user pastes: ``asyncio.run()`` there fails on Jupyter's running loop."""
    assert "asyncio.run(" not in block.code, f"{block.id}: a notebook cell awaits at the top level instead"
    compile(block.code, block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


def _cell_stdout(cell: Any) -> str:
    return "".join(out.get("text", "") for out in cell.outputs if out.get("name") == "stdout")


@pytest.mark.timeout(bound(200))  # above the runner's own bound, so that one fires first with the details
@pytest.mark.parametrize("page", NOTEBOOK_PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_notebook_cells_run_in_a_kernel(page: Path, tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    cells = [b for b in CELLS if b.page == page]
    assert any("await " in b.code for b in cells), f"{page.name}: the notebook shows top-level await"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(b.code.rstrip("\n")) for b in cells])
    executed = run_notebook(
        notebook, tmp_path, startup_timeout=bound(60), cell_timeout=bound(60), total_timeout=bound(180)
    )
    for block, cell in zip(cells, executed.cells, strict=True):
        assert cell.execution_count, f"{block.id} did not run"
        errors = [out for out in cell.outputs if out.get("output_type") == "error"]
        assert errors == [], f"{block.id} raised: {errors}"
        printed = _cell_stdout(cell)
        if block.output is None:
            assert not printed.strip(), f"{block.id} prints, but the page shows no ```text output after it\n{printed}"
        else:
            assert output_matches(block.output, printed), f"{block.id}: the shown output differs\n{printed}"

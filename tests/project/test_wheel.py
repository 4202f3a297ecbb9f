"""The distributions: the wheel holds exactly the package (``py.typed`` and the vendored schemas included), its
metadata is complete and valid (``twine check --strict``), the version has one source, and the sdist builds the
same project.

``.ci/run`` builds the wheel and the sdist once (``python -m build``, then installs the wheel alone into a fresh
virtualenv and runs it from outside the checkout) and names their folder in ``ACP_DIST``; without it the test
builds them itself, with the hatchling of the test extra (no build isolation, so no network).
"""

from __future__ import annotations

import ast
import email.parser
import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import pytest

from tests.conftest import bound

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "acp_client"

# one worker builds the distributions once for the whole module
pytestmark = pytest.mark.xdist_group("wheel")


def _version_file_value() -> str:
    """``__version__`` as written in acp_client/_version.py, the one place it is set."""
    tree = ast.parse((PACKAGE / "_version.py").read_text(encoding="utf-8"))
    values = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["__version__"]
        and isinstance(node.value, ast.Constant)
    ]
    assert len(values) == 1 and isinstance(values[0], str), "acp_client/_version.py sets __version__ once"
    return values[0]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    built = os.environ.get("ACP_DIST")
    if built:
        yield Path(built)
        return
    folder = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(folder), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=bound(180),
    )
    assert done.returncode == 0, f"python -m build failed:\n{done.stdout}\n{done.stderr}"
    yield folder


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    assert len(found) == 1, f"expected one {pattern} in {folder}, found {[p.name for p in found]}"
    return found[0]


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(archive.read(name).decode("utf-8"))


def _package_files() -> set[str]:
    """Every file of the package folder as the wheel should name it (compiled caches aside)."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def test_the_wheel_holds_exactly_the_package(dist: Path) -> None:
    with zipfile.ZipFile(_one(dist, "*.whl")) as archive:
        names = archive.namelist()
    in_package = {name for name in names if name.startswith("acp_client/")}
    assert sorted(_package_files() - in_package) == [], "files of the package missing from the wheel"
    assert sorted(in_package - _package_files()) == [], "files in the wheel that the package folder lacks"
    top = {name.split("/", 1)[0] for name in names}
    assert {folder for folder in top if not folder.endswith(".dist-info")} == {"acp_client"}, top
    # named on their own: what a type checker and the schema provenance need
    for data in ("py.typed", "schema/_json/v1/schema.json", "schema/_json/v2/schema.unstable.json"):
        assert f"acp_client/{data}" in in_package
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)


def test_the_metadata_is_complete(dist: Path) -> None:
    meta = _metadata(_one(dist, "*.whl"))
    assert meta["Name"] == "acp-reconnect"
    assert meta["Version"] == _version_file_value()
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["Requires-Python"] == ">=3.11"
    classifiers = meta.get_all("Classifier") or []
    assert {"Typing :: Typed", "Programming Language :: Python :: 3.11", "Framework :: AsyncIO"} <= set(classifiers)
    urls = meta.get_all("Project-URL") or []
    assert urls, "the metadata names project URLs"
    assert all(url.split(", ", 1)[1].startswith("https://") for url in urls), urls
    assert meta["Description-Content-Type"] == "text/markdown"
    assert "# acp-client" in (meta.get_payload() or "")


def test_twine_check_passes(dist: Path) -> None:
    files = [str(_one(dist, "*.whl")), str(_one(dist, "*.tar.gz"))]
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files],
        capture_output=True,
        text=True,
        timeout=bound(60),
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_version_has_one_source() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["hatch"]["version"]["path"] == "acp_client/_version.py"
    import acp_client

    assert acp_client.__version__ == _version_file_value()
    setters = [
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        if any(
            isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    ]
    assert setters == ["acp_client/_version.py"]


def test_the_sdist_holds_the_sources_and_no_local_state(dist: Path) -> None:
    with tarfile.open(_one(dist, "*.tar.gz")) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"LICENSE", "README.md", "pyproject.toml", "acp_client/py.typed", "acp_client/_version.py"} <= names
    assert "tests/conftest.py" in names
    assert not [name for name in names if name.startswith((".venv/", "tests/.cache", "site/", "dist/"))]
    assert not [name for name in names if "__pycache__" in name]

"""The docs site builds with ``mkdocs build --strict`` (no broken link, no page outside the nav, no bad
docstring), and its reference pages render the public API from the docstrings.

``.ci/run`` builds the site once and names it in ``ACP_DOCS_SITE``; without it (a developer's machine) the
test builds it into a temporary folder. mkdocs comes from the ``docs`` extra: without it the tests skip, except
under ``CI=true``, where they fail.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import acp_client
from tests.conftest import bound

ROOT = Path(__file__).resolve().parents[2]

# one worker builds the site once for the whole module
pytestmark = pytest.mark.xdist_group("docs-site")

#: The sub-packages rendered on reference/index.md with all their members: every public class and function of
#: their ``__all__`` must have its own entry there.
MAIN_SUBPACKAGES = (
    "acp_client.client",
    "acp_client.client.connection",
    "acp_client.reconnect",
    "acp_client.reconnect.strategy",
    "acp_client.reconnect.dialects",
    "acp_client.sessions",
    "acp_client.handlers",
    "acp_client.schema.content",
    "acp_client.schema.updates",
    "acp_client.sync",
    "acp_client.exceptions",
    "acp_client.transports",
    "acp_client.transports.http",
    "acp_client.otel",
    "acp_client.testing.reference_agent",
    "acp_client.testing.fault_proxy",
)


def _build(site: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        if os.environ.get("CI"):
            pytest.fail("mkdocs is not installed: .ci/run installs the docs extra")
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=bound(180),
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    built = os.environ.get("ACP_DOCS_SITE")
    if built:
        yield Path(built)
        return
    folder = tmp_path_factory.mktemp("site")
    _build(folder)
    yield folder


def _anchors(page: Path) -> set[str]:
    return set(re.findall(r'\sid="(acp_client[\w.]*)"', page.read_text(encoding="utf-8")))


def test_the_package_page_renders_every_public_name(site: Path) -> None:
    anchors = _anchors(site / "reference" / "package" / "index.html")
    names = [name for name in acp_client.__all__ if not name.startswith("__")]
    assert sorted(f"acp_client.{name}" for name in names if f"acp_client.{name}" not in anchors) == []
    # the methods come with their classes
    assert {"acp_client.ReconnectingClient.new_session", "acp_client.Session.prompt"} <= anchors


@pytest.mark.parametrize("module", MAIN_SUBPACKAGES)
def test_the_modules_page_renders_each_subpackage(site: Path, module: str) -> None:
    anchors = _anchors(site / "reference" / "index.html")
    imported = importlib.import_module(module)
    public = [
        name
        for name in imported.__all__
        if inspect.isclass(getattr(imported, name)) or inspect.isfunction(getattr(imported, name))
    ]
    assert public, f"{module} exports no class or function"
    assert [name for name in public if f"{module}.{name}" not in anchors] == []


def test_every_page_is_built(site: Path) -> None:
    pages = sorted(p.relative_to(ROOT / "docs").with_suffix("") for p in (ROOT / "docs").rglob("*.md"))
    missing = [str(p) for p in pages if not (site / p / "index.html").exists() and p.name != "index"]
    assert missing == []

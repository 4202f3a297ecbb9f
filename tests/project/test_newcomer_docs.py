"""A newcomer's first steps in the docs: install lines, the README snippet, the index's summary.

The name ``acp-client`` on the package index belongs to an unrelated project, so a ``pip install`` line in
README.md, docs/ or examples/ must name ``acp-reconnect`` (with or without extras) or install from a
checkout (``pip install -e .``, ``.[extra]``) or a git URL. README and docs/index.md say once that the
package is not on PyPI yet.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_INSTALL = re.compile(r"pip install\b[^`\n]*")
_OURS = re.compile(r"acp-reconnect|(?:^|\s)['\"]?\.(?:\[[\w,]+\])?['\"]?(?:\s|$)|git\+")


def _pages() -> list[Path]:
    pages = [ROOT / "README.md"]
    for folder in ("docs", "examples"):
        pages += sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in {".md", ".py", ".ipynb", ".txt"})
    return pages


def _install_lines() -> list[tuple[str, str]]:
    found = []
    for page in _pages():
        for match in _INSTALL.finditer(page.read_text(encoding="utf-8")):
            found.append((str(page.relative_to(ROOT)), match.group(0)))
    return found


def test_the_docs_have_install_lines() -> None:
    assert len(_install_lines()) >= 4


def test_every_install_line_names_the_project_or_a_checkout() -> None:
    wrong = [(page, line) for page, line in _install_lines() if not _OURS.search(line[len("pip install") :])]
    assert wrong == []


def test_readme_and_index_say_it_is_not_on_pypi_yet() -> None:
    for page in ("README.md", "docs/index.md"):
        text = " ".join((ROOT / page).read_text(encoding="utf-8").split())
        assert "not on PyPI yet" in text, page


def test_readme_says_the_events_loop_never_ends() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    loop = next(i for i, line in enumerate(lines) if "async for event in client.events()" in line)
    assert "never ends" in " ".join(lines[loop - 2 : loop + 1])


def test_index_names_every_transport() -> None:
    intro = " ".join((ROOT / "docs" / "index.md").read_text(encoding="utf-8").split()[:80])
    for transport in ("WebSocket", "HTTP", "stdio"):
        assert transport in intro


def test_no_example_or_page_uses_a_deprecated_keyword() -> None:
    """The examples and the docs teach the option objects, never the flat keywords the library only still
    accepts with a DeprecationWarning (the notebook used ``recovery_start_jitter=``)."""
    from acp_client.reconnect.options import FLAT_KEYWORDS

    root = ROOT
    # the flat names that are no field of an option object (a field of the same name, TransportOptions(headers=)
    # or sync's ready_timeout=, is no deprecated spelling); the design page and the changelog quote them
    renamed = [name for name, goes in FLAT_KEYWORDS.items() if all(field != name for _, field, _ in goes)]
    renamed.remove("ready_timeout")  # sync.ReconnectingClient(ready_timeout=) is its own, current keyword
    pages = [*root.glob("examples/*"), *root.glob("docs/**/*.md"), root / "README.md"]
    pages = [p for p in pages if p.name not in ("design.md", "benchmarks.md")]  # history, quoted on purpose
    found = []
    for page in pages:
        if not page.is_file() or page.suffix not in (".py", ".ipynb", ".md"):
            continue
        text = page.read_text(encoding="utf-8")
        if page.suffix == ".ipynb":  # the cells' code, not its JSON escaping
            text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
        found += [
            f"{page.relative_to(root)}: {name}"
            for name in renamed
            if re.search(rf"\b{name}=(?!=)|[\"']{name}[\"']\s*:", text)  # passed as a keyword or in a **dict
        ]
    assert found == []

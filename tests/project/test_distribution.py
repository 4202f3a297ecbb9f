"""The distribution name: "acp-client" on the package index is an unrelated project, so ours is published as
``acp-reconnect``; the import name stays ``acp_client`` and the command stays ``acp-client``."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "acp-reconnect"


def test_pyproject_names_the_free_distribution() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION
    assert project["scripts"] == {"acp-client": "acp_client.cli:main"}


def test_the_installed_distribution_provides_the_package_and_the_command() -> None:
    dist = importlib.metadata.distribution(DISTRIBUTION)
    scripts = {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}
    assert scripts["acp-client"] == "acp_client.cli:main"


def test_the_docs_name_the_distribution() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    assert f"pip install {DISTRIBUTION}" in index

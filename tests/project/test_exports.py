"""The public surface is exactly what docs/reference/api.md documents, and every public name has a docstring."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import acp_client

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "api.md"


def documented_names() -> set[str]:
    text = API_DOC.read_text(encoding="utf-8")
    section = text.split("## acp_client", 1)[1]
    return set(re.findall(r"^- `([A-Za-z_][A-Za-z0-9_]*)`", section, flags=re.MULTILINE))


def test_all_is_exactly_the_documented_surface() -> None:
    assert set(acp_client.__all__) == documented_names()
    assert len(acp_client.__all__) == len(set(acp_client.__all__))


def test_every_public_name_exists_and_is_documented() -> None:
    for name in acp_client.__all__:
        obj = getattr(acp_client, name)
        if name == "__version__":
            continue
        assert inspect.getdoc(obj), f"{name} has no docstring"


def test_public_methods_have_docstrings() -> None:
    missing = []
    for name in acp_client.__all__:
        obj = getattr(acp_client, name)
        if not inspect.isclass(obj):
            continue
        for attr, member in vars(obj).items():
            if attr.startswith("_") or not (inspect.isfunction(member) or isinstance(member, property)):
                continue
            if not inspect.getdoc(member):
                missing.append(f"{name}.{attr}")
    assert missing == []

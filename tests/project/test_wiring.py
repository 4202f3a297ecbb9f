"""The client's settings are stated once (issue 33): ``ClientSettings`` holds one field per keyword of
``ReconnectingClient(...)``, and the signature (kept for ``help()`` and type checkers) may not drift from it;
the wiring stays short enough to read (``assemble()`` and every ``__init__`` at most 60 lines)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import acp_client
from acp_client import ReconnectingClient, sync
from acp_client.reconnect._settings import ClientSettings

LIBRARY = Path(acp_client.__file__).parent
MAX_LINES = 60


def _keywords(function: object) -> dict[str, inspect.Parameter]:
    parameters = inspect.signature(function).parameters.values()  # type: ignore[arg-type]
    return {p.name: p for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}


def test_the_signature_lists_exactly_the_settings_fields_in_their_order() -> None:
    fields = [spec.name for spec in dataclasses.fields(ClientSettings)]
    assert list(_keywords(ReconnectingClient.__init__)) == fields
    assert [name for name in _keywords(sync.ReconnectingClient.__init__) if name != "ready_timeout"] == fields


def test_each_keyword_has_its_fields_default_and_type() -> None:
    """A field with a factory is ``None`` in the signature (``None`` means the factory's object); any other
    field has the signature's default. The signature's type is the field's, with ``| None`` for a factory."""
    keywords = _keywords(ReconnectingClient.__init__)
    for spec in dataclasses.fields(ClientSettings):
        parameter = keywords[spec.name]
        if spec.default_factory is not dataclasses.MISSING:
            assert parameter.default is None, spec.name
            assert parameter.annotation == f"{spec.type} | None", spec.name
        else:
            assert parameter.default is spec.default, spec.name
            assert parameter.annotation == spec.type, spec.name
        assert callable(spec.metadata.get("check")), f"{spec.name} has no check"


def _lengths(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (node.end_lineno - node.lineno + 1, f"{path.relative_to(LIBRARY)}:{node.lineno} {node.name}")  # type: ignore[operator]
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def test_assemble_and_every_init_fit_in_60_lines() -> None:
    """Every ``__init__`` and ``assemble()`` of the package, the test kit's included (the reference agent's
    ``__init__`` was 75 lines), counted as ``end_lineno - lineno + 1`` (the signature included)."""
    measured = [row for path in LIBRARY.rglob("*.py") for row in _lengths(path)]
    wiring = [(n, where) for n, where in measured if where.endswith((" __init__", " assemble"))]
    assert any(where.endswith(" assemble") for _, where in wiring)
    assert any(where.startswith("testing/reference_agent.py:") for _, where in wiring)  # the kit is walked too
    assert [(n, where) for n, where in wiring if n > MAX_LINES] == []

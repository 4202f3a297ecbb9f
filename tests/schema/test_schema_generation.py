"""The committed generated modules are exactly what the generator writes from the vendored schemas."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "acp_client" / "schema" / "_generated"
SCRIPT = ROOT / "scripts" / "generate_schema.py"


def _generate(out: Path) -> None:
    subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], check=True, capture_output=True, timeout=120)


def test_generated_modules_are_up_to_date(tmp_path: Path) -> None:
    _generate(tmp_path)
    produced = sorted(p.name for p in tmp_path.glob("*.py"))
    committed = sorted(p.name for p in GENERATED.glob("*.py"))
    assert produced == committed
    for name in produced:
        fresh = (tmp_path / name).read_text(encoding="utf-8")
        assert fresh == (GENERATED / name).read_text(encoding="utf-8"), (
            f"{name} is stale: run `python scripts/generate_schema.py` and commit the result"
        )


def test_generation_is_deterministic(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    _generate(first)
    _generate(second)
    for path in first.glob("*.py"):
        assert path.read_bytes() == (second / path.name).read_bytes()


@pytest.mark.parametrize("version", [1, 2])
def test_generated_module_records_its_source(version: int) -> None:
    import hashlib

    source = ROOT / "acp_client" / "schema" / "_json" / f"v{version}-schema.unstable.json"
    header = (GENERATED / f"v{version}.py").read_text(encoding="utf-8")[:600]
    assert hashlib.sha256(source.read_bytes()).hexdigest() in header

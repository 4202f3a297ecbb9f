"""The committed generated modules are exactly what the generator writes from the vendored schemas."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "acp_client" / "schema" / "_generated"
SCRIPT = ROOT / "scripts" / "generate_schema.py"
SCHEMA_JSON = ROOT / "acp_client" / "schema" / "_json"


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

    source = ROOT / "acp_client" / "schema" / "_json" / f"v{version}" / "schema.unstable.json"
    header = (GENERATED / f"v{version}.py").read_text(encoding="utf-8")[:600]
    assert hashlib.sha256(source.read_bytes()).hexdigest() in header
    provenance = json.loads((SCHEMA_JSON / "SOURCE.json").read_text(encoding="utf-8"))
    assert f"{provenance['package']}@{provenance['version']}" in header


def test_vendored_files_are_the_ones_their_provenance_names() -> None:
    """No hand edit of a vendored schema can pass: every file's sha256 is the one sync_schema.py recorded."""
    import hashlib

    provenance = json.loads((SCHEMA_JSON / "SOURCE.json").read_text(encoding="utf-8"))
    on_disk = sorted(str(p.relative_to(SCHEMA_JSON)) for p in SCHEMA_JSON.glob("v*/*.json"))
    assert on_disk == sorted(provenance["files"])
    for rel, sha in provenance["files"].items():
        assert hashlib.sha256((SCHEMA_JSON / rel).read_bytes()).hexdigest() == sha, f"{rel} was edited by hand"
    upstream = (SCHEMA_JSON / "UPSTREAM.md").read_text(encoding="utf-8")
    assert provenance["version"] in upstream and all(sha in upstream for sha in provenance["files"].values())


def _sync(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sync_schema.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _package_folder(tmp_path: Path, *, mutate: bool) -> Path:
    """An unpacked package folder holding the vendored files (one definition added to v2 when ``mutate``)."""
    folder = tmp_path / "package"
    for rel in json.loads((SCHEMA_JSON / "SOURCE.json").read_text(encoding="utf-8"))["files"]:
        target = folder / "schema" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        data = (SCHEMA_JSON / rel).read_bytes()
        if mutate and rel == "v2/schema.unstable.json":
            doc = json.loads(data)
            doc["$defs"]["FutureThing"] = {"type": "object", "properties": {}}
            data = json.dumps(doc).encode()
        target.write_bytes(data)
    (folder / "package.json").write_text(json.dumps({"name": "@agentclientprotocol/sdk", "version": "9.9.9"}))
    return folder


def test_sync_dry_run_reports_what_a_package_changes_and_writes_nothing(tmp_path: Path) -> None:
    before = {p: p.read_bytes() for p in SCHEMA_JSON.rglob("*") if p.is_file()}
    done = _sync("--dry-run", "--from", str(_package_folder(tmp_path, mutate=True)))
    assert done.returncode == 0, done.stderr
    assert "v2/schema.unstable.json: 1 added, 0 removed, 0 changed" in done.stdout
    assert "added: FutureThing" in done.stdout
    assert "v1/schema.unstable.json: unchanged" in done.stdout
    assert {p: p.read_bytes() for p in SCHEMA_JSON.rglob("*") if p.is_file()} == before


def test_sync_refuses_a_folder_that_is_not_the_package(tmp_path: Path) -> None:
    done = _sync("--dry-run", "--from", str(tmp_path))
    assert done.returncode == 2
    assert "package.json" in done.stderr or "schema/" in done.stderr

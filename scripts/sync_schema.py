#!/usr/bin/env python3
"""Bring the vendored ACP JSON schemas up to date from a published package, then regenerate the models.

Usage::

    python scripts/sync_schema.py                      # newest @agentclientprotocol/sdk, fetched with npm
    python scripts/sync_schema.py --version 2.4.0      # that release, fetched with npm
    python scripts/sync_schema.py --from PKG.tgz       # a tarball made by `npm pack` (or a registry download)
    python scripts/sync_schema.py --from DIR           # an unpacked package (the folder holding `schema/`)
    python scripts/sync_schema.py --dry-run ...        # only show what would change

The official TypeScript SDK ships the protocol's JSON schemas in its npm package (``schema/v1`` and
``schema/v2``: ``schema.json`` and ``schema.unstable.json`` each). This script copies that folder byte for byte
into ``acp_client/schema/_json/``, records where it came from in ``SOURCE.json`` (package, version and the
sha256 of the tarball and of every file) and ``UPSTREAM.md``, prints a summary of the definitions that were
added, removed or changed per protocol version, and runs ``scripts/generate_schema.py``. Review the summary
and the diff, then commit the JSON and the generated modules together (``tests/schema`` fails when they
disagree).

Needs ``npm`` only without ``--from``. Nothing here runs at import, build or test time.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "acp_client" / "schema" / "_json"
PACKAGE = "@agentclientprotocol/sdk"
FILES = ("v1/schema.json", "v1/schema.unstable.json", "v2/schema.json", "v2/schema.unstable.json")
MAX_FILE_BYTES = 16 * 1024 * 1024  # one schema file is about 0.5 MB; refuse anything absurd


class SyncError(Exception):
    """The package could not be fetched or does not hold the expected schema files."""


def _npm(*args: str, cwd: Path | None = None) -> str:
    if shutil.which("npm") is None:
        raise SyncError("npm is not on PATH: install Node.js/npm, or pass --from with a downloaded package")
    done = subprocess.run(["npm", *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SyncError(f"npm {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout


def fetch_tarball(version: str | None, into: Path) -> Path:
    """``npm pack`` the package (newest when ``version`` is None) into ``into``; returns the tarball."""
    spec = f"{PACKAGE}@{version}" if version else PACKAGE
    out = _npm("pack", spec, "--pack-destination", str(into), "--json")
    name = json.loads(out)[0]["filename"]
    return into / Path(name).name


def read_package(source: Path) -> tuple[dict[str, bytes], dict[str, Any], str | None]:
    """The schema files, ``package.json`` and the tarball's sha256 (None for a folder) of ``source``."""
    files: dict[str, bytes] = {}
    if not source.exists():
        raise SyncError(f"{source} does not exist")
    if source.is_dir():
        if not (source / "package.json").is_file():
            raise SyncError(f"{source} has no package.json: is it the unpacked {PACKAGE} package?")
        manifest = json.loads((source / "package.json").read_text(encoding="utf-8"))
        for rel in FILES:
            path = source / "schema" / rel
            if not path.is_file():
                raise SyncError(f"{source} has no schema/{rel}: is it the unpacked {PACKAGE} package?")
            files[rel] = path.read_bytes()
        return files, manifest, None
    raw = source.read_bytes()
    manifest = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
            for member in tar.getmembers():  # read by name only: nothing is extracted to disk
                name = member.name.removeprefix("package/")
                if not member.isfile() or member.size > MAX_FILE_BYTES:
                    continue
                rel = name.removeprefix("schema/")
                if name != "package.json" and not (name.startswith("schema/") and rel in FILES):
                    continue
                handle = tar.extractfile(member)
                if handle is None:
                    continue
                if name == "package.json":
                    manifest = json.loads(handle.read())
                else:
                    files[rel] = handle.read()
    except tarfile.TarError as exc:
        raise SyncError(f"{source} is not a gzipped tarball ({exc})") from None
    missing = [rel for rel in FILES if rel not in files]
    if missing or not manifest:
        raise SyncError(f"{source} lacks {', '.join(missing) or 'package.json'}: is it a {PACKAGE} tarball?")
    return files, manifest, hashlib.sha256(raw).hexdigest()


def summarize(old: bytes | None, new: bytes) -> dict[str, list[str]]:
    """Definitions added, removed and changed between two schema documents (by ``$defs`` name)."""
    new_defs = json.loads(new)["$defs"]
    old_defs = json.loads(old)["$defs"] if old is not None else {}
    return {
        "added": sorted(set(new_defs) - set(old_defs)),
        "removed": sorted(set(old_defs) - set(new_defs)),
        "changed": sorted(k for k in new_defs if k in old_defs and new_defs[k] != old_defs[k]),
    }


def _legacy(rel: str) -> Path:
    """Where the layout before 2026-12 kept ``rel`` (``v1-schema.unstable.json``, no stable files)."""
    return SCHEMA_DIR / rel.replace("/", "-")


def _old_file(rel: str) -> bytes | None:
    for path in (SCHEMA_DIR / rel, _legacy(rel)):
        if path.is_file():
            return path.read_bytes()
    return None


def render_upstream(provenance: dict[str, Any]) -> str:
    """The text of ``UPSTREAM.md`` for ``provenance`` (the content of ``SOURCE.json``)."""
    rows = "\n".join(f"| `{rel}` | `schema/{rel}` | `{sha}` |" for rel, sha in provenance["files"].items())
    tarball = provenance.get("tarball_sha256") or "(synced from an unpacked folder: no tarball hash)"
    return f"""# ACP JSON schemas (vendored, unmodified)

Written by `scripts/sync_schema.py`; do not edit by hand (rerun the script instead).

The files under `v1/` and `v2/` are byte-for-byte copies of the `schema/` folder of the npm package
`{provenance["package"]}` version **{provenance["version"]}** (the official TypeScript SDK, Apache-2.0,
repository `agentclientprotocol/typescript-sdk`; the schemas themselves come from
`agentclientprotocol/agent-client-protocol`). Nothing in them has been edited.

- Package tarball sha256: `{tarball}`

| Local file | Path in the package | sha256 |
| --- | --- | --- |
{rows}

`schema.unstable.json` is the stable schema plus every feature still behind a flag; the generator
(`scripts/generate_schema.py`) reads only the two unstable files.

## What the SDK adds on top

`session/status` is in these schemas as upstream's intermediate draft (`open` / `saved`). The normative text
(`rfd/session-status.txt`, revision 2026-10-26) says `active` / `inactive` and adds an optional v2 `state`;
it wins on conflicts. The SDK's hand-written models in `acp_client/schema/status.py` accept both vocabularies
(`open` reads as `active`, `saved` as `inactive`, anything else is kept raw and handled like `inactive`).
The generator adds the RFD's capability marker only where a schema lacks `SessionStatusCapabilities`
(neither of these does).
"""


def sync(source: Path | None, version: str | None, *, dry_run: bool) -> int:
    """Fetch (or read) the package, print the summary, and unless ``dry_run`` write and regenerate."""
    with tempfile.TemporaryDirectory() as tmp:
        if source is None:
            source = fetch_tarball(version, Path(tmp))
        files, manifest, tar_sha = read_package(source)
    if manifest.get("name") != PACKAGE:
        raise SyncError(f"{source} is {manifest.get('name')!r}, not {PACKAGE}")
    provenance = {
        "package": PACKAGE,
        "version": manifest.get("version"),
        "tarball_sha256": tar_sha,
        "files": {rel: hashlib.sha256(files[rel]).hexdigest() for rel in FILES},
    }
    print(f"{PACKAGE} {provenance['version']} (tarball sha256 {tar_sha or '-'})")
    changed_any = False
    for rel in FILES:
        old = _old_file(rel)
        if old == files[rel]:
            print(f"  {rel}: unchanged")
            continue
        changed_any = True
        diff = summarize(old, files[rel])
        print(f"  {rel}: {len(diff['added'])} added, {len(diff['removed'])} removed, {len(diff['changed'])} changed")
        if rel.endswith("unstable.json"):
            for key in ("added", "removed"):
                if diff[key]:
                    print(f"    {key}: {', '.join(diff[key])}")
    if dry_run:
        print("dry run: nothing written")
        return 0
    if not changed_any and (SCHEMA_DIR / "SOURCE.json").is_file():
        current = json.loads((SCHEMA_DIR / "SOURCE.json").read_text(encoding="utf-8"))
        if current.get("files") == provenance["files"]:
            print("already up to date")
            return 0
    for rel in FILES:
        target = SCHEMA_DIR / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(files[rel])
        _legacy(rel).unlink(missing_ok=True)
    (SCHEMA_DIR / "SOURCE.json").write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
    (SCHEMA_DIR / "UPSTREAM.md").write_text(render_upstream(provenance), encoding="utf-8")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "generate_schema.py")], check=False)
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--version", help=f"the {PACKAGE} release to fetch with npm (default: the newest)")
    group.add_argument("--from", dest="source", type=Path, help="a package tarball or an unpacked package folder")
    parser.add_argument("--dry-run", action="store_true", help="print the summary, write nothing")
    args = parser.parse_args(argv)
    try:
        return sync(args.source, args.version, dry_run=args.dry_run)
    except SyncError as exc:
        print(f"sync_schema: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

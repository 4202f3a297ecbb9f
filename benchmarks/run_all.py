"""Run every benchmark script and regenerate ``docs/benchmarks.md`` in one command.

    python benchmarks/run_all.py                      # full sizes, rewrites docs/benchmarks.md
    python benchmarks/run_all.py --quick --docs out.md  # smoke sizes, elsewhere
    python benchmarks/run_all.py --only p2,p9         # some of them

Each ``pN_*.py`` script runs in its own process, one after the other (never two at once: they measure), with
``--docs`` pointing at the same file, so each rewrites its own section. Then a closing summary section lists
every ``RATIO`` line each script printed, under the exact command that produced it. A script that fails is
reported and the others still run; the exit status says whether all passed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import _common

SCRIPT = re.compile(r"^p(\d+)_\w+\.py$")
#: Bound on one full-size script run.
SCRIPT_TIMEOUT = 3600.0


def scripts(only: set[str] | None) -> list[Path]:
    """The benchmark scripts in numeric order (``p1_…`` before ``p10_…``), optionally only some."""
    found = [p for p in _common.HERE.iterdir() if SCRIPT.match(p.name)]
    found.sort(key=lambda p: int(SCRIPT.match(p.name).group(1)))  # type: ignore[union-attr]
    if only:
        found = [p for p in found if p.name.split("_", 1)[0] in only]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke sizes (each script's --quick)")
    parser.add_argument("--docs", type=Path, default=_common.DOCS, help="results file (default: docs/benchmarks.md)")
    parser.add_argument("--only", default="", help="comma-separated keys, e.g. p2,p9")
    args = parser.parse_args()
    only = {key.strip() for key in args.only.split(",") if key.strip()} or None
    summary: list[str] = []
    failed: list[str] = []
    for script in scripts(only):
        command = [sys.executable, str(script), "--docs", str(args.docs)]
        if args.quick:
            command.append("--quick")
        shown = " ".join(["python", str(script.relative_to(_common.REPO)), *command[2:]])
        print(f"== {shown}", flush=True)
        started = time.perf_counter()
        try:
            proc = subprocess.run(
                command, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT, cwd=str(_common.REPO), check=False
            )
        except subprocess.TimeoutExpired:
            failed.append(script.name)
            summary.append(f"- `{shown}`: **timed out** after {SCRIPT_TIMEOUT:.0f} s")
            continue
        ratios = [line for line in proc.stdout.splitlines() if line.startswith("RATIO ")]
        for line in ratios:
            print(f"   {line}")
        print(f"   ({time.perf_counter() - started:.0f} s, exit {proc.returncode})", flush=True)
        if proc.returncode != 0:
            failed.append(script.name)
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            summary.append(f"- `{shown}`: **failed** (exit {proc.returncode}: {tail[0]})")
            continue
        summary.append(f"- `{shown}`")
        summary.extend(f"  - `{line}`" for line in ratios)
    scope = (
        f"only {', '.join(sorted(only))} ran this time; the other sections above come from earlier runs"
        if only
        else "every script ran in this one run"
    )
    body = (
        "Every ratio the scripts printed, under the command that produced it (a ratio compares with a baseline "
        f"measured in the same script run; {scope}).\n\n" + "\n".join(summary)
    )
    _common.write_section(args.docs, "p99", "Summary — ratios and commands", body)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""P9: import time and peak memory — ``import acp_client`` vs the official SDK's ``import acp``.

Each measurement is a fresh interpreter (``python -c``) that times its own import with
``time.process_time()`` (CPU seconds, the interpreter's start-up excluded) and reports ``ru_maxrss`` (peak
resident memory of the whole process, start-up included) right after it. The two imports alternate, N runs
each (quick: 5, full: 21), and the table gives medians. Also measured, in the same way:

- ``import acp_client`` and then the protocol models a connection needs (``from acp_client.schema import
  v2``): the generated models are imported on first use, so this is what the first ``connect()`` adds;
- both imports in an environment without ``rich``: ``structlog`` imports ``rich`` when it is installed (here
  it comes with the ``import-linter`` dev tool, not with acp-client), which a user's environment may lack.

Which heavy modules ``import acp_client`` leaves alone is checked (``websockets``, ``sqlite3``, ``httpx``,
``redis`` and the generated models are imported where used), and ``python -X importtime`` gives the largest
cumulative imports. Target: ``import acp_client`` no slower than ``import acp`` (ratio ≤ 1.00).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import _common

TARGET = 1.0
RUN_TIMEOUT = 120.0

_PROBE = """
import json, resource, sys, time
{prelude}
t0 = time.process_time()
{statement}
cpu = time.process_time() - t0
heavy = sorted(m for m in {watch!r} if sys.modules.get(m) is not None)
print(json.dumps({{"cpu": cpu, "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "loaded": heavy}}))
"""
_WATCH = (
    "websockets",
    "sqlite3",
    "httpx",
    "redis",
    "acp_client.schema._generated.v1",
    "acp_client.schema._generated.v2",
    "rich",
)
_NO_RICH = "sys.modules['rich'] = None  # as if rich were not installed"
CASES: dict[str, tuple[str, str]] = {
    "acp_client": ("", "import acp_client"),
    "acp": ("", "import acp"),
    "acp_client + v2 models": ("", "import acp_client\nfrom acp_client.schema import v2"),
    "acp_client, no rich": (_NO_RICH, "import acp_client"),
    "acp, no rich": (_NO_RICH, "import acp"),
}
LABELS = {
    "acp_client": "`import acp_client`",
    "acp": "`import acp` (official SDK 0.12.1)",
    "acp_client + v2 models": "`import acp_client` + `from acp_client.schema import v2` (first connect)",
    "acp_client, no rich": "`import acp_client`, without `rich`",
    "acp, no rich": "`import acp`, without `rich`",
}


def probe(case: str) -> dict[str, object]:
    prelude, statement = CASES[case]
    code = _PROBE.format(prelude=prelude, statement=statement, watch=_WATCH)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        cwd=str(_common.REPO),
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def importtime_top(n: int = 8) -> list[tuple[str, float]]:
    """The ``n`` largest cumulative imports of ``import acp_client`` (``-X importtime``, microseconds)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import acp_client"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        cwd=str(_common.REPO),
        check=True,
    )
    rows: list[tuple[str, float]] = []
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self, cumulative, name = line[len("import time:") :].split("|")
        rows.append((name.strip(), float(cumulative)))
    top = sorted(rows, key=lambda r: r[1], reverse=True)
    return [r for r in top if r[0] != "acp_client"][:n]


async def main() -> int:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    runs = 3 if args.quick else 21
    cpu: dict[str, list[float]] = {k: [] for k in CASES}
    rss: dict[str, list[float]] = {k: [] for k in CASES}
    loaded: dict[str, list[str]] = {}
    for i in range(runs):
        order = list(CASES)
        order = order[i % len(order) :] + order[: i % len(order)]  # rotate: no case always runs first
        for case in order:
            result = await asyncio.to_thread(probe, case)
            cpu[case].append(float(result["cpu"]))  # type: ignore[arg-type]
            rss[case].append(float(result["maxrss_kib"]) / 1024)  # type: ignore[arg-type]
            loaded[case] = list(result["loaded"])  # type: ignore[call-overload]
        print(f"run {i + 1}/{runs}: " + ", ".join(f"{k} {cpu[k][-1] * 1000:.0f} ms" for k in CASES), flush=True)
    med = {k: _common.median(v) for k, v in cpu.items()}
    mem = {k: _common.median(v) for k, v in rss.items()}
    header = [
        "import",
        "CPU (median)",
        "CPU (min)",
        "÷ `import acp`",
        "peak RSS (median)",
        "÷ acp RSS",
        "heavy modules loaded",
    ]
    base = {k: ("acp, no rich" if "no rich" in k else "acp") for k in CASES}
    rows = [
        [
            LABELS[k],
            f"{med[k] * 1000:.0f} ms",
            f"{min(cpu[k]) * 1000:.0f} ms",
            f"{med[k] / med[base[k]]:.2f}x",
            f"{mem[k]:.1f} MiB",
            f"{mem[k] / mem[base[k]]:.2f}x",
            ", ".join(f"`{m.rsplit('.', 1)[-1] if m.startswith('acp_client') else m}`" for m in loaded[k]) or "none",
        ]
        for k in CASES
    ]
    table = _common.table(header, rows)
    print(table)
    top = importtime_top()
    top_table = _common.table(
        ["module (cumulative, `-X importtime`)", "µs"], [[f"`{m}`", f"{us:,.0f}"] for m, us in top]
    )
    print(top_table)
    ratio = med["acp_client"] / med["acp"]
    ratio_no_rich = med["acp_client, no rich"] / med["acp, no rich"]
    lines = [
        _common.ratio_line("p9 import acp_client/acp CPU", ratio, f"<= {TARGET:.2f}x", ratio <= TARGET),
        _common.ratio_line(
            "p9 import acp_client/acp CPU without rich", ratio_no_rich, f"<= {TARGET:.2f}x", ratio_no_rich <= TARGET
        ),
        f"RATIO p9 peak RSS acp_client/acp: {mem['acp_client'] / mem['acp']:.2f}x (informational)",
    ]
    for line in lines:
        print(line)
    body = "\n\n".join(
        [
            f"Fresh interpreter per measurement, the import timed inside it with `time.process_time()` (CPU), "
            f"peak RSS (`ru_maxrss`) right after; {runs} runs per row, rows alternating in rotating order.",
            table,
            "Largest imports under `import acp_client` (one `-X importtime` run; cumulative µs, inflated by the "
            "tracing itself):\n\n" + top_table,
            f"Target: `import acp_client` no slower than `import acp` (≤ {TARGET:.2f}x).\n\n"
            + "\n".join(f"- `{line}`" for line in lines),
        ]
    )
    _common.write_section(_common.docs_target(args), "p9", "P9 — import time and peak memory", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""``acp-client wire-log FILE``: a wire log (see :class:`acp_client.WireLog`) as a table.

The rotated set is read oldest first (``FILE.N`` ... ``FILE.1``, then ``FILE``). Each frame is a row (time,
generation, direction, kind, method or id, size); lifecycle lines are rows of their own, and the first
line of a new generation after an earlier one is marked as a reconnect. A line that is not JSON (a
last line cut short by a crash, or a damaged file) is skipped and counted; the table says so at its end.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp_client.cli._console import EXIT_FAILURE, EXIT_OK, Style, error, out, printable

__all__ = ["add_arguments", "rotated_set", "run"]

_HEADER = f"{'time':<15} {'gen':>4} {'dir':<3} {'kind':<12} {'method / id':<40} {'bytes':>8}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``wire-log`` subcommand's arguments."""
    parser.add_argument("file", metavar="FILE", help="the wire log (its rotated files FILE.1, FILE.2 ... are read too)")
    parser.add_argument("--payloads", action="store_true", help="also print each frame's (redacted) payload")
    parser.add_argument("--no-frames", action="store_true", help="print the lifecycle lines only")


def rotated_set(path: Path) -> list[Path]:
    """``path`` and its rotated files, oldest first (``FILE.3``, ``FILE.2``, ``FILE.1``, ``FILE``)."""
    backups: list[tuple[int, Path]] = []
    if path.parent.is_dir():
        for candidate in path.parent.iterdir():
            suffix = candidate.name.removeprefix(path.name + ".")
            if candidate.name != suffix and suffix.isdigit():
                backups.append((int(suffix), candidate))
    ordered = [p for _, p in sorted(backups, reverse=True)]
    return [*ordered, path] if path.exists() else ordered


@dataclass
class _Reading:
    """What the reader met besides rows: damaged lines, and the generations seen."""

    skipped: list[str] = field(default_factory=list)
    last_generation: int | None = None


def _records(files: list[Path], reading: _Reading) -> Iterator[dict[str, Any]]:
    for path in files:
        with path.open(encoding="utf-8", errors="replace") as stream:
            for number, raw in enumerate(stream, 1):
                try:
                    record = json.loads(raw)
                except ValueError:
                    cut = "" if raw.endswith("\n") else " (cut short)"
                    reading.skipped.append(f"{path.name}:{number}{cut}")
                    continue
                if isinstance(record, dict):
                    yield record
                else:
                    reading.skipped.append(f"{path.name}:{number}")


def _time(record: dict[str, Any]) -> str:
    stamp = str(record.get("t", ""))
    return stamp[11:26] if len(stamp) >= 26 else stamp


def _frame_row(record: dict[str, Any], style: Style) -> str:
    name = record.get("method")
    ident = record.get("id")
    what = f"{name} #{ident}" if name is not None and ident is not None else str(name if name is not None else ident)
    if record.get("code") is not None:
        what += f" ({record['code']})"
    if record.get("count") is not None:
        what = f"{record['count']} messages"
    direction = str(record.get("dir", ""))
    arrow = style(direction, "cyan" if direction == "in" else "blue")
    gen = record.get("gen")
    return (
        f"{printable(_time(record)):<15} {printable(gen if gen is not None else '-'):>4} {arrow:<3}"
        f" {printable(record.get('kind', '')):<12} {printable(what)[:40]:<40} {printable(record.get('bytes', '')):>8}"
    )


_EVENT_FIELDS = ("old", "new", "peer", "reason", "close_code", "error", "delay", "session_id", "outcome")


def _shown(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else printable(value)


def _event_row(record: dict[str, Any], style: Style) -> str:
    name = str(record.get("event"))
    details = [
        f"{key}={_shown(record[key])}" for key in _EVENT_FIELDS if key in record and record[key] not in (None, "")
    ]
    if name == "recovery_round_finished":
        details = [f"{key}={record.get(key)}" for key in ("reattached", "restored", "forgotten", "failed", "kept")]
    gen = record.get("gen")
    text = f"{printable(_time(record)):<15} {printable(gen if gen is not None else '-'):>4} --- {printable(name)}"
    return style(f"{text} {' '.join(details)}".rstrip(), "dim" if name != "connection_closed" else "yellow")


def run(args: argparse.Namespace) -> int:
    """Print the wire log at ``args.file`` as a table; 1 when there is no such file."""
    path = Path(args.file)
    files = rotated_set(path)
    if not files:
        error(f"wire-log: no such file: {path}")
        return EXIT_FAILURE
    style = Style(sys.stdout)
    reading = _Reading()
    out(style(_HEADER, "bold"))
    frames = 0
    for record in _records(files, reading):
        _mark_reconnect(record, reading, style)
        if "event" in record:
            out(_event_row(record, style))
        elif not args.no_frames:
            frames += 1
            out(_frame_row(record, style))
            if args.payloads and "payload" in record:
                out("    " + printable(json.dumps(record["payload"], ensure_ascii=False)))
    summary = f"{frames} frames from {len(files)} file{'s' if len(files) != 1 else ''}"
    if reading.skipped:
        summary += f"; {len(reading.skipped)} damaged line(s) skipped: {', '.join(reading.skipped[:5])}"
    out(summary)
    return EXIT_OK


def _mark_reconnect(record: dict[str, Any], reading: _Reading, style: Style) -> None:
    """The first line of a new generation after an earlier one: a reconnect (attempt) begins."""
    gen = record.get("gen")
    if not isinstance(gen, int) or isinstance(gen, bool):
        return
    if reading.last_generation is not None and gen != reading.last_generation:
        out(style(f"==== reconnect: generation {reading.last_generation} -> {gen} ====", "bold"))
    reading.last_generation = gen

"""Figures about the shape of the code, counted over the AST (issue 33's closing note).

    python scripts/code_metrics.py [PACKAGE_DIR]      # default: acp_client next to this script

It prints:

- **private calls into Session**: attribute reads and calls of names private to ``Session`` (its methods,
  properties and fields whose name starts with one underscore, not dunders) in any module other than the
  one that defines ``Session``, on any receiver but ``self``/``cls``. Each hit is listed as
  ``module:line name``;
- **the longest function** of the package (``end_lineno - lineno + 1``, the signature and decorators'
  first line included as the AST counts them);
- **the longest ``__init__``** and every ``__init__``/``assemble`` above the project's 60-line limit.

The count is a heuristic: a private name of ``Session`` read on another class's object counts too (it
over-counts, never under-counts). Run it on a checkout of any commit to compare before and after.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

LIMIT = 60  # lines, for __init__ and assemble (docs/style.md)
SESSION_MODULE = Path("sessions") / "_session.py"


@dataclass(frozen=True)
class Function:
    module: str
    qualname: str
    lineno: int
    lines: int


def _modules(package: Path) -> list[Path]:
    return sorted(p for p in package.rglob("*.py") if "_generated" not in p.parts)


def _session_private_names(package: Path) -> set[str]:
    """Every single-underscore name ``Session`` defines: methods, class attributes, ``self._x`` fields."""
    tree = ast.parse((package / SESSION_MODULE).read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Session":
            for sub in ast.walk(node):
                if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(sub.name)
                elif isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name):
                    names.add(sub.target.id)
                elif isinstance(sub, ast.Assign):
                    names.update(t.id for t in sub.targets if isinstance(t, ast.Name))
                elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                    names.add(sub.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def private_session_accesses(package: Path) -> list[str]:
    """``module:line name`` for each access of a ``Session`` private name from another module."""
    private = _session_private_names(package)
    hits: list[str] = []
    for path in _modules(package):
        if path.relative_to(package) == SESSION_MODULE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute) or node.attr not in private:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            hits.append(f"{path.relative_to(package.parent)}:{node.lineno} {node.attr}")
    return hits


def functions(package: Path) -> list[Function]:
    """Every function and method of the package with its length in lines."""
    found: list[Function] = []

    def visit(node: ast.AST, prefix: str, module: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                end = child.end_lineno or child.lineno
                found.append(Function(module, name, child.lineno, end - child.lineno + 1))
                visit(child, f"{name}.", module)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", module)
            else:
                visit(child, prefix, module)

    for path in _modules(package):
        visit(ast.parse(path.read_text()), "", str(path.relative_to(package.parent)))
    return found


def over_limit(package: Path, limit: int = LIMIT) -> list[Function]:
    """Every ``__init__`` and ``assemble`` longer than ``limit`` lines."""
    return [
        f
        for f in functions(package)
        if f.qualname.rsplit(".", 1)[-1] in ("__init__", "assemble") and f.lines > limit
    ]


def main(argv: list[str]) -> int:
    package = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent / "acp_client"
    hits = private_session_accesses(package)
    print(f"private accesses of Session names from other modules: {len(hits)}")
    for hit in hits:
        print(f"  {hit}")
    every = functions(package)
    longest = max(every, key=lambda f: f.lines)
    print(f"longest function: {longest.module}:{longest.lineno} {longest.qualname} ({longest.lines} lines)")
    inits = [f for f in every if f.qualname.endswith("__init__")]
    init = max(inits, key=lambda f: f.lines)
    print(f"longest __init__: {init.module}:{init.lineno} {init.qualname} ({init.lines} lines)")
    assembles = [f for f in every if f.qualname.rsplit(".", 1)[-1] == "assemble"]
    for f in assembles:
        print(f"assemble: {f.module}:{f.lineno} {f.qualname} ({f.lines} lines)")
    too_long = over_limit(package)
    print(f"__init__/assemble over {LIMIT} lines: {len(too_long)}")
    for f in too_long:
        print(f"  {f.module}:{f.lineno} {f.qualname} ({f.lines} lines)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))

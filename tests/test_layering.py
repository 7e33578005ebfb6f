"""Data flows one way: files → parsers → ingest → store → API → generate/report/replay → CLI.

The layers are declared once, as an import contract in pyproject.toml ([tool.importlinter]), which
`make check` enforces with `lint-imports` over every import of the package. These tests check what
an import graph cannot: that importing the library does not load the CLI stack at run time, and
that no module grows past the line bound.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any


def test_importing_the_library_does_not_load_the_cli_stack() -> None:
    code = (
        "import sys, tracekit.ingest, tracekit.api; "
        "print(sorted(m for m in ('typer', 'rich', 'altair') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# No module of the package over this many lines (issue 10's bound): a longer one holds more than one concern.
MAX_MODULE_LINES = 600
# Exempt for good: the CLI's command module (one typer app, its commands and their help) and protoc's output.
EXEMPT = {"tracekit/cli.py", "tracekit/parsers/et_def_pb2.py"}


def _module_lines() -> dict[str, int]:
    root = Path(__file__).resolve().parent.parent
    return {
        path.relative_to(root).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted((root / "tracekit").rglob("*.py"))
    }


def test_no_module_is_over_the_line_bound() -> None:
    lines = _module_lines()
    over = {path: n for path, n in lines.items() if n > MAX_MODULE_LINES and path not in EXEMPT}
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {over}"


def test_no_module_imports_itself_through_others() -> None:
    """No import circle anywhere in tracekit (type-only and function-level imports count: each is a
    dependency a reader has to hold in mind, and a circle is two modules that are really one)."""
    import grimp

    graph = grimp.build_graph("tracekit")
    circles = [sorted(c) for c in _strongly_connected(graph) if len(c) > 1]
    assert not circles, f"import circles: {circles}"


def _strongly_connected(graph: Any) -> list[set[str]]:
    """Tarjan's components of the import graph, iteratively (the package is deeper than the stack allows)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    component.add(member)
                    if member == node:
                        break
                found.append(component)
    return found

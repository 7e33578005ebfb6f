"""Data flows one way: files → parsers → ingest → dataset → API/CLI. These tests keep it so."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tracekit"

# module prefix -> modules it must never import
FORBIDDEN = {
    "tracekit.parsers": (
        "tracekit.ingest",
        "tracekit.dataset",
        "tracekit.api",
        "tracekit.cli",
        "duckdb",
        "typer",
        "rich",
    ),
    "tracekit.writers": ("tracekit.ingest", "tracekit.dataset", "tracekit.cli", "typer", "rich"),
    "tracekit.ingest": ("tracekit.cli", "typer", "rich", "altair"),
    "tracekit.dataset": ("tracekit.cli", "typer", "rich", "altair", "tracekit.parsers"),
    "tracekit.api": ("tracekit.cli", "typer", "rich"),
    # The report reads datasets through the API and the queries; it knows nothing of trace formats.
    "tracekit.report": (
        "tracekit.ingest",
        "tracekit.parsers",
        "tracekit.parse",
        "tracekit.writers",
        "tracekit.generate",
        "tracekit.samples",
        "tracekit.cli",
        "typer",
        "rich",
    ),
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_respects_the_layering(path: Path) -> None:
    module = _module_name(path)
    for prefix, forbidden in FORBIDDEN.items():
        if module == prefix or module.startswith(prefix + "."):
            bad = {i for i in _imports(path) for f in forbidden if i == f or i.startswith(f + ".")}
            assert not bad, f"{module} imports {sorted(bad)}"


def test_importing_the_library_does_not_load_the_cli_stack() -> None:
    code = (
        "import sys, tracekit.ingest, tracekit.api; "
        "print(sorted(m for m in ('typer', 'rich', 'altair') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_cli_imports_the_report(path: Path) -> None:
    module = _module_name(path)
    if module == "tracekit.cli" or module.startswith("tracekit.report"):
        return
    assert not {i for i in _imports(path) if i == "tracekit.report" or i.startswith("tracekit.report.")}, module

"""Data flows one way: files → parsers → ingest → store → API → generate/report/replay → CLI.

The layers are declared once, as an import contract in pyproject.toml ([tool.importlinter]), which
`make check` enforces with `lint-imports` over every import of the package. This test checks what
an import graph cannot: that importing the library does not load the CLI stack at run time.
"""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_library_does_not_load_the_cli_stack() -> None:
    code = (
        "import sys, tracekit.ingest, tracekit.api; "
        "print(sorted(m for m in ('typer', 'rich', 'altair') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

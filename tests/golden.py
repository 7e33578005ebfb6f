"""Golden files: a parser's output kept as JSON in tests/parsers/golden/, compared on every run.

`assert_golden(name, value)` compares `value`, as JSON (non-JSON values written as strings), with
tests/parsers/golden/<name>.json; with `key`, the file holds many entries and `value` is the one
under `key`. `TRACEKIT_REGEN_GOLDEN=1 pytest ...` writes the files instead (other entries kept):
review the diff before committing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parent / "parsers" / "golden"
REGENERATE = os.environ.get("TRACEKIT_REGEN_GOLDEN", "") not in ("", "0")


def assert_golden(name: str, value: Any, key: str | None = None) -> None:
    path = GOLDEN / f"{name}.json"
    actual = json.loads(json.dumps(value, default=str))
    held = json.loads(path.read_text()) if path.is_file() else None
    if REGENERATE:
        document = actual if key is None else {**(held or {}), key: actual}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
        return
    assert held is not None, f"golden file {path} missing: run with TRACEKIT_REGEN_GOLDEN=1"
    expected = held if key is None else held.get(key)
    where = f"{path}" + (f" [{key}]" if key is not None else "")
    assert actual == expected, f"{name}: output differs from {where} (TRACEKIT_REGEN_GOLDEN=1 rewrites it)"

"""sample_traces/fleet is what its documented command writes, byte for byte."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.conftest import SAMPLE_TRACES
from tracekit.generate import generate_fleet

FLEET = SAMPLE_TRACES / "fleet"


def _digest(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name != "README.md"
    }


def test_sample_fleet_is_reproducible(tmp_path: Path) -> None:
    summary = generate_fleet(tmp_path / "fleet", 200, 1, "sample", archive=True)
    assert summary.jobs == 200
    assert _digest(tmp_path / "fleet") == _digest(FLEET)

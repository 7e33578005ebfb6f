"""The benchmark suite runs: `python -m bench --quick` is a smoke of every default stage, so it never rots."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_quick_smoke_runs_every_default_stage_and_prints_its_ratios() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "2 cores" in lines[0] or "cores" in lines[0]
    from bench.suite import STAGES

    for name, stage in STAGES.items():
        if stage.default:
            assert any(line.startswith(name) for line in lines), f"stage {name} printed nothing"
    assert any("decode floor" in line and "x wall" in line for line in lines)
    assert any(line.startswith("queries") and "slowest:" in line and " under 2 s" in line for line in lines)


def test_stages_are_listed() -> None:
    done = subprocess.run([sys.executable, "-m", "bench", "--list"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0
    assert "fleet-30k" in done.stdout and "(only when named)" in done.stdout

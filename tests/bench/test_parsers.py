"""The single-file stages of bench/parsers.py run: `chakra-et` and `kineto` are default stages (the
quick smoke of test_suite.py runs them); `stream` writes 4 GB in a full run, so its quick form is run
here, and the rows it reads in pieces must be those of the whole document."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_quick_stream_stage_reads_the_same_rows_in_pieces() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "stream"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("stream")]
    assert len(lines) == 3 and "same rows: yes" in lines[1] and "(met)" in lines[1]


def test_parser_stages_are_registered() -> None:
    import bench.parsers  # noqa: F401 - registers its stages
    from bench.suite import STAGES

    assert {"chakra-et", "kineto"} <= {name for name, s in STAGES.items() if s.default}
    assert not STAGES["stream"].default

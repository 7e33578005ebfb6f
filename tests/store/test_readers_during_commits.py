"""Readers beside a committing writer (issue 22, item 4): every read while ingests commit, in place
and on the copy path, opens a committed state, in this process (the Python API) and in others (the
CLI), and never sees fewer jobs than a read before it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import tracekit
from tests.builders import write_et_job
from tracekit.ingest import ingest

pytestmark = pytest.mark.slow

RUNS = 10
# The writer: one ingest per job, each committed on its own (a small run stays in the log; every
# third is made to checkpoint, so both ways a commit lands are met).
WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import tracekit.store.commit as commit
    from tracekit.ingest import ingest

    root, dataset = Path(sys.argv[1]), Path(sys.argv[2])
    for i, job in enumerate(sorted(root.iterdir())):
        commit.WAL_CHECKPOINT_BYTES = 0 if i % 3 == 2 else 16 << 20
        report = ingest([job], dataset, workers=1)
        assert report.ok, report.errors
        print(job.name, flush=True)
    """
)


def _jobs(root: Path) -> Path:
    for i in range(RUNS):
        write_et_job(root / f"job{i:02d}", [0, 1, 2, 3], [("ALL_REDUCE", 1 << 20), ("ALL_GATHER", 4096)] * 20)
    return root


def test_every_read_beside_committing_ingests_opens_a_committed_state(tmp_path: Path) -> None:
    dataset = tmp_path / "ds"
    write_et_job(tmp_path / "first" / "job", [0, 1], [("ALL_REDUCE", 1 << 20)])
    assert ingest([tmp_path / "first" / "job"], dataset, workers=1).ok
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(_jobs(tmp_path / "in")), str(dataset)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    seen: list[int] = []
    failures: list[str] = []
    cli_reads = 0
    deadline = time.monotonic() + 240
    while writer.poll() is None and time.monotonic() < deadline:
        try:
            with tracekit.open(dataset) as ds:
                seen.append(ds.summary().jobs)
                ds.query("collective_mix_by_class").fetchall()
        except Exception as exc:  # every failure is a finding: collect them all
            failures.append(f"api: {type(exc).__name__}: {exc}")
        if len(seen) % 4 == 0:
            info = subprocess.run(
                [sys.executable, "-m", "tracekit", "query", "job_class", str(dataset)],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            cli_reads += 1
            if info.returncode != 0:
                failures.append(f"cli exit {info.returncode}: {info.stderr.strip()}")
    out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert len(out.split()) == RUNS
    assert failures == [], failures
    assert seen == sorted(seen) and 1 <= seen[0] and seen[-1] <= RUNS + 1, seen
    assert len(set(seen)) > 2 and cli_reads >= 3, (seen, cli_reads)  # reads met commits, not one state
    with tracekit.open(dataset) as ds:
        assert ds.summary().jobs == RUNS + 1

"""Hostile files beside a thousand good ones cost one error row each, never the run."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import tracekit
from tests.builders import write_et_job
from tests.conftest import run_tracekit


def _hostile(folder: Path) -> dict[str, str]:
    """Files that each once took down a run or a worker, each a job of its own (one rank, so that no
    rank bookkeeping adds rows); {name: what its error row (or, for a file now read, its warning)
    must hold}."""
    files = {
        # 8 MiB of zeros in 8 KB of gzip: it parsed as a Chakra stream into 8.4 M ops rows.
        "zeros.0.et.gz": gzip.compress(bytes(8 << 20)),
        # An unknown NodeType echoing 50,000 characters and a lone surrogate: the error text could
        # not be written (exit 3, the whole batch lost). An unknown NodeType name is now a warning
        # (Chakra forks add node types), whose text must be as bounded and writable.
        "surrogate.0.json": ('{"version": "0.0.4"}{"id": "1", "type": "\\ud800' + "X" * 50_000 + '"}').encode(),
        # A rank of 2^40 and a world of 2^31 - 1 (an Int32 column and the missing-rank rows could not
        # hold them), in a document nested 5,000 deep (RecursionError).
        "deep_rank0.pt.trace.json": (
            f'{{"distributedInfo": {json.dumps({"rank": 2**40, "world_size": 2**31 - 1})}, '
            f'"traceEvents": {"[" * 5000 + "]" * 5000}}}'
        ).encode(),
    }
    for name, data in files.items():
        (folder / name.split(".")[0]).mkdir(parents=True)
        (folder / name.split(".")[0] / name).write_bytes(data)
    return {
        "zeros.0.et.gz": "at byte 0: first 64 KiB are zero bytes: zero-filled, not a trace",
        "surrogate.0.json": "at node id 1: NodeType name = '\\ud800XXXXXXXX",
        "deep_rank0.pt.trace.json": ": JSON nested too deeply (hundreds of levels; traces nest fewer than 10)",
    }


def test_hostile_files_among_a_thousand_cost_one_error_row_each(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "fleet", list(range(1000)), [("ALL_REDUCE", 1 << 20)])
    expected = _hostile(tmp_path / "in" / "odd")

    done = run_tracekit("ingest", tmp_path / "in", "--out", tmp_path / "ds", "--workers", "2", "-q")
    assert done.returncode == 1, done.stderr
    with tracekit.open(tmp_path / "ds") as ds:
        traces = ds.sql("select status, count(*) from traces group by status order by status").fetchall()
        assert traces == [("error", 2), ("ok", 1001)]
        found = ds.sql(
            "select path, coalesce(error, array_to_string(warnings, ' | ')) from traces "
            "where status = 'error' or path like '%surrogate%'"
        ).fetchall()
        errors = {Path(path).name: error for path, error in found}
        assert ds.sql(
            "select count(*), count(distinct rank) from collectives where job_id like 'fleet%'"
        ).fetchall() == [(1000, 1000)]
        assert ds.sql("select count(*) from ops").fetchall() == [(2001,)]  # the surrogate node: INVALID_NODE
    assert sorted(errors) == sorted(expected)
    for name, error in errors.items():
        assert expected[name] in error and len(error) <= 500 and "\n" not in error, error
        error.encode("utf-8")

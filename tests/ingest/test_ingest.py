"""`tracekit.ingest` end to end: datasets written, re-ingested, added to, and bad input survived."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

import tracekit
from tests.builders import et_bytes, write_et_job
from tests.conftest import SAMPLE_TRACES
from tracekit.errors import DatasetError
from tracekit.ingest import ingest


def _counts(dataset: Path) -> dict[str, int]:
    with tracekit.open(dataset) as ds:
        return {t: ds.sql(f"select count(*) from {t}").fetchall()[0][0] for t in ("traces", "collectives", "ops")}


def test_ingest_writes_every_table_and_parquet(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "jobA", [0, 1, 2, 3], [("ALL_REDUCE", 1 << 20), ("ALL_GATHER", 4096)])
    report = ingest([tmp_path / "in"], tmp_path / "ds")
    assert report.ok and report.files_added == 4
    with tracekit.open(tmp_path / "ds") as ds:
        rows = ds.sql(
            "select rank, comm_type, in_bytes, group_size, inferred from collectives order by rank, op_id"
        ).fetchall()
        assert rows[:2] == [
            (0, "ALL_REDUCE", 1 << 20, 4, ["group_size"]),
            (0, "ALL_GATHER", 4096, 4, ["group_size"]),
        ]
        assert {r[0] for r in rows} == {0, 1, 2, 3}
        job = ds.frame("jobs").to_dicts()[0]
        assert (job["job_id"], job["world_size"], job["ranks_seen"], job["inferred"]) == (
            "jobA",
            4,
            4,
            ["world_size"],
        )
        assert ds.sql("select count(*) from ops").fetchall() == [(16,)]
    import polars as pl

    parquet = pl.read_parquet(tmp_path / "ds" / "collectives" / "*.parquet")
    assert parquet.height == 8 and set(parquet["job_id"]) == {"jobA"}
    assert pl.read_parquet(tmp_path / "ds" / "traces" / "*.parquet").height == 4


def test_reingesting_the_same_files_adds_nothing_and_new_files_add_only_themselves(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "jobA", [0, 1], [("ALL_REDUCE", 100)])
    ingest([tmp_path / "in"], tmp_path / "ds")
    first = _counts(tmp_path / "ds")
    again = ingest([tmp_path / "in"], tmp_path / "ds")
    assert again.files_added == 0 and again.files_skipped == 2
    assert _counts(tmp_path / "ds") == first
    write_et_job(tmp_path / "in" / "jobA", [2, 3], [("ALL_REDUCE", 100)])
    more = ingest([tmp_path / "in"], tmp_path / "ds")
    assert (more.files_added, more.files_skipped) == (2, 2)
    assert _counts(tmp_path / "ds") == {k: 2 * v for k, v in first.items()}
    with tracekit.open(tmp_path / "ds") as ds:
        assert ds.sql("select world_size, ranks_seen, trace_count from jobs").fetchall() == [(4, 4, 4)]


def test_bad_inputs_get_error_rows_and_the_rest_is_ingested(tmp_path: Path) -> None:
    job = tmp_path / "in" / "mixed"
    write_et_job(job, [0, 1], [("ALL_REDUCE", 64)])
    good = et_bytes([("ALL_REDUCE", 64)])
    (job / "mixed.2.et").write_bytes(good[:-3])  # truncated record
    (job / "mixed.3.json").write_text('{"schema": "1.1.0-chakra.0.0.4", "nodes": [')  # invalid JSON
    (job / "mixed.4.et.gz").write_bytes(good)  # named .gz, not gzip
    (job / "mixed.5.et").write_bytes(b"")  # empty
    (job / "mixed.6.json").write_text('{"hello": "world"}')  # unknown format
    report = ingest([tmp_path / "in"], tmp_path / "ds")
    assert not report.ok
    with tracekit.open(tmp_path / "ds") as ds:
        rows = dict(ds.sql("select rank, error from traces where status = 'error'").fetchall())
        ok = ds.sql("select count(*) from traces where status = 'ok'").fetchall()[0][0]
        assert ds.sql("select count(*) from collectives").fetchall() == [(2,)]
    assert ok == 2
    assert set(rows) == {2, 3, 4, 5, 6}
    assert "mixed.2.et at record" in rows[2] and "byte offset" in rows[2]
    assert "mixed.3.json" in rows[3]
    assert "not gzip" in rows[4]
    assert "empty file" in rows[5]
    assert "no known trace format" in rows[6]
    assert all("\n" not in e for e in rows.values())


def test_a_job_with_a_missing_rank_is_counted_on_its_job_row_not_as_an_error(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "gap", [0, 1, 3, 7], [("ALL_REDUCE", 8)])
    report = ingest([tmp_path / "in"], tmp_path / "ds")
    assert report.ok and not report.complete
    assert report.errors == []
    assert report.missing == ["job gap: ranks 2, 4–6 of 8 missing"]
    with tracekit.open(tmp_path / "ds") as ds:
        assert ds.sql("select ranks_seen, ranks_missing, missing_ranks from jobs").fetchall() == [(4, 4, "2, 4-6")]
        assert ds.sql("select count(*) from traces where status = 'error' or path is null").fetchall() == [(0,)]
    write_et_job(tmp_path / "in" / "gap", [2, 4, 5, 6], [("ALL_REDUCE", 8)])
    again = ingest([tmp_path / "in"], tmp_path / "ds")
    assert again.ok and again.complete
    with tracekit.open(tmp_path / "ds") as ds:
        assert ds.sql("select ranks_seen, ranks_missing, missing_ranks from jobs").fetchall() == [(8, 0, "")]


def test_gzip_bomb_is_refused_without_running_out_of_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tracekit.sources

    # The real floor is 256 MiB; a smaller one keeps the test fast while exercising the same check.
    monkeypatch.setattr(tracekit.sources, "MIN_INFLATE_LIMIT", 16 << 20)
    job = tmp_path / "in" / "bomb"
    write_et_job(job, [0], [("ALL_REDUCE", 8)])
    # ~64 KiB on disk that inflates to 64 MiB of JSON-looking text: past 200x its stored size.
    with gzip.open(job / "bomb.1.json.gz", "wb", compresslevel=9) as f:
        f.write(b'{"schema": "1.1.0-chakra.0.0.4", "nodes": [')
        block = b" " * (1 << 20)
        for _ in range(64):
            f.write(block)
    assert (job / "bomb.1.json.gz").stat().st_size < 200_000
    report = ingest([tmp_path / "in"], tmp_path / "ds", workers=1)
    assert len(report.errors) == 1 and "decompression bomb" in report.errors[0]
    assert "bomb.1.json.gz" in report.errors[0]


def test_dataset_survives_being_moved(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "j", [0, 1], [("ALL_REDUCE", 8)])
    ingest([tmp_path / "in"], tmp_path / "ds")
    shutil.move(tmp_path / "ds", tmp_path / "elsewhere")
    with tracekit.open(tmp_path / "elsewhere") as ds:
        assert ds.sql("select count(*) from collectives").fetchall() == [(2,)]
    write_et_job(tmp_path / "in" / "k", [0], [("ALL_GATHER", 8)])
    assert ingest([tmp_path / "in"], tmp_path / "elsewhere").files_added == 1


def test_the_pool_and_the_inline_path_give_the_same_dataset(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "j", list(range(8)), [("ALL_REDUCE", 8), ("BROADCAST", 16)])
    ingest([tmp_path / "in"], tmp_path / "pool", workers=2)
    ingest([tmp_path / "in"], tmp_path / "inline", workers=1)
    query = "select * exclude (trace_id) from collectives order by rank, op_id"
    with tracekit.open(tmp_path / "pool") as a, tracekit.open(tmp_path / "inline") as b:
        assert a.sql(query).fetchall() == b.sql(query).fetchall()


def test_open_refuses_a_folder_that_is_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not a tracekit dataset"):
        tracekit.open(tmp_path)


@pytest.mark.parametrize("workers", [1, 2])
def test_refused_inputs_are_retried_and_their_error_row_replaced(tmp_path: Path, workers: int) -> None:
    write_et_job(tmp_path / "in" / "j", list(range(4)), [("ALL_REDUCE", 8)])
    (tmp_path / "in" / "broken.tgz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    first = ingest([tmp_path / "in"], tmp_path / "ds", workers=workers)
    assert len(first.errors) == 1 and "broken.tgz" in first.errors[0]
    again = ingest([tmp_path / "in"], tmp_path / "ds", workers=workers)
    # Still broken: reported again (an error row is not "already present"), and stored once.
    assert (again.files_added, again.files_skipped, again.errors) == (1, 4, first.errors)
    with tracekit.open(tmp_path / "ds") as ds:
        assert ds.sql("select count(*), count(distinct trace_id) from traces").fetchall() == [(5, 5)]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_file_rewritten_in_place_replaces_its_earlier_rows(tmp_path: Path, workers: int) -> None:
    write_et_job(tmp_path / "in" / "j", list(range(4)), [("ALL_REDUCE", 8)])
    ingest([tmp_path / "in"], tmp_path / "ds", workers=workers)
    changed = tmp_path / "in" / "j" / "j.1.et"
    changed.write_bytes(et_bytes([("ALL_REDUCE", 8), ("ALL_GATHER", 4096)]))  # the trace taken again
    again = ingest([tmp_path / "in"], tmp_path / "ds", workers=workers)
    assert (again.files_added, again.files_skipped, again.files_replaced) == (1, 3, [str(changed)])
    assert f"{changed}: changed since it was ingested: its earlier rows are replaced" in again.warnings
    write_et_job(tmp_path / "fresh" / "j", [0, 2, 3], [("ALL_REDUCE", 8)])
    shutil.copy(changed, tmp_path / "fresh" / "j")
    ingest([tmp_path / "fresh"], tmp_path / "fresh.ds", workers=workers)
    query = "select rank, comm_type, in_bytes from collectives order by rank, op_id"
    with tracekit.open(tmp_path / "ds") as ds, tracekit.open(tmp_path / "fresh.ds") as fresh:
        assert ds.sql(query).fetchall() == fresh.sql(query).fetchall()
        assert _counts(tmp_path / "ds") == _counts(tmp_path / "fresh.ds") == {"traces": 4, "collectives": 5, "ops": 10}
        assert ds.sql("select trace_count, ranks_seen from jobs").fetchall() == [(4, 4)]
        assert ds.sql("select sum(calls) from collective_ops").fetchall() == [(5,)]
    import polars as pl

    for table in ("traces", "collectives", "ops"):
        assert pl.read_parquet(tmp_path / "ds" / table / "*.parquet").height == _counts(tmp_path / "ds")[table]


def test_the_only_file_of_a_dataset_rewritten_leaves_its_new_rows_alone_in_parquet_too(tmp_path: Path) -> None:
    (path,) = write_et_job(tmp_path / "in" / "j", [0], [("ALL_REDUCE", 8)])
    ingest([tmp_path / "in"], tmp_path / "ds")
    path.write_bytes(et_bytes([("ALL_GATHER", 64), ("ALL_GATHER", 64)]))
    ingest([tmp_path / "in"], tmp_path / "ds")
    import polars as pl

    with tracekit.open(tmp_path / "ds") as ds:
        assert ds.sql("select comm_type from collectives").fetchall() == [("ALL_GATHER",)] * 2
    assert pl.read_parquet(tmp_path / "ds" / "collectives" / "*.parquet")["comm_type"].to_list() == ["ALL_GATHER"] * 2
    assert pl.read_parquet(tmp_path / "ds" / "ops" / "*.parquet").height == 4


@pytest.mark.parametrize("workers", [1, 2])
def test_a_file_rewritten_in_place_that_no_longer_parses_keeps_its_earlier_rows(tmp_path: Path, workers: int) -> None:
    write_et_job(tmp_path / "in" / "j", [0, 1], [("ALL_REDUCE", 8)])
    ingest([tmp_path / "in"], tmp_path / "ds", workers=workers)
    before = _counts(tmp_path / "ds")
    changed = tmp_path / "in" / "j" / "j.1.et"
    changed.write_bytes(changed.read_bytes()[:-3])  # cut short while being rewritten
    again = ingest([tmp_path / "in"], tmp_path / "ds", workers=workers)
    assert again.files_replaced == [] and len(again.errors) == 1 and "j.1.et" in again.errors[0]
    after = _counts(tmp_path / "ds")
    assert (after["collectives"], after["ops"]) == (before["collectives"], before["ops"])


def test_two_folders_whose_jobs_share_a_name_are_kept_apart(tmp_path: Path) -> None:
    write_et_job(tmp_path / "a" / "run", [0, 1], [("ALL_REDUCE", 8)])
    write_et_job(tmp_path / "b" / "run", [2, 3], [("ALL_REDUCE", 8)])
    report = ingest([tmp_path / "a", tmp_path / "b"], tmp_path / "ds")
    assert report.ok
    assert report.warnings == [
        f"job run already holds files from {tmp_path / 'a' / 'run'}: the files from {tmp_path / 'b' / 'run'} "
        "are kept apart as job b/run (to add them to job run, use --job run; or name jobs in a manifest)"
    ]
    with tracekit.open(tmp_path / "ds") as ds:
        assert ds.sql("select job_id, ranks_seen from jobs order by 1").fetchall() == [("b/run", 2), ("run", 2)]


def test_a_parser_warning_is_stored_on_its_trace_row_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracekit.parsers.chakra import et as chakra_et

    original = chakra_et.parse

    def parse_and_warn(source, sink):  # type: ignore[no-untyped-def]
        meta = original(source, sink)
        meta.warn("a value out of bounds was left null", "record 3")
        return meta

    monkeypatch.setattr(chakra_et, "parse", parse_and_warn)
    write_et_job(tmp_path / "in" / "jobA", [0], [("ALL_REDUCE", 100)])
    report = ingest([tmp_path / "in"], tmp_path / "ds", workers=1)
    assert report.ok
    with tracekit.open(tmp_path / "ds") as ds:
        [(path, warnings)] = ds.sql("select path, warnings from traces").fetchall()
    assert warnings == [f"{path} at record 3: a value out of bounds was left null"]


def test_jobs_finished_in_rounds_give_the_rows_of_one_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fleet's jobs are finished a round of files at a time (memory); the dataset is the same."""
    import tracekit.ingest.finishing

    for j in range(4):
        write_et_job(tmp_path / "in" / f"job{j}", [0, 1, 2], [("ALL_REDUCE", 64 << j), ("BROADCAST", 8)])
    (tmp_path / "in" / "job1" / "job1.9.et").write_bytes(b"\x05garbage")
    (tmp_path / "in" / "job2" / "job2.7.et").write_bytes(et_bytes([("ALL_GATHER", 4)]))  # rank past the world
    shutil.copy(tmp_path / "in" / "job0" / "job0.1.et", tmp_path / "in" / "job3")  # read twice: added once
    reports, tables = [], []
    for name, per_round in (("one", 1 << 20), ("rounds", 2)):
        monkeypatch.setattr(tracekit.ingest.finishing, "FINISH_FILES", per_round)
        reports.append(ingest([tmp_path / "in"], tmp_path / name))
        with tracekit.open(tmp_path / name) as ds:
            tables.append(
                [
                    ds.sql(f"select * exclude (run_id, ingested_at) from {t} order by all").fetchall()
                    if t == "traces"
                    else ds.sql(f"select * from {t} order by all").fetchall()
                    for t in ("traces", "jobs", "process_groups", "collectives")
                ]
            )
    assert tables[0] == tables[1]
    assert (reports[0].errors, reports[0].warnings, reports[0].missing) == (
        reports[1].errors,
        reports[1].warnings,
        reports[1].missing,
    )
    assert reports[1].files_added == 14 and len(reports[1].errors) == 1
    assert reports[1].files_duplicate == 1
    note = f"{tmp_path / 'in' / 'job3' / 'job0.1.et'}: the same file (name and content) as "
    assert note + f"{tmp_path / 'in' / 'job0' / 'job0.1.et'}, read in this run; not added again" in reports[1].warnings


def test_workers_are_handed_a_rounds_worth_of_files_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files stay handed out to the workers up to _IN_FLIGHT_FILES before the ingest process takes
    any back, so the workers parse on while it finishes a round (with a few batches in flight they
    sat idle through every round)."""
    from collections.abc import Iterator
    from concurrent.futures import Executor, Future
    from contextlib import contextmanager
    from typing import Any

    import tracekit.ingest.batching as run
    from tracekit.executors import Slots

    class Synchronous(Executor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
            future: Future[Any] = Future()
            future.set_result(fn(*args, **kwargs))
            return future

    @contextmanager
    def synchronous(spec: str | None, workers: int) -> Iterator[Slots]:
        yield Slots(Synchronous(), workers)

    handed_out: list[int] = []
    drain = run._drain

    def recording(pending: dict[Any, int], until: str | None, report: Any) -> Any:
        handed_out.append(sum(pending.values()))
        return drain(pending, until, report)

    monkeypatch.setattr(run.executors, "open_executor", synchronous)
    monkeypatch.setattr(run, "_drain", recording)
    monkeypatch.setattr(run, "_BATCH_FILES", 2)
    monkeypatch.setattr(run, "_IN_FLIGHT_FILES", 12)
    for j in range(6):
        write_et_job(tmp_path / "in" / f"job{j}", [0, 1, 2, 3], [("ALL_REDUCE", 64)])
    report = ingest([tmp_path / "in"], tmp_path / "ds", workers=2)
    assert report.ok and report.files_added == 24
    assert max(handed_out) == 12


def test_the_same_warning_of_several_files_of_a_job_is_one_line_naming_how_many(tmp_path: Path) -> None:
    # The README's first command printed eight lines for the eight Flight Recorder dumps of one job
    # (a pickle and a JSON of each of four ranks), each saying gloo's 12 sends and recvs left no entry.
    job = tmp_path / "pipeline_p2p"
    shutil.copytree(SAMPLE_TRACES / "flight_recorder" / "pipeline_p2p", job)
    report = ingest([job], tmp_path / "ds", workers=1)
    first = job / "nccl_trace_rank_0"
    gaps = [w for w in report.warnings if "left no entry" in w]
    assert gaps == [
        f"{first} and 7 more files of job pipeline_p2p at entries: 12 operations between the first and last entry "
        "of their process group left no entry ('0': 12; gloo records no send/recv)"
    ]
    with tracekit.open(tmp_path / "ds") as ds:  # every file's own warning is kept in its traces row
        rows = ds.sql("select count(*) from traces, unnest(warnings) as w(w) where w.w like '%left no entry%'")
        assert rows.fetchall() == [(8,)]

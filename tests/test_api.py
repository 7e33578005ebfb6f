"""The notebook API: queries as relations, and a dataset that follows what other processes ingest."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

import polars as pl
import pytest

import tracekit
import tracekit.store.snapshot
from tests.builders import foreign_database, write_et_job
from tests.conftest import SAMPLE_TRACES, duckdb_shell, needs_duckdb_shell
from tracekit.api import CollectiveTotal, DatasetSummary
from tracekit.errors import DatasetError, InputError
from tracekit.ingest import ingest

CAPTURED = SAMPLE_TRACES / "captured"


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    write_et_job(tmp_path / "in" / "jobA", [0, 1, 2, 3], [("ALL_REDUCE", 1 << 20), ("ALL_GATHER", 4096)])
    assert ingest([tmp_path / "in" / "jobA"], tmp_path / "ds").ok
    return tmp_path / "ds"


def test_a_query_is_a_relation_to_filter_and_turn_into_polars(dataset: Path) -> None:
    with tracekit.open(dataset) as ds:
        relation = ds.query("collective_mix_by_class")
        assert relation.columns[:3] == ["class", "comm_type", "jobs"]
        frame = relation.filter("comm_type = 'ALL_REDUCE'").pl()
        assert isinstance(frame, pl.DataFrame)
        assert frame["calls"].to_list() == [4]
        trend = ds.query("group_size_trend", {"start": "2000-01-01", "period_months": 3}).pl()
        assert trend.is_empty()  # the job records no start time


def test_query_names_and_parameters_are_checked(dataset: Path) -> None:
    with tracekit.open(dataset) as ds:
        with pytest.raises(InputError, match="no query 'jobs; drop table jobs'"):
            ds.query("jobs; drop table jobs")
        with pytest.raises(InputError, match="missing period_months"):
            ds.query("group_size_trend", {"start": "2024-01-01"})
        with pytest.raises(InputError, match="not rank"):
            ds.query("job_class", {"rank": 0})


def test_a_sum_past_64_bits_is_refused_at_fetch_never_wrapped(dataset: Path) -> None:
    # The dataset fuzzer (seed 2026, case 2522): calls of 2^62 twice over. The API's relation raises
    # DuckDB's checked-cast error when fetched; inside ds.computing(name) it is a one-line DatasetError.
    import duckdb

    with duckdb.connect(str(dataset / "tracekit.duckdb")) as con:
        con.execute("insert into collective_sizes select * from collective_sizes")
        con.execute("update collective_sizes set calls = 4611686018427387904")
    with tracekit.open(dataset) as ds:
        with pytest.raises(duckdb.ConversionException, match="out of range"):
            ds.query("group_size_by_job_size").fetchall()
        with pytest.raises(DatasetError, match="query group_size_by_job_size cannot be computed") as caught:
            with ds.computing("group_size_by_job_size"):
                ds.query("group_size_by_job_size").fetchall()
        assert "\n" not in str(caught.value)


def test_every_query_is_there_by_name_for_sql_too(dataset: Path) -> None:
    with tracekit.open(dataset) as ds:
        # An all-reduce and an all-gather that no reduce-scatter pairs with: data parallel.
        assert ds.sql("select inferred_class from job_class").fetchall() == [("ddp",)]


def test_an_open_dataset_sees_what_another_process_ingests(dataset: Path, tmp_path: Path) -> None:
    write_et_job(tmp_path / "more" / "jobB", [0, 1], [("ALL_REDUCE", 64)])
    with tracekit.open(dataset) as ds:
        before = ds.query("job_overview")
        assert len(before.fetchall()) == 1
        ingested = subprocess.run(
            [sys.executable, "-m", "tracekit", "ingest", str(tmp_path / "more"), "--out", str(dataset), "-q"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ingested.returncode == 0, ingested.stderr
        assert [r[0] for r in ds.query("job_overview").fetchall()] == ["jobA", "jobB"]
        assert ds.frame("jobs").height == 2
        assert len(before.fetchall()) == 1  # a relation made before keeps reading what it read


def test_summary_counts_jobs_ranks_traces_collectives_and_errors(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "gap", [0, 2], [("ALL_REDUCE", 1 << 20), ("BROADCAST", 8)])
    (tmp_path / "in" / "gap" / "gap.3.et").write_bytes(b"\x05ab")  # truncated record
    report = ingest([tmp_path / "in"], tmp_path / "ds", workers=1)
    with tracekit.open(tmp_path / "ds") as ds:
        summary = ds.summary()
    assert summary == report.totals
    assert isinstance(summary, DatasetSummary)
    assert (summary.jobs, summary.ranks, summary.traces_ok, summary.traces_error) == (1, 2, 2, 1)
    assert summary.collectives == [CollectiveTotal("ALL_REDUCE", 2, 2 << 20), CollectiveTotal("BROADCAST", 2, 16)]
    assert len(summary.errors) == 1 and "truncated record" in summary.errors[0]
    # Rank 1 has no file: a note on the job, not an error row (rank 3's unreadable file is the error).
    assert summary.missing == ["job gap: rank 1 of 3 missing"]


def test_open_refuses_what_is_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not a tracekit dataset"):
        tracekit.open(tmp_path)


@needs_duckdb_shell
def test_open_reads_a_dataset_that_the_duckdb_shell_holds_open_for_writing(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB lets no other process open a file one holds read-write, not even read-only."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with duckdb_shell(dataset / "tracekit.duckdb") as shell:
        shell.run("create table note as select 42 as answer;")  # committed by the shell, into its log
        with tracekit.open(dataset) as ds:
            assert ds.summary().jobs == 1
            assert ds.sql("select answer from note").fetchall() == [(42,)]
            assert ds.query("job_class").fetchall()
    assert not list((tmp_path / "tmp").iterdir()), "the snapshot copy was left behind"


@needs_duckdb_shell
def test_open_names_the_process_that_keeps_changing_the_file_while_it_is_copied(
    dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks = iter(range(1000))
    monkeypatch.setattr(tracekit.store.snapshot, "stamps", lambda *paths: next(looks))  # new at every look
    monkeypatch.setattr(tracekit.store.snapshot, "SNAPSHOT_WAITS", (0.0, 0.0))
    with duckdb_shell(dataset / "tracekit.duckdb") as shell:
        with pytest.raises(DatasetError) as refused, tracekit.open(dataset) as ds:
            ds.summary()
    message = str(refused.value)
    assert message.startswith(f"{dataset / 'tracekit.duckdb'}: duckdb, PID {shell.pid} holds it open for writing")
    assert "try again when it has finished" in message and "\n" not in message


@needs_duckdb_shell
def test_open_says_where_a_snapshot_could_not_be_made(
    dataset: Path, read_only_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(read_only_dir))
    with duckdb_shell(dataset / "tracekit.duckdb") as shell:
        with pytest.raises(DatasetError) as refused, tracekit.open(dataset) as ds:
            ds.summary()
    message = str(refused.value)
    assert (
        f"duckdb, PID {shell.pid} holds it open for writing, and no snapshot can be made in {read_only_dir}" in message
    )


@pytest.mark.parametrize("kind", ["empty", "text", "another database"])
def test_open_refuses_a_duckdb_file_that_tracekit_did_not_write(tmp_path: Path, kind: str) -> None:
    db = foreign_database(tmp_path / "ds", kind)
    with pytest.raises(DatasetError) as refused, tracekit.open(tmp_path / "ds") as ds:
        ds.summary()
    assert str(refused.value).startswith(f"{db}: not a tracekit dataset ("), refused.value
    assert "\n" not in str(refused.value)


def test_tracekit_ingest_stays_callable_once_its_package_is_imported(tmp_path: Path) -> None:
    """`tracekit.ingest` is a function and the name of a package: importing the package (which
    `tracekit.generate` and `tracekit.report` do) made `tracekit.ingest(...)` a TypeError."""
    write_et_job(tmp_path / "in" / "jobA", [0, 1], [("ALL_REDUCE", 64)])
    code = (
        "import sys, tracekit, tracekit.generate, tracekit.report, tracekit.ingest.run; "
        "print(tracekit.ingest([sys.argv[1]], sys.argv[2]).files_added)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "in"), str(tmp_path / "ds")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"


def test_a_scope_shows_only_the_selected_jobs_in_every_table_and_query(tmp_path: Path) -> None:
    from tracekit.scope import Scope

    manifest = tmp_path / "manifest.csv"
    rows = [("ddp_mlp", "ddp:mlp", "2024-03-01"), ("fsdp_mlp", "fsdp:mlp", "2024-07-01"),
            ("moe_alltoall", "moe:mlp", "2024-07-15"), ("pipeline_p2p", None, "2023-12-01")]  # fmt: skip
    manifest.write_text(
        "job_id,path,label,started_at\n" + "".join(f"{j},{CAPTURED / j},{label or ''},{at}\n" for j, label, at in rows)
    )
    assert ingest([CAPTURED], tmp_path / "ds", manifest=manifest).ok
    cases = {
        Scope(labels=("fsdp", "moe:mlp")): ["fsdp_mlp", "moe_alltoall"],
        Scope(since=date(2024, 7, 1)): ["fsdp_mlp", "moe_alltoall"],
        Scope(until=date(2024, 7, 1)): ["ddp_mlp", "pipeline_p2p"],
        Scope(jobs=("pipeline_p2p",)): ["pipeline_p2p"],
        Scope(jobs=("ddp_mlp", "fsdp_mlp"), labels=("fsdp",)): ["fsdp_mlp"],
        Scope(): ["ddp_mlp", "fsdp_mlp", "moe_alltoall", "pipeline_p2p"],
    }
    for scope, expected in cases.items():
        with tracekit.open(tmp_path / "ds", scope=scope) as ds:
            assert [r[0] for r in ds.sql("select job_id from jobs order by 1").fetchall()] == expected, scope
            assert {r[0] for r in ds.sql("select distinct job_id from collectives").fetchall()} == set(expected)
            assert sorted(r["job_id"] for r in ds.query("job_overview").pl().to_dicts()) == expected
            assert ds.sql("select count(*) from runs").fetchall() == [(1,)]  # runs are not a job's

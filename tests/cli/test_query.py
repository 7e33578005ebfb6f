"""`tracekit query`, `tracekit queries` and `tracekit report` as users run them, and what they do
with no DATASET (the bundled samples, ingested once into the user's cache)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import tracekit
from tests.builders import write_et_job
from tests.conftest import SampleRun, cli, run_tracekit
from tracekit.ingest import ingest
from tracekit.store.queries import query_names


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli-query")
    write_et_job(root / "in" / "jobA", [0, 1, 2, 3], [("ALL_REDUCE", 1 << 20), ("ALL_GATHER", 4096)])
    (root / "in" / "tracekit_manifest.csv").write_text("job_id,path,label,started_at\njobA,jobA,fsdp:m,2024-02-01\n")
    assert ingest([root / "in"], root / "ds").ok
    return root / "ds"


def test_queries_lists_every_query_with_its_parameters() -> None:
    result = cli("queries")
    assert result.returncode == 0, result.stderr
    for name in query_names():
        assert name in result.stdout
    assert "start, period_months" in result.stdout


def test_query_prints_a_table(dataset: Path) -> None:
    result = cli("query", "collective_mix_by_class", dataset)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["class", "comm_type", "jobs", "calls"]
    assert any(line.split()[:4] == ["fsdp", "ALL_GATHER", "1", "4"] for line in lines)


def test_query_csv_and_json_hold_the_api_rows(dataset: Path) -> None:
    with tracekit.open(dataset) as ds:
        expected = ds.query("job_size_histogram").pl()
    as_csv = cli("query", "job_size_histogram", dataset, "--format", "csv")
    assert as_csv.returncode == 0, as_csv.stderr
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [int(r["job_gpus"]) for r in rows] == expected["job_gpus"].to_list()
    as_json = cli("query", "job_size_histogram", dataset, "-f", "json")
    assert json.loads(as_json.stdout) == expected.to_dicts()


def test_query_parameters_and_parquet(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "trend.parquet"
    result = cli(
        "query",
        "group_size_trend",
        dataset,
        "-p",
        "start=2024-01-01",
        "--param",
        "period_months=3",
        "-f",
        "parquet",
        "-o",
        out,
    )
    assert result.returncode == 0, result.stderr
    frame = pl.read_parquet(out)
    assert frame["jobs"].to_list() == [1] and frame["max_group_size"].to_list() == [4]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["query", "no_such_query"], "no query 'no_such_query'"),
        (["query", "group_size_trend"], "missing start, period_months"),
        (["query", "job_class", "-p", "rank"], "expected key=value"),
        (["query", "job_class", "-f", "parquet"], "--format parquet needs --out FILE"),
        (["query", "group_size_trend", "-p", "start=notadate", "-p", "period_months=3"], "start=notadate"),
        (["query", "group_size_trend", "-p", "start=2023-01-01", "-p", "period_months=0"], "period_months=0"),
        (["query", "group_size_trend", "-p", "start=2023-01-01", "-p", "period_months=abc"], "period_months=abc"),
        (["query", "group_size_trend", "-p", "start=2023-01-01", "-p", "period_months=-3"], "period_months=-3"),
        (["query", "alltoallv_matrix", "-p", "job_id=jobA", "-p", "ranks_per_cell=0"], "ranks_per_cell=0"),
        (["query", "message_sizes_by_label", "-p", "rank=abc"], "rank=abc"),
        (["report", "--since", "yesterday"], "--since yesterday: not a date"),
        (["report", "--job", "no-such-job"], "no job named no-such-job"),
        (["report", "--compare", "no-such-thing"], "neither a tracekit dataset nor a period"),
    ],
)
def test_bad_arguments_get_one_line_and_exit_2(dataset: Path, tmp_path: Path, args: list[str], message: str) -> None:
    where = [str(dataset)] if args[0] == "report" else ([str(dataset)] if len(args) == 2 else [])
    if args[0] == "query" and len(args) > 2:
        args = [*args[:2], str(dataset), *args[2:]]
    result = cli(*args, *where, *(["-o", str(tmp_path / "r.html")] if args[0] == "report" else []))
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_a_string_parameter_stays_a_string(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "007", [0, 1], [("ALL_REDUCE", 64)])
    write_et_job(tmp_path / "in" / "7", [0, 1], [("ALL_GATHER", 64)])
    write_et_job(tmp_path / "in" / "job-a", [0, 1], [("BROADCAST", 64)])
    assert ingest([tmp_path / "in"], tmp_path / "ds").ok
    result = cli("query", "job_bytes_by_collective", tmp_path / "ds", "-p", "job_id=007", "-f", "json")
    assert result.returncode == 0, result.stderr
    assert [row["comm_type"] for row in json.loads(result.stdout)] == ["ALL_REDUCE"]


def test_a_report_names_the_file_it_wrote(dataset: Path, tmp_path: Path) -> None:
    result = cli("report", dataset, "-o", tmp_path / "r.html")
    assert result.returncode == 0, result.stderr
    assert f"→ {tmp_path / 'r.html'}" in result.stderr
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_no_dataset_means_the_bundled_samples_ingested_once(samples: SampleRun, tmp_path: Path) -> None:
    assert "ingesting the bundled samples" in samples.stderr
    assert str(samples.dataset) in samples.stderr
    again = run_tracekit("query", "job_class", "-f", "json", env={"XDG_CACHE_HOME": str(samples.cache)}, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "ingesting" not in again.stderr
    classes = {row["job_id"]: row["inferred_class"] for row in json.loads(again.stdout)}
    assert classes["captured/moe_alltoall"] == "moe"
    assert len(classes) == 211
    assert not list(tmp_path.iterdir())  # nothing written where it ran


@pytest.mark.parametrize("command", ["report", "query", "queries"])
def test_help_starts_without_importing_the_heavy_modules(command: str) -> None:
    code = (
        "import sys; from typer.testing import CliRunner; from tracekit.cli import app; "
        f"r = CliRunner().invoke(app, ['{command}', '--help']); assert r.exit_code == 0, r.output; "
        "print([m for m in ('duckdb', 'polars', 'pyarrow', 'altair') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_csv_keeps_every_digit_of_a_float(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "big", [0, 1], [("ALL_REDUCE", 20_940_288), ("ALL_GATHER", 1_234_567)])
    assert ingest([tmp_path / "in"], tmp_path / "ds").ok
    with tracekit.open(tmp_path / "ds") as ds:
        expected = sorted(ds.query("collective_wire_bytes", {"job_id": "big"}).pl()["wire_bytes"].to_list())
    result = cli("query", "collective_wire_bytes", tmp_path / "ds", "-p", "job_id=big", "-f", "csv")
    assert result.returncode == 0, result.stderr
    printed = [row["wire_bytes"] for row in csv.DictReader(io.StringIO(result.stdout))]
    assert sorted(float(value) for value in printed) == expected
    assert "20940288" in result.stdout and "e+" not in result.stdout


def test_query_reads_only_the_jobs_its_scope_selects(tmp_path: Path) -> None:
    from tests.builders import write_et_job
    from tracekit.ingest import ingest

    write_et_job(tmp_path / "in" / "early", [0, 1], [("ALL_REDUCE", 1 << 20)])
    write_et_job(tmp_path / "in" / "late", [0, 1], [("ALL_GATHER", 1 << 10)])
    manifest = tmp_path / "m.csv"
    manifest.write_text(f"job_id,path,label,started_at\nearly,{tmp_path / 'in' / 'early'},ddp:a,2024-01-10\n"
                        f"late,{tmp_path / 'in' / 'late'},fsdp:b,2024-09-01\n")  # fmt: skip
    assert ingest([tmp_path / "in"], tmp_path / "ds", manifest=manifest).ok
    cases = [(["--label", "fsdp"], ["late"]), (["--until", "2024-06-01"], ["early"]),
             (["--job", "early", "--job", "late"], ["early", "late"]), ([], ["early", "late"])]  # fmt: skip
    for options, expected in cases:
        result = cli("query", "job_overview", tmp_path / "ds", "-f", "json", *options)
        assert result.returncode == 0, result.stderr
        assert sorted(r["job_id"] for r in json.loads(result.stdout)) == expected, options
    none = cli("query", "job_overview", tmp_path / "ds", "--label", "moe")
    assert none.returncode == 2
    assert none.stderr.strip() == f"error: no job of {tmp_path / 'ds'} matches the selection (labels moe)"
    bad = cli("query", "job_overview", tmp_path / "ds", "--since", "June")
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --since June: not a date (YYYY-MM-DD)"


def test_a_count_past_64_bits_in_the_dataset_is_one_line_from_query_and_report(dataset: Path, tmp_path: Path) -> None:
    # Found by the dataset fuzzer (seed 2026, case 2522): calls of 2^62 in collective_sizes made the
    # queries' checked 64-bit casts fail at fetch, and `tracekit query` and `report` printed tracebacks.
    import shutil

    import duckdb

    copy = tmp_path / "ds"
    shutil.copytree(dataset, copy)
    with duckdb.connect(str(copy / "tracekit.duckdb")) as con:
        con.execute("insert into collective_sizes select * from collective_sizes")
        con.execute("update collective_sizes set calls = 4611686018427387904")
    commands: list[list[str | Path]] = [
        ["query", "group_size_by_job_size", copy],
        ["report", copy, "-o", tmp_path / "r.html"],
    ]
    for args in commands:
        done = cli(*args)
        assert done.returncode == 3, done.stderr
        [line] = done.stderr.strip().splitlines()[-1:]
        assert "Traceback" not in done.stderr and line.startswith("error: ") and "out of range" in line, done.stderr


def test_a_megabyte_value_is_one_cut_line_of_the_table_and_whole_in_csv(dataset: Path, tmp_path: Path) -> None:
    # Found by the dataset fuzzer (seed 2026, case 5308): a job class of 1 MiB of line feeds made
    # `tracekit query ... -f table` lay out a million-line cell (past 10 s of CPU).
    import shutil

    import duckdb

    copy = tmp_path / "ds"
    shutil.copytree(dataset, copy)
    with duckdb.connect(str(copy / "tracekit.duckdb")) as con:
        con.execute("update job_classes set class = repeat(chr(10), 1048576)")
    table = cli("query", "job_class", copy, "-f", "table")
    assert table.returncode == 0, table.stderr
    [row] = [line for line in table.stdout.splitlines() if "more characters" in line]
    assert "\\n\\n" in row and "(1,047,576 more characters)" in row and len(row) < 4000
    whole = cli("query", "job_class", copy, "-f", "csv")
    assert whole.returncode == 0 and whole.stdout.count("\n") > 1 << 20

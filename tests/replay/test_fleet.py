"""The fleet replay: every job of a dataset, each row the one its own replay gives, stored in the dataset."""

from __future__ import annotations

import math
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

import tracekit
from tests.cli.test_cli import tracekit as run
from tracekit.fabric.presets import preset
from tracekit.ingest import ingest
from tracekit.replay import Placement, replay
from tracekit.replay.fabric_whatif import time_on_fabrics
from tracekit.replay.fleet import FleetSettings, replay_fleet, store
from tracekit.replay.indicators import network_indicators
from tracekit.schema import arrow_schema

ROOT = Path(__file__).resolve().parents[2]
PLACEMENT = Placement(gpus_per_host=2)  # the captured jobs' 4 ranks on 2 hosts: traffic crosses the network
FABRICS = (preset("clos2-2to1"), preset("dgx-h100-superpod"))


@pytest.fixture
def fleet_dataset(captured_dataset: Path, tmp_path: Path) -> Path:
    """A copy of the captured jobs' dataset that a test may write into."""
    shutil.copytree(captured_dataset, tmp_path / "fleet.dataset")
    return tmp_path / "fleet.dataset"


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9) or (math.isnan(a) and math.isnan(b))
    return a == b


def test_each_job_s_row_is_the_one_its_own_replay_gives(fleet_dataset: Path) -> None:
    settings = FleetSettings(PLACEMENT, fabrics=FABRICS, seeds=3)
    fleet = replay_fleet(fleet_dataset, settings, workers=2)
    assert fleet.skipped == [] and sorted(fleet.jobs["job_id"]) == [
        "ddp_mlp",
        "fsdp_mlp",
        "moe_alltoall",
        "pipeline_p2p",
    ]
    for job in fleet.jobs["job_id"]:
        alone = replay(fleet_dataset, job, placement=PLACEMENT)
        single = network_indicators(alone)
        row = fleet.jobs.filter(pl.col("job_id") == job).row(0, named=True)
        shared = [k for k in single if k in row]
        assert len(shared) >= 40
        assert {k: row[k] for k in shared if not _same(row[k], single[k])} == {}
        timed = time_on_fabrics(alone, list(FABRICS), ["ecmp", "spray"], seeds=3).table
        stored = fleet.fabrics.filter(pl.col("job_id") == job).drop("job_id")
        assert stored.height == timed.height > 0
        assert_frame_equal(stored.select(timed.columns), timed, check_dtypes=False, rel_tol=1e-9)


def test_the_tables_have_the_declared_columns_and_every_indicator_is_declared(fleet_dataset: Path) -> None:
    fleet = replay_fleet(fleet_dataset, FleetSettings(PLACEMENT, fabrics=FABRICS[:1], seeds=1), workers=1)
    declared = arrow_schema("replay_jobs").names
    assert fleet.jobs.columns == declared and fleet.fabrics.columns == arrow_schema("replay_fabrics").names
    alone = network_indicators(replay(fleet_dataset, "ddp_mlp", placement=PLACEMENT))
    assert set(alone) - set(declared) == {"timing", "burst_peak_over_mean"}  # the replay's times: not the fleet's


def test_replay_fleet_stores_the_tables_sql_reads_and_a_second_run_replaces_them(
    fleet_dataset: Path, tmp_path: Path
) -> None:
    for attempt in range(2):
        done = run("replay", fleet_dataset, "--fleet", "-o", tmp_path / "out", "--gpus-per-host", "2", "--workers", "2")
        assert done.returncode == 0, done.stderr
        assert "4 jobs replayed (0 skipped) on 2 fabrics" in done.stderr, attempt
    # the command the summary suggests runs as printed and shows the slowdowns per class
    suggested = re.search(r"query: tracekit (.+)$", " ".join(done.stderr.split()))
    assert suggested, done.stderr
    shown = run(*shlex.split(suggested.group(1)))
    assert shown.returncode == 0 and "clos2-1to1" in shown.stdout, shown.stderr
    with tracekit.open(fleet_dataset) as ds:
        assert ds.sql("select count(*) from replay_jobs").fetchall() == [(4,)]
        rows = ds.sql(
            "select j.class, f.fabric, f.routing, f.slowdown from replay_fabrics f join replay_jobs j using (job_id) "
            "where f.comm_type = 'all' order by all"
        ).fetchall()
    assert len(rows) == 4 * 2 * 2 and all(r[3] >= 1.0 - 1e-9 for r in rows)
    assert {r[0] for r in rows} == {"ddp", "fsdp", "moe", "llm-3d"}
    on_disk = pl.read_parquet(tmp_path / "out" / "replay_jobs.parquet")
    assert on_disk.height == 4 and (tmp_path / "out" / "replay.json").is_file()


def test_a_fleet_replay_of_some_jobs_replaces_only_their_rows(fleet_dataset: Path, tmp_path: Path) -> None:
    settings = FleetSettings(PLACEMENT, fabrics=FABRICS[:1], seeds=1)
    store(replay_fleet(fleet_dataset, settings, workers=1), fleet_dataset)
    with tracekit.open(fleet_dataset) as ds:
        before = ds.frame("replay_jobs").sort("job_id")
    done = run("replay", fleet_dataset, "--fleet", "--job", "ddp_mlp", "-o", tmp_path / "out", "--gpus-per-host", "4")
    assert done.returncode == 0, done.stderr
    assert "1 jobs replayed (0 skipped)" in done.stderr
    with tracekit.open(fleet_dataset) as ds:
        after = ds.frame("replay_jobs").sort("job_id")
        fabrics = {r[0] for r in ds.sql("select distinct job_id from replay_fabrics").fetchall()}
    assert after["job_id"].to_list() == before["job_id"].to_list() and len(fabrics) == 4
    others = pl.col("job_id") != "ddp_mlp"
    assert_frame_equal(after.filter(others), before.filter(others))
    mine = after.filter(~others).row(0, named=True)
    assert mine["settings"] != before.filter(~others).row(0, named=True)["settings"]  # 4 GPUs per host now
    nothing = run("replay", fleet_dataset, "--fleet", "--label", "nosuch", "-o", tmp_path / "o3")
    assert nothing.returncode == 2 and "no job of" in nothing.stderr and "(labels nosuch)" in nothing.stderr
    refused = run("replay", fleet_dataset, "--label", "ddp", "-o", tmp_path / "o2")
    assert refused.returncode == 2 and "--fleet" in refused.stderr


def test_an_ingest_drops_the_replay_rows_of_the_jobs_it_touches(fleet_dataset: Path) -> None:
    settings = FleetSettings(PLACEMENT, fabrics=FABRICS[:1], seeds=1)
    store(replay_fleet(fleet_dataset, settings, workers=1), fleet_dataset)
    assert ingest([ROOT / "sample_traces" / "chakra" / "ddp_mlp"], fleet_dataset, job="ddp_mlp").ok
    with tracekit.open(fleet_dataset) as ds:
        kept = {r[0] for r in ds.sql("select distinct job_id from replay_fabrics").fetchall()}
        assert sorted(r[0] for r in ds.sql("select job_id from replay_jobs").fetchall()) == sorted(kept)
    assert kept == {"fsdp_mlp", "moe_alltoall", "pipeline_p2p"}


def test_a_job_that_cannot_be_replayed_is_skipped_with_its_reason_and_the_rest_stored(
    fleet_dataset: Path, tmp_path: Path
) -> None:
    con = duckdb.connect(str(fleet_dataset / "tracekit.duckdb"))
    con.execute("update jobs set world_size = 2000000000 where job_id = 'fsdp_mlp'")
    con.close()
    done = run("replay", fleet_dataset, "--fleet", "-o", tmp_path / "out", "--gpus-per-host", "2", "-q")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "skipped job fsdp_mlp: job fsdp_mlp: world_size 2000000000 is outside 1..1048576"
    ]
    with tracekit.open(fleet_dataset) as ds:
        assert ds.sql("select count(*) from replay_jobs").fetchall() == [(3,)]
    assert pl.read_csv(tmp_path / "out" / "skipped.csv")["job_id"].to_list() == ["fsdp_mlp"]


def test_a_bug_in_one_job_s_replay_skips_that_job_only(
    fleet_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two values of a hostile dataset made the replay raise its own exceptions (a zero-byte job:
    # numpy's UFuncTypeError; an unknown comm_type: the algorithms' NotApplicable), and the first one
    # ended the whole fleet run with a traceback. Both are fixed (tests/replay/test_hostile_values.py);
    # a bug not found yet is injected here, in-process, to hold the fleet to one job lost per bug.
    import tracekit.replay.decompose as decompose_module
    from tracekit.cli import app

    real = decompose_module.decompose

    def failing(job: Any, *args: Any, **kwargs: Any) -> Any:
        if job.job == "fsdp_mlp":
            raise ZeroDivisionError("float division by zero\n  on a second line")
        return real(job, *args, **kwargs)

    monkeypatch.setattr(decompose_module, "decompose", failing)
    settings = FleetSettings(PLACEMENT, fabrics=FABRICS[:1], seeds=1)
    fleet = replay_fleet(fleet_dataset, settings, workers=1)
    reason = (
        "job fsdp_mlp: unexpected ZeroDivisionError: float division by zero (a bug of the replay: please report it)"
    )
    assert fleet.skipped == [("fsdp_mlp", reason)]
    assert sorted(fleet.jobs["job_id"]) == ["ddp_mlp", "moe_alltoall", "pipeline_p2p"]
    done = CliRunner().invoke(
        app, ["replay", str(fleet_dataset), "--fleet", "-o", str(tmp_path / "out"), "--workers", "1", "-q"]
    )
    assert done.exit_code == 1
    assert done.stderr.splitlines() == [f"skipped job fsdp_mlp: {reason}"]
    with tracekit.open(fleet_dataset) as ds:
        assert ds.sql("select count(*) from replay_jobs").fetchall() == [(3,)]


def test_fleet_errors_are_one_line(tmp_path: Path) -> None:
    done = run("replay", tmp_path / "nothing", "--fleet", "-o", tmp_path / "out")
    assert done.returncode == 3 and done.stderr.splitlines() == [
        f"error: {tmp_path / 'nothing'}: not a tracekit dataset (no tracekit.duckdb)"
    ]
    assert not (tmp_path / "nothing").exists() and not (tmp_path / "out").exists()


def test_a_dataset_another_program_writes_is_refused_before_any_work(fleet_dataset: Path, tmp_path: Path) -> None:
    # Seen in the new-user pass: with the DuckDB shell open on the dataset (read-write), the fleet
    # replay worked for its whole run and only then found it could not store its tables.
    import subprocess
    import sys

    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('open', flush=True); "
         "sys.stdin.read()", str(fleet_dataset / "tracekit.duckdb")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        done = run("replay", fleet_dataset, "--fleet", "-o", tmp_path / "out", "--gpus-per-host", "2")
    finally:
        holder.communicate("")
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.splitlines()
    assert "open in another program" in line and "python" in line and "--out" not in line, line
    assert not (tmp_path / "out").exists()


def test_what_recovering_an_earlier_run_found_is_said_by_the_fleet_replay(fleet_dataset: Path, tmp_path: Path) -> None:
    # The recovery that `writing()` runs names a torn commit marker in Dataset.warnings; the ingest
    # printed it, the fleet replay dropped it.
    torn = fleet_dataset / ".staging" / "r" / "COMMIT.json"
    torn.parent.mkdir(parents=True)
    torn.write_text('{"run_id": "')
    done = run("replay", fleet_dataset, "--fleet", "-o", tmp_path / "out", "--gpus-per-host", "2")
    assert done.returncode == 0, done.stderr
    [warning] = [line for line in (done.stdout + done.stderr).splitlines() if str(torn) in line]
    assert warning.startswith("warning:"), warning
    assert not torn.exists()

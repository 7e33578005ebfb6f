"""tracekit.ingest.logs: a rank's Flight Recorder dump beside its profiler trace, each collective once.

On the real captures of sample_traces/flight_recorder (torch 2.13, gloo: a dump per rank as pickle and
JSON, and a profiler trace of one step of the same run), and on hand-made rows for what gloo cannot
show (NCCL traces that record sequence ids, traces with no clock).
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import tracekit
from tests.conftest import SAMPLE_TRACES
from tracekit.ingest import ingest
from tracekit.ingest.logs import Clock, link_logs
from tracekit.replay.collectives import load_job
from tracekit.schema import arrow_schema

pytestmark = pytest.mark.slow  # 13 ingests of the real captures: about a minute

SAMPLES = SAMPLE_TRACES / "flight_recorder"
JOBS = ("ddp_mlp", "fsdp_mlp", "pipeline_p2p")


def _rows(folder: Path | list[Path], out: Path) -> pl.DataFrame:
    report = ingest(folder if isinstance(folder, list) else [folder], out, job="job", workers=1)
    assert report.ok, report.errors
    with tracekit.open(out) as ds:
        return ds.frame("collectives")


def _copy(job: str, dest: Path, keep: tuple[str, ...]) -> Path:
    dest.mkdir(parents=True)
    for path in (SAMPLES / job).iterdir():
        if path.name.startswith(keep):
            shutil.copy(path, dest / path.name)
    return dest


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {job: tmp_path_factory.mktemp(job) for job in JOBS}


@pytest.fixture(scope="module")
def datasets(ingested: dict[str, dict[str, pl.DataFrame]], roots: dict[str, Path]) -> dict[str, Path]:
    """The dataset of each whole sample folder (dumps and profiler traces)."""
    return {job: roots[job] / "d4" for job in JOBS}


@pytest.fixture(scope="module")
def ingested(roots: dict[str, Path]) -> dict[str, dict[str, pl.DataFrame]]:
    """Per job: the rows of the dumps alone, of the profiler traces alone, and of the whole folder."""
    out: dict[str, dict[str, pl.DataFrame]] = {}
    for job in JOBS:
        root = roots[job]
        out[job] = {
            "dumps": _rows(_copy(job, root / "dumps", ("nccl_trace_rank_",)), root / "d1"),
            "pickles": _rows(_pickles_only(job, root / "pickles"), root / "d2"),
            "profiler": _rows(_copy(job, root / "profiler", ("kineto_",)), root / "d3"),
            "both": _rows(SAMPLES / job, root / "d4"),
        }
    return out


def _pickles_only(job: str, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for path in sorted((SAMPLES / job).glob("nccl_trace_rank_?")):
        shutil.copy(path, dest / path.name)
    return dest


@pytest.mark.parametrize("job", JOBS)
def test_a_dump_and_a_profiler_trace_of_a_rank_count_each_collective_once(
    ingested: dict[str, dict[str, pl.DataFrame]], job: str
) -> None:
    rows = ingested[job]
    dumps, profiler, both = rows["dumps"], rows["profiler"], rows["both"]
    # The pickle and the JSON of one dump count once.
    assert dumps.height == rows["pickles"].height
    # Every entry once, plus what only the profiler holds (gloo records no send/recv): never the sum.
    p2p = profiler.filter(pl.col("comm_type").is_in(["SEND", "RECV"])).height
    assert both.height == dumps.height + p2p < dumps.height + profiler.height
    for rank in range(4):
        mine = both.filter(pl.col("rank") == rank)
        traced = mine.filter(pl.col("source") != "flight_recorder")
        assert traced.height == profiler.filter(pl.col("rank") == rank).height  # the profiler's rows all stand
        assert (
            traced["trace_id"].unique().to_list()
            == profiler.filter(pl.col("rank") == rank)["trace_id"].unique().to_list()
        )
    # By type: the profiler's rows, and the entries outside its step (the profiler says REDUCE_SCATTER
    # where gloo's recorder says ALL_REDUCE: the row is the profiler's).
    own = both.filter(pl.col("source") == "flight_recorder")
    assert own.height == dumps.height - (profiler.height - p2p)
    assert Counter(both["comm_type"].to_list()) == Counter(own["comm_type"].to_list()) + Counter(
        profiler["comm_type"].to_list()
    )


def test_the_profiler_rows_take_the_entries_sequence_ids_and_groups(
    ingested: dict[str, dict[str, pl.DataFrame]],
) -> None:
    both = ingested["pipeline_p2p"]["both"]
    profiled = both.filter((pl.col("source") == "c10d") & (pl.col("comm_type") == "ALL_REDUCE"))
    assert profiled.height == 16
    # The Kineto trace names no group of a functional all-reduce; the dump does: DP pairs "1" and "2".
    assert (
        ingested["pipeline_p2p"]["profiler"].filter(pl.col("comm_type") == "ALL_REDUCE")["pg_name"].null_count() == 16
    )
    by_rank = {r: sorted(set(profiled.filter(pl.col("rank") == r)["pg_name"].to_list())) for r in range(4)}
    assert by_rank == {0: ["1"], 1: ["2"], 2: ["1"], 3: ["2"]}
    assert profiled["seq"].to_list() and profiled["seq"].null_count() == 0
    assert set(profiled["group_size"].to_list()) == {2}
    # The profiler's timing and ids stay its own.
    assert set(profiled["trace_id"].to_list()) <= set(ingested["pipeline_p2p"]["profiler"]["trace_id"].to_list())


@pytest.mark.parametrize("job", JOBS)
def test_rows_of_one_collective_match_across_ranks_by_group_and_sequence(
    ingested: dict[str, dict[str, pl.DataFrame]], datasets: dict[str, Path], job: str
) -> None:
    both = ingested[job]["both"]
    keyed = both.filter(pl.col("seq").is_not_null() & ~pl.col("comm_type").is_in(["SEND", "RECV"]))
    matched = keyed.group_by("pg_name", "seq").agg(
        pl.col("rank").n_unique().alias("ranks"),
        pl.col("group_size").max(),
        pl.col("comm_type").n_unique().alias("types"),
        pl.col("in_bytes").n_unique().alias("sizes"),
        pl.len().alias("rows"),
    )
    assert matched.height > 0
    assert (matched["ranks"] == matched["group_size"]).all()
    assert (
        (matched["types"] == 1).all() and (matched["sizes"] == 1).all() and (matched["rows"] == matched["ranks"]).all()
    )
    # The replay's matching finds every collective on all its members.
    with tracekit.open(datasets[job]) as ds:
        logical = load_job(ds, "job").collectives
    assert (logical["participants"] == logical["n"]).all()


def test_a_trace_that_cannot_place_the_entries_keeps_its_rows_and_the_dump_says_so(tmp_path: Path) -> None:
    """Execution traces carry neither a wall clock nor (on gloo) sequence ids: they stand alone."""
    job = tmp_path / "job"
    job.mkdir()
    for rank in range(4):
        shutil.copy(SAMPLE_TRACES / "captured" / "ddp_mlp" / f"et_rank{rank}.json.gz", job)
        shutil.copy(SAMPLES / "ddp_mlp" / f"nccl_trace_rank_{rank}", job)
    out = tmp_path / "ds"
    report = ingest([job], out, workers=1)
    assert report.ok, report.errors
    with tracekit.open(out) as ds:
        sources = Counter(ds.frame("collectives")["source"].to_list())
        warnings = ds.sql("select path, warnings from traces where format = 'flight_recorder' order by path").fetchall()
    assert "flight_recorder" not in sources and sum(sources.values()) == 4 * 10  # the ETs' 10 per rank
    assert all(any("16 entries not counted" in w for w in ws) for _, ws in warnings), warnings


# ------------------------------------------------------------------------------- hand-made rows


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Collectives rows as the job's finishing holds them (every column of the table)."""
    empty = pl.from_arrow(arrow_schema("collectives").empty_table())
    assert isinstance(empty, pl.DataFrame)
    base = dict.fromkeys(empty.columns)
    return pl.DataFrame([{**base, "inferred": [], **row} for row in rows], schema=empty.schema)


def _trace_row(op_id: int, comm_type: str, start: float, **extra: Any) -> dict[str, Any]:
    return {
        "trace_id": "kineto",
        "rank": 0,
        "op_id": op_id,
        "comm_type": comm_type,
        "source": "record_param_comms",
        "start_us": start,
        "duration_us": 10.0,
        "in_bytes": 64,
        **extra,
    }


def _entry(op_id: int, comm_type: str, start: float, seq: int, **extra: Any) -> dict[str, Any]:
    return {
        "trace_id": "dump",
        "rank": 0,
        "op_id": op_id,
        "comm_type": comm_type,
        "source": "flight_recorder",
        "start_us": start,
        "seq": seq,
        "pg_name": "0",
        "group_size": 8,
        "in_bytes": 64,
        **extra,
    }


FORMATS = {"kineto": "kineto", "dump": "flight_recorder"}


def test_a_trace_that_records_sequence_ids_covers_the_entries_it_holds_by_them() -> None:
    """NCCL's record_param_comms carries the group's sequence id: no clock is needed."""
    rows = [_trace_row(i, "ALL_REDUCE", 100.0 + i, seq=5 + i, pg_name="0") for i in range(3)]
    entries = [_entry(i, "ALL_REDUCE", 0.0, seq=3 + i) for i in range(7)]  # seqs 3..9, the trace holds 5..7
    linked, notes = link_logs(_frame(rows + entries), FORMATS, {"kineto": Clock(None, None)})
    assert notes == {}
    assert sorted(linked.filter(pl.col("source") == "flight_recorder")["seq"].to_list()) == [3, 4, 8, 9]
    assert linked.filter(pl.col("trace_id") == "kineto")["group_size"].to_list() == [8, 8, 8]  # filled by seq


def test_a_trace_with_a_clock_covers_the_entries_recorded_while_it_recorded() -> None:
    # The trace's clock: its times + 1e9 µs are the wall clock; it started at 1e9 + 50 µs.
    clock = Clock(started_us=1e9 + 50, offset_us=1e9)
    rows = [_trace_row(0, "BROADCAST", 60.0), _trace_row(1, "ALL_REDUCE", 80.0), _trace_row(2, "ALL_REDUCE", 120.0)]
    wall = [1e9 + t for t in (10, 55, 79, 118, 200)]  # before, 3 inside, after
    types = ["ALL_REDUCE", "BROADCAST", "ALL_REDUCE", "ALL_REDUCE", "ALL_REDUCE"]
    entries = [_entry(i, t, w, seq=i + 1) for i, (t, w) in enumerate(zip(types, wall, strict=True))]
    linked, _ = link_logs(_frame(rows + entries), FORMATS, {"kineto": clock, "dump": Clock(None, 0.0)})
    own = linked.filter(pl.col("source") == "flight_recorder").sort("seq")
    assert own["seq"].to_list() == [1, 5]
    traced = linked.filter(pl.col("trace_id") == "kineto").sort("op_id")
    assert traced["seq"].to_list() == [2, 3, 4] and traced["pg_name"].to_list() == ["0", "0", "0"]
    assert traced["start_us"].to_list() == [60.0, 80.0, 120.0]  # the trace's own timing stays


def test_entries_of_another_rank_or_of_a_rank_without_a_trace_are_left_alone() -> None:
    rows = [_trace_row(0, "ALL_REDUCE", 100.0, seq=1, pg_name="0")]
    entries = [_entry(0, "ALL_REDUCE", 0.0, seq=1, rank=1), _entry(0, "ALL_REDUCE", 0.0, seq=1, rank=None)]
    linked, notes = link_logs(_frame(rows + entries), FORMATS, {})
    assert linked.height == 3 and notes == {}


def test_counts_that_disagree_are_not_paired_but_still_covered() -> None:
    clock = Clock(started_us=0.0, offset_us=0.0)
    rows = [_trace_row(0, "REDUCE_SCATTER", 10.0)]  # gloo's reduce-scatter, recorded as an all-reduce
    entries = [_entry(0, "ALL_REDUCE", 12.0, seq=7)]
    linked, _ = link_logs(_frame(rows + entries), FORMATS, {"kineto": clock})
    assert linked.height == 1 and linked["seq"].to_list() == [None]


def test_the_clock_decides_over_sequence_ids_that_start_again_with_each_run() -> None:
    clock = Clock(started_us=1000.0, offset_us=0.0)
    rows = [_trace_row(i, "ALL_REDUCE", 1000.0 + 10 * i, seq=1 + i, pg_name="0") for i in range(3)]
    earlier = [_entry(i, "ALL_REDUCE", 5.0 + i, seq=1 + i) for i in range(3)]  # the run before: seqs 1..3 again
    linked, _ = link_logs(_frame(rows + earlier), FORMATS, {"kineto": clock})
    assert linked.filter(pl.col("source") == "flight_recorder").height == 3 and linked.height == 6


def test_an_untimed_log_beside_a_timed_log_of_the_same_rank_is_not_counted_twice() -> None:
    # A Flight Recorder dump and an NCCL INFO log of one rank (no trace) both held its collectives,
    # and both were counted. The NCCL log's lines carry no time (nor PyTorch's sequence ids, nor its
    # group names) to tell which of them the dump holds: as beside a trace, they are not counted.
    formats = {"dump": "flight_recorder", "log": "nccl_log"}
    dump = [_entry(i, "ALL_REDUCE", 1e9 + i, seq=1 + i) for i in range(3)]
    lines = [_entry(i, "ALL_REDUCE", 0.0, seq=i, trace_id="log", source="nccl_log", start_us=None) for i in range(5)]
    other = [_entry(0, "ALL_REDUCE", 0.0, seq=0, trace_id="log", source="nccl_log", start_us=None, rank=1)]
    linked, notes = link_logs(_frame(dump + lines + other), formats, {})
    assert Counter(zip(linked["rank"].to_list(), linked["source"].to_list(), strict=True)) == {
        (0, "flight_recorder"): 3,
        (1, "nccl_log"): 1,  # no dump of rank 1: its lines are its only record
    }
    assert notes == {
        "log": "5 entries not counted: a log of the same rank (flight_recorder) records the rank's "
        "collectives, and these carry no time to tell which of them it holds"
    }


def test_a_log_whose_entries_are_partly_timed_keeps_all_of_them() -> None:
    # NCCL Inspector gives a time only to the records of verbose output: one file's untimed records
    # were dropped as if a timed log of the rank held them, the timed log being the same file.
    formats = {"insp": "nccl_inspector"}
    timed = [_entry(i, "ALL_REDUCE", 1e9 + i, seq=1 + i, trace_id="insp", source="nccl_inspector") for i in range(2)]
    untimed = [
        _entry(2 + i, "ALL_GATHER", 0.0, seq=1 + i, trace_id="insp", source="nccl_inspector", start_us=None)
        for i in range(3)
    ]
    linked, notes = link_logs(_frame(timed + untimed), formats, {})
    assert linked.height == 5 and notes == {}


def test_a_timed_log_beside_a_better_log_of_the_rank_keeps_only_what_that_log_did_not_record() -> None:
    # A Flight Recorder dump holds the rank's last collectives (PyTorch's groups and sequence ids);
    # an Inspector file of the same rank holds all of the run's, under NCCL's communicator ids: its
    # records of the dump's span are the dump's entries, the ones before it are not in the dump.
    formats = {"dump": "flight_recorder", "insp": "nccl_inspector"}
    dump = [_entry(i, "ALL_REDUCE", 1e9 + 100 * i, seq=10 + i) for i in range(3)]
    insp = [
        _entry(i, "ALL_REDUCE", 1e9 - 1000 + 100 * i, seq=1 + i, trace_id="insp", source="nccl_inspector", pg_name="c")
        for i in range(13)
    ]  # 10 before the dump's first entry, 3 within its span
    linked, notes = link_logs(_frame(dump + insp), formats, {})
    assert Counter(linked["source"].to_list()) == {"flight_recorder": 3, "nccl_inspector": 10}
    assert notes == {
        "insp": "3 entries not counted: they were recorded while a log of the same rank (flight_recorder) was, "
        "which holds them"
    }


def test_an_untimed_log_beside_an_untimed_better_log_of_the_rank_is_not_counted_twice() -> None:
    # Inspector without verbose output and an NCCL INFO log of one rank: neither carries a time, and
    # both hold the rank's collectives (NCCL's own communicators and counters, but counted apart).
    formats = {"insp": "nccl_inspector", "log": "nccl_log"}
    insp = [
        _entry(i, "ALL_REDUCE", 0.0, seq=1 + i, trace_id="insp", source="nccl_inspector", start_us=None)
        for i in range(4)
    ]
    lines = [_entry(i, "ALL_REDUCE", 0.0, seq=i, trace_id="log", source="nccl_log", start_us=None) for i in range(5)]
    linked, notes = link_logs(_frame(insp + lines), formats, {})
    assert Counter(linked["source"].to_list()) == {"nccl_inspector": 4}
    assert notes == {
        "log": "5 entries not counted: a log of the same rank (nccl_inspector) records the rank's "
        "collectives, and these carry no time to tell which of them it holds"
    }

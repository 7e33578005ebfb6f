"""The replay on hostile datasets: values at and past every bound it states. Its work is bounded by
the collectives' members and recorded transfers, never by a value (a span, a split, a size); what it
cannot replay within its bounds it refuses in one line naming the job and the collective."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tests.synthetic import write_dataset
from tracekit.errors import InputError
from tracekit.replay import replay
from tracekit.replay.collectives import MAX_BYTES
from tracekit.replay.matrices import gpu_matrix

PIB = 1 << 50


def _row(job: str, rank: int, op: int, comm_type: str, size: int | None, **extra: Any) -> dict[str, Any]:
    return {
        "job_id": job,
        "rank": rank,
        "trace_id": f"{job}-t{rank}",
        "op_id": op,
        "op_name": f"op{op}",
        "comm_type": comm_type,
        "group_size": extra.pop("group_size", None),
        "pg_name": "0",
        "in_bytes": size,
        "dtype": "Float",
        "is_uneven": False,
        "start_us": float(op),
        "duration_us": 1.0,
        **extra,
    }


def _dataset(root: Path, world: int, collectives: list[dict[str, Any]], job: str = "j") -> Path:
    ranks = sorted({c["rank"] for c in collectives})
    traces = [{"trace_id": f"{job}-t{r}", "job_id": job, "rank": r, "path": f"t{r}", "status": "ok"} for r in ranks]
    tables = {
        "jobs": [{"job_id": job, "world_size": world, "label": "hostile"}],
        "collectives": collectives,
        "traces": traces,
        "process_groups": [{"job_id": job, "pg_name": "0", "group_size": world, "ranks": []}],
    }
    return write_dataset(root, tables)


def _alltoallv(root: Path, splits: list[int], world: int = 4, in_bytes: int = 16) -> Path:
    """One all-to-allv over `world` ranks, each sending `splits` (elements of 4 bytes); in_bytes
    within its bound (a hostile trace need not make it agree with the splits)."""
    rows = [
        _row("j", r, 0, "ALL_TO_ALL", in_bytes, group_size=world, in_splits=splits, is_uneven=True)
        for r in range(world)
    ]
    return _dataset(root, world, rows)


# --- sizes: splits x element size, and the job's sums ----------------------------------------------


def test_a_split_past_the_byte_bound_is_refused_naming_the_job_and_collective(tmp_path: Path) -> None:
    """2^59 elements of 4 bytes: a 2 EiB transfer, past the replay's own 1 PiB bound."""
    with pytest.raises(InputError, match=r"job j: ALL_TO_ALL op0 \(collective 0\).*in_splits.*1 PiB") as caught:
        replay(_alltoallv(tmp_path / "ds", [1 << 59, 1, 1, 1]), "j")
    assert "\n" not in str(caught.value)


def test_a_split_whose_bytes_wrap_64_bits_is_refused_not_dropped(tmp_path: Path) -> None:
    """2^62 elements of 4 bytes wrap to 0 in int64: the transfer vanished without a word."""
    with pytest.raises(InputError, match=r"job j: ALL_TO_ALL op0 \(collective 0\)"):
        replay(_alltoallv(tmp_path / "ds", [1, 1 << 62, 1, 1]), "j")


def test_a_split_at_the_byte_bound_is_replayed_exactly(tmp_path: Path) -> None:
    result = replay(_alltoallv(tmp_path / "ds", [1, MAX_BYTES // 4 - 3, 1, 1], in_bytes=MAX_BYTES), "j")
    assert int(result.flows["bytes"].max()) == MAX_BYTES - 12  # type: ignore[arg-type]


def test_a_job_whose_bytes_would_wrap_64_bits_is_refused(tmp_path: Path) -> None:
    """9,000 all-reduces of 1 PiB over 2 ranks: 2^63 bytes and more on the wire; the totals and
    matrices summed them in int64 and printed negative bytes."""
    rows = [_row("j", r, op, "ALL_REDUCE", PIB, group_size=2) for op in range(9000) for r in range(2)]
    with pytest.raises(InputError, match=r"job j: .*ALL_REDUCE op\d+ \(collective \d+\).*64 bits") as caught:
        replay(_dataset(tmp_path / "ds", 2, rows), "j", algorithm="ring")
    assert "\n" not in str(caught.value)


def test_sums_below_the_bound_stay_exact(tmp_path: Path) -> None:
    rows = [_row("j", r, op, "ALL_REDUCE", PIB, group_size=2) for op in range(40) for r in range(2)]
    result = replay(_dataset(tmp_path / "ds", 2, rows), "j", algorithm="ring")
    total = sum(int(b) for b in result.flows["bytes"].to_list())
    assert int(result.flows["bytes"].sum()) == total > 0
    matrix = gpu_matrix(result.flows)
    assert int(matrix["bytes"].sum()) == total and (matrix["bytes"] >= 0).all()


def test_replay_summary_prints_no_negative_bytes(tmp_path: Path) -> None:
    from tests.conftest import cli

    rows = [_row("j", r, op, "ALL_REDUCE", PIB, group_size=2) for op in range(9000) for r in range(2)]
    result = cli("replay", _dataset(tmp_path / "ds", 2, rows), "--algorithm", "ring", "--out", tmp_path / "out")
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "error: job j:" in result.stderr


# --- time: a span of 10^13 µs ----------------------------------------------------------------------


def test_a_span_of_ten_trillion_microseconds_stays_within_the_bucket_cap(tmp_path: Path) -> None:
    """Two all-reduces 10^13 µs apart (a 1 ms bucket each would be 10^10 buckets, 80 GB): the buckets are
    capped, widened to fit, and replay.json says how wide."""
    import json
    import time

    from tracekit.replay import write_outputs
    from tracekit.replay.indicators import MAX_BUCKETS

    rows = [
        {**_row("j", r, op, "ALL_REDUCE", 1 << 20, group_size=16), "start_us": start}
        for op, start in enumerate([0.0, 1e13])
        for r in range(16)  # two hosts of 8 GPUs: network flows
    ]
    began = time.monotonic()
    result = replay(_dataset(tmp_path / "ds", 16, rows), "j")
    write_outputs(result, tmp_path / "out", ["flows"])
    assert time.monotonic() - began < 30
    buckets = pl.read_parquet(tmp_path / "out" / "burstiness.parquet")
    assert 1 < buckets.height <= MAX_BUCKETS
    assert int(buckets["bytes"].sum()) == int(result.flows.filter(pl.col("link") == "network")["bytes"].sum())
    notes = json.loads((tmp_path / "out" / "replay.json").read_text())["notes"]
    assert any(note.startswith("burstiness: buckets of 1000.1 s, not 0.001 s") for note in notes), notes


# --- all-to-allv: work by members and non-zero splits, never n x n ----------------------------------


def test_all_zero_splits_over_many_ranks_build_no_n_by_n_matrix(tmp_path: Path) -> None:
    """1,500 ranks sending all-zero splits: no flow, and no 1,500 x 1,500 matrix on the way (the
    replay built one per collective, int64, and walked every split in Python)."""
    import tracemalloc

    from tracekit.replay.collectives import load_job
    from tracekit.replay.decompose import decompose
    from tracekit.replay.placement import Placement

    n = 1500
    zeros = [0] * n
    rows = [
        _row("j", r, 0, "ALL_TO_ALL", 0, group_size=n, in_splits=zeros, out_splits=zeros, is_uneven=True)
        for r in range(n)
    ]
    import tracekit

    with tracekit.open(_dataset(tmp_path / "ds", n, rows)) as ds:
        job = load_job(ds, "j")
    tracemalloc.start()
    try:
        parts = decompose(job, Placement())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert parts.flow_count == 0
    assert peak < n * n * 8 // 2, f"{peak:,} bytes at peak"  # half of one int64 n x n matrix


@st.composite
def _split_rows(draw: st.DrawFn) -> tuple[int, list[dict[str, Any]]]:
    n = draw(st.integers(1, 5))
    split = st.one_of(st.none(), st.integers(-1, 3))
    splits = st.one_of(st.none(), st.lists(split, min_size=n, max_size=n), st.lists(split, max_size=n + 1))
    rows = []
    for rank in draw(st.lists(st.integers(0, n - 1), max_size=n + 1)):
        dtype = draw(st.sampled_from(["Float", "Double", None]))
        rows.append(
            {"rank": rank, "dtype": dtype, "in_bytes": draw(st.sampled_from([None, 0, 8, 12, 24])),
             "in_splits": draw(splits), "out_splits": draw(splits)}
        )  # fmt: skip
    return n, rows


@settings(max_examples=examples(300), deadline=None)
@given(case=_split_rows())
def test_split_transfers_read_the_lists_as_the_dense_matrix_did(case: tuple[int, list[dict[str, Any]]]) -> None:
    """The sparse reading gives the transfers and the issues the former n x n matrix gave."""
    import numpy as np

    from tracekit.replay.layout import group_layout
    from tracekit.replay.placement import Placement
    from tracekit.replay.splits import split_transfers

    n, rows = case
    layout = group_layout(list(range(n))[::-1], Placement())  # members in an order of their own
    splits: pl.DataType = pl.List(pl.Int64)
    schema: dict[str, pl.DataType] = {"rank": pl.Int64(), "dtype": pl.String(), "in_bytes": pl.Int64(),
                                      "in_splits": splits, "out_splits": splits}  # fmt: skip
    parts = pl.DataFrame(rows, schema=schema, orient="row") if rows else None
    issues: dict[str, int] = {}
    got = split_transfers(parts, layout, issues, "here")
    expected_issues: dict[str, int] = {}
    matrix = _dense(rows, layout, expected_issues) if rows else None
    assert sorted(issues.items()) == sorted(expected_issues.items())
    if matrix is None:
        assert got is None
        return
    assert got is not None
    src, dst = np.nonzero(matrix > 0)
    keep = src != dst
    assert got.src.tolist() == src[keep].tolist() and got.dst.tolist() == dst[keep].tolist()
    assert got.bytes.tolist() == matrix[src[keep], dst[keep]].tolist()


def _dense(rows: list[dict[str, Any]], layout: Any, issues: dict[str, int]) -> Any:
    """The former reading: an n x n matrix of bytes (-1 unknown), senders' lists first, receivers' after."""
    import numpy as np

    from tracekit.parsers.common.names import dtype_bytes

    def count(issue: str) -> None:
        issues[issue] = issues.get(issue, 0) + 1

    n = layout.n
    matrix = np.full((n, n), -1, dtype=np.int64)
    known, received = False, []
    for row in rows:
        position = int(layout.positions(np.array([row["rank"]]))[0])
        elem = dtype_bytes(row["dtype"])
        if not elem:
            splits = row["in_splits"] or row["out_splits"]
            total = sum(s for s in splits or [] if s is not None and s > 0)
            elem = row["in_bytes"] // total if row["in_bytes"] and total and row["in_bytes"] % total == 0 else None
        for column in ("in_splits", "out_splits"):
            splits = row[column]
            if splits is None:
                continue
            if len(splits) != n or elem is None or any(s is None or s < 0 for s in splits):
                count(f"{column} unusable (length != group size, negative, or no element size)")
                continue
            values = np.zeros(n, dtype=np.int64)
            values[layout.position_of_member] = np.array(splits, dtype=np.int64) * elem
            if column == "in_splits":
                matrix[position, :] = values
                known = True
            else:
                received.append((position, values))
    disagree, seen = set(), set()
    for position, values in received:
        if position in seen:
            continue  # a receiver's second list fills nothing the first left
        seen.add(position)
        sent_to = matrix[:, position]
        unknown = sent_to < 0
        if (~unknown & (sent_to != values)).any():
            disagree.add(position)
        sent_to[unknown] = values[unknown]
        known = known or bool(unknown.any())
    for _ in disagree:
        count("a sender's in_splits and its receiver's out_splits disagree: the sender's are used")
    if not known:
        return None
    if (matrix < 0).any():
        count("pairs between ranks without trace rows are unknown and left out")
    return matrix


# --- values no real trace holds: zero-byte collectives, a comm_type outside the vocabulary ---------


def test_a_job_of_zero_byte_collectives_is_replayed_by_the_fleet_with_no_bytes(tmp_path: Path) -> None:
    """Empty tensors: no transfer is stamped, and the fleet's byte check summed an empty bincount,
    which numpy makes int64 whatever its weights: UFuncTypeError ended the whole fleet run."""
    from tracekit.replay.fleet import FleetSettings, replay_fleet

    kinds = ["ALL_REDUCE", "ALL_TO_ALL", "ALL_REDUCE", "ALL_TO_ALL"]
    rows = [_row("j", r, op, comm, 0, group_size=4) for op, comm in enumerate(kinds) for r in range(4)]
    fleet = replay_fleet(_dataset(tmp_path / "ds", 4, rows), FleetSettings(fabrics=()), workers=1)
    assert fleet.skipped == []
    row = fleet.jobs.row(0, named=True)
    assert (row["collectives"], row["flows"], row["bytes"]) == (4, 0, 0)


def test_a_comm_type_outside_the_vocabulary_is_skipped_with_a_note(tmp_path: Path) -> None:
    """The algorithms' NotApplicable ('ring does not serve BOGUS') escaped the replay and the fleet."""
    from tracekit.replay.fleet import FleetSettings, replay_fleet

    rows = [_row("j", r, 0, "BOGUS[/]", 64, group_size=4) for r in range(4)]
    rows += [_row("j", r, 1, "ALL_REDUCE", 64, group_size=4) for r in range(4)]
    dataset = _dataset(tmp_path / "ds", 4, rows)
    result = replay(dataset, "j")
    assert result.collectives["comm_type"].to_list() == ["ALL_REDUCE"]
    [note] = [n for n in result.notes if "comm_type" in n]
    assert note.startswith("job j: skipped 4 collectives row(s) with a comm_type the replay does not know, e.g. ")
    assert "'BOGUS[/]'" in note
    fleet = replay_fleet(dataset, FleetSettings(fabrics=()), workers=1)
    assert fleet.skipped == [] and fleet.jobs.row(0, named=True)["collectives"] == 1


# --- the fleet: every job it cannot replay listed, with why ------------------------------------------


def test_the_fleet_lists_every_job_it_skips_and_why(tmp_path: Path) -> None:
    """On stderr (one line each) and in OUT/skipped.csv; a job all of whose rows are invalid is one of
    them (it was stored as a job of zero collectives and zero bytes, without a word)."""
    import csv

    from tests.conftest import cli

    jobs: dict[str, tuple[int, list[dict[str, Any]]]] = {
        "good": (4, [_row("good", r, 0, "ALL_REDUCE", 1024, group_size=4) for r in range(4)]),
        "bigsplit": (
            4,
            [
                _row("bigsplit", r, 0, "ALL_TO_ALL", 16, group_size=4, in_splits=[1 << 59, 1, 1, 1], is_uneven=True)
                for r in range(4)
            ],
        ),  # fmt: skip
        "badworld": (0, [_row("badworld", r, 0, "ALL_REDUCE", 1024, group_size=4) for r in range(2)]),
        "badrows": (4, [_row("badrows", -5, 0, "ALL_REDUCE", 1 << 60, group_size=4)]),
        "idle": (4, []),  # no collectives at all: replayed, a job of zero collectives
    }
    tables: dict[str, list[dict[str, Any]]] = {"jobs": [], "collectives": [], "traces": [], "process_groups": []}
    for job, (world, rows) in jobs.items():
        tables["jobs"].append({"job_id": job, "world_size": world, "label": "x"})
        tables["process_groups"].append({"job_id": job, "pg_name": "0", "group_size": world, "ranks": []})
        tables["collectives"].extend(rows)
        ranks = sorted({r["rank"] for r in rows})
        tables["traces"].extend({"trace_id": f"{job}-t{r}", "job_id": job, "rank": r, "path": f"{job}{r}",
                                 "status": "ok"} for r in ranks)  # fmt: skip
    dataset = write_dataset(tmp_path / "ds", tables)
    result = cli("replay", dataset, "--fleet", "--out", tmp_path / "out")
    assert result.returncode == 1, result.stderr
    skipped = {line.split()[2].rstrip(":"): line for line in result.stderr.splitlines() if line.startswith("skipped")}
    assert set(skipped) == {"bigsplit", "badworld", "badrows"}
    assert "1 PiB" in skipped["bigsplit"] and "world_size 0" in skipped["badworld"]
    assert "all 1 collectives row(s) left out" in skipped["badrows"] and "without a rank" in skipped["badrows"]
    with open(tmp_path / "out" / "skipped.csv") as handle:
        listed = {row["job_id"]: row["reason"] for row in csv.DictReader(handle)}
    assert set(listed) == set(skipped) and all(listed[job] in skipped[job] for job in listed)
    assert "2 jobs replayed (3 skipped)" in result.stderr


def test_the_fleets_bytes_per_class_sum_past_64_bits_exactly(tmp_path: Path) -> None:
    """Three jobs of one class, each just below MAX_TOTAL_BYTES: their sum needs more than 64 bits."""
    from tracekit.replay import fleet_locality

    tables: dict[str, list[dict[str, Any]]] = {"jobs": [], "collectives": [], "traces": [], "process_groups": []}
    for job in ("a", "b", "c"):
        tables["jobs"].append({"job_id": job, "world_size": 2, "label": "ddp:m"})
        tables["process_groups"].append({"job_id": job, "pg_name": "0", "group_size": 2, "ranks": []})
        tables["collectives"].extend(
            _row(job, r, op, "ALL_REDUCE", PIB, group_size=2) for op in range(2000) for r in range(2)
        )
        tables["traces"].extend(
            {"trace_id": f"{job}-t{r}", "job_id": job, "rank": r, "path": f"{job}{r}", "status": "ok"} for r in range(2)
        )
    table = fleet_locality(write_dataset(tmp_path / "ds", tables), algorithm="ring")
    per_job = 2000 * 2 * PIB  # a 2-rank ring all-reduce: each rank sends S
    assert table["jobs"].to_list() == [3]
    assert int(table["bytes"][0]) == 3 * per_job > (1 << 63)


def test_a_peer_on_a_collective_that_is_no_send_or_recv_never_sizes_the_world(tmp_path: Path) -> None:
    # Found by the dataset fuzzer (seed 2026, cases 437 and 620): a peer of 2^31 - 1 on an all-reduce
    # row made the world 2^31 ranks; the replay took past 1 GiB and minutes.
    rows = [_row("j", r, 0, "ALL_REDUCE", 1 << 20, group_size=4, peer=2**31 - 1 if r == 0 else None) for r in range(4)]
    result = replay(_dataset(tmp_path / "ds", 4, rows), "j")
    assert result.world_size == 4
    assert result.flows.height > 0


def test_a_group_listing_one_rank_for_calls_of_many_is_replayed_without_a_division_by_zero(tmp_path: Path) -> None:
    # Found by the dataset fuzzer (seed 2026, case 939): process group "0" listing rank 0 only, under
    # all-reduces of four ranks, gave NCCL's tuning model a one-rank ring (zero steps): ZeroDivisionError.
    rows = [_row("j", r, 0, "ALL_REDUCE", 1 << 20, group_size=4) for r in range(4)]
    dataset = _dataset(tmp_path / "ds", 4, rows)
    import duckdb

    with duckdb.connect(str(dataset / "tracekit.duckdb")) as con:
        con.execute("update process_groups set ranks = [0]")
    result = replay(dataset, "j")
    assert result.world_size == 4

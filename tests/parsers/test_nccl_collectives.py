"""NCCL INFO logs as an ingest format (tracekit.parsers.nccl_collectives, format nccl_log).

Fixtures (tests/parsers/nccl_log/README.md): real excerpts from public issue threads, and a job of
4 ranks on 2 nodes written in NCCL 2.21.5's line formats (src/enqueue.cc's COLL line, src/init.cc's
`comm ... nRanks ... nNodes` and `ncclCommInitRank|ncclCommSplit ... - Init COMPLETE` lines).
"""

from __future__ import annotations

import gzip
import shutil
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import tracekit
from tests.conftest import SAMPLE_TRACES
from tests.golden import assert_golden
from tracekit.ingest import ingest
from tracekit.parsers import detect_format, read_trace
from tracekit.parsers.base import MemorySink, TraceError, TraceMeta
from tracekit.parsers.nccl_collectives import MAX_LINE, parse
from tracekit.sources import BytesSource, FileSource

FIXTURES = Path(__file__).resolve().parent / "nccl_log"
JOB = FIXTURES / "job_2x2"
P = "node-a:4101:4101 [0] NCCL INFO "
WORLD = "node-a:4101:4180 [0] NCCL INFO comm 0x1000 rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0\n"


def _coll(
    op: str, count: str = "1024", dtype: str = "7", root: str = "0", nranks: str = "4", opcount: str = "0"
) -> str:
    return (
        f"{P}{op}: opCount {opcount} sendbuff 0x7f0000000000 recvbuff 0x7f0000100000 count {count} datatype {dtype} "
        f"op 0 root {root} comm 0x1000 [nranks={nranks}] stream 0x2000\n"
    )


def read(text: str | bytes, name: str = "x.nccl.log") -> tuple[TraceMeta, list[dict[str, Any]]]:
    data = text.encode() if isinstance(text, str) else text
    sink = MemorySink()
    meta = parse(BytesSource(data, name, name), sink)
    return meta, sink.table("collectives").to_pylist()


def _file(path: Path) -> tuple[TraceMeta, list[dict[str, Any]]]:
    sink = MemorySink()
    fmt, meta = read_trace(FileSource(path, str(path)), sink)
    assert fmt == "nccl_log"
    return meta, sink.table("collectives").to_pylist()


def _summary(path: Path) -> dict[str, Any]:
    meta, rows = _file(path)
    return {
        "rank": meta.rank,
        "world_size": meta.world_size,
        "version": meta.schema_version,
        "groups": [(g.pg_name, g.group_size, g.ranks) for g in meta.process_groups],
        "warnings": [w.message for w in meta.warnings],
        "rows": [{k: v for k, v in row.items() if v is not None} for row in rows],
    }


FILES = sorted(p.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob("*.log"))


@pytest.mark.parametrize("name", FILES)
def test_the_rows_of_every_fixture_are_the_golden_ones(name: str) -> None:
    assert_golden("nccl_log_fixtures", _summary(FIXTURES / name), key=name)


def test_a_rank_of_a_two_node_job_gives_its_collectives_with_nccls_size_convention() -> None:
    meta, rows = _file(JOB / "rank0.nccl.log")
    assert (meta.rank, meta.world_size, meta.schema_version) == (0, 4, "2.21.5+cuda12.4")
    assert [(g.pg_name, g.group_size) for g in meta.process_groups] == [
        ("commId 0x7d3a0c5b1e9f4a21", 4),
        ("commId 0x2f6b8e0d4c1a9375", 2),
    ]
    by_type = {(r["comm_type"], r["pg_name"][-4:]): r for r in rows}
    gather = by_type[("ALL_GATHER", "9375")]  # the TP split, count = sendcount
    assert (gather["dtype"], gather["in_bytes"], gather["out_bytes"], gather["group_size"]) == (
        "BFloat16",
        2097152 * 2,
        2097152 * 2 * 2,
        2,
    )
    scatter = by_type[("REDUCE_SCATTER", "9375")]  # count = recvcount: the full input is in_bytes
    assert (scatter["in_bytes"], scatter["out_bytes"], scatter["seq"]) == (2097152 * 2 * 2, 2097152 * 2, 1)
    send = by_type[("SEND", "4a21")]
    assert (send["peer"], send["in_bytes"], send["dtype"], send["inferred"]) == (2, 65536 * 2, "Half", ["peer"])
    assert [r["seq"] for r in rows if r["pg_name"].endswith("4a21")] == [0, 1, 2, 3, 4]
    assert all(r["source"] == "nccl_log" for r in rows) and len(rows) == 7


def test_an_interleaved_log_gives_its_lowest_rank_and_lists_the_communicator_it_holds_whole() -> None:
    meta, rows = _file(FIXTURES / "interleaved" / "node-a.nccl.log")
    assert meta.rank == 0 and len(rows) == 7
    groups = {g.pg_name: g.ranks for g in meta.process_groups}
    assert groups == {"commId 0x7d3a0c5b1e9f4a21": [], "commId 0x2f6b8e0d4c1a9375": [0, 1]}
    assert any("2 ranks are interleaved" in w.message and "7 COLL lines of rank 1" in w.message for w in meta.warnings)


def test_real_excerpts_read_without_communicator_lines() -> None:
    """pytorch/torchtitan#1369: two TP ranks interleaved, no init lines: the communicator is its pointer."""
    meta, rows = _file(FIXTURES / "real" / "torchtitan-1369.log")
    assert meta.rank is None and [r["op_name"] for r in rows] == ["AllGather", "ReduceScatter", "AllGather"]
    assert [r["seq"] for r in rows] == [0xD, 0xE, 0xF]
    assert rows[0]["pg_name"] == "hopper01:191370:0x55fca23fc0f0" and rows[0]["in_bytes"] == 2097152 * 4
    meta, rows = _file(FIXTURES / "real" / "nccl-584.log")  # NVIDIA/nccl#584: sends and a recv, two comms
    assert Counter(r["comm_type"] for r in rows) == {"SEND": 6, "RECV": 1}
    assert [r["peer"] for r in rows] == [1, 1, 1, 1, 0, 0, 1]
    meta, rows = _file(FIXTURES / "real" / "ray-nccl-1193.log")  # NVIDIA/nccl#1193: Ray's tag before the prefix
    assert len(rows) == 1 and rows[0]["group_size"] == 128 and rows[0]["seq"] == 0x139D


def test_the_registry_tells_a_log_from_its_first_bytes() -> None:
    for name in FILES:
        head = (FIXTURES / name).read_bytes()[: 1 << 16]
        assert detect_format(head, "x") == "nccl_log", name
    assert detect_format(b"[rank0]:" + WORLD.encode(), "x") == "nccl_log"
    with pytest.raises(TraceError):
        detect_format(b"\x08\x01\x12\x00" + WORLD.encode(), "x")  # binary before the line: not a log


def test_newer_and_rccl_spellings() -> None:
    text = (
        WORLD
        + _coll("AlltoAll", count="4096", dtype="10")
        + _coll("Gather", count="8", dtype="11", root="3")
        + P
        + "PutSignal: opCount 0 sendbuff 0x1 recvbuff 0x2 count 4 datatype 7 op 0 root 1 comm 0x1000 [nranks=4] "
        "stream 0x3\n"
        + P
        + "AllReduce: opCount 5 sendbuff 0x1 recvbuff 0x2 count 16 datatype 9 op 0 root 0 comm 0x1000 [nranks=4] "
        "stream 0x3 task 1 globalrank 0\n"
    )
    meta, rows = read(text)
    a2a, gather, put, rccl = rows
    assert (a2a["comm_type"], a2a["dtype"], a2a["in_bytes"], a2a["out_bytes"]) == (
        "ALL_TO_ALL",
        "Float8_e4m3fn",
        16384,
        16384,
    )
    gathered = (gather["comm_type"], gather["dtype"], gather["in_elems"], gather["out_elems"])
    assert gathered == ("GATHER", "Float8_e5m2", 8, 32)
    assert (rccl["comm_type"], rccl["in_bytes"], rccl["seq"]) == ("ALL_REDUCE", 32, 5)
    # NCCL 2.28's one-sided put is typed by the rulebook (tracekit.schema.COMM_TYPE_TABLE: PUT), not
    # skipped as no collective; its root is not read as a peer (PEER_TYPES are send and recv).
    assert (put["comm_type"], put["dtype"], put["in_bytes"], put["peer"]) == ("PUT", "Float", 16, None)
    assert not any("PutSignal" in w.message for w in meta.warnings)
    assert any("share their opCount" in w.message for w in meta.warnings)  # AlltoAll and Gather: opCount 0


def test_a_communicator_at_the_pointer_of_a_destroyed_one_is_a_new_one() -> None:
    def init(rank: int, nranks: int, comm_id: str) -> str:
        return (
            f"{P}comm 0x1000 rank {rank} nRanks {nranks} nNodes 1 localRanks {nranks} localRank {rank} MNNVL 0\n"
            f"{P}ncclCommInitRank comm 0x1000 rank {rank} nranks {nranks} cudaDev 0 nvmlDev 0 busId 18000 "
            f"commId {comm_id} - Init COMPLETE\n"
        )

    meta, rows = read(init(0, 4, "0xaaaa") + _coll("AllReduce") + init(1, 2, "0xbbbb") + _coll("AllReduce", nranks="2"))
    assert [(r["pg_name"], r["group_size"]) for r in rows] == [("commId 0xaaaa", 4), ("commId 0xbbbb", 2)]
    assert [(g.pg_name, g.group_size) for g in meta.process_groups] == [("commId 0xaaaa", 4), ("commId 0xbbbb", 2)]
    assert (meta.rank, meta.world_size, meta.warnings) == (0, 4, [])


def test_bad_values_are_null_with_a_warning_naming_the_line_and_never_size_anything() -> None:
    text = (
        WORLD
        + _coll("AllReduce", count=str(1 << 70))
        + _coll("AllGather", count=str(1 << 61), dtype="0", nranks="1048576")
        + _coll("Broadcast", dtype="99")
        + _coll("Send", root="-1")
        + _coll("Reduce", nranks="99999999999999999999")
        + _coll("AllReduce", opcount="f" * 32)
    )
    started = time.perf_counter()
    meta, rows = read(text)
    assert time.perf_counter() - started < 1
    assert [r["in_bytes"] for r in rows[:2]] == [None, 1 << 61]
    assert rows[1]["out_bytes"] is None  # 2**61 x 2**20 elements: past the bound, null
    assert rows[2]["dtype"] is None and rows[3]["peer"] is None and rows[4]["group_size"] is None
    assert rows[5]["seq"] is None
    places = {w.where for w in meta.warnings}
    assert {"line 2", "line 3", "line 4", "line 5", "line 6", "line 7"} <= places, meta.warnings


def test_a_file_with_no_nccl_line_is_a_one_line_error() -> None:
    with pytest.raises(TraceError) as caught:
        read("just a training log\nstep 1 loss 2.3\n")
    assert "no NCCL INFO line" in caught.value.message and caught.value.where == "line 2"


def test_a_long_line_and_zero_bytes_are_warnings_and_the_rest_is_read() -> None:
    text = WORLD + "x" * (3 * MAX_LINE) + "\n" + _coll("AllReduce")
    meta, rows = read(text)
    assert len(rows) == 1 and any(w.where == "line 2" and "longer than" in w.message for w in meta.warnings)
    meta, rows = read((WORLD + _coll("AllReduce")).encode() + b"\0" * 4096 + _coll("Broadcast").encode())
    assert [r["comm_type"] for r in rows] == ["ALL_REDUCE"] and any("zero bytes" in w.message for w in meta.warnings)


def test_a_line_that_almost_has_the_prefix_costs_time_linear_in_it() -> None:
    """A host-like run of 64 KiB before ' [0] NCCL INFO ' once cost a search quadratic in it (3 minutes)."""
    text = WORLD + ("x" * (MAX_LINE - 40) + " [0] NCCL INFO x\n") * 3 + _coll("AllReduce")
    started = time.process_time()
    meta, rows = read(text)
    assert time.process_time() - started < 1 and len(rows) == 1


def test_a_gzipped_log_of_many_megabytes_streams(tmp_path: Path) -> None:
    line = _coll("AllReduce", count="7382228")
    path = tmp_path / "big.nccl.log.gz"
    lines = 20_000
    with gzip.open(path, "wt") as out:
        out.write(WORLD)
        for _ in range(lines):
            out.write(line)
    meta, rows = _file(path)
    assert len(rows) == lines and meta.rank == 0 and rows[-1]["op_id"] == lines + 1


def test_a_log_is_streamed_not_read_whole(tmp_path: Path) -> None:
    """16 MB of lines (gzipped on disk) are read in memory bounded by a line and a batch of rows."""
    path = tmp_path / "long.nccl.log.gz"
    channel = P + "Channel 00/02 :    0   1   2   3" + " " * 160 + "\n"
    with gzip.open(path, "wt", compresslevel=1) as out:
        out.write(WORLD)
        for _ in range((16 << 20) // len(channel)):
            out.write(channel)
        out.write(_coll("AllReduce"))

    class Rows:
        def __init__(self) -> None:
            self.rows = 0

        def write(self, table: str, batch: Any) -> None:
            self.rows += batch.num_rows

    sink = Rows()
    tracemalloc.start()
    try:
        meta = parse(FileSource(path, str(path)), sink)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sink.rows == 1 and meta.rank == 0
    assert peak < 8 << 20, f"{peak:,} bytes at the peak"


# ------------------------------------------------------------------------------------- ingest


def test_a_job_of_rank_logs_ingests_with_its_ranks_groups_and_missing_ranks(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    for name in ("rank0.nccl.log", "rank1.nccl.log", "rank3.nccl.log"):
        shutil.copy(JOB / name, job / name)
    report = ingest([job], tmp_path / "ds", workers=1)
    assert report.ok, report.errors
    with tracekit.open(tmp_path / "ds") as ds:
        traces = ds.sql("select rank, rank_source, format from traces order by rank").fetchall()
        jobs = ds.sql("select world_size, missing_ranks from jobs").fetchall()
        groups = ds.sql("select pg_name, group_size, ranks from process_groups order by pg_name").fetchall()
        per_rank = ds.sql("select rank, count(*) from collectives where source = 'nccl_log' group by 1 order by 1")
        counts = per_rank.fetchall()
    assert traces == [(0, "content", "nccl_log"), (1, "content", "nccl_log"), (3, "content", "nccl_log")]
    assert jobs == [(4, "2")]
    assert ("commId 0x7d3a0c5b1e9f4a21", 4, [0, 1, 2, 3]) in groups
    assert counts == [(0, 7), (1, 7), (3, 7)]


def test_an_interleaved_log_alone_is_its_lowest_rank_and_the_others_are_missing(tmp_path: Path) -> None:
    job = tmp_path / "node-a"
    job.mkdir()
    shutil.copy(FIXTURES / "interleaved" / "node-a.nccl.log", job / "stderr.rccl.txt")  # found by its name
    shutil.copy(FIXTURES / "real" / "torchtitan-1369.log", job / "train.log")  # no such name: not looked for
    report = ingest([job], tmp_path / "ds", workers=1)
    assert report.ok, report.errors
    assert report.missing == ["job node-a: ranks 1–3 of 4 missing"]
    with tracekit.open(tmp_path / "ds") as ds:
        assert ds.sql("select count(*), min(rank) from collectives").fetchall() == [(7, 0)]
        assert ds.sql("select count(*) from traces").fetchall() == [(1,)]


def test_collectives_that_share_an_opcount_are_each_a_row_of_the_job(tmp_path: Path) -> None:
    """NCCL 2.27+ prints opCount 0 on a single node: equal lines are still distinct collectives."""
    job = tmp_path / "job"
    job.mkdir()
    for rank in (0, 1):
        world = WORLD.replace("rank 0 nRanks 4", f"rank {rank} nRanks 2").replace("4101:4180", f"410{rank}:4180")
        coll = _coll("AllReduce", nranks="2").replace("4101:4101", f"410{rank}:4101")
        (job / f"rank{rank}.nccl.log").write_text(world + coll * 5)
    report = ingest([job], tmp_path / "ds", workers=1)
    assert report.ok, report.errors
    with tracekit.open(tmp_path / "ds") as ds:
        counts = ds.sql("select rank, count(*) from collectives group by 1 order by 1").fetchall()
    assert counts == [(0, 5), (1, 5)]


def test_a_log_beside_a_profiler_trace_of_its_rank_is_not_counted_twice(tmp_path: Path) -> None:
    """The log's lines carry no time: the trace's rows stand, the log's are dropped, and it says so."""
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(SAMPLE_TRACES / "captured" / "ddp_mlp" / "kineto_rank0.json.gz", job)
    shutil.copy(JOB / "rank0.nccl.log", job)
    report = ingest([job], tmp_path / "ds", workers=1)
    assert report.ok, report.errors
    with tracekit.open(tmp_path / "ds") as ds:
        sources = Counter(ds.frame("collectives")["source"].to_list())
        warnings = ds.sql("select warnings from traces where format = 'nccl_log'").fetchall()
    assert "nccl_log" not in sources and sources
    assert any("7 entries not counted" in w for w in warnings[0][0]), warnings

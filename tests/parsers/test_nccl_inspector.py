"""NCCL Inspector JSON lines as an ingest format (tracekit.parsers.nccl_inspector, format nccl_inspector).

Fixtures (tests/parsers/nccl_inspector/README.md): a job of 4 ranks on 2 hosts written in NCCL's v4.0
lines (inspector_json.cc @5067397c) and, for ranks 0 and 1, in v4.3 dumps (NVIDIA/nccl#2359,
inspector_json_reader.py @08618d4a); a torn v4.3 dump; and records NVIDIA published from real runs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import tracekit
from tests.golden import assert_golden
from tracekit.ingest import ingest
from tracekit.parsers import detect_format, read_trace
from tracekit.parsers.base import MemorySink, TraceError, TraceMeta
from tracekit.parsers.nccl_inspector import MAX_LINE, parse
from tracekit.sources import BytesSource, FileSource

FIXTURES = Path(__file__).resolve().parent / "nccl_inspector"
V40 = FIXTURES / "v4_0"
V43 = FIXTURES / "v4_3"
WORLD = "0x7d3a0c5b1e9f4a21"
TP_A = "0x1a2b3c4d5e6f7081"
HEADER = {"id": WORLD, "comm_name": "default_pg", "rank": 0, "n_ranks": 4, "nnodes": 2}
METADATA = {
    "inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism": "nccl_profiler_interface",
    "dump_timestamp_us": 1764700000500000, "hostname": "node-a", "pid": 4101,
}  # fmt: skip
PERF = {
    "coll": "AllReduce", "coll_sn": 7, "coll_msg_size_bytes": 1048576, "coll_exec_time_us": 120,
    "coll_timing_source": "kernel_gpu", "coll_algobw_gbs": 8.738133, "coll_busbw_gbs": 13.1072,
}  # fmt: skip


def _line(**parts: Any) -> str:
    return json.dumps(parts, separators=(",", ":")) + "\n"


def _record(header: Any = None, metadata: Any = None, **perf: Any) -> str:
    return _line(header=HEADER if header is None else header, metadata=METADATA if metadata is None else metadata,
                 coll_perf={**PERF, **perf})  # fmt: skip


def read(text: str | bytes, name: str = "node-a-pid4101.log") -> tuple[TraceMeta, list[dict[str, Any]]]:
    data = text.encode() if isinstance(text, str) else text
    sink = MemorySink()
    meta = parse(BytesSource(data, name, name), sink)
    return meta, sink.table("collectives").to_pylist()


def _file(path: Path) -> tuple[TraceMeta, list[dict[str, Any]]]:
    sink = MemorySink()
    fmt, meta = read_trace(FileSource(path, str(path)), sink)
    assert fmt == "nccl_inspector"
    return meta, sink.table("collectives").to_pylist()


def _summary(path: Path) -> dict[str, Any]:
    sink = MemorySink()
    fmt, meta = read_trace(FileSource(path, str(path)), sink)
    assert fmt == "nccl_inspector"
    rows = sink.table("collectives").to_pylist()
    observed = sink.table("observed_transfers").to_pylist()
    measured = sink.table("observed_collectives").to_pylist()
    return {
        "observed": [{k: v for k, v in row.items() if v is not None} for row in observed],
        "measured": [{k: v for k, v in row.items() if v is not None} for row in measured],
        "rank": meta.rank,
        "world_size": meta.world_size,
        "version": meta.schema_version,
        "groups": [(g.pg_name, g.pg_desc, g.group_size) for g in meta.process_groups],
        "warnings": [(w.where, w.message) for w in meta.warnings],
        "rows": [{k: v for k, v in row.items() if v is not None} for row in rows],
    }


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["pg_name"], row["op_name"], row["seq"])


FILES = sorted(p.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob("*.log"))


@pytest.mark.parametrize("name", FILES)
def test_the_rows_of_every_fixture_are_the_golden_ones(name: str) -> None:
    assert_golden("nccl_inspector_fixtures", _summary(FIXTURES / name), key=name)


def test_a_v4_0_rank_gives_its_collectives_in_the_data_models_size_convention() -> None:
    meta, rows = _file(V40 / "node-a-pid4101.log")
    assert (meta.rank, meta.world_size, meta.schema_version) == (0, 4, "v4.0")
    assert {(g.pg_name, g.pg_desc, g.group_size) for g in meta.process_groups} == {
        (TP_A, "tp", 2), (WORLD, "default_pg", 4)
    }  # fmt: skip
    by = {_key(r): r for r in rows}
    assert len(by) == len(rows) == 8
    # coll_msg_size_bytes is NCCL's per-rank count x type size: all-gather's input, reduce-scatter's output.
    gather = by[(TP_A, "AllGather", 1)]
    assert (gather["comm_type"], gather["in_bytes"], gather["out_bytes"], gather["group_size"]) == (
        "ALL_GATHER", 4194304, 8388608, 2
    )  # fmt: skip
    scatter = by[(TP_A, "ReduceScatter", 1)]
    assert (scatter["in_bytes"], scatter["out_bytes"]) == (8388608, 4194304)
    world_gather = by[(WORLD, "AllGather", 1)]
    assert (world_gather["in_bytes"], world_gather["out_bytes"]) == (16777216, 67108864)
    # coll_sn counts per collective type: two AllReduces of the tp communicator are 1 and 2, its
    # AllGather is 1 too.
    assert [r["seq"] for r in rows if r["pg_name"] == TP_A] == [1, 1, 1, 2]
    send = by[(WORLD, "Send", 1)]
    assert (send["comm_type"], send["peer"], send["in_bytes"], send["inferred"]) == ("SEND", 2, 8388608, [])
    assert all(r["dtype"] is None and r["in_elems"] is None and r["source"] == "nccl_inspector" for r in rows)
    assert by[(TP_A, "AllReduce", 1)]["start_us"] == 1764700000001000.0  # verbose event_trace_ts
    assert by[(TP_A, "AllReduce", 2)]["start_us"] is None  # the dump time is not the operation's
    assert by[(WORLD, "AllReduce", 1)]["duration_us"] == 2950.0
    assert meta.epoch_offset_us == 0.0
    assert any("NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES (default 8,192 bytes)" in w.message for w in meta.warnings)


@pytest.mark.parametrize("rank_file", ["node-a-pid4101.log", "node-a-pid4102.log"])
def test_v4_3_dumps_give_the_same_rows_as_v4_0_lines(rank_file: str) -> None:
    meta40, rows40 = _file(V40 / rank_file)
    meta43, rows43 = _file(V43 / rank_file)
    assert (meta43.rank, meta43.world_size, meta43.schema_version) == (meta40.rank, meta40.world_size, "v4.3")
    drop = ("op_id",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in sorted(rows43, key=_key)] == [
        {k: v for k, v in r.items() if k not in drop} for r in sorted(rows40, key=_key)
    ]
    assert not [w for w in meta43.warnings if "cut short" in w.message or "bare" in w.message]


def test_a_torn_dump_and_a_bare_record_beyond_the_counts_are_warnings_naming_their_lines() -> None:
    meta, rows = _file(FIXTURES / "torn" / "node-a-pid4101.log")
    warnings = {w.message: w.where for w in meta.warnings}
    cut = next(m for m in warnings if "cut short or interleaved: 2 of its 4 records" in m)
    assert warnings[cut] == "line 1" and "(line 4)" in cut
    bare = next(m for m in warnings if m.startswith("1 bare records outside the counts"))
    assert warnings[bare] == "line 9"
    assert any("coll_dropped_total 3" in m for m in warnings)
    # The records the dumps hold are read: 2 of tp's, the world's 3 and its Send.
    assert len(rows) == 6 and {r["pg_name"] for r in rows} == {TP_A, WORLD}


def test_a_file_that_ends_inside_a_dump_says_so() -> None:
    lines = (V43 / "node-a-pid4101.log").read_text().splitlines(keepends=True)
    meta, rows = read("".join(lines[:3]))
    assert len(rows) == 2
    ends = [w for w in meta.warnings if "4 records are missing before the end of the file" in w.message]
    assert [w.where for w in ends] == ["line 1"]


def test_records_of_v4_1_and_v4_2_dump_markers_keep_their_own_context() -> None:
    marker = _line(header=HEADER, metadata={**METADATA, "inspector_output_format_version": "v4.1"},
                   dump_stats={"coll_records": 5, "coll_dropped_total": 0, "p2p_records": 0})  # fmt: skip
    meta, rows = read(marker + _record() + _record(coll_sn=8))
    assert [r["seq"] for r in rows] == [7, 8]
    assert not [w for w in meta.warnings if "cut short" in w.message]


def test_real_records_read() -> None:
    meta, rows = _file(FIXTURES / "real" / "example-hostname-pid468528.log")
    assert (meta.rank, meta.world_size) == (31, 32)
    assert [(r["comm_type"], r["in_bytes"], r["out_bytes"], r["seq"]) for r in rows] == [
        ("REDUCE_SCATTER", 65536 * 32, 65536, 129)
    ]
    meta, rows = _file(FIXTURES / "real" / "example-hostname-pid438776.log")
    assert (meta.rank, meta.world_size, rows[0]["start_us"], rows[0]["duration_us"]) == (
        4, 8, 1752867229235059.0, 41057.0
    )  # fmt: skip


def test_the_registry_tells_an_inspector_file_from_its_first_line() -> None:
    for path in (V40 / "node-a-pid4101.log", V43 / "node-a-pid4101.log"):
        assert detect_format(path.read_bytes()[:4096], path.name) == "nccl_inspector"
    assert detect_format(b'{"coll_perf":{"coll":"AllReduce"}}\n', "x.log") == "nccl_inspector"
    assert detect_format(b'{"traceEvents": [], "header": {}}', "trace.json") == "kineto"
    with pytest.raises(TraceError):  # a header without Inspector's metadata is no Inspector record
        detect_format(b'{"header":{"id":"x"}}\n', "x.json")


def test_all2all_and_operations_that_are_no_collective() -> None:
    meta, rows = read(_record(coll="All2All") + _record(coll="Invalid"))
    assert [r["comm_type"] for r in rows] == ["ALL_TO_ALL"]
    assert rows[0]["in_bytes"] == rows[0]["out_bytes"] == 1048576 * 4
    assert any("operations that are no collective (Invalid 1)" in w.message for w in meta.warnings)


def test_hostile_values_are_null_with_a_warning_naming_the_line_and_never_size_anything() -> None:
    text = (
        _record(coll_msg_size_bytes=1 << 70)
        + _record(coll_sn="many", coll_exec_time_us="nan")
        + _record(header={**HEADER, "id": "0xbad", "n_ranks": 10**12, "rank": -1})
        + _record(header={**HEADER, "id": "0xbig", "n_ranks": 2, "rank": 5})
        + _record(header="no header")
        + _record(coll=["AllReduce"])
        + _line(header=HEADER, metadata=METADATA, p2p_perf={"p2p": "Send", "p2p_peer": 1 << 40, "p2p_sn": 1})
        + "[" * 100_000
        + "\n"
        + "not json at all\n"
        + '{"coll_perf": 3}\n'
    )
    meta, rows = read(text)
    warnings = {w.message.split(" = ")[0]: w.where for w in meta.warnings}
    assert warnings["coll_msg_size_bytes"] == "line 1"
    assert warnings["coll_sn"] == "line 2" and warnings["coll_exec_time_us"] == "line 2"
    assert warnings["header.n_ranks"] == "line 3" and warnings["header.rank"] == "line 3"
    assert warnings["header"] == "line 5" and warnings["coll"] == "line 6" and warnings["p2p_peer"] == "line 7"
    assert rows[0]["in_bytes"] is None and rows[1]["seq"] is None and rows[1]["duration_us"] is None
    assert rows[2]["group_size"] is None and rows[2]["pg_name"] == "0xbad"
    assert rows[4]["peer"] is None
    assert meta.rank == 0 and meta.world_size == 4  # the bad header sized nothing
    assert any(w.message.startswith("2 lines are no Inspector record") and w.where == "line 8" for w in meta.warnings)
    assert any("bare records outside the counts" in w.message and w.where == "line 10" for w in meta.warnings)


def test_a_long_line_is_skipped_with_a_warning_and_the_rest_is_read() -> None:
    long = '{"coll_perf":{"coll":"' + "A" * MAX_LINE + '"}}\n'
    meta, rows = read(_record() + long + _record(coll_sn=8))
    assert [r["seq"] for r in rows] == [7, 8]
    assert any(w.where == "line 2" and "longer than" in w.message for w in meta.warnings)


def test_a_file_with_no_inspector_record_is_a_one_line_error() -> None:
    with pytest.raises(TraceError) as raised:
        read("hello\n{}\n[1, 2]\n")
    assert raised.value.where == "line 3" and "no NCCL Inspector record" in str(raised.value)
    assert "\n" not in str(raised.value)


def test_records_of_another_process_are_counted_not_read() -> None:
    other = {**METADATA, "pid": 9999}
    meta, rows = read(_record() + _record(metadata=other, coll_sn=8))
    assert [r["seq"] for r in rows] == [7]
    assert any("1 records of another process" in w.message for w in meta.warnings)


def test_a_rank_of_many_ingests_with_the_others_missing(tmp_path: Path) -> None:
    job = tmp_path / "nccl-inspector-4242"
    job.mkdir()
    shutil.copy(V40 / "node-b-pid5201.log", job / "node-b-pid5201.log")  # found by its name
    report = ingest([job], tmp_path / "ds", workers=1)
    assert report.ok, report.errors
    assert report.missing == ["job nccl-inspector-4242: ranks 0–1, 3 of 4 missing"]
    with tracekit.open(tmp_path / "ds") as ds:
        traces = ds.sql("select rank, rank_source, format, schema_version from traces").fetchall()
        counts = ds.sql("select rank, source, count(*) from collectives group by all").fetchall()
        groups = ds.sql("select pg_name, group_size from process_groups order by pg_name").fetchall()
    assert traces == [(2, "content", "nccl_inspector", "v4.0")]
    assert counts == [(2, "nccl_inspector", 8)]
    assert ("0x2b3c4d5e6f708192", 2) in groups and (WORLD, 4) in groups


def test_a_job_of_inspector_files_matches_its_collectives_across_ranks(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(V40, job)
    report = ingest([job], tmp_path / "ds", workers=1)
    assert report.ok, report.errors
    assert report.missing == []
    with tracekit.open(tmp_path / "ds") as ds:
        # One world AllReduce, counted on each of its 4 ranks, by (communicator, collective, coll_sn).
        where = f"pg_name = '{WORLD}' and op_name = 'AllReduce' and seq = 1"
        ranks = ds.sql(f"select count(distinct rank) from collectives where {where}").fetchall()
    assert ranks == [(4,)]


# ------------------------------------------------------------------------------ observed_transfers


def _observed(path: Path) -> tuple[TraceMeta, list[dict[str, Any]]]:
    sink = MemorySink()
    meta = parse(FileSource(path, str(path)), sink)
    return meta, sink.table("observed_transfers").to_pylist()


def test_final_proxy_ops_are_observed_transfers_with_their_parent() -> None:
    _, rows = _observed(V43 / "node-a-pid4101.log")
    assert [(r["channel"], r["peer"], r["direction"], r["bytes"], r["parent_type"], r["parent_seq"]) for r in rows] == [
        (0, 3, "recv", 16777216, "coll", 1),
        (1, 3, "recv", 16777216, "coll", 1),
        (0, 2, "send", 8388608, "p2p", 1),
    ]
    # coll_sn 1 names the world's AllReduce, Broadcast and AllGather alike: no parent name; the Send's is one.
    assert [r["parent_op"] for r in rows] == [None, None, "Send"]
    first = rows[0]
    assert (first["pg_name"], first["steps"], first["steps_completed"], first["steps_dropped"]) == (WORLD, 32, 32, 0)
    assert (first["chunk_bytes"], first["start_us"], first["duration_us"], first["inferred"]) == (
        524288, 1764700000002000.0, 640.0, []
    )  # fmt: skip


def test_proxy_records_that_are_not_final_are_counted_and_bad_ones_are_warnings() -> None:
    marker = _line(header=HEADER, metadata={**METADATA, "inspector_output_format_version": "v4.3"},
                   dump_stats={"coll_records": 0, "p2p_records": 0, "proxy_records": 3})  # fmt: skip
    start = _line(proxy_trace={"record_type": "proxy_op_start", "parent_type": "coll", "parent_sn": 1})
    bad = _line(proxy_trace={"record_type": "proxy_op", "parent_type": "coll", "parent_sn": 1, "channel_id": 10**6,
                             "peer": 9, "direction": "both", "trans_size_bytes": -1, "n_steps": 1 << 40})  # fmt: skip
    meta, rows = read(marker + start + bad + _line(proxy_trace=[1]))
    sink = MemorySink()
    parse(BytesSource((marker + start + bad).encode(), "x-pid1.log", "x-pid1.log"), sink)
    observed = sink.table("observed_transfers").to_pylist()
    assert len(observed) == 1
    assert [observed[0][k] for k in ("channel", "peer", "direction", "bytes", "steps")] == [None] * 5
    named = {w.message.split(" = ")[0]: w.where for w in meta.warnings}
    for field in (
        "proxy_trace.channel_id",
        "proxy_trace.peer",
        "proxy_trace.direction",
        "proxy_trace.trans_size_bytes",
    ):
        assert named[field] == "line 3"
    assert named["proxy_trace"] == "line 4"
    assert any("no final proxy_op (proxy_op_start 1)" in w.message for w in meta.warnings)
    assert rows == []


def test_observed_transfers_ingest_with_their_rank_and_job(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(V43, job)
    report = ingest([job], tmp_path / "ds", workers=1)
    assert report.ok, report.errors
    with tracekit.open(tmp_path / "ds") as ds:
        rows = ds.sql(
            "select job_id, rank, direction, sum(bytes)::bigint from observed_transfers group by all order by 2, 3"
        ).fetchall()
        held = ds.sql("select count(*) from observed_transfers where trace_id in (select trace_id from traces)")
        assert held.fetchall() == [(5,)]
    assert rows == [("job", 0, "recv", 33554432), ("job", 0, "send", 8388608), ("job", 1, "send", 33554432)]
    again = ingest([job], tmp_path / "ds", workers=1)  # the same files again add nothing
    assert again.ok
    with tracekit.open(tmp_path / "ds") as ds:
        assert ds.sql("select count(*) from observed_transfers").fetchall() == [(5,)]
    files = sorted(p.name for p in (tmp_path / "ds" / "observed_transfers").glob("*.parquet"))
    assert files and tracekit.verify(tmp_path / "ds").problems == []  # its Parquet files are recorded and check


# ----------------------------------------------------------------------------- observed_collectives
def _measured(text: str) -> tuple[TraceMeta, list[dict[str, Any]]]:
    sink = MemorySink()
    meta = parse(BytesSource(text.encode(), "node-a-pid4101.log", "node-a-pid4101.log"), sink)
    return meta, sink.table("observed_collectives").to_pylist()


def test_each_record_is_also_what_nccl_ran_and_measured() -> None:
    _, [row] = _measured(_record(coll_algo="NVLS_TREE", coll_proto="LL128"))
    assert {k: row[k] for k in ("record_id", "pg_name", "comm_type", "op_name", "seq", "group_size", "msg_bytes")} == {
        "record_id": 1, "pg_name": WORLD, "comm_type": "ALL_REDUCE", "op_name": "AllReduce", "seq": 7,
        "group_size": 4, "msg_bytes": 1048576,
    }  # fmt: skip
    assert (row["algorithm"], row["protocol"], row["timing_source"]) == ("NVLS_TREE", "LL128", "kernel_gpu")
    assert (row["duration_us"], row["algbw_gbs"], row["busbw_gbs"]) == (120.0, 8.738133, 13.1072)
    _, [v40] = _measured(_record())  # v4.0 names no algorithm or protocol
    assert v40["algorithm"] is None and v40["protocol"] is None and v40["busbw_gbs"] == 13.1072


def test_bad_measurements_are_null_with_a_warning_naming_the_line() -> None:
    bad = _record(coll_algo=7, coll_proto="S" * 100_000, coll_busbw_gbs="fast", coll_algobw_gbs=[1])
    meta, [row] = _measured(_line(x=1) + bad)
    assert row["algorithm"] is None and row["busbw_gbs"] is None and row["algbw_gbs"] is None
    assert len(row["protocol"]) < 100_000
    where = {w.where for w in meta.warnings if "coll_" in w.message}
    assert where == {"line 2"}


def test_observed_collectives_ingest_beside_their_collectives(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(V43, job)
    assert ingest([job], tmp_path / "ds", workers=1).ok
    assert ingest([job], tmp_path / "ds", workers=1).ok  # the same files again add nothing
    with tracekit.open(tmp_path / "ds") as ds:
        joined = ds.sql(
            "select count(*), count(c.op_id), count(m.algorithm) from observed_collectives m left join collectives c "
            "on c.job_id = m.job_id and c.rank = m.rank and c.trace_id = m.trace_id and c.op_id = m.record_id"
        ).fetchall()
        collectives = ds.sql("select count(*) from collectives").fetchall()[0][0]
    assert joined[0][0] == joined[0][1] == collectives > 0 and joined[0][2] > 0
    assert tracekit.verify(tmp_path / "ds").problems == []

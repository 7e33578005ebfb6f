"""tracekit.parsers.flight_recorder on real dumps (torch 2.13 on CPU with gloo, sample_traces/flight_recorder)
and on NCCL dumps written from PyTorch's own definition of the layout.

The NCCL dumps follow torch/csrc/distributed/c10d/FlightRecorderDetail.hpp (`getCollectiveTrace`,
`getPgConfig`: 2.10), FlightRecorder.hpp 2.7 (`nccl_version`) and NCCLUtils.hpp 2.3, and the entries
PyTorch's analyzer tests make (test/distributed/flight_recorder/test_fr_analysis.py:
`create_one_event`, version "2.8"; test_loader.py: version "2.9", nccl_version "2.26.6"). They are
pickled with protocol 2, as c10d's pickler writes (dicts, lists, tuples, strings, ints, floats, bools,
None), and written as JSON as `dump_json` does (process_group a list, unknown times 0).
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import os
import pickle
import pickletools
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracekit
from tests.conftest import SAMPLE_TRACES
from tests.examples import examples
from tests.golden import assert_golden
from tracekit.ingest import ingest
from tracekit.parsers import detect_format, flight_recorder
from tracekit.parsers.base import MemorySink, TraceError, TraceMeta
from tracekit.parsers.flight_recorder import decode as fr_decode
from tracekit.parsers.flight_recorder import rows as fr_rows
from tracekit.sources import BytesSource, FileSource

SAMPLES = SAMPLE_TRACES / "flight_recorder"
PICKLES = sorted(SAMPLES.glob("*/nccl_trace_rank_?"))
Row = dict[str, Any]


def run(data: bytes, name: str = "nccl_trace_rank_1") -> tuple[TraceMeta, list[Row], list[Row]]:
    sink = MemorySink()
    meta = flight_recorder.parse(BytesSource(data, name, name), sink)
    return meta, sink.table("collectives").to_pylist(), sink.table("ops").to_pylist()


def rows_of(path: Path) -> list[Row]:
    sink = MemorySink()
    flight_recorder.parse(FileSource(path, str(path)), sink)
    return sink.table("collectives").to_pylist()


# ------------------------------------------------------------------------ NCCL dumps, from the layout

T0 = 1_760_000_000_000_000_000  # time_created_ns: wall clock


def entry(
    record_id: int,
    name: str,
    group: tuple[str, str],
    ins: list[list[int]],
    outs: list[list[int]],
    dtype: str,
    seq: int,
    p2p_seq: int = 0,
    op_id: int = 1,
    state: str = "completed",
    **extra: Any,
) -> dict[str, Any]:
    """One entry with every key getCollectiveTrace writes (2.10: with thread_id and thread_name)."""
    completed = state == "completed"
    made: dict[str, Any] = {
        "record_id": record_id,
        "pg_id": int(group[0]),
        "process_group": group,
        "thread_name": "pt_main_thread",
        "thread_id": "140123456789",
        "collective_seq_id": seq,
        "p2p_seq_id": p2p_seq,
        "op_id": op_id,
        "profiling_name": name,
        "time_created_ns": T0 + record_id * 1_000_000,
        "input_sizes": ins,
        "input_dtypes": [dtype] * len(ins),
        "output_sizes": outs,
        "output_dtypes": [dtype] * len(outs),
        "state": state,
        "time_discovered_started_ns": T0 + record_id * 1_000_000 + 5_000 if state != "scheduled" else None,
        "time_discovered_completed_ns": T0 + record_id * 1_000_000 + 90_000 if completed else None,
        "retired": completed,
        "timeout_ms": 600_000,
        "is_p2p": name.split(":", 1)[1].startswith(("send", "recv")),
        "frames": [{"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 2696}],
    }
    if completed:
        made["duration_ms"] = 0.25
    made.update(extra)
    return made


TP, PP, WORLD = ("1", "tp"), ("2", "pp"), ("0", "default_pg")


def nccl_dump(version: str = "2.10", backend: str = "nccl") -> dict[str, Any]:
    """Rank 1 of 4: tensor-parallel pair [0, 1], pipeline pair [1, 3], the world."""
    b = backend
    entries = [  # op_id counts every operation of a group
        entry(0, f"{b}:all_reduce", TP, [[1024, 1024]], [[1024, 1024]], "BFloat16", 1, op_id=1),
        entry(1, f"{b}:_allgather_base", WORLD, [[256]], [[1024]], "Float", 1, op_id=1),
        entry(2, f"{b}:_reduce_scatter_base", WORLD, [[1024]], [[256]], "Float", 2, op_id=2),
        # Group ranks: rank 1 is group rank 0 of pp [1, 3]; its peer, group rank 1, is rank 3.
        entry(3, f"{b}:send 0->1", PP, [[64, 512]], [[64, 512]], "BFloat16", 0, p2p_seq=1, op_id=1),
        entry(4, f"{b}:recv 0<-1", PP, [[64, 512]], [[64, 512]], "BFloat16", 0, p2p_seq=2, op_id=2),
        # A coalesced pair of all-reduces: one collective_seq_id, then the `coalesced` marker.
        entry(5, f"{b}:all_reduce", TP, [[4096]], [[4096]], "Float", 2, op_id=2),
        entry(6, f"{b}:all_reduce", TP, [[2048]], [[2048]], "Float", 2, op_id=3),
        entry(7, f"{b}:coalesced", TP, [], [], "Float", 2, op_id=4),
        entry(8, f"{b}:all_to_all", WORLD, [[4096]], [[3072]], "Long", 3, op_id=3),
        # In flight when the dump was taken: started, not completed, no duration.
        entry(9, f"{b}:all_reduce", WORLD, [[8]], [[8]], "Float", 4, state="started", op_id=4),
    ]
    document: dict[str, Any] = {
        "version": version,
        "pg_config": {
            "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
            "1": {"name": "1", "desc": "tp", "ranks": "[0, 1]"},
            "2": {"name": "2", "desc": "pp", "ranks": "[1, 3]"},
        },
        "pg_status": {
            "0": {"last_enqueued_collective": 4, "last_started_collective": 4, "last_completed_collective": 3}
        },
        "entries": entries,
    }
    if version == "2.10":
        document["comm_lib_version"] = "2.27.3"
    elif version >= "2.7":
        document["nccl_version"] = "2.26.6"
    if version < "2.10":
        for e in entries:
            del e["thread_name"], e["thread_id"]
    return document


def as_json(document: dict[str, Any]) -> bytes:
    """What dump_json writes: the same keys, process_group a list, unknown times 0, no frames."""
    doc = copy.deepcopy(document)
    for e in doc.get("entries", []):
        e.pop("frames", None)
        for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            e[key] = e[key] or 0
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


EXPECTED_NCCL = [
    # (op_name, comm_type, pg_name, group_size, seq, dtype, in_bytes, out_bytes, peer)
    ("nccl:all_reduce", "ALL_REDUCE", "1", 2, 1, "BFloat16", 2 << 20, 2 << 20, None),
    ("nccl:_allgather_base", "ALL_GATHER", "0", 4, 1, "Float", 1024, 4096, None),
    ("nccl:_reduce_scatter_base", "REDUCE_SCATTER", "0", 4, 2, "Float", 4096, 1024, None),
    ("nccl:send", "SEND", "2", 2, 1, "BFloat16", 65536, 65536, 3),
    ("nccl:recv", "RECV", "2", 2, 2, "BFloat16", 65536, 65536, 3),
    ("nccl:all_reduce", "ALL_REDUCE", "1", 2, 2, "Float", 16384, 16384, None),
    ("nccl:all_reduce", "ALL_REDUCE", "1", 2, 2, "Float", 8192, 8192, None),
    ("nccl:all_to_all", "ALL_TO_ALL", "0", 4, 3, "Long", 32768, 24576, None),
    ("nccl:all_reduce", "ALL_REDUCE", "0", 4, 4, "Float", 32, 32, None),
]


def _summary(rows: list[Row]) -> list[tuple[Any, ...]]:
    keys = ("op_name", "comm_type", "pg_name", "group_size", "seq", "dtype", "in_bytes", "out_bytes", "peer")
    return [tuple(r[k] for k in keys) for r in rows]


@pytest.mark.parametrize("version", ["2.3", "2.4", "2.7", "2.8", "2.9", "2.10"])
@pytest.mark.parametrize("encoding", ["pickle", "json"])
def test_nccl_dumps_of_every_version_give_one_row_per_collective(version: str, encoding: str) -> None:
    document = nccl_dump(version)
    data = pickle.dumps(document, protocol=2) if encoding == "pickle" else as_json(document)
    meta, rows, ops = run(data)
    assert _summary(rows) == EXPECTED_NCCL
    assert meta.schema_version == version and meta.world_size == 4 and meta.node_count == 10
    assert meta.epoch_offset_us == 0.0 and meta.warnings == []
    assert [(g.pg_name, g.pg_desc, g.ranks, g.backend) for g in meta.process_groups] == [
        ("0", "default_pg", [0, 1, 2, 3], "nccl"),
        ("1", "tp", [0, 1], "nccl"),
        ("2", "pp", [1, 3], "nccl"),
    ]
    assert [r["op_id"] for r in rows] == [0, 1, 2, 3, 4, 5, 6, 8, 9]  # entry 7 is the `coalesced` marker
    assert all(r["source"] == "flight_recorder" for r in rows)
    # Wall-clock µs when the work was enqueued; GPU time only where TORCH_NCCL_ENABLE_TIMING recorded it.
    assert rows[0]["start_us"] == T0 / 1000 and rows[0]["duration_us"] == 250.0
    assert rows[-1]["duration_us"] is None
    assert [o["type"] for o in ops] == ["completed"] * 9 + ["started"]
    assert [o["name"] for o in ops][3:5] == ["nccl:send 0->1", "nccl:recv 0<-1"]


def test_the_nccl_rows_are_the_golden_ones() -> None:
    _, rows, ops = run(pickle.dumps(nccl_dump(), protocol=2))
    assert_golden("flight_recorder_nccl", {"collectives": rows, "ops": ops})


@pytest.mark.parametrize("backend", ["ncclx", "rccl", "hccl", "xccl", "mccl", "nccl2"])
def test_any_backend_prefix_names_its_collectives(backend: str) -> None:
    _, rows, _ = run(pickle.dumps(nccl_dump(backend=backend), protocol=2))
    assert [r[1:] for r in _summary(rows)] == [e[1:] for e in EXPECTED_NCCL]
    assert rows[3]["op_name"] == f"{backend}:send"


def test_pytorch_analyzer_test_entries_are_read() -> None:
    """test_fr_analysis.py's `create_one_event`: sequence ids as strings, one dtype string for all
    tensors ("float32"), no record_id in some."""
    event = {
        "profiling_name": "nccl:all_reduce",
        "state": "scheduled",
        "process_group": ("0", "default"),
        "input_sizes": [[4, 4]],
        "output_sizes": [[4, 4]],
        "input_dtypes": "float32",
        "output_dtypes": "float32",
        "collective_seq_id": "1",
        "p2p_seq_id": "0",
        "time_created_ns": 0,
        "frames": [],
    }
    document = {"version": "2.8", "pg_config": {"0": {"name": "0", "desc": "default", "ranks": "[0, 1]"}}}
    _, rows, _ = run(pickle.dumps({**document, "entries": [event]}, protocol=2))
    assert _summary(rows) == [("nccl:all_reduce", "ALL_REDUCE", "0", 2, 1, "Float", 64, 64, None)]


def test_a_dump_without_collectives_gives_its_groups_only() -> None:
    document = nccl_dump()
    del document["entries"]
    meta, rows, ops = run(as_json(document))
    assert rows == [] and ops == [] and [g.pg_name for g in meta.process_groups] == ["0", "1", "2"]


def test_values_out_of_bounds_are_null_with_a_warning() -> None:
    document = nccl_dump()
    document["entries"][0]["input_sizes"] = [[1 << 40, 1 << 40]]  # 2**80 elements
    document["entries"][1]["collective_seq_id"] = 1 << 70
    document["entries"][2]["process_group"] = "0"
    document["entries"][3] = "not an entry"
    document["pg_config"]["1"]["ranks"] = "[0, 0]"  # a rank twice: the group is skipped
    document["pg_config"]["2"]["ranks"] = "[" + ", ".join(str(r) for r in range((1 << 20) + 1)) + "]"
    meta, rows, _ = run(pickle.dumps(document, protocol=2))
    assert rows[0]["in_elems"] is None and rows[0]["in_bytes"] is None
    assert rows[1]["seq"] is None and rows[2]["pg_name"] is None
    assert len(rows) == len(EXPECTED_NCCL) - 1  # the entry that is not an object
    assert [g.pg_name for g in meta.process_groups] == ["0"]
    text = " | ".join(w.message for w in meta.warnings)
    for word in ("in_elems", "collective_seq_id", "process_group", "entries", "process group '1'", "process group '2'"):
        assert word in text, (word, text)


def test_versions_newer_or_unreadable_are_read_as_the_newest_with_a_warning() -> None:
    for version, note in (("2.11", "newer than 2.10"), ("three", "not major.minor"), (None, "no version")):
        document = nccl_dump()
        document["version"] = version
        meta, rows, _ = run(pickle.dumps(document, protocol=2))
        assert len(rows) == len(EXPECTED_NCCL)
        assert any(note in w.message for w in meta.warnings), (version, meta.warnings)


# ------------------------------------------------------------------------------- the captured dumps


@pytest.mark.parametrize("path", PICKLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_captured_dumps_are_pickles_of_data_only(path: Path) -> None:
    """What the decoder accepts is what c10d writes: no opcode that loads or calls an object."""
    opcodes = {op.name for op, _, _ in pickletools.genops(path.read_bytes())}
    assert opcodes <= fr_decode._DATA_OPCODES
    assert not opcodes & {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ"}


@pytest.mark.parametrize("path", PICKLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_captured_pickle_and_json_dumps_give_the_same_rows(path: Path) -> None:
    assert rows_of(path) == rows_of(path.with_name(path.name + ".json"))
    assert detect_format(path.read_bytes()[:65536], path.name) == "flight_recorder"
    assert detect_format(path.with_name(path.name + ".json").read_bytes()[:65536], "x.json") == "flight_recorder"


def _fingerprint(path: Path) -> dict[str, Any]:
    sink = MemorySink()
    meta = flight_recorder.parse(FileSource(path, str(path)), sink)
    digest = hashlib.sha256(
        json.dumps([sink.table("collectives").to_pylist(), sink.table("ops").to_pylist()], default=str).encode()
    ).hexdigest()
    return {
        "collectives": sink.table("collectives").num_rows,
        "sha256": digest,
        "groups": [(g.pg_name, g.pg_desc, g.ranks) for g in meta.process_groups],
        "warnings": [w.message for w in meta.warnings],
        "version": meta.schema_version,
    }


def test_captured_rows_are_the_golden_ones() -> None:
    assert_golden("flight_recorder_captured", {f"{p.parent.name}/{p.name}": _fingerprint(p) for p in PICKLES})
    # One dump in full: pipeline stage 1, DP group "2" (dp_stage1) beside the world.
    assert_golden("flight_recorder_pipeline_rank1", rows_of(SAMPLES / "pipeline_p2p" / "nccl_trace_rank_1"))


def _kineto_rows(path: Path) -> tuple[list[Row], float, float]:
    """The profiler trace's rows, and its window on the wall clock (first event, last collective's end)."""
    parsed = tracekit.parse_file(path)
    rows = parsed.collectives.to_pylist()
    offset = parsed.meta.epoch_offset_us
    assert offset is not None and parsed.meta.started_at is not None
    start = parsed.meta.started_at.timestamp() * 1e6
    end = max(r["start_us"] + (r["duration_us"] or 0) for r in rows) + offset
    return sorted(rows, key=lambda r: r["start_us"]), start, end


@pytest.mark.parametrize("path", PICKLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_captured_dumps_hold_the_profiler_traces_collectives(path: Path) -> None:
    """The entries recorded while the profiler was on are the profiler trace's collectives, in order,
    with the same type, size and group; gloo's two differences are the ones PyTorch makes (no send/recv
    entries; a reduce-scatter recorded as the all-reduce of the same input gloo runs)."""
    rank = int(path.name.rsplit("_", 1)[1])
    traced, start, end = _kineto_rows(path.with_name(f"kineto_rank{rank}.json.gz"))
    window = [r for r in rows_of(path) if start <= r["start_us"] <= end]
    outside = [r for r in rows_of(path) if not start <= r["start_us"] <= end]
    assert window and outside  # entries before and after the profiled step too
    expected = [r for r in traced if r["comm_type"] not in ("SEND", "RECV")]
    assert len(window) == len(expected)
    for fr, kt in zip(window, expected, strict=True):
        comm_type = "ALL_REDUCE" if kt["comm_type"] == "REDUCE_SCATTER" else kt["comm_type"]
        assert (fr["comm_type"], fr["in_bytes"]) == (comm_type, kt["in_bytes"])
        assert kt["pg_name"] in (None, fr["pg_name"])  # Kineto names no group of a functional all-reduce
    # The sequence ids of each group are consecutive: nothing of a group is missing from the window.
    for group in {r["pg_name"] for r in window}:
        seqs = [r["seq"] for r in window if r["pg_name"] == group]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def test_gloo_dumps_warn_of_the_sends_and_recvs_they_do_not_hold() -> None:
    meta, _, _ = run((SAMPLES / "pipeline_p2p" / "nccl_trace_rank_0").read_bytes())
    assert [w.message for w in meta.warnings] == [
        "12 operations between the first and last entry of their process group left no entry "
        "('0': 12; gloo records no send/recv)"
    ]
    # gloo's pg_config holds one entry named '' (recorded before the group had a name): not read.
    assert [(g.pg_name, g.ranks) for g in meta.process_groups] == [("0", [])]


# ------------------------------------------------------------------------ reading without running code


class _Payload:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (self.command,))


def test_a_pickle_with_a_foreign_global_is_a_clean_error_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    document = nccl_dump()
    document["entries"][0]["frames"] = _Payload(f"touch {marker}")
    data = pickle.dumps(document, protocol=2)
    assert b"system" in data
    with pytest.raises(TraceError) as caught:
        tracekit.parse_file(data=data, name="nccl_trace_rank_1")
    text = caught.value.describe("nccl_trace_rank_1")
    assert "\n" not in text and text.startswith("nccl_trace_rank_1")
    assert "pickle global" in text and "system" in text and "byte offset" in text
    assert not marker.exists()
    # The same through an ingest: an error row, the run goes on, nothing ran.
    job = tmp_path / "job"
    job.mkdir()
    (job / "nccl_trace_rank_1").write_bytes(data)
    (job / "nccl_trace_rank_0").write_bytes(pickle.dumps(nccl_dump(), protocol=2))
    report = ingest([job], tmp_path / "ds", workers=1)
    assert not report.ok and len(report.errors) == 1 and "system" in report.errors[0]
    assert not marker.exists()


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"\x80\x02cos\nsystem\n(S'true'\ntR.", "pickle global os.system"),
        (b"\x80\x04\x95\x15\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x8c\x06system\x93)R.", "pickle global os.system"),
        (b"\x80\x02N)R.", "REDUCE"),
        (b"\x80\x02}N(b.", "BUILD"),
        (b"\x80\x02(cos\nsystem\no.", "pickle global os.system"),
        (b"\x80\x02K\x01\x82.", "EXT1"),
        (b"\x80\x02X\x01\x00\x00\x00xQ.", "BINPERSID"),
        (b"\x80\x05\x97.", "NEXT_BUFFER"),
        (b"\x80\x02\xff.", "byte 0xff"),
    ],
)
def test_every_opcode_that_could_run_code_is_refused(data: bytes, said: str) -> None:
    with pytest.raises(TraceError, match=said):
        run(data)


def test_a_memo_index_sizes_nothing() -> None:
    """The C unpickler allocates its memo by the largest index (a put at 2**26 costs it 1 GiB)."""
    index = struct.pack("<I", (1 << 31) - 1)
    data = b"\x80\x02N" + b"r" + index + b"j" + index + b"."  # LONG_BINPUT, LONG_BINGET
    tracemalloc.start()
    try:
        with pytest.raises(TraceError, match="not a Flight Recorder dump"):
            run(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20


def test_a_pickle_that_visits_one_list_over_and_over_is_refused() -> None:
    shape = [1] * 1000
    one = {"profiling_name": "nccl:all_reduce", "process_group": WORLD, "input_sizes": [shape] * 1000}
    data = pickle.dumps({"version": "2.10", "entries": [one] * 1000}, protocol=2)
    assert len(data) < 20_000  # a billion dimensions in a few kilobytes, by memo references
    with pytest.raises(TraceError, match="over and over"):
        run(data)


def test_a_pickle_of_dense_containers_is_refused_as_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fr_decode, "DENSE_OBJECTS", 1_000)
    data = b"\x80\x02}(X\x07\x00\x00\x00entries]" + b"}" * 5_000
    with pytest.raises(TraceError, match="containers in the first"):
        run(data)


def test_a_pickle_longer_than_the_budget_allows_is_not_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_MEMORY_BUDGET", str(16 * 4096))
    data = pickle.dumps(nccl_dump(), protocol=2) + b"\0" * 8192
    with pytest.raises(TraceError, match="pickle longer than 4,096 bytes"):
        run(data)


def test_more_entries_than_the_bound_are_cut_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fr_rows, "MAX_ENTRIES", 4)
    meta, rows, ops = run(pickle.dumps(nccl_dump(), protocol=2))
    assert len(ops) == 4 and len(rows) == 4
    assert any("only the first 4 read" in w.message for w in meta.warnings)


def _real_pickle() -> bytes:
    return (SAMPLES / "pipeline_p2p" / "nccl_trace_rank_0").read_bytes()


def test_every_truncation_of_a_real_dump_is_a_trace_error() -> None:
    data = _real_pickle()
    for cut in range(len(data)):
        with pytest.raises(TraceError) as caught:
            run(data[:cut])
        caught.value.describe("nccl_trace_rank_0").encode("utf-8")


def test_garbage_and_truncated_json_are_trace_errors() -> None:
    for data in (b"\x80\x02", b"\x80", b"\x80\x09garbage", b"{", b'{"version": "2.10", "entries": [', b"[1, 2]"):
        with pytest.raises(TraceError):
            run(data)
    text = as_json(nccl_dump())
    for cut in range(1, len(text), 97):
        with pytest.raises(TraceError):
            run(text[:cut])


def test_a_non_dump_binary_named_as_a_dump_is_a_clean_error(tmp_path: Path) -> None:
    path = tmp_path / "nccl_trace_rank_5"
    path.write_bytes(b"\x01\x02\x03 not a trace")
    with pytest.raises(TraceError, match="neither a pickle nor a JSON object"):
        tracekit.parse_file(path)
    gz = tmp_path / "nccl_trace_rank_6.pkl.gz"
    gz.write_bytes(gzip.compress(pickle.dumps(nccl_dump(), protocol=2)))
    assert tracekit.parse_file(gz).format == "flight_recorder"


def test_sniffing_tells_dumps_from_other_json_and_pickles() -> None:
    assert detect_format(pickle.dumps(nccl_dump(), protocol=2)[:65536], "x") == "flight_recorder"
    assert detect_format(pickle.dumps(nccl_dump(), protocol=5)[:65536], "x") == "flight_recorder"
    assert detect_format(as_json(nccl_dump())[:65536], "x.json") == "flight_recorder"
    # Kineto's distributedInfo also holds pg_config and nccl_version: its own keys decide first.
    kineto = b'{"schemaVersion": 1, "distributedInfo": {"nccl_version": "2.18", "pg_config": []}, "traceEvents": []}'
    assert detect_format(kineto, "x.json") == "kineto"
    # A pickle of something else is no dump.
    with pytest.raises(TraceError):
        detect_format(pickle.dumps({"weights": [1.0]}, protocol=2), "model.bin")


# ------------------------------------------------------------------------------------ property tests

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.floats()
    | st.text(max_size=20)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and a != a:
        return b != b  # NaN
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=examples(200), deadline=None)
@given(_values, st.integers(min_value=2, max_value=5))
def test_the_decoder_gives_back_any_data_python_pickles(value: Any, protocol: int) -> None:
    """Every value a dump can hold, as Python's pickler writes it at protocols 2 to 5 (a dump loaded and
    saved again), decodes to itself."""
    data = pickle.dumps({"version": "2.10", "value": value}, protocol=protocol)
    decoded, size = fr_decode.read_document(BytesSource(data, "x", "x"))
    assert size == len(data) and _same(decoded, {"version": "2.10", "value": value})


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=200), st.sampled_from([b"\x80\x02", b"\x80\x04", b"\x80\x02}(X\x07\x00\x00\x00version"]))
def test_any_bytes_after_a_pickle_header_give_data_or_a_trace_error(tail: bytes, head: bytes) -> None:
    try:
        run(head + tail)
    except TraceError as exc:
        exc.describe("nccl_trace_rank_1").encode("utf-8")


_entry_values = st.one_of(
    _values,
    st.lists(st.lists(st.integers(min_value=-5, max_value=1 << 63), max_size=3), max_size=3),
    st.sampled_from(["nccl:all_reduce", "gloo:send 0->1", "nccl:recv 1<-0", "ncclx:coalesced", "Float", "completed"]),
)
_entry_keys = st.sampled_from(
    [
        "profiling_name",
        "process_group",
        "input_sizes",
        "output_sizes",
        "input_dtypes",
        "output_dtypes",
        "collective_seq_id",
        "p2p_seq_id",
        "op_id",
        "time_created_ns",
        "duration_ms",
        "state",
        "is_p2p",
    ]
)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.dictionaries(_entry_keys, _entry_values, max_size=10) | _values, max_size=6),
    st.dictionaries(st.text(max_size=4), st.dictionaries(st.sampled_from(["name", "desc", "ranks"]), _values))
    | _values,
    st.sampled_from(["pickle", "json"]),
)
def test_any_entries_give_bounded_rows_or_a_trace_error(entries: list[Any], pg_config: Any, encoding: str) -> None:
    document = {"version": "2.10", "pg_config": pg_config, "entries": entries}
    try:
        data = pickle.dumps(document, protocol=2) if encoding == "pickle" else json.dumps(document).encode()
    except (TypeError, ValueError):
        return  # JSON cannot write it (tuples are lists, NaN keys): no dump
    try:
        meta, rows, ops = run(data)
    except TraceError as exc:
        exc.describe("nccl_trace_rank_1").encode("utf-8")
        return
    assert len(ops) == sum(isinstance(e, dict) and isinstance(e.get("profiling_name"), str) for e in entries)
    assert meta.world_size is None or 1 <= meta.world_size <= 1 << 20
    for row in rows:
        assert row["source"] == "flight_recorder"
        assert row["group_size"] is None or 1 <= row["group_size"] <= 1 << 20
        assert row["peer"] is None or 0 <= row["peer"] < 1 << 20
        for column in ("in_elems", "out_elems", "in_bytes", "out_bytes"):
            assert row[column] is None or 0 <= row[column] <= 1 << 62

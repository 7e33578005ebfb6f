"""The newest trace fields (issue 23, item 4): what each format reads from them, and where it goes.

Where the fields come from (none of the public or sample traces carries them yet: the PyTorch that
writes them is newer than every capture, and gloo, which the samples are captured with, records no
record_param_comms; so the events below are built to the writers' layouts):

* Kineto `Seq`, `Comms Id`, `Is asynchronized op`, `Input Tensors start`, `Output Tensors start`:
  torch/csrc/profiler/util.cpp `saveNcclMeta` (the copy in the code index, id 69136504465, lines
  514-583: `Seq` only when the sequence number is >= 0, `Comms Id` = c10::get_hash(group name,
  seq, is p2p, rank start, rank stride, group size) only with it, `Is asynchronized op` as
  std::to_string(bool), the tensor starts only with tensor addresses recorded); the names in
  torch/csrc/profiler/util.h (code index id 68874190153, lines 204-208) and libkineto's
  CollectiveMetadataFields (id 58324417042: kSeqNum int64, kIsAsynchronizedOp bool, kCommsId
  uint64); pytorch/kineto#1294 and #1299, pytorch/pytorch#169416.
* PyTorch ET `is_asynchronized_op`: torch/csrc/profiler/standalone/execution_trace_observer.cpp
  `getCommsNodeAttrs` (code index id 69234782715, line 686: `addAttr(kIsAsynchronizedOp,
  kETIsAsynchronizedOp, "string")`, the value saveNcclMeta's "0" or "1").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

import tracekit
from tracekit.ingest import ingest
from tracekit.parsers import kineto, pytorch_et
from tracekit.parsers.base import MemorySink, TraceMeta
from tracekit.replay.collectives import load_job
from tracekit.sources import BytesSource

Row = dict[str, Any]
PID, TID = 1000, 1001


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> Row:
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur, "args": args}


def _g5_args(coll: str, elems: int, seq: int, **extra: Any) -> dict[str, Any]:
    """record_param_comms args as saveNcclMeta writes them in 2026 (values as Kineto prints them)."""
    args: dict[str, Any] = {
        "Collective name": coll,
        "dtype": "Float",
        "In msg nelems": elems,
        "Out msg nelems": elems,
        "In split size": "[]",
        "Out split size": "[]",
        "Global rank start": 0,
        "Global rank stride": 1,
        "Group size": 2,
        "Process Group Name": "0",
        "Process Group Description": "default_pg",
        "Process Group Ranks": "[0, 1]",
        "Rank": 0,
        "Seq": seq,
        "Comms Id": 13874425187231416781,  # a size_t hash: above the int64 range
        "Is asynchronized op": 1,
        "Input Tensors start": "[0]",
        "Output Tensors start": "[0]",
    }
    args.update(extra)
    return args


def _kineto_doc(rank: int, events: list[Row]) -> dict[str, Any]:
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "traceEvents": events,
    }


def _parse_kineto(doc: dict[str, Any]) -> tuple[TraceMeta, list[Row]]:
    data = json.dumps(doc).encode()
    sink = MemorySink()
    meta = kineto.parse(BytesSource(data, "rank0.pt.trace.json", "rank0.pt.trace.json"), sink)
    return meta, sink.table("collectives").to_pylist()


# ---------------------------------------------------------------------------------- Kineto


def test_kineto_seq_fills_seq_and_the_other_new_args_are_read_without_warnings() -> None:
    meta, rows = _parse_kineto(_kineto_doc(0, [_x("record_param_comms", 10, 5, **_g5_args("allreduce", 256, 41))]))
    (row,) = rows
    assert (row["comm_type"], row["pg_name"], row["seq"], row["in_bytes"]) == ("ALL_REDUCE", "0", 41, 1024)
    assert meta.warnings == []


def test_kineto_bad_comms_id_and_async_flag_are_warned_and_cost_nothing_else() -> None:
    bad = _g5_args("allreduce", 256, 3, **{"Comms Id": -5, "Is asynchronized op": "maybe"})
    worse = _g5_args("allreduce", 256, 4, **{"Comms Id": "x" * 50, "Is asynchronized op": [1]})
    meta, rows = _parse_kineto(
        _kineto_doc(0, [_x("record_param_comms", 10, 5, **bad), _x("record_param_comms", 20, 5, **worse)])
    )
    assert [(r["seq"], r["in_bytes"]) for r in rows] == [(3, 1024), (4, 1024)]
    messages = " | ".join(f"{w.where}: {w.message}" for w in meta.warnings)
    assert "Comms Id" in messages and "out of bounds" in messages and "traceEvents[0]" in messages
    assert "Is asynchronized op" in messages and "is not a flag" in messages


def test_kineto_seq_matches_a_collective_across_ranks_when_a_rank_missed_the_first(tmp_path: Path) -> None:
    """Rank 1's profiler started one collective late: by order its first all-reduce would be taken
    for rank 0's first (a 4 KiB bucket with a 64 KiB one); by (group, Seq) each meets its own."""
    sizes = {1: 1024, 2: 16384, 3: 4096}
    folder = tmp_path / "job"
    folder.mkdir()
    for rank, seqs in ((0, (1, 2, 3)), (1, (2, 3))):
        events = [
            _x("record_param_comms", 100 * seq, 5, **_g5_args("allreduce", sizes[seq], seq, Rank=rank)) for seq in seqs
        ]
        (folder / f"rank{rank}.pt.trace.json").write_text(json.dumps(_kineto_doc(rank, events)))
    out = tmp_path / "ds"
    report = ingest([folder], out, job="job", workers=1)
    assert report.ok, report.errors
    with tracekit.open(out) as ds:
        rows = ds.frame("collectives")
        matched = load_job(ds, "job")
    assert sorted(rows["seq"].to_list()) == [1, 2, 2, 3, 3]
    logical = matched.collectives.sort("size")
    assert logical["participants"].to_list() == [1, 2, 2]  # seq 1 seen on rank 0 only
    assert logical["size"].to_list() == [4096, 16384, 65536]
    per_collective = matched.participants.group_by("collective_id").agg(pl.col("in_bytes").n_unique().alias("sizes"))
    assert (per_collective["sizes"] == 1).all()  # both ranks' rows of one collective are the same bucket


# ---------------------------------------------------------------------------------- PyTorch ET


def _et_doc(flag: Any) -> dict[str, Any]:
    """A 1.1.1-chakra.0.0.4 trace of one all-reduce whose record_param_comms carries
    `is_asynchronized_op` as getCommsNodeAttrs writes it (type "string", value saveNcclMeta's)."""

    def attr(name: str, kind: str, value: Any) -> dict[str, Any]:
        return {"name": name, "type": kind, "value": value}

    def node(nid: int, name: str, parent: int, attrs: list[dict[str, Any]]) -> dict[str, Any]:
        empty: dict[str, list[Any]] = {"values": [], "shapes": [], "types": [], "strides": []}
        base = [attr("rf_id", "uint64", nid * 10), attr("op_schema", "string", "")]
        return {"id": nid, "name": name, "ctrl_deps": parent, "inputs": empty, "outputs": empty, "attrs": base + attrs}

    comms = [
        attr("collective_name", "string", "allreduce"),
        attr("dtype", "string", "Float"),
        attr("in_msg_nelems", "uint64", 1024),
        attr("out_msg_nelems", "uint64", 1024),
        attr("in_split_size", "string", "[]"),
        attr("out_split_size", "string", "[]"),
        attr("global_rank_start", "uint64", 0),
        attr("global_rank_stride", "uint64", 1),
        attr("pg_name", "string", "0"),
        attr("pg_desc", "string", "default_pg"),
        attr("pg_size", "uint64", 2),
        attr("is_asynchronized_op", "string", flag),
    ]
    return {
        "schema": "1.1.1-chakra.0.0.4",
        "pid": 42,
        "time": "2026-03-01 10:00:00",
        "start_ts": 100,
        "nodes": [
            node(2, "[pytorch|profiler|execution_trace|thread]", 1, []),
            node(11, "record_param_comms", 2, comms),
            node(1, "[pytorch|profiler|execution_trace|process]", 1, []),
        ],
        "finish_ts": 200,
    }


def _parse_et(doc: dict[str, Any]) -> tuple[TraceMeta, list[Row]]:
    data = json.dumps(doc).encode()
    sink = MemorySink()
    meta = pytorch_et.parse(BytesSource(data, "et.json", "et.json"), sink)
    return meta, sink.table("collectives").to_pylist()


def test_et_is_asynchronized_op_is_read_as_a_flag_in_each_spelling() -> None:
    for flag in ("1", "0", 1, 0, True, "true"):
        meta, rows = _parse_et(_et_doc(flag))
        assert [(r["comm_type"], r["in_bytes"], r["group_size"]) for r in rows] == [("ALL_REDUCE", 4096, 2)]
        assert meta.warnings == [], flag


def test_et_bad_is_asynchronized_op_is_a_warning_naming_the_node() -> None:
    meta, rows = _parse_et(_et_doc("sometimes"))
    assert [(r["comm_type"], r["in_bytes"]) for r in rows] == [("ALL_REDUCE", 4096)]
    (warning,) = meta.warnings
    assert "is_asynchronized_op" in warning.message and "is not a flag" in warning.message
    assert "11" in (warning.where or "")


# ---------------------------------------------------------------------------------- names


# Each format's spelling of NCCL >= 2.28's native all-to-all, gather and scatter and of its one-sided
# put and signal: NCCL's own names (src/collectives.cc ncclFuncToString in NVIDIA/nccl 2.28+: AlltoAll,
# Gather, Scatter, PutSignal, Signal, WaitSignal; what its INFO logs print), c10d's (record_param_comms
# `Collective name`, the Flight Recorder's `nccl:` profiling names, c10d:: ops) and torch symm_mem's
# (nccl_put, nccl_put_with_signal, nccl_wait_for_signal: torch/csrc/distributed/c10d/symm_mem).
SPELLINGS = {
    "nccl:all_to_all": "ALL_TO_ALL",
    "alltoall_base": "ALL_TO_ALL",
    "all_to_all_single": "ALL_TO_ALL",
    "AlltoAll": "ALL_TO_ALL",
    "AlltoAllv": "ALL_TO_ALL",
    "gather": "GATHER",
    "nccl:gather": "GATHER",
    "c10d::gather_": "GATHER",
    "Gather": "GATHER",
    "scatter": "SCATTER",
    "nccl:scatter": "SCATTER",
    "c10d::scatter_": "SCATTER",
    "Scatter": "SCATTER",
    "nccl:put": "PUT",
    "nccl:put_signal": "PUT",
    "put_signal": "PUT",
    "nccl_put_with_signal": None,  # a symm_mem op name alone: no backend prefix, not a c10d op
    "PutSignal": "PUT",
    "xccl:put": "PUT",
    "nccl:signal": "SIGNAL",
    "Signal": "SIGNAL",
    "WaitSignal": None,  # a local wait for a peer's signal: no communication, as `wait` is none
    "nccl:wait_signal": None,
}


def test_every_spelling_of_the_newest_ops_gets_its_comm_type_from_the_one_rulebook() -> None:
    from tracekit.parsers.common.names import comm_type_of

    assert {name: comm_type_of(name) for name in SPELLINGS} == SPELLINGS


def test_one_sided_types_are_in_the_data_model_and_chakra_codes_still_name_theirs() -> None:
    from tracekit.parsers.common.names import CHAKRA_COMM_TYPES
    from tracekit.schema import COMM_TYPES, ONE_SIDED

    assert set(ONE_SIDED) <= set(COMM_TYPES)
    assert (CHAKRA_COMM_TYPES[3], CHAKRA_COMM_TYPES[4], CHAKRA_COMM_TYPES[6]) == ("GATHER", "SCATTER", "ALL_TO_ALL")
    assert not set(ONE_SIDED) & set(CHAKRA_COMM_TYPES.values())  # Chakra 0.0.4 has no code for them


def test_a_put_is_counted_with_its_bytes_on_the_wire_and_left_out_of_the_replay_with_a_note(tmp_path: Path) -> None:
    """Two ranks' profiler traces: an all-reduce and a put of 1 MiB from rank 0 (as a backend that
    records its one-sided ops through record_param_comms would write it), and a signal."""
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in (0, 1):
        events = [_x("record_param_comms", 100, 5, **_g5_args("allreduce", 256, 1, Rank=rank))]
        if rank == 0:
            put = _g5_args("put_signal", 262144, 1, Rank=1)
            signal = _g5_args("signal", 0, 2, Rank=1)
            events += [_x("record_param_comms", 200, 5, **put), _x("record_param_comms", 300, 5, **signal)]
        (folder / f"rank{rank}.pt.trace.json").write_text(json.dumps(_kineto_doc(rank, events)))
    out = tmp_path / "ds"
    report = ingest([folder], out, job="job", workers=1)
    assert report.ok, report.errors
    with tracekit.open(out) as ds:
        wire = ds.query("collective_wire_bytes", {"job_id": "job"}).pl()
        matched = load_job(ds, "job")
    by_type = {t: w for t, w in wire.filter(pl.col("rank") == 0).select("comm_type", "wire_bytes").iter_rows()}
    assert by_type == {"ALL_REDUCE": 1024.0, "PUT": 1048576.0, "SIGNAL": 0.0}
    assert matched.collectives["comm_type"].to_list() == ["ALL_REDUCE"]
    assert any("2 collectives row(s) of one-sided puts or signals" in note for note in matched.notes), matched.notes


# ---------------------------------------------------------------------------------- Chakra


def _fork_trace(nodes: int) -> bytes:
    """An .et of `nodes` nodes as a Chakra fork writes them: every 50th a NodeType 9 node (BATCH_NODE in
    mlcommons/chakra PR #216, DATA_OP_NODE in Keysight/chakra @0e8de7ad), every 100th a collective of
    comm_type 99 (astra-sim/chakra et_def.proto @b8d2e8b9: INVALID_COMM_TYPE = 99), the rest
    all-reduces (1 KiB) and compute."""
    import io

    from tracekit.writers.chakra_et import EtWriter, comm_node, comp_node

    out = io.BytesIO()
    writer = EtWriter(out)
    writer.write_metadata("0.0.4")
    for i in range(1, nodes + 1):
        if i % 100 == 0:
            writer.write_node(comm_node(i, f"fork_coll_{i}", 99, 2048, "0"))
        elif i % 50 == 0:
            node = comp_node(i, f"batch_{i}", 3)
            node.type = 9
            writer.write_node(node)
        elif i % 2:
            writer.write_node(comm_node(i, f"allreduce_{i}", "ALL_REDUCE", 1024, "0"))
        else:
            writer.write_node(comp_node(i, f"gemm_{i}", 7))
    writer.close()
    return out.getvalue()


def _jsonized(data: bytes) -> bytes:
    from tests.parsers.chakra.test_jsonizer import jsonize

    return jsonize(data)


def test_chakra_unknown_node_and_comm_types_are_kept_as_integers_with_warnings_in_both_readers() -> None:
    from tests.parsers.chakra.test_et import parse_with
    from tracekit.parsers.chakra import et as chakra_et
    from tracekit.parsers.chakra import jsonizer as chakra_json

    # 200 nodes are read node by node, 20,000 through the column-wise path: the same rows and warnings.
    for nodes in (200, 20_000):
        data = _fork_trace(nodes)
        for module, payload in ((chakra_et, data), (chakra_json, _jsonized(data))):
            parsed = parse_with(module, payload, "fork.0.et" if module is chakra_et else "fork.0.json")
            kinds = {r["type"] for r in parsed.ops}
            assert "NODE_TYPE_9" in kinds
            forked = [r for r in parsed.collectives if r["comm_type"] == "COMM_TYPE_99"]
            assert len(forked) == nodes // 100 and {r["in_bytes"] for r in forked} == {2048}
            assert sum(r["comm_type"] == "ALL_REDUCE" for r in parsed.collectives) == nodes // 2
            messages = {w.message.split(" ", 1)[0]: w for w in parsed.meta.warnings}
            node_type, comm_type = messages["NodeType"], messages["comm_type"]
            assert node_type.where == "node id 50" and "kept as NODE_TYPE_9" in node_type.message
            assert f"({nodes // 100} values in this file)" in node_type.message, node_type.message
            assert comm_type.where == "node id 100" and "kept as COMM_TYPE_99" in comm_type.message
            assert f"({nodes // 100} values in this file)" in comm_type.message, comm_type.message


def test_the_replay_skips_an_unknown_chakra_comm_type_with_a_note_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in (0, 1):
        (folder / f"fork.{rank}.et").write_bytes(_fork_trace(200))
    out = tmp_path / "ds"
    report = ingest([folder], out, job="job", workers=1)
    assert report.ok, report.errors
    with tracekit.open(out) as ds:
        matched = load_job(ds, "job")
    assert set(matched.collectives["comm_type"].to_list()) == {"ALL_REDUCE"}
    assert any("with a comm_type the replay does not know, e.g. 'COMM_TYPE_99'" in n for n in matched.notes)

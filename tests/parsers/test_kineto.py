"""Kineto (PyTorch profiler JSON) parser: real public traces, hand-built generations, bad input."""

from __future__ import annotations

import collections
import gzip
import json
import os
import subprocess
import sys
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tracekit.parsers import kineto
from tracekit.parsers.base import MemorySink, TraceError
from tracekit.sources import BytesSource, source_for

GOLDEN = Path(__file__).parent / "golden"
PID, TID = 1000, 1001
GPU, STREAM = 0, 7


# ---------------------------------------------------------------------------------- helpers


def _parse(data: bytes | dict[str, Any], name: str = "rank0.pt.trace.json"):
    if isinstance(data, dict):
        data = json.dumps(data).encode()
    sink = MemorySink()
    meta = kineto.parse(BytesSource(data, name, name), sink)
    return meta, sink.table("collectives").to_pylist(), sink.table("ops")


def _doc(events: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 4},
    }
    doc.update(top)
    doc["traceEvents"] = events
    return doc


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", pid: Any = PID, tid: Any = TID, **args: Any):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _launch(ts: float, corr: int, ext: int, pid: Any = PID, tid: Any = TID):
    return _x(
        "cudaLaunchKernelExC",
        ts,
        3,
        cat="cuda_runtime",
        pid=pid,
        tid=tid,
        correlation=corr,
        **{"External id": ext},
    )


def _kernel(
    name: str, ts: float, dur: float, corr: int, ext: int, pid: Any = GPU, tid: Any = STREAM, **args: Any
):
    return _x(
        name,
        ts,
        dur,
        cat="kernel",
        pid=pid,
        tid=tid,
        correlation=corr,
        stream=STREAM,
        **{"External id": ext},
        **args,
    )


def _comm_args(coll: str, dtype: str, n_in: int, n_out: int, size: int, **extra: Any) -> dict[str, Any]:
    args = {
        "Collective name": coll,
        "dtype": dtype,
        "In msg nelems": n_in,
        "Out msg nelems": n_out,
        "Group size": size,
        "In split size": "[]",
        "Out split size": "[]",
    }
    args.update(extra)
    return args


def _by(rows: list[dict[str, Any]], key: str) -> dict[Any, dict[str, Any]]:
    return {r[key]: r for r in rows}


# ---------------------------------------------------------------------------------- real traces


def test_hta_nccl_2gpu(public_traces: Path) -> None:
    path = public_traces / "hta-nccl-2gpu" / "nccl_data.json.gz"
    sink = MemorySink()
    meta = kineto.parse(source_for(path), sink)
    rows = sink.table("collectives").to_pylist()

    assert meta.format == "kineto" and meta.schema_version == "1"
    assert meta.rank == 0 and meta.world_size == 2
    assert meta.node_count == 40_573
    [pg] = meta.process_groups
    assert (pg.pg_name, pg.pg_desc, pg.backend, pg.group_size, pg.ranks) == (
        "0",
        "default_pg",
        "nccl",
        2,
        [0, 1],
    )
    # baseTimeNanoseconds 1711964646000000000 + first ts 4458676388068.751 µs.
    expected_start = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
        microseconds=1711964646000000 + 4458676388068.751
    )
    assert meta.started_at == expected_start
    assert meta.started_at.date().isoformat() == "2024-05-23"  # INFO lines: 2024-05-22 17:15 local (PDT)

    kinds = collections.Counter(r["comm_type"] for r in rows)
    assert kinds == {"ALL_REDUCE": 15, "BROADCAST": 6}
    sizes = collections.Counter((r["comm_type"], r["in_bytes"]) for r in rows)
    # Counted in the file: each ResNet-50 bucket appears 3 times (3 iterations), broadcasts 3 each.
    assert sizes == {
        ("ALL_REDUCE", 8_196_000): 3,
        ("ALL_REDUCE", 9_724_160): 3,
        ("ALL_REDUCE", 26_255_360): 3,
        ("ALL_REDUCE", 26_550_272): 3,
        ("ALL_REDUCE", 31_502_336): 3,
        ("BROADCAST", 424): 3,
        ("BROADCAST", 212_480): 3,
    }
    ops = sink.table("ops")
    kernel_dur = {
        ts: dur
        for name, ts, dur in zip(
            ops["name"].to_pylist(), ops["start_us"].to_pylist(), ops["duration_us"].to_pylist(), strict=True
        )
        if name.startswith("ncclKernel_")
    }
    for r in rows:
        assert r["source"] == "record_param_comms" and r["inferred"] == []
        assert r["group_size"] == 2 and r["pg_name"] == "0"
        assert r["duration_us"] > 0
        assert kernel_dur.get(r["start_us"]) == pytest.approx(r["duration_us"])  # device time
        assert r["in_bytes"] == r["out_bytes"] and r["is_uneven"] is False
        assert r["rf_id"] is not None
    assert {r["dtype"] for r in rows if r["comm_type"] == "BROADCAST"} == {"Float", "Long"}


def test_dlrm_kineto_8_ranks(public_traces: Path) -> None:
    archive = public_traces / "param-dlrm-8rank" / "dlrm_kineto.tar.gz"
    ranks = []
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".json")]
        assert len(members) == 8
        for member in members:
            data = tar.extractfile(member).read()  # type: ignore[union-attr]
            meta, rows, ops = _parse(data, member.name)
            ranks.append(meta.rank)
            assert meta.world_size == 8
            assert meta.started_at is None  # no baseTimeNanoseconds in this generation
            assert ops.num_rows > 0
            kinds = collections.Counter(r["comm_type"] for r in rows)
            assert kinds == {"ALL_TO_ALL": 5, "ALL_REDUCE": 3}, member.name
            # G1: no comm args, sizes from Input Dims x Input type (README: the ET's byte counts).
            assert sorted(r["in_bytes"] for r in rows if r["comm_type"] == "ALL_REDUCE") == [
                448,
                907_840,
                1_576_964,
            ]
            assert sorted(r["in_bytes"] for r in rows if r["comm_type"] == "ALL_TO_ALL") == [
                192,
                1_536,
                13_568,
                24_576,
                24_576,
            ]
            for r in rows:
                assert r["source"] == "record_param_comms"
                assert set(r["inferred"]) == {"dtype", "in_elems", "in_bytes"}
                assert r["duration_us"] > 0  # from the kernel, matched by launch correlation
                assert r["op_name"] in ("nccl:all_reduce", "nccl:all_to_all")
            assert {r["is_uneven"] for r in rows if r["comm_type"] == "ALL_TO_ALL"} == {None}
    assert sorted(ranks) == list(range(8))


# ---------------------------------------------------------------------------------- generations


def _g2_doc() -> dict[str, Any]:
    args = _comm_args(
        "allreduce",
        "Float",
        256,
        256,
        4,
        **{
            "Process Group ID": 0,
            "Process Group Ranks": "[0, 1, 2, 3]",
            "External id": 11,
            "Record function id": 21,
        },
    )
    events = [
        _x("c10d::allreduce_", 100, 50, **{"External id": 10}),
        _x("record_param_comms", 105, 40, **args),
        _x("nccl:all_reduce", 110, 20, cat="user_annotation", **{"External id": 12}),
        _x("record_param_comms", 200, 2, **_comm_args("wait", "Byte", 0, 0, 1, **{"Process Group ID": 0})),
    ]
    pg = [{"pg_name": "0", "uid": 0, "backend_config": "cuda:nccl", "pg_size": 4, "ranks": [0, 1, 2, 3]}]
    return _doc(events, distributedInfo={"backend": "nccl", "rank": 2, "world_size": 4, "pg_config": pg})


def test_g2_process_group_id_args_on_record_param_comms_only() -> None:
    meta, rows, _ = _parse(_g2_doc())
    assert meta.rank == 2 and meta.world_size == 4
    [pg] = meta.process_groups
    assert (pg.pg_name, pg.pg_desc, pg.backend, pg.group_size, pg.ranks) == (
        "0",
        None,
        "nccl",
        4,
        [0, 1, 2, 3],
    )
    [row] = rows  # the wait is no collective
    assert row["op_id"] == 1 and row["source"] == "record_param_comms"
    assert row["pg_name"] == "0" and row["group_size"] == 4
    assert (row["comm_type"], row["dtype"], row["in_bytes"], row["out_bytes"]) == (
        "ALL_REDUCE",
        "Float",
        1024,
        1024,
    )
    assert (row["start_us"], row["duration_us"]) == (105, 40)  # no kernel: CPU time
    assert row["rf_id"] == 21 and row["inferred"] == []


def _g4_doc() -> dict[str, Any]:
    pg_args = {
        "Process Group Name": "1",
        "Process Group Description": "tp",
        "Process Group Ranks": "[0, 2, 4, 6]",
        "Rank": 1,
    }
    ag = _comm_args("_allgather_base", "BFloat16", 1024, 4096, 4, Seq=7, **pg_args)
    rs = _comm_args("_reduce_scatter_base", "Float", 4096, 1024, 4, Seq=8, **pg_args)
    kname_ag = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    kname_rs = "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    events = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python"}},
        _x("c10d::_allgather_base_", 1000, 100, **{"External id": 499, "Record function id": 699}),
        _x("record_param_comms", 1010, 80, **ag, **{"External id": 500, "Record function id": 700}),
        _x("nccl:_all_gather_base", 1020, 50, cat="user_annotation", **{"External id": 501}),
        _launch(1030, corr=9000, ext=500),
        {"ph": "s", "id": 9000, "pid": PID, "tid": TID, "ts": 1030, "cat": "ac2g", "name": "ac2g"},
        _kernel(kname_ag, 1200, 30.5, corr=9000, ext=500, **ag),
        {
            "ph": "f",
            "id": 9000,
            "pid": GPU,
            "tid": STREAM,
            "ts": 1200,
            "cat": "ac2g",
            "name": "ac2g",
            "bp": "e",
        },
        _x("nccl:_all_gather_base", 1199, 32, cat="gpu_user_annotation", pid=GPU, tid=STREAM),
        # Reduce-scatter whose launch event is missing: matched by External id.
        _x("record_param_comms", 2010, 80, **rs, **{"External id": 600, "Record function id": 800}),
        _x("nccl:_reduce_scatter_base", 2020, 50, cat="user_annotation", **{"External id": 601}),
        _kernel(kname_rs, 2300, 12.25, corr=9100, ext=600, **rs),
        _x("record_param_comms", 2500, 2, **_comm_args("wait", "Byte", 0, 0, 1), **{"External id": 650}),
        _x("aten::mm", 2600, 10, **{"External id": 660}),
    ]
    pg = [
        {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 8, "ranks": []},
        {"pg_name": "1", "pg_desc": "tp", "backend_config": "cuda:nccl", "pg_size": 4, "ranks": [0, 2, 4, 6]},
    ]
    dist = {
        "backend": "nccl",
        "rank": 2,
        "world_size": 8,
        "pg_count": 2,
        "pg_config": pg,
        "nccl_version": "2.27.5",
    }
    return _doc(events, distributedInfo=dist, baseTimeNanoseconds=1_750_000_000_000_000_000)


def test_g4_dev_kernels_rank_seq() -> None:
    meta, rows, ops = _parse(_g4_doc())
    assert [g.pg_name for g in meta.process_groups] == ["0", "1"]
    assert meta.process_groups[0].ranks == [] and meta.process_groups[1].ranks == [0, 2, 4, 6]
    assert meta.started_at == datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
        microseconds=1_750_000_000_000_000 + 1000
    )
    ag, rs = rows
    assert (ag["op_id"], ag["comm_type"], ag["op_name"]) == (2, "ALL_GATHER", "_allgather_base")
    assert (ag["in_bytes"], ag["out_bytes"], ag["seq"], ag["rf_id"]) == (2048, 8192, 7, 700)
    assert (ag["start_us"], ag["duration_us"]) == (1200, 30.5)  # kernel, via launch correlation
    assert (ag["pg_name"], ag["group_size"], ag["peer"]) == ("1", 4, None)
    assert (rs["op_id"], rs["comm_type"], rs["in_bytes"], rs["out_bytes"]) == (
        9,
        "REDUCE_SCATTER",
        16384,
        4096,
    )
    assert (rs["start_us"], rs["duration_us"]) == (2300, 12.25)  # kernel, via External id
    assert ops.num_rows == sum(1 for e in _g4_doc()["traceEvents"] if e["ph"] == "X")


def test_golden_g4_collectives() -> None:
    _, rows, _ = _parse(_g4_doc())
    path = GOLDEN / "kineto_g4_collectives.json"
    text = json.dumps(rows, indent=1, sort_keys=True) + "\n"
    if os.environ.get("TRACEKIT_REGEN_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert json.loads(path.read_text()) == json.loads(text), (
        f"regenerate with TRACEKIT_REGEN_GOLDEN=1 ({path})"
    )


def test_pid_tid_as_strings() -> None:
    doc = _g4_doc()
    for ev in doc["traceEvents"]:
        if "pid" in ev:
            ev["pid"], ev["tid"] = str(ev["pid"]), str(ev["tid"])
    doc["traceEvents"].append(
        {
            "ph": "X",
            "cat": "Trace",
            "name": "PyTorch Profiler (0)",
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "ts": 900,
            "dur": 5000,
        }
    )
    _, rows, ops = _parse(doc)
    _, expected, _ = _parse(_g4_doc())
    assert rows == expected
    assert "PyTorch Profiler (0)" in ops["name"].to_pylist()


def test_unexpected_field_types_take_the_tolerant_path() -> None:
    doc = _g4_doc()
    doc["traceEvents"].append(
        {"ph": "X", "cat": "cpu_op", "name": 5, "pid": [1], "tid": None, "ts": 3000, "dur": 1}
    )
    doc["traceEvents"].append(
        {"ph": "i", "name": "instant", "pid": PID, "tid": TID, "ts": 3001, "args": "not a dict"}
    )
    doc["schemaVersion"] = {"odd": True}
    meta, rows, ops = _parse(doc)
    _, expected, _ = _parse(_g4_doc())
    assert rows == expected
    assert meta.schema_version is None
    assert "5" in ops["name"].to_pylist()


def test_cpu_gloo_trace_without_kernels() -> None:
    events = [
        _x("c10d::allreduce_", 100, 60),
        _x(
            "record_param_comms",
            105,
            50,
            **_comm_args("allreduce", "Double", 10, 10, 2, **{"Process Group Name": "0"}),
        ),
        _x("gloo:all_reduce", 110, 40, cat="user_annotation"),
        _x("record_param_comms", 170, 2, **_comm_args("wait", "Byte", 0, 0, 1)),
        # No record_param_comms: the annotation alone, inside a c10d op (consumed by it).
        _x("c10d::broadcast_", 200, 30, **{"Record function id": 55}),
        _x("gloo:broadcast", 205, 20, cat="user_annotation", **{"Record function id": 56}),
        # Nothing but a c10d op.
        _x("c10d::barrier", 300, 9),
        _x("c10d::wait", 310, 1),
    ]
    pg = [
        {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo", "pg_size": 2, "ranks": [0, 1]}
    ]
    meta, rows, _ = _parse(
        _doc(events, distributedInfo={"backend": "gloo", "rank": 1, "world_size": 2, "pg_config": pg})
    )
    assert meta.process_groups[0].backend == "gloo"
    assert [(r["op_id"], r["comm_type"], r["source"]) for r in rows] == [
        (1, "ALL_REDUCE", "record_param_comms"),
        (5, "BROADCAST", "annotation"),
        (6, "BARRIER", "c10d"),
    ]
    ar, bc, bar = rows
    assert (ar["start_us"], ar["duration_us"], ar["in_bytes"], ar["group_size"]) == (105, 50, 80, 2)
    assert (bc["start_us"], bc["duration_us"], bc["op_name"], bc["rf_id"]) == (205, 20, "gloo:broadcast", 56)
    assert bc["in_bytes"] is None and bc["group_size"] is None
    assert (bar["start_us"], bar["op_name"]) == (300, "c10d::barrier")


def test_gloo_worker_thread_annotations_pair_with_c10d_ops() -> None:
    worker = 2002
    events = [
        _x("c10d::barrier", 100, 10),
        _x("c10d::allgather_", 120, 30),
        _x("c10d::barrier", 200, 10),
        _x("c10d::allreduce_", 300, 10),  # its gloo work is not in the trace
        # gloo runs the work later, on its own thread
        _x("gloo:barrier", 115, 5, cat="user_annotation", tid=worker),
        _x("gloo:barrier", 205, 4, cat="user_annotation", tid=worker + 1),
        _x("gloo:all_gather", 400, 4, cat="user_annotation", tid=worker),  # the allgather_ at 120
        _x("gloo:broadcast", 500, 4, cat="user_annotation", tid=worker),  # no c10d op before it
    ]
    _, rows, _ = _parse(_doc(events))
    got = [(r["op_id"], r["comm_type"], r["source"]) for r in rows]
    assert got == [
        (3, "ALL_REDUCE", "c10d"),
        (4, "BARRIER", "annotation"),
        (5, "BARRIER", "annotation"),
        (6, "ALL_GATHER", "annotation"),
        (7, "BROADCAST", "annotation"),
    ]


def test_g1_kind_from_annotation_c10d_or_kernel() -> None:
    no_args = {"Input Dims": [[], [], []], "Input type": ["TensorList", "Scalar", "Scalar"]}
    events = [
        # kind from the nested annotation, size from its Input Dims
        _x("record_param_comms", 100, 50, **no_args),
        _x(
            "nccl:all_reduce",
            110,
            30,
            cat="user_annotation",
            **{"Input Dims": [[8, 4]], "Input type": ["c10::Half"]},
        ),
        # kind from the enclosing c10d op, size from the record_param_comms' own Input Dims
        _x("c10d::broadcast_", 200, 60),
        _x("record_param_comms", 205, 50, **{"Input Dims": [[16]], "Input type": ["long int"]}),
        # kind from the kernel only (launch inside the span)
        _x("record_param_comms", 300, 50, **no_args),
        _launch(310, corr=77, ext=77),
        _kernel(
            "ncclKernel_ReduceScatter_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            400,
            9,
            corr=77,
            ext=77,
        ),
        # a wait: nothing names a collective
        _x("record_param_comms", 500, 3, **{"Input Dims": [[]], "Input type": ["Scalar"]}),
    ]
    _, rows, _ = _parse(_doc(events))
    ar, bc, rs = rows
    assert (ar["comm_type"], ar["op_name"], ar["dtype"], ar["in_elems"], ar["in_bytes"]) == (
        "ALL_REDUCE",
        "nccl:all_reduce",
        "Half",
        32,
        64,
    )
    assert set(ar["inferred"]) == {"dtype", "in_elems", "in_bytes"}
    assert (bc["comm_type"], bc["op_name"], bc["dtype"], bc["in_bytes"]) == (
        "BROADCAST",
        "c10d::broadcast_",
        "Long",
        128,
    )
    assert (rs["comm_type"], rs["inferred"], rs["start_us"], rs["duration_us"]) == (
        "REDUCE_SCATTER",
        ["comm_type"],
        400,
        9,
    )
    assert rs["dtype"] is None and rs["in_bytes"] is None


def test_annotation_enclosing_the_anchor_is_not_counted_twice() -> None:
    events = [
        _x("nccl:all_reduce", 100, 60, cat="user_annotation"),
        _x("record_param_comms", 105, 50, **_comm_args("allreduce", "Float", 4, 4, 2)),
        _launch(110, corr=5, ext=5),
        _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 200, 4, corr=5, ext=5),
        _x("nccl:broadcast", 300, 10, cat="user_annotation"),
    ]
    _, rows, _ = _parse(_doc(events))
    assert [(r["op_id"], r["comm_type"], r["source"], r["start_us"]) for r in rows] == [
        (1, "ALL_REDUCE", "record_param_comms", 200),
        (4, "BROADCAST", "annotation", 300),
    ]


def test_kernel_only_trace() -> None:
    events = [
        _kernel(
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", 10, 5, 1, 1
        ),
        _kernel(
            "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 20, 6, 2, 2
        ),
        _kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 30, 7, 3, 3),
        _kernel("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 40, 8, 4, 4),
        _kernel("void at::native::vectorized_elementwise_kernel<4>(...)", 50, 1, 5, 5),
    ]
    _, rows, _ = _parse(_doc(events))
    got = [(r["op_id"], r["comm_type"], r["dtype"], r["source"], r["inferred"], r["start_us"]) for r in rows]
    assert got == [
        (0, "ALL_REDUCE", "Float", "kernel", ["comm_type", "dtype"], 10),
        (1, "REDUCE_SCATTER", "BFloat16", "kernel", ["comm_type", "dtype"], 20),
        (3, "BROADCAST", None, "kernel", ["comm_type"], 40),
    ]
    assert all(r["in_bytes"] is None for r in rows)  # never from a kernel name


def test_send_recv_peers() -> None:
    pg = [
        {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 8, "ranks": []},
        {"pg_name": "1", "pg_desc": "pp", "backend_config": "cuda:nccl", "pg_size": 4, "ranks": [0, 2, 4, 6]},
    ]
    p1 = {"Process Group Name": "1"}
    events = [
        _x("record_param_comms", 10, 5, **_comm_args("send", "Float", 4, 4, 2, **{"Dst Rank": 3, "Rank": 1})),
        _x("record_param_comms", 20, 5, **_comm_args("recv", "Float", 4, 4, 2, **{"Src Rank": 5, "Rank": 0})),
        _x("record_param_comms", 30, 5, **_comm_args("send", "Float", 4, 4, 2, Rank=2, **p1)),
        _x(
            "record_param_comms",
            40,
            5,
            **_comm_args("recv", "Float", 4, 4, 2, Rank=1, **{"Process Group Name": "0"}),
        ),
        _x(
            "record_param_comms",
            50,
            5,
            **_comm_args("send", "Float", 4, 4, 2, Rank=1, **{"Process Group Name": "9"}),
        ),
        _x(
            "record_param_comms",
            60,
            5,
            **_comm_args(
                "recv",
                "Float",
                4,
                4,
                2,
                Rank=1,
                **{"Process Group Name": "7", "Process Group Ranks": "[5, 6]"},
            ),
        ),
        _x(
            "record_param_comms",
            70,
            5,
            **_comm_args(
                "send",
                "Float",
                4,
                4,
                2,
                Rank=1,
                **{"Process Group Name": "8", "Process Group Ranks": "[0, 1, ..., 63]"},
            ),
        ),
    ]
    _, rows, _ = _parse(_doc(events, distributedInfo={"rank": 0, "world_size": 8, "pg_config": pg}))
    got = [(r["comm_type"], r["peer"], "peer" in r["inferred"]) for r in rows]
    assert got == [
        ("SEND", 3, False),
        ("RECV", 5, False),
        ("SEND", 4, True),  # group 1 ranks [0, 2, 4, 6][2]
        ("RECV", 1, True),  # whole-world group: local == global
        ("SEND", None, False),  # unknown group
        ("RECV", 6, True),  # from the event's own Process Group Ranks
        ("SEND", None, False),  # abbreviated ranks: no guess
    ]
    assert all(r["in_bytes"] == 16 for r in rows)


def test_split_lists_and_unevenness() -> None:
    events = [
        _x(
            "record_param_comms",
            10,
            5,
            **_comm_args(
                "all_to_allv",
                "Float",
                36,
                36,
                8,
                **{"In split size": "[1, 2, ..., 8]", "Out split size": "[1, ...]"},
            ),
        ),
        _x(
            "record_param_comms",
            20,
            5,
            **_comm_args("all_to_all", "Int", 16, 16, 4, **{"In split size": "[4, 4, 4, 4]"}),
        ),
        _x(
            "record_param_comms",
            30,
            5,
            **_comm_args(
                "all_to_all",
                "Long",
                10,
                6,
                4,
                **{"In split size": "[1, 2, 3, 4]", "Out split size": "[3, 1, 1, 1]"},
            ),
        ),
        _x("record_param_comms", 40, 5, **_comm_args("allreduce", "Float", 8, 8, 4)),
    ]
    _, rows, _ = _parse(_doc(events))
    v, even, uneven, ar = rows
    assert (v["comm_type"], v["is_uneven"], v["in_splits"], v["out_splits"]) == (
        "ALL_TO_ALL",
        True,
        None,
        None,
    )
    assert (even["is_uneven"], even["in_splits"], even["out_splits"]) == (False, [4, 4, 4, 4], None)
    assert (uneven["is_uneven"], uneven["in_splits"], uneven["out_splits"]) == (
        True,
        [1, 2, 3, 4],
        [3, 1, 1, 1],
    )
    assert (uneven["in_bytes"], uneven["out_bytes"]) == (80, 48)
    assert (ar["is_uneven"], ar["in_splits"]) == (False, None)


def test_ops_rows() -> None:
    doc = _g2_doc()
    doc["traceEvents"].append({"ph": "i", "name": "instant", "pid": PID, "tid": TID, "ts": 5})
    meta, _, ops = _parse(doc)
    assert meta.node_count == 5
    assert ops["op_id"].to_pylist() == [0, 1, 2, 3]
    assert ops["name"].to_pylist()[:2] == ["c10d::allreduce_", "record_param_comms"]
    assert ops["type"].to_pylist()[2] == "user_annotation"
    assert ops["start_us"].to_pylist()[1] == 105 and ops["duration_us"].to_pylist()[1] == 40
    assert ops["ctrl_deps"].null_count == 4 and ops["data_deps"].null_count == 4


def test_gzip_source(tmp_path: Path) -> None:
    path = tmp_path / "rank0.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_g2_doc()).encode()))
    sink = MemorySink()
    meta = kineto.parse(source_for(path), sink)
    assert meta.rank == 2 and sink.table("collectives").num_rows == 1


# ---------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("data", "where_prefix"),
    [
        (json.dumps(_g2_doc()).encode()[:-40], "byte offset"),  # truncated
        (b'{"traceEvents": [{"ph": "X",, "ts": 1}]}', "byte offset"),
        (b'{"traceEvents": {"ph": "X"}}', "traceEvents"),
        (b'{"schemaVersion": 1}', "traceEvents"),
        (
            b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}, {"ph": "X", "ts": "12", "dur": 1}]}',
            "traceEvents[1]",
        ),
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": [1]}]}', "traceEvents[0]"),
        (b'{"traceEvents": [1, 2]}', "traceEvents[0]"),
        (b"[1, 2]", "byte offset 0"),
        (b'{"traceEvents": [{"ph": "X", "name": "\xff"}]}', None),
        (b"", "byte offset 0"),
    ],
)
def test_bad_input_raises_trace_error_only(data: bytes, where_prefix: str | None) -> None:
    with pytest.raises(TraceError) as info:
        _parse(data)
    if where_prefix is not None:
        assert info.value.where is not None and info.value.where.startswith(where_prefix), info.value.where


def test_bad_comm_arg_values_do_not_crash() -> None:
    odd = {
        "Collective name": "allreduce",
        "dtype": 7,
        "In msg nelems": "many",
        "Out msg nelems": None,
        "Group size": 2.5,
        "In split size": 12,
        "Out split size": "[a, b]",
        "Process Group Ranks": {"x": 1},
        "Seq": [],
        "Record function id": "3",
    }
    huge = _comm_args(
        "allreduce", "Float", 2**70, 2**62, 2**40, Seq=2**64, **{"In split size": f"[{2**64}, 1]"}
    )
    _, rows, _ = _parse(_doc([_x("record_param_comms", 1, 1, **odd), _x("record_param_comms", 5, 1, **huge)]))
    row, big = rows
    assert row["comm_type"] == "ALL_REDUCE" and row["dtype"] is None and row["in_elems"] is None
    assert row["group_size"] is None and row["seq"] is None and row["rf_id"] == 3
    # Integers no Arrow column can hold become null rather than failing the file.
    assert (big["in_elems"], big["out_elems"], big["out_bytes"], big["group_size"], big["seq"]) == (
        None,
        2**62,
        None,
        None,
        None,
    )
    assert big["in_splits"] is None


# ---------------------------------------------------------------------------------- throughput


def synthetic_trace(path: Path, target_bytes: int) -> int:
    """Write a Kineto-shaped trace of about `target_bytes`; returns the number of collectives."""
    with open(path, "w") as out:
        out.write('{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8, ')
        out.write('"pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", ')
        out.write(
            '"pg_size": 8, "ranks": [0, 1, 2, 3, 4, 5, 6, 7]}]}, "baseTimeNanoseconds": 1711964646000000000,'
        )
        out.write('\n  "traceEvents": [\n')
        ts, corr, n_coll, written, first = 1_000_000.0, 1, 0, 0, True
        while written < target_bytes:
            block = []
            for _ in range(20):  # compute: python_function, aten op, launch, kernel, flow events
                block.append(
                    _x("nn.Module: Linear", ts, 40, cat="python_function", tid=TID, **{"Python id": corr})
                )
                block.append(
                    _x(
                        "aten::mm",
                        ts + 1,
                        30,
                        **{"External id": corr, "Record function id": corr, "Ev Idx": corr},
                    )
                )
                block.append(_launch(ts + 5, corr, corr))
                block.append(
                    {
                        "ph": "s",
                        "id": corr,
                        "pid": PID,
                        "tid": TID,
                        "ts": ts + 5,
                        "cat": "ac2g",
                        "name": "ac2g",
                    }
                )
                block.append(
                    _kernel(
                        "ampere_sgemm_128x64_tn", ts + 50, 20.5, corr, corr, grid=[8, 1, 1], block=[256, 1, 1]
                    )
                )
                ts += 60
                corr += 1
            args = _comm_args(
                "allreduce",
                "Float",
                1 << 20,
                1 << 20,
                8,
                **{"Process Group Name": "0", "Process Group Ranks": "[0, ...]"},
            )
            block.append(_x("c10d::allreduce_", ts, 50, **{"External id": corr}))
            block.append(
                _x("record_param_comms", ts + 2, 40, **args, **{"External id": corr + 1, "Seq": n_coll})
            )
            block.append(
                _x("nccl:all_reduce", ts + 4, 30, cat="user_annotation", **{"External id": corr + 2})
            )
            block.append(_launch(ts + 10, corr + 1, corr + 1))
            block.append(
                _kernel(
                    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", ts + 60, 300, corr + 1, corr + 1, **args
                )
            )
            ts += 400
            corr += 3
            n_coll += 1
            text = ",\n".join(json.dumps(e) for e in block)
            if not first:
                out.write(",\n")
            out.write(text)
            first = False
            written += len(text)
        out.write("\n]}\n")
    return n_coll


def test_synthetic_trace_parses(tmp_path: Path) -> None:
    path = tmp_path / "synthetic.json"
    n = synthetic_trace(path, 200_000)
    sink = MemorySink()
    kineto.parse(source_for(path), sink)
    rows = sink.table("collectives").to_pylist()
    assert len(rows) == n and all(
        r["duration_us"] == 300 and r["source"] == "record_param_comms" for r in rows
    )
    assert [r["seq"] for r in rows] == list(range(n))


@pytest.mark.skipif(not os.environ.get("TRACEKIT_BENCH"), reason="throughput run: set TRACEKIT_BENCH=1")
def test_throughput_100mb() -> None:
    """Parse a ~100 MB synthetic trace in a fresh process; prints MB/s and peak RSS."""
    path = Path("/tmp/tracekit_kineto_bench.json")
    if not path.exists() or path.stat().st_size < 90_000_000:
        synthetic_trace(path, 100_000_000)
    code = (
        "import resource, sys, time\n"
        "from tracekit.parsers import kineto\n"
        "from tracekit.parsers.base import MemorySink\n"
        "from tracekit.sources import source_for\n"
        "t = time.perf_counter(); c = time.process_time(); s = MemorySink()\n"
        "kineto.parse(source_for(sys.argv[1]), s)\n"
        "dt, dc = time.perf_counter() - t, time.process_time() - c\n"
        "print(dt, dc, s.table('ops').num_rows, s.table('collectives').num_rows,\n"
        "      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    wall, cpu = [], []
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
        )
        dt, dc, ops, colls, rss_kb = out.stdout.split()
        wall.append(float(dt))
        cpu.append(float(dc))
    mb = path.stat().st_size / 1e6
    print(
        f"\nkineto parse: {mb:.1f} MB, {ops} ops, {colls} collectives; best wall {min(wall):.2f} s "
        f"= {mb / min(wall):.0f} MB/s, best cpu {min(cpu):.2f} s = {mb / min(cpu):.0f} MB/s; "
        f"peak RSS {int(rss_kb) / 1024:.0f} MiB (imports alone: ~45 MiB)"
    )
    assert int(colls) > 0

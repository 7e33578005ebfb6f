"""One rulebook: a fact that several formats record gives the same answer from every parser.

Each test states one rule of collective semantics (a backend prefix, a rank layout, the integer
bounds, dispatcher/work pairing, process-group reading, which c10d ops list their output first,
the group of an op that names none, a device kernel launched outside the profiled window) and runs
the same case through every parser that can meet it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.parsers.chakra.test_et import attr_bytes, node_bytes, parse_with, record
from tests.parsers.test_kineto import _comm_args, _doc, _kernel, _launch, _x
from tests.parsers.test_kineto import _parse as parse_kineto
from tests.parsers.test_pytorch_et import et, node, pg_init, rpc_c, tensor
from tests.parsers.test_pytorch_et import run as parse_et
from tracekit.parsers.base import ProcessGroup, TraceMeta
from tracekit.parsers.chakra import et as chakra_et

ET_SCHEMA = "1.1.1-chakra.0.0.4"
PG_INIT = "## process_group:init ##"
METADATA_NODE = 1
COMM_COLL_NODE = 7


def _parse_groups(fmt: str, entries: list[dict[str, Any]]) -> TraceMeta:
    """A trace whose only content is a process-group record holding `entries`."""
    if fmt == "pytorch_et":
        return parse_et(et(ET_SCHEMA, [pg_init(3, entries)]))[0]
    if fmt == "chakra_et":
        payload = str([json.dumps(entries)])  # the converter's str() of the ET input list
        return parse_with(chakra_et, record(node_bytes(1, PG_INIT, METADATA_NODE, inputs=payload))).meta
    info = {"backend": "nccl", "rank": 0, "world_size": 8, "pg_config": entries}
    return parse_kineto(_doc([], distributedInfo=info))[0]


GROUP_FORMATS = ["pytorch_et", "chakra_et", "kineto"]


# ------------------------------------------------------------------------------------ names


@pytest.mark.parametrize("fmt", ["pytorch_et", "kineto"])
def test_xccl_annotation_is_a_collective(fmt: str) -> None:
    """Intel GPUs' XCCL backend annotates its work as `xccl:<collective>`, as NCCL does `nccl:`."""
    if fmt == "pytorch_et":
        rows = parse_et(et(ET_SCHEMA, [node(10, "xccl:all_reduce", 2, inputs=[(tensor(5, 8), "Tensor(float)")])]))[1]
    else:
        rows = parse_kineto(_doc([_x("xccl:all_reduce", 100, 10, cat="user_annotation")]))[1]
    assert [(r["comm_type"], r["source"]) for r in rows] == [("ALL_REDUCE", "annotation")]


# ------------------------------------------------------------------------------ rank layouts


@pytest.mark.parametrize(
    "fmt",
    [
        "pytorch_et",
        "chakra_et",
        "kineto",
    ],
)
def test_oldest_rank_layout_maps_global_to_group_rank(fmt: str) -> None:
    """PyTorch before pg_name wrote `_world.pg_group_ranks[pg]`: {global rank: group rank}."""
    entry = {"pg_id": 1, "backend_id": 2, "backend_config": "cuda:nccl", "ranks": {"5": 1, "4": 0}}
    meta = _parse_groups(fmt, [entry])
    assert meta.process_groups == [ProcessGroup("1", None, "nccl", 2, [4, 5])]


# --------------------------------------------------------------------------- process groups


@pytest.mark.parametrize("fmt", GROUP_FORMATS)
def test_bad_process_group_entry_is_skipped_with_a_warning(fmt: str) -> None:
    good = {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "ranks": [], "group_size": 4}
    bad = {"pg_name": "1", "backend_config": "cuda:nccl", "ranks": "all of them"}
    meta = _parse_groups(fmt, [good, bad])
    assert meta.process_groups == [ProcessGroup("0", "default_pg", "nccl", 4, [])]
    [warning] = meta.warnings
    assert "process group" in warning.message and "'all of them'" in warning.message


# -------------------------------------------------------------------------- integer bounds


def _huge_count(fmt: str) -> tuple[TraceMeta, list[dict[str, Any]]]:
    if fmt == "pytorch_et":
        attrs = {"collective_name": "allreduce", "dtype": "Float", "in_msg_nelems": 2**70, "out_msg_nelems": 4}
        meta, rows, _ = parse_et(et(ET_SCHEMA, [rpc_c(11, 2, "allreduce", None, None, 1, ("0", ""), 0, attrs=attrs)]))
        return meta, rows
    if fmt == "chakra_et":
        fields = (attr_bytes("comm_type", "int64_val", 0), attr_bytes("comm_size", "uint64_val", 2**64 - 1))
        parsed = parse_with(chakra_et, record(node_bytes(1, "ar", COMM_COLL_NODE, attrs=fields)))
        return parsed.meta, parsed.collectives
    args = _comm_args("allreduce", "Float", 2**70, 4, 2)
    meta, rows, _ = parse_kineto(_doc([_x("record_param_comms", 100, 10, **args)]))
    return meta, rows


@pytest.mark.parametrize(
    "fmt",
    GROUP_FORMATS,
)
def test_count_beyond_bounds_is_null_with_a_warning(fmt: str) -> None:
    """An element or byte count above 2**62 is no real message: null, and a note on the file."""
    meta, [row] = _huge_count(fmt)
    assert row["in_bytes"] is None and row["in_elems"] is None
    assert row["comm_type"] == "ALL_REDUCE"
    [warning] = meta.warnings
    assert "in_" in warning.message and "bounds" in warning.message


# ------------------------------------------------------------------ dispatcher/work pairing


@pytest.mark.parametrize(
    "fmt",
    ["pytorch_et", "kineto"],
)
def test_work_pairs_only_with_a_dispatcher_it_can_run_for(fmt: str) -> None:
    """A gloo:all_reduce right after a c10d::broadcast_ is not that broadcast's work."""

    def rf(n: int) -> dict[str, Any]:
        return {"rf_id": n}

    if fmt == "pytorch_et":
        nodes = [
            node(
                10, "c10d::broadcast_", 2, inputs=[([tensor(5, 4)], "GenericList[Tensor(float)]")], attrs={"rf_id": 10}
            ),
            node(11, "gloo:all_reduce", 2, inputs=[(tensor(6, 8), "Tensor(float)")], attrs=rf(11)),
        ]
        rows = parse_et(et(ET_SCHEMA, nodes))[1]
    else:
        events = [
            _x("c10d::broadcast_", 100, 10, **{"Record function id": 10}),
            _x("gloo:all_reduce", 105, 20, cat="user_annotation", tid=2002, **{"Record function id": 11}),
        ]
        rows = parse_kineto(_doc(events))[1]
    assert sorted((r["comm_type"], r["source"]) for r in rows) == [("ALL_REDUCE", "annotation"), ("BROADCAST", "c10d")]


# -------------------------------------------------------------------- output-first c10d ops


@pytest.mark.parametrize(
    "fmt",
    ["pytorch_et", "kineto"],
)
def test_alltoall_list_form_lists_its_output_first(fmt: str) -> None:
    """c10d::alltoall_(Tensor[] output_tensors, Tensor[] input_tensors, ...)."""
    if fmt == "pytorch_et":
        inputs = [
            ([tensor(5, 2), tensor(6, 2)], "GenericList[Tensor(float),Tensor(float)]"),
            ([tensor(7, 3), tensor(8, 3)], "GenericList[Tensor(float),Tensor(float)]"),
            ("<Object>", "Object"),
            (-1, "Int"),
        ]
        rows = parse_et(et(ET_SCHEMA, [node(10, "c10d::alltoall_", 2, inputs=inputs)]))[1]
    else:
        args = {
            "Input Dims": [[[2], [2]], [[3], [3]], [], []],
            "Input type": ["TensorList", "TensorList", "", "Scalar"],
            "Concrete Inputs": ["", "", "", "-1"],
        }
        rows = parse_kineto(_doc([_x("c10d::alltoall_", 100, 10, **args)]))[1]
    [row] = rows
    assert (row["comm_type"], row["in_elems"], row["out_elems"]) == ("ALL_TO_ALL", 6, 4)


# ------------------------------------------------------------- the group of an unnamed op


@pytest.mark.parametrize(
    "fmt",
    ["pytorch_et", "kineto"],
)
def test_op_naming_no_group_belongs_to_the_only_group(fmt: str) -> None:
    """A c10d op records its ProcessGroup as an opaque object: with one group listed, it is that one."""
    group = {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo", "ranks": [], "group_size": 4}
    if fmt == "pytorch_et":
        op = node(10, "c10d::allreduce_", 2, inputs=[([tensor(5, 4)], "GenericList[Tensor(float)]")])
        rows = parse_et(et(ET_SCHEMA, [pg_init(3, [group]), op]))[1]
    else:
        args = {"Input Dims": [[[4]], []], "Input type": ["TensorList", ""]}
        info = {"backend": "gloo", "rank": 0, "world_size": 4, "pg_config": [group]}
        rows = parse_kineto(_doc([_x("c10d::allreduce_", 100, 10, **args)], distributedInfo=info))[1]
    [row] = rows
    assert (row["pg_name"], row["group_size"]) == ("0", 4)
    assert set(row["inferred"]) == {"pg_name", "group_size"}


# --------------------------------------------------- device kernel outside the host window


@pytest.mark.parametrize("with_comm_args", [False, True], ids=["G1 kernel name only", "G3+ comm args"])
def test_kernel_launched_before_the_profiled_window_is_left_out_and_noted(with_comm_args: bool) -> None:
    """A collective kernel whose launch is missing from a trace that records launches belongs to a
    host op issued before the window opened."""
    args = _comm_args("allreduce", "Float", 4, 4, 2) if with_comm_args else {}
    events = [
        _launch(40, corr=5, ext=1),
        _kernel("void at::native::vectorized_elementwise_kernel", 45, 2, corr=5, ext=1),
        _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", 100, 10, corr=7, ext=9, **args),
    ]
    meta, rows, ops = parse_kineto(_doc(events))
    assert rows == [] and ops.num_rows == 3
    [warning] = meta.warnings
    assert "1 NCCL kernel launched before the profiled window" in warning.message
    assert warning.where == "traceEvents[2]"


def test_kernel_of_a_device_only_trace_is_counted() -> None:
    """A trace that records no launches at all (device activities only) has no host window."""
    kernel = _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", 100, 10, corr=7, ext=9)
    meta, rows, _ = parse_kineto(_doc([kernel]))
    assert [(r["comm_type"], r["source"], r["inferred"]) for r in rows] == [
        ("ALL_REDUCE", "kernel", ["comm_type", "dtype"])
    ]
    assert meta.warnings == []


# ------------------------------------------------------------- ranks and sizes beyond bounds


def test_world_size_and_rank_beyond_any_cluster_are_null_with_a_warning() -> None:
    info = {"backend": "nccl", "rank": 2**31 - 2, "world_size": 2**31 - 1}
    meta = parse_kineto(_doc([], distributedInfo=info))[0]
    assert (meta.rank, meta.world_size) == (None, None)
    assert [w.message.split(" = ")[0] for w in meta.warnings] == ["rank", "world_size"]


@pytest.mark.parametrize("fmt", GROUP_FORMATS)
def test_group_size_beyond_any_cluster_skips_the_group(fmt: str) -> None:
    huge = {
        "pg_name": "0",
        "pg_desc": "default_pg",
        "backend_config": "cuda:nccl",
        "ranks": [],
        "group_size": 2**31 - 1,
    }
    meta = _parse_groups(fmt, [huge])
    assert meta.process_groups == []
    assert meta.world_size == (8 if fmt == "kineto" else None)  # Kineto states it in distributedInfo too
    [warning] = meta.warnings
    assert "size is not a group size in [1, 1048576]" in warning.message


def test_pytorch_et_ids_beyond_int64_are_null_with_a_warning() -> None:
    nodes = [node(2**64, "aten::mm", 2), node(11, "aten::add", 2**64)]
    meta, _, ops = parse_et(et(ET_SCHEMA, nodes))
    by_name = {o["name"]: o for o in ops}
    assert by_name["aten::mm"]["op_id"] is None and by_name["aten::add"]["ctrl_deps"] is None
    assert [w.message.split(" = ")[0] for w in meta.warnings] == ["op_id", "ctrl_deps"]

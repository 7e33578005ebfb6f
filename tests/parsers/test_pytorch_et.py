"""tracekit.parsers.pytorch_et against real public traces and hand-made ETs of every schema generation."""

from __future__ import annotations

import copy
import json
import random
import tarfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tests.golden import assert_golden
from tracekit.parsers import detect_format, parser_for, pytorch_et
from tracekit.parsers.base import MemorySink, TraceError, TraceMeta
from tracekit.parsers.common.values import MAX_TEXT_CHARS
from tracekit.sources import BytesSource

# ------------------------------------------------------------------------------------------ helpers


Row = dict[str, Any]
Parsed = tuple[TraceMeta, list[Row], list[Row]]


def run(data: bytes | dict[str, Any], name: str = "et.json") -> Parsed:
    if isinstance(data, dict):
        data = json.dumps(data).encode()
    sink = MemorySink()
    meta = pytorch_et.parse(BytesSource(data, name, name), sink)
    return meta, sink.table("collectives").to_pylist(), sink.table("ops").to_pylist()


def tensor(tid: int, numel: int, itemsize: int = 4) -> list[Any]:
    return [tid, tid + 1000, 0, numel, itemsize, "cuda:0"]


def node(
    nid: int,
    name: str,
    parent: int,
    inputs: Sequence[tuple[Any, str]] = (),
    outputs: Sequence[tuple[Any, str]] = (),
    attrs: dict[str, Any] | None = None,
    strides: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A >=1.0.2 node; inputs/outputs are (value, type) pairs."""

    def block(pairs: Sequence[tuple[Any, str]]) -> dict[str, Any]:
        b = {"values": [v for v, _ in pairs], "shapes": [[] for _ in pairs], "types": [t for _, t in pairs]}
        if strides:
            b["strides"] = [[] for _ in pairs]
        return b

    base_attrs: list[dict[str, Any]] = [
        {"name": "rf_id", "type": "uint64", "value": nid * 10},
        {"name": "op_schema", "type": "string", "value": ""},
    ]
    for key, value in (attrs or {}).items():
        kind = "string" if isinstance(value, str) else "uint64"
        base_attrs = [a for a in base_attrs if a["name"] != key] + [{"name": key, "type": kind, "value": value}]
    out = {
        "id": nid,
        "name": name,
        "ctrl_deps": parent,
        "inputs": block(inputs),
        "outputs": block(outputs),
        "attrs": base_attrs,
    }
    out.update(extra)
    return out


def flat_node(
    nid: int, name: str, parent: int, inputs: Sequence[tuple[Any, str]] = (), outputs: Sequence[tuple[Any, str]] = ()
) -> dict[str, Any]:
    """A schema 1.0.1 node (flat keys)."""
    return {
        "name": name,
        "id": nid,
        "rf_id": nid * 10,
        "parent": parent,
        "fw_parent": 0,
        "seq_id": -1,
        "scope": 0,
        "tid": 1,
        "fw_tid": 0,
        "op_schema": "",
        "inputs": [v for v, _ in inputs],
        "input_shapes": [[] for _ in inputs],
        "input_types": [t for _, t in inputs],
        "outputs": [v for v, _ in outputs],
        "output_shapes": [[] for _ in outputs],
        "output_types": [t for _, t in outputs],
    }


def et(schema: str, nodes: list[dict], root_flat: bool = False) -> dict:
    if root_flat:
        roots = [
            flat_node(2, "[pytorch|profiler|execution_graph|thread]", 1),
            flat_node(1, "[pytorch|profiler|execution_graph|process]", 1),
        ]
    else:
        roots = [
            node(2, "[pytorch|profiler|execution_trace|thread]", 1),
            node(1, "[pytorch|profiler|execution_trace|process]", 1),
        ]
    return {
        "schema": schema,
        "pid": 42,
        "time": "2024-04-29 16:23:47",
        "start_ts": 100,
        "nodes": [roots[0], *nodes, roots[1]],
        "finish_ts": 200,
    }


def pg_init(nid: int, groups: list[dict], parent: int = 2) -> dict:
    return node(nid, "## process_group:init ##", parent, inputs=[(json.dumps(groups), "String")])


def rpc_c(
    nid: int,
    parent: int,
    coll: str,
    tensors_in: list[Any] | None,
    tensors_out: list[Any] | None,
    seq: Any,
    pg: Sequence[Any],
    rank: int,
    splits: tuple[list[int], list[int]] = ([], []),
    tail: Sequence[int] = (0, 1, 2),
    attrs: dict[str, Any] | None = None,
    strides: bool = False,
) -> dict[str, Any]:
    """record_param_comms, layout C.

    [tensors, seq, (pg_name, pg_desc), rank, coll, in_split, out_split, start, stride, world]
    """
    ins: list[tuple[Any, str]] = []
    if tensors_in is not None:
        ins.append(([tensors_in], "GenericList[Tensor(float)]"))
    ins += [
        (seq, "Int"),
        (list(pg), "Tuple[String,String]"),
        (rank, "Int"),
        (coll, "String"),
        (splits[0], "GenericList[" + ",".join("Int" for _ in splits[0]) + "]"),
        (splits[1], "GenericList[" + ",".join("Int" for _ in splits[1]) + "]"),
    ]
    ins += [(v, "Int") for v in tail]
    outs = [([tensors_out], "GenericList[Tensor(float)]")] if tensors_out is not None else []
    return node(nid, "record_param_comms", parent, ins, outs, attrs=attrs, strides=strides)


def by_id(rows: list[dict]) -> dict[int, dict]:
    return {r["op_id"]: r for r in rows}


# --------------------------------------------------------------------------------- real: dlrm 8-rank


def _dlrm_members(root: Path) -> dict[int, bytes]:
    members = {}
    with tarfile.open(root / "param-dlrm-8rank" / "dlrm_pytorch_et.tar.gz", "r:gz") as tar:
        for info in tar.getmembers():
            if info.isfile() and info.name.endswith(".json"):
                rank = int(info.name.rsplit("_", 1)[1].split(".")[0])
                member = tar.extractfile(info)
                assert member is not None
                members[rank] = member.read()
    return members


@pytest.fixture(scope="module")
def dlrm(request: pytest.FixtureRequest) -> dict[int, Parsed]:
    from tests.conftest import PUBLIC_TRACES

    if not PUBLIC_TRACES.is_dir():
        pytest.skip(f"public reference traces not present at {PUBLIC_TRACES}")
    return {rank: run(data, f"dlrm_eg_{rank}.json") for rank, data in _dlrm_members(PUBLIC_TRACES).items()}


def test_dlrm_eight_collectives_per_rank(public_traces: Path, dlrm: dict[int, Parsed]) -> None:
    assert sorted(dlrm) == list(range(8))
    for rank, (meta, colls, ops) in dlrm.items():
        assert meta.format == "pytorch_et"
        assert meta.schema_version == "1.0.1"
        assert meta.rank is None
        assert meta.rank_hint == rank  # the default-group `rank` argument equals the global rank
        assert meta.node_count == len(ops)
        assert 1_600 < meta.node_count < 1_750
        assert meta.started_at is not None and meta.started_at.tzinfo is not None
        assert len(colls) == 8
        kinds = Counter((c["comm_type"], c["op_name"], c["is_uneven"]) for c in colls)
        assert kinds == {
            ("ALL_TO_ALL", "all_to_allv", True): 4,
            ("ALL_TO_ALL", "all_to_all", False): 1,
            ("ALL_REDUCE", "allreduce", False): 3,
        }
        assert all(c["source"] == "record_param_comms" for c in colls)
        assert all(c["op_name"] != "wait" for c in colls)
        # layout A records only a process-group pointer: no pg_name
        assert all(c["pg_name"] is None and c["seq"] is not None and c["rf_id"] is not None for c in colls)


def test_dlrm_input_bytes_match_readme(public_traces: Path, dlrm: dict[int, Parsed]) -> None:
    for _rank, (_meta, colls, _ops) in dlrm.items():
        sizes = {
            name: sorted(c["in_bytes"] for c in colls if c["op_name"] == name)
            for name in ("all_to_all", "all_to_allv", "allreduce")
        }
        assert sizes == {
            "all_to_all": [192],
            "all_to_allv": [1_536, 13_568, 24_576, 24_576],
            "allreduce": [448, 907_840, 1_576_964],
        }
        for c in colls:
            assert c["in_bytes"] == c["in_elems"] * {"Float": 4, "Int": 4, "Long": 8}[c["dtype"]]


def test_dlrm_wait_nodes_are_ops_not_collectives(public_traces: Path, dlrm: dict[int, Parsed]) -> None:
    for _rank, (_meta, colls, ops) in dlrm.items():
        types = Counter(o["type"] for o in ops)
        assert types["COMM_COLL_NODE"] == 8
        assert types["METADATA_NODE"] == 0
        comm_ids = {o["op_id"] for o in ops if o["type"] == "COMM_COLL_NODE"}
        assert comm_ids == {c["op_id"] for c in colls}
        rpc_ops = [o for o in ops if o["name"] == "record_param_comms"]
        assert len(rpc_ops) == 13  # 8 collectives + 5 waits
        assert sum(o["type"] == "COMP_NODE" for o in rpc_ops) == 5


def test_dlrm_splits_consistent_across_ranks(public_traces: Path, dlrm: dict[int, Parsed]) -> None:
    per_rank = {}
    for rank, (_meta, colls, _ops) in dlrm.items():
        v = sorted((c for c in colls if c["op_name"] == "all_to_allv"), key=lambda c: c["seq"])
        assert len(v) == 4
        for c in v:
            assert len(c["in_splits"]) == len(c["out_splits"]) == 8
            assert sum(c["in_splits"]) == c["in_elems"]
            assert sum(c["out_splits"]) == c["out_elems"]
            assert c["group_size"] == 8 and c["inferred"] == ["group_size"]
        per_rank[rank] = v
    uneven_seen = False
    for k in range(4):
        seqs = {per_rank[r][k]["seq"] for r in range(8)}
        assert len(seqs) == 1  # the k-th all_to_allv is the same logical collective on every rank
        for i in range(8):
            for j in range(8):
                assert per_rank[i][k]["in_splits"][j] == per_rank[j][k]["out_splits"][i]
            uneven_seen |= len(set(per_rank[i][k]["in_splits"])) > 1
    assert uneven_seen


def test_dlrm_ops_tree(public_traces: Path, dlrm: dict[int, Parsed]) -> None:
    _meta, _colls, ops = dlrm[0]
    rows = by_id(ops)
    assert rows[1]["ctrl_deps"] is None  # the root's self-loop is dropped
    assert rows[2]["ctrl_deps"] == [1]
    assert all(o["start_us"] is None and o["duration_us"] is None and o["data_deps"] is None for o in ops)


# --------------------------------------------------------------------------------- real: resnet 2-gpu


@pytest.fixture(scope="module")
def resnet() -> tuple[Path, Parsed]:
    from tests.conftest import PUBLIC_TRACES

    path = PUBLIC_TRACES / "param-resnet-2gpu" / "resnet_2gpu_et.json.gz"
    if not path.is_file():
        pytest.skip(f"public reference trace not present at {path}")
    return path, run(path.read_bytes(), path.name)


def test_resnet_collectives(public_traces: Path, resnet: tuple[Path, Parsed]) -> None:
    path, (meta, colls, ops) = resnet
    assert meta.schema_version == "1.1.0-chakra.0.0.4"
    assert meta.node_count == 14_392 == len(ops)
    assert meta.started_at == datetime(2024, 4, 29, 16, 23, 47, tzinfo=UTC)
    assert Counter(c["comm_type"] for c in colls) == {"ALL_REDUCE": 15, "BROADCAST": 6}
    assert all(c["source"] == "record_param_comms" for c in colls)

    # Count per size by re-reading the file independently of the parser.
    import gzip

    doc = json.loads(gzip.decompress(path.read_bytes()))
    expected: Counter = Counter()
    for n in doc["nodes"]:
        if n["name"] == "record_param_comms":
            a = {x["name"]: x["value"] for x in n["attrs"]}
            if a["collective_name"] != "wait":
                expected[(a["collective_name"], a["in_msg_nelems"] * {"Float": 4, "Long": 8}[a["dtype"]])] += 1
    got = Counter((c["op_name"], c["in_bytes"]) for c in colls)
    assert got == expected
    assert {size for name, size in got if name == "allreduce"} == {
        8_196_000,
        9_724_160,
        26_255_360,
        26_550_272,
        31_502_336,
    }
    assert {size for name, size in got if name == "broadcast"} == {424, 212_480}
    assert sum(got.values()) == 21


def test_resnet_process_group_and_rank(public_traces: Path, resnet: tuple[Path, Parsed]) -> None:
    _path, (meta, colls, ops) = resnet
    assert len(meta.process_groups) == 1
    pg = meta.process_groups[0]
    assert (pg.pg_name, pg.pg_desc, pg.backend, pg.group_size, pg.ranks) == ("0", "default_pg", "nccl", 2, [])
    assert meta.world_size == 2
    # broadcast records the root (0) as `rank`; allreduce records the caller's rank (this is cuda:1)
    assert meta.rank_hint == 1
    for c in colls:
        assert c["pg_name"] == "0" and c["group_size"] == 2 and c["inferred"] is None
        assert c["dtype"] in ("Float", "Long") and c["rf_id"] is not None and c["seq"] is not None
        assert c["is_uneven"] is False and c["in_splits"] is None
    assert sorted(c["seq"] for c in colls) == list(range(33, 54))
    types = Counter(o["type"] for o in ops)
    assert types["COMM_COLL_NODE"] == 21 and types["METADATA_NODE"] == 1
    names = {o["op_id"]: o["name"] for o in ops}
    assert {names[c["op_id"]] for c in colls} == {"record_param_comms"}


def test_resnet_parse_speed(public_traces: Path, resnet: tuple[Path, Parsed]) -> None:
    """Loose bound (shared CI machines): the 11.9 MB file parses at well over 2 MB/s."""
    import time

    path, _ = resnet
    data = path.read_bytes()
    start = time.perf_counter()
    run(data, path.name)
    assert time.perf_counter() - start < 6.0


# ------------------------------------------------------------------------------ hand-made layouts


def test_layout_b_1_0_2_int_pg_pointer_and_trailing_world_size() -> None:
    rpc = node(
        11,
        "record_param_comms",
        10,
        inputs=[
            ([tensor(5, 1)], "GenericList[Tensor(float)]"),
            (12, "Int"),
            (82149104, "Int"),
            (1, "Int"),
            ("all_gather", "String"),
            ([], "GenericList[]"),
            ([], "GenericList[]"),
            (2, "Int"),
        ],
        outputs=[([[tensor(6, 1), tensor(7, 1)]], "GenericList[GenericList[Tensor(float),Tensor(float)]]")],
    )
    doc = et(
        "1.0.2-chakra.0.0.4",
        [
            node(
                3,
                "## process_group:init ##",
                2,
                inputs=[
                    (
                        json.dumps(
                            [
                                {
                                    "pg_name": "0",
                                    "backend_id": 82149104,
                                    "backend_config": "cuda:nccl",
                                    "ranks": [],
                                    "group_size": 2,
                                    "group_count": 1,
                                }
                            ]
                        ),
                        "String",
                    )
                ],
            ),
            node(
                10,
                "c10d::allgather_",
                2,
                inputs=[([[tensor(6, 1), tensor(7, 1)]], "GenericList[GenericList[Tensor(float),Tensor(float)]]")],
            ),
            rpc,
            node(12, "nccl:all_gather", 11, inputs=[(tensor(5, 1), "Tensor(float)")]),
            node(
                13,
                "record_param_comms",
                2,
                inputs=[
                    (12, "Int"),
                    (0, "Int"),
                    (1, "Int"),
                    ("wait", "String"),
                    ([], "GenericList[]"),
                    ([], "GenericList[]"),
                    (1, "Int"),
                ],
            ),
        ],
    )
    meta, colls, ops = run(doc)
    assert len(colls) == 1
    c = colls[0]
    assert c["op_id"] == 11 and c["op_name"] == "all_gather" and c["comm_type"] == "ALL_GATHER"
    assert (c["in_elems"], c["out_elems"], c["in_bytes"], c["out_bytes"]) == (1, 2, 4, 8)
    assert c["dtype"] == "Float" and c["seq"] == 12 and c["pg_name"] is None
    assert c["group_size"] == 2 and c["inferred"] is None  # read from the trailing world_size
    assert c["is_uneven"] is False
    assert meta.world_size == 2 and meta.rank_hint == 1
    pg = meta.process_groups[0]
    assert (pg.pg_name, pg.pg_desc, pg.backend, pg.group_size, pg.ranks) == ("0", None, "nccl", 2, [])
    types = {o["op_id"]: o["type"] for o in ops}
    assert types[3] == "METADATA_NODE" and types[11] == "COMM_COLL_NODE"
    assert types[10] == types[12] == types[13] == "COMP_NODE"


@pytest.mark.parametrize(
    "schema,strides",
    [("1.0.3-chakra.0.0.4", False), ("1.1.1-chakra.0.0.4", True), ("1.0.4-chakra.0.0.4", False)],
)
def test_layout_c_tuple_pg_name(schema: str, strides: bool) -> None:
    doc = et(
        schema,
        [
            pg_init(
                3,
                [
                    {
                        "pg_name": "0",
                        "pg_desc": "default_pg",
                        "backend_config": "cuda:nccl",
                        "ranks": [],
                        "group_size": 4,
                        "group_count": 1,
                    }
                ],
            ),
            node(
                10,
                "c10d::allreduce_",
                2,
                inputs=[([tensor(5, 100)], "GenericList[Tensor(float)]")],
                strides=strides,
            ),
            rpc_c(
                11,
                10,
                "allreduce",
                tensor(5, 100),
                tensor(5, 100),
                7,
                ("0", "default_pg"),
                3,
                tail=(0, 1, 4),
                strides=strides,
            ),
            node(12, "nccl:all_reduce", 11, inputs=[(tensor(5, 100), "Tensor(float)")], strides=strides),
        ],
    )
    meta, colls, _ = run(doc)
    assert len(colls) == 1
    c = colls[0]
    assert (c["op_id"], c["op_name"], c["comm_type"], c["pg_name"], c["group_size"], c["seq"]) == (
        11,
        "allreduce",
        "ALL_REDUCE",
        "0",
        4,
        7,
    )
    assert (c["in_bytes"], c["out_bytes"], c["dtype"], c["rf_id"]) == (400, 400, "Float", 110)
    assert meta.rank_hint == 3 and meta.world_size == 4


def test_layout_d_seq_pair() -> None:
    rpc = node(
        11,
        "record_param_comms",
        2,
        inputs=[
            ([tensor(5, 8, 2)], "GenericList[Tensor(c10::BFloat16)]"),
            ([91, False], "GenericList[Int,Bool]"),
            (["3", "tp"], "Tuple[String,String]"),
            (1, "Int"),
            ("_reduce_scatter_base", "String"),
            ([], "GenericList[]"),
            ([], "GenericList[]"),
            (4, "Int"),
            (1, "Int"),
            (2, "Int"),
        ],
        outputs=[(tensor(6, 4, 2), "Tensor(c10::BFloat16)")],
    )
    _meta, colls, _ = run(et("1.1.1-chakra.1.0.0", [rpc]))
    c = colls[0]
    assert (c["seq"], c["pg_name"], c["group_size"], c["comm_type"], c["dtype"]) == (
        91,
        "3",
        2,
        "REDUCE_SCATTER",
        "BFloat16",
    )
    assert (c["in_elems"], c["out_elems"], c["in_bytes"], c["out_bytes"]) == (8, 4, 16, 8)
    assert c["is_uneven"] is False


def test_attrs_win_over_inputs_and_split_strings() -> None:
    attrs = {
        "collective_name": "all_to_allv",
        "dtype": "Float",
        "in_msg_nelems": 10,
        "out_msg_nelems": 6,
        "in_split_size": "[1, 2, 3, 4]",
        "out_split_size": "[2, 2, 1, 1]",
        "pg_name": "0",
        "pg_desc": "default_pg",
        "pg_size": 4,
        "global_rank_start": 0,
        "global_rank_stride": 1,
    }
    rpc = rpc_c(
        11,
        2,
        "all_to_allv",
        tensor(5, 10),
        tensor(6, 6),
        3,
        ("0", "default_pg"),
        2,
        splits=([1, 2, 3, 4], [2, 2, 1, 1]),
        tail=(0, 1, 4),
        attrs=attrs,
    )
    meta, colls, _ = run(et("1.1.0-chakra.0.0.4", [rpc]))
    c = colls[0]
    assert (c["in_elems"], c["out_elems"], c["in_bytes"], c["out_bytes"]) == (10, 6, 40, 24)
    assert (c["in_splits"], c["out_splits"], c["is_uneven"], c["group_size"]) == (
        [1, 2, 3, 4],
        [2, 2, 1, 1],
        True,
        4,
    )
    assert meta.rank_hint == 2
    # no process_group:init node: world_size comes from the default group's pg_size attr
    assert meta.world_size == 4


def test_uneven_from_splits_even_all_to_all() -> None:
    even = rpc_c(11, 2, "all_to_all", tensor(5, 8), tensor(6, 8), 1, ("0", ""), 0, splits=([2, 2, 2, 2], [2, 2, 2, 2]))
    odd = rpc_c(21, 2, "all_to_all", tensor(7, 8), tensor(8, 8), 2, ("0", ""), 0, splits=([1, 3, 2, 2], [2, 2, 2, 2]))
    _meta, colls, _ = run(et("1.0.3-chakra.0.0.4", [even, odd]))
    rows = by_id(colls)
    assert rows[11]["is_uneven"] is False and rows[21]["is_uneven"] is True


def test_c10d_only_collectives() -> None:
    alltoall_schema = (
        "c10d::alltoall_base_(Tensor output, Tensor input, "
        "__torch__.torch.classes.c10d.ProcessGroup process_group, "
        "int[] output_split_sizes, int[] input_split_sizes, int timeout) -> __torch__.torch.classes.c10d.Work"
    )
    nodes = [
        node(
            10,
            "c10d::allreduce_",
            2,
            inputs=[
                ([tensor(5, 64)], "GenericList[Tensor(float)]"),
                ("<Object>", "Object"),
                ("<Object>", "Object"),
                ("<None>", "None"),
                (-1, "Int"),
            ],
            outputs=[([tensor(5, 64)], "GenericList[Tensor(float)]"), ("<Object>", "Object")],
        ),
        node(
            20,
            "c10d::alltoall_base_",
            2,
            inputs=[
                (tensor(6, 12, 8), "Tensor(long int)"),
                (tensor(7, 10, 8), "Tensor(long int)"),
                ("<Object>", "Object"),
                ([3, 3, 3, 3], "GenericList[Int,Int,Int,Int]"),
                ([1, 2, 3, 4], "GenericList[Int,Int,Int,Int]"),
                (-1, "Int"),
            ],
            outputs=[("<Object>", "Object")],
            attrs={"op_schema": alltoall_schema},
        ),
        # no op_schema: argument order from the op name
        node(
            30,
            "c10d::alltoall_base_",
            2,
            inputs=[
                (tensor(8, 12, 8), "Tensor(long int)"),
                (tensor(9, 10, 8), "Tensor(long int)"),
                ("<Object>", "Object"),
                ([3, 3, 3, 3], "GenericList[Int,Int,Int,Int]"),
                ([1, 2, 3, 4], "GenericList[Int,Int,Int,Int]"),
                (-1, "Int"),
            ],
            outputs=[("<Object>", "Object")],
        ),
        node(40, "c10d::wait", 2),
        node(
            50,
            "c10d::barrier",
            2,
            inputs=[
                (tensor(10, 1), "Tensor(float)"),
                ("<Object>", "Object"),
                ([], "GenericList[]"),
                (-1, "Int"),
            ],
        ),
    ]
    meta, colls, ops = run(et("1.1.0-chakra.0.0.4", nodes))
    rows = by_id(colls)
    assert sorted(rows) == [10, 20, 30, 50]
    ar = rows[10]
    assert (ar["comm_type"], ar["op_name"], ar["source"], ar["in_bytes"], ar["out_bytes"], ar["dtype"]) == (
        "ALL_REDUCE",
        "allreduce_",
        "c10d",
        256,
        256,
        "Float",
    )
    assert ar["is_uneven"] is False and ar["pg_name"] is None and ar["seq"] is None
    for i in (20, 30):
        a2a = rows[i]
        assert (
            a2a["comm_type"],
            a2a["in_elems"],
            a2a["out_elems"],
            a2a["in_bytes"],
            a2a["out_bytes"],
            a2a["dtype"],
        ) == (
            "ALL_TO_ALL",
            10,
            12,
            80,
            96,
            "Long",
        )
        assert (a2a["in_splits"], a2a["out_splits"], a2a["is_uneven"]) == ([1, 2, 3, 4], [3, 3, 3, 3], True)
    assert rows[50]["comm_type"] == "BARRIER"
    assert meta.rank_hint is None


def test_annotations_gloo_and_no_double_count() -> None:
    nodes = [
        # gloo without record_param_comms: the c10d op paired with its gloo work is the row
        node(10, "c10d::allreduce_", 2, inputs=[([tensor(5, 16)], "GenericList[Tensor(float)]")]),
        node(11, "gloo:all_reduce", 10, inputs=[(tensor(5, 16), "Tensor(float)")]),
        # full NCCL chain: one row, anchored on record_param_comms
        node(20, "c10d::broadcast_", 2, inputs=[([tensor(6, 4)], "GenericList[Tensor(float)]")]),
        rpc_c(21, 20, "broadcast", tensor(6, 4), tensor(6, 4), 5, ("0", "default_pg"), 0),
        node(22, "nccl:broadcast", 21, inputs=[(tensor(6, 4), "Tensor(float)")]),
        # coalesced wrapper and nccl:coalesced are not collectives; the ops inside are
        rpc_c(30, 2, "coalesced", None, None, 6, ("0", "default_pg"), 1),
        node(31, "nccl:coalesced", 30),
        rpc_c(32, 31, "allreduce", tensor(7, 2), tensor(7, 2), 6, ("0", "default_pg"), 1),
        rpc_c(33, 31, "allreduce", tensor(8, 3), tensor(8, 3), 6, ("0", "default_pg"), 1),
        # a collective anchor nested in another: the outer one counts
        rpc_c(40, 2, "allreduce_coalesced", tensor(9, 5), tensor(9, 5), 7, ("0", "default_pg"), 1),
        rpc_c(41, 40, "allreduce", tensor(9, 5), tensor(9, 5), 7, ("0", "default_pg"), 1),
    ]
    meta, colls, ops = run(et("1.0.3-chakra.0.0.4", nodes))
    rows = by_id(colls)
    assert sorted(rows) == [10, 21, 32, 33, 40]
    assert (rows[10]["source"], rows[10]["op_name"], rows[10]["in_bytes"], rows[10]["rf_id"]) == (
        "c10d",
        "allreduce_",
        64,
        100,
    )
    assert rows[21]["source"] == "record_param_comms" and rows[21]["comm_type"] == "BROADCAST"
    assert rows[40]["op_name"] == "allreduce_coalesced" and rows[40]["comm_type"] == "ALL_REDUCE"
    assert meta.rank_hint == 1  # broadcast's rank argument is the root, not used
    types = {o["op_id"]: o["type"] for o in ops}
    assert types[11] == types[22] == types[30] == types[31] == types[41] == "COMP_NODE"
    assert types[10] == "COMM_COLL_NODE"


def test_send_recv_peer_mapping_in_subgroup() -> None:
    groups = [
        {
            "pg_name": "0",
            "pg_desc": "default_pg",
            "backend_config": "cuda:nccl",
            "ranks": [],
            "group_size": 4,
            "group_count": 2,
        },
        {
            "pg_name": "1",
            "pg_desc": "pp",
            "backend_config": "cuda:nccl",
            "ranks": [1, 3],
            "group_size": 2,
            "group_count": 2,
        },
    ]
    nodes = [
        pg_init(3, groups),
        node(10, "c10d::send", 2),
        rpc_c(11, 10, "send", tensor(5, 8), None, 1, ("1", "pp"), 1, tail=(-1, -1, 2)),
        node(12, "nccl:send 0->1", 11, inputs=[(tensor(5, 8), "Tensor(float)")]),
        rpc_c(21, 2, "recv", None, tensor(6, 8), 2, ("1", "pp"), 0, tail=(-1, -1, 2)),
        # whole-world group: identity, marked inferred
        rpc_c(31, 2, "send", tensor(7, 2), None, 3, ("0", "default_pg"), 2, tail=(-1, -1, 4)),
        # a group missing from the init node, but start/stride recorded
        rpc_c(41, 2, "recv", None, tensor(8, 2), 1, ("7", "x"), 1, tail=(1, 2, 2)),
        rpc_c(51, 2, "allreduce", tensor(9, 2), tensor(9, 2), 4, ("0", "default_pg"), 1, tail=(0, 1, 4)),
    ]
    meta, colls, ops = run(et("1.0.3-chakra.0.0.4", nodes))
    rows = by_id(colls)
    assert sorted(rows) == [11, 21, 31, 41, 51]
    assert (rows[11]["comm_type"], rows[11]["peer"], rows[11]["inferred"], rows[11]["in_bytes"]) == (
        "SEND",
        3,
        None,
        32,
    )
    assert (rows[21]["comm_type"], rows[21]["peer"], rows[21]["inferred"], rows[21]["out_bytes"]) == (
        "RECV",
        1,
        None,
        32,
    )
    assert (rows[31]["peer"], rows[31]["inferred"]) == (2, ["peer"])
    assert (rows[41]["peer"], rows[41]["inferred"]) == (3, None)
    assert rows[51]["peer"] is None
    assert rows[11]["group_size"] == 2 and rows[11]["pg_name"] == "1"
    assert meta.rank_hint == 1 and meta.world_size == 4
    types = {o["op_id"]: o["type"] for o in ops}
    assert (types[11], types[21], types[12]) == ("COMM_SEND_NODE", "COMM_RECV_NODE", "COMP_NODE")


def test_annotation_send_peer_from_name() -> None:
    nodes = [node(12, "nccl:send 0->1", 2, inputs=[(tensor(5, 8), "Tensor(float)")])]
    _meta, colls, _ = run(et("1.0.3-chakra.0.0.4", nodes))
    assert (colls[0]["comm_type"], colls[0]["peer"], colls[0]["inferred"]) == ("SEND", 1, ["peer"])


@pytest.mark.parametrize(
    "entry,expected",
    [
        # oldest generation: pg_id, ranks as {global: group-local}
        (
            {"pg_id": 0, "backend_id": 1, "backend_config": "cuda:nccl", "ranks": {"6": 1, "4": 0}},
            ("0", None, "nccl", 2, [4, 6]),
        ),
        (
            {
                "pg_name": "1",
                "backend_id": 2,
                "backend_config": "cpu:gloo,cuda:nccl",
                "ranks": [0, 2],
                "group_size": 2,
                "group_count": 2,
            },
            ("1", None, "gloo,nccl", 2, [0, 2]),
        ),
        (
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": "cuda:nccl",
                "ranks": [],
                "group_size": 8,
                "group_count": 1,
            },
            ("0", "default_pg", "nccl", 8, []),
        ),
    ],
)
def test_process_group_generations(entry: dict[str, Any], expected: Any) -> None:
    meta, _colls, ops = run(et("1.0.2-chakra.0.0.4", [pg_init(3, [entry])]))
    pg = meta.process_groups[0]
    assert (pg.pg_name, pg.pg_desc, pg.backend, pg.group_size, pg.ranks) == expected
    assert meta.world_size == expected[3]
    assert by_id(ops)[3]["type"] == "METADATA_NODE"


def test_flat_1_0_1_handmade_and_unknown_future_version() -> None:
    rpc = flat_node(
        11,
        "record_param_comms",
        2,
        inputs=[
            (tensor(5, 6), "Tensor(float)"),
            (9, "Int"),
            (1234, "Int"),
            (2, "Int"),
            ("allreduce", "String"),
            ([], "GenericList[]"),
            ([], "GenericList[]"),
        ],
        outputs=[(tensor(5, 6), "Tensor(float)")],
    )
    meta, colls, ops = run(et("1.0.1", [rpc], root_flat=True))
    assert (colls[0]["in_bytes"], colls[0]["seq"], colls[0]["rf_id"], meta.rank_hint) == (24, 9, 110, 2)
    assert by_id(ops)[11]["ctrl_deps"] == [2]

    future = et("9.3.0-chakra.2.0.0", [rpc_c(11, 2, "allreduce", tensor(5, 6), tensor(5, 6), 9, ("0", ""), 0)])
    meta, colls, _ = run(future)
    assert meta.schema_version == "9.3.0-chakra.2.0.0" and colls[0]["in_bytes"] == 24


def test_et_plus_times() -> None:
    nodes = [
        node(10, "c10d::allreduce_", 2, ts=1000.0, inclusive_dur=50, exclusive_dur=5),
        rpc_c(11, 10, "allreduce", tensor(5, 6), tensor(5, 6), 9, ("0", ""), 0),
    ]
    nodes[1].update(ts=1001.5, inclusive_dur=40, exclusive_dur=3)
    meta, colls, ops = run(et("1.1.0-chakra.0.0.4", nodes))
    rows = by_id(ops)
    assert (rows[10]["start_us"], rows[10]["duration_us"]) == (1000.0, 50.0)
    assert (rows[2]["start_us"], rows[2]["duration_us"]) == (None, None)
    assert (colls[0]["start_us"], colls[0]["duration_us"]) == (1001.5, 40.0)


def test_et_plus_kernel_nodes_give_device_times() -> None:
    """chakra_trace_link adds GPU kernel nodes (with `cat`) under the launching op."""
    kernel = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    nodes = [
        node(10, "c10d::allreduce_", 2, ts=1000.0, inclusive_dur=50, exclusive_dur=5),
        rpc_c(11, 10, "allreduce", tensor(5, 6), tensor(5, 6), 9, ("0", ""), 0),
        node(12, "nccl:all_reduce", 11, ts=1002.0, inclusive_dur=30, exclusive_dur=30),
        node(13, kernel, 12, cat="kernel", ts=1010.0, inclusive_dur=7.5, exclusive_dur=7.5),
        node(14, "aten::add_", 2, ts=2000.0, inclusive_dur=3),
        node(15, "void at::native::kernel", 14, cat="kernel", ts=2001.0, inclusive_dur=1),
    ]
    nodes[1].update(ts=1001.5, inclusive_dur=40, exclusive_dur=3)
    _meta, colls, ops = run(et("1.1.0-chakra.0.0.4", nodes))
    assert len(colls) == 1
    assert (colls[0]["op_id"], colls[0]["start_us"], colls[0]["duration_us"]) == (11, 1010.0, 7.5)
    rows = by_id(ops)
    assert (rows[11]["start_us"], rows[11]["duration_us"], rows[11]["type"]) == (
        1001.5,
        40.0,
        "COMM_COLL_NODE",
    )
    assert (rows[13]["start_us"], rows[13]["type"], rows[13]["ctrl_deps"]) == (1010.0, "COMP_NODE", [12])


def test_meta_started_at_is_utc_and_format_registered() -> None:
    doc = et("1.1.0-chakra.0.0.4", [])
    data = json.dumps(doc).encode()
    assert detect_format(data[:65536], "x.json") == "pytorch_et"
    assert parser_for("pytorch_et").role == "host"
    meta, colls, ops = run(data)
    assert meta.started_at == datetime(2024, 4, 29, 16, 23, 47, tzinfo=UTC)
    assert meta.rank is None and meta.rank_hint is None and colls == [] and len(ops) == 2
    doc["time"] = "not a time"
    assert run(doc)[0].started_at is None


# ----------------------------------------------------------------------------------------- bad input


def _good_doc() -> dict:
    return et(
        "1.1.0-chakra.0.0.4",
        [
            pg_init(
                3,
                [
                    {
                        "pg_name": "0",
                        "pg_desc": "default_pg",
                        "backend_config": "cuda:nccl",
                        "ranks": [],
                        "group_size": 2,
                    }
                ],
            ),
            node(10, "c10d::allreduce_", 2, inputs=[([tensor(5, 16)], "GenericList[Tensor(float)]")]),
            rpc_c(
                11,
                10,
                "allreduce",
                tensor(5, 16),
                tensor(5, 16),
                1,
                ("0", "default_pg"),
                0,
                attrs={
                    "collective_name": "allreduce",
                    "dtype": "Float",
                    "in_msg_nelems": 16,
                    "out_msg_nelems": 16,
                    "in_split_size": "[]",
                },
            ),
            node(12, "nccl:all_reduce", 11, inputs=[(tensor(5, 16), "Tensor(float)")]),
            rpc_c(13, 2, "send", tensor(6, 4), None, 2, ("0", "default_pg"), 1),
        ],
    )


def test_truncated_json_names_line_and_column() -> None:
    data = json.dumps(_good_doc(), indent=1).encode()
    cut = data[: len(data) // 2]
    with pytest.raises(TraceError) as info:
        run(cut)
    assert "truncated" in info.value.message
    lines = cut.split(b"\n")
    assert info.value.where is not None
    assert info.value.where.startswith(f"line {len(lines)} column {len(lines[-1]) + 1}")
    assert f"byte offset {len(cut)}" in info.value.where


def test_truncated_real_file(public_traces: Path) -> None:
    import gzip

    data = gzip.decompress((public_traces / "param-resnet-2gpu" / "resnet_2gpu_et.json.gz").read_bytes())
    with pytest.raises(TraceError) as info:
        run(data[:1_000_000])
    assert (info.value.where or "").startswith("line ")


def test_malformed_json_names_position() -> None:
    with pytest.raises(TraceError) as info:
        run(b'{"schema": "1.1.0",\n "nodes": [1,,2]}')
    assert (info.value.where or "").startswith("line 2 column ")
    with pytest.raises(TraceError):
        run(b"")


def test_invalid_utf8_and_deep_nesting() -> None:
    with pytest.raises(TraceError) as info:
        run(b'{"schema": "1.1.0",\n "nodes": [], "x": "\xff"}')
    assert (info.value.where or "").startswith("line 2 column ")
    with pytest.raises(TraceError):
        run(b"[" * 5000 + b"]" * 5000)
    # a tensor input nested up to and beyond the decoder's depth limit: rows or TraceError only
    doc = _good_doc()
    next(n for n in doc["nodes"] if n["id"] == 11)["inputs"]["values"][0] = "PLACEHOLDER"
    text = json.dumps(doc)
    outcomes = set()
    for depth in (200, 900, 950, 990, 1100):
        nested = "[" * depth + "]" * depth
        try:
            run(text.replace('"PLACEHOLDER"', nested).encode())
            outcomes.add("ok")
        except TraceError:
            outcomes.add("error")
    assert outcomes == {"ok", "error"}


@pytest.mark.parametrize(
    "data",
    [
        b'{"traceEvents": []}',
        b'{"schema": "1.1.0", "nodes": {"a": 1}}',
        b"[1, 2, 3]",
        b'"just a string"',
        b'{"schema": 7, "nodes": []}',
        b'{"schema": "1.1.0", "nodes": [1, 2]}',
        b'{"schema": "1.1.0", "nodes": [{"name": "x"}]}',
    ],
)
def test_not_an_et(data: bytes) -> None:
    with pytest.raises(TraceError):
        run(data)


def _at(doc: dict, nid: int) -> dict:
    return next(n for n in doc["nodes"] if n["id"] == nid)


def _structural_mutations() -> list[tuple[str, Any]]:
    """A node that contradicts itself: the file cannot be read (TraceError naming the node)."""

    def at(nid: int) -> Any:
        return lambda d: _at(d, nid)

    return [
        ("id is a string", lambda d: at(10)(d).update(id="10")),
        ("duplicate id", lambda d: at(12)(d).update(id=11)),
        ("name is an int", lambda d: at(10)(d).update(name=5)),
        ("ctrl_deps is a string", lambda d: at(11)(d).update(ctrl_deps="10")),
        ("inputs values not a list", lambda d: at(11)(d)["inputs"].update(values=7)),
        ("types shorter than values", lambda d: at(11)(d)["inputs"]["types"].pop()),
        ("Int input is a string", lambda d: at(11)(d)["inputs"]["values"].__setitem__(1, "one")),
        ("attrs not a list", lambda d: at(12)(d).update(attrs={"rf_id": 1})),
        ("ctrl_deps cycle", lambda d: at(10)(d).update(ctrl_deps=11)),
        ("tuple pg is a string", lambda d: at(13)(d)["inputs"]["values"].__setitem__(2, 5)),
    ]


@pytest.mark.parametrize("label,mutate", _structural_mutations(), ids=[m[0] for m in _structural_mutations()])
def test_wrong_types_inside_a_node_raise_trace_error(label: str, mutate: Any) -> None:
    doc = _good_doc()
    run(copy.deepcopy(doc))  # the unmutated document parses
    mutate(doc)
    with pytest.raises(TraceError) as info:
        run(doc)
    assert info.value.where, label
    if label not in ("id is a string",):
        assert "node id" in info.value.where or "nodes[" in info.value.where


def _value_mutations() -> list[tuple[str, Any, str]]:
    """A value that does not fit its column: null, and a warning naming the node (the rulebook's
    value policy, tracekit.parsers.common.values). (label, mutation, expected warning text)."""

    def add_attr(nid: int, name: str, value: Any) -> Any:
        return lambda d: _at(d, nid)["attrs"].append({"name": name, "type": "string", "value": value})

    return [
        ("attr value wrong type", add_attr(11, "in_msg_nelems", "lots"), "in_msg_nelems = 'lots' is not an integer"),
        ("split attr garbage", add_attr(11, "in_split_size", "[1, x"), "in_splits = '[1, x' is not a list"),
        ("ts is a string", lambda d: _at(d, 10).update(ts="soon"), "start_us = 'soon' is not a finite number"),
        (
            "negative numel",
            lambda d: _at(d, 11)["inputs"]["values"][0][0].__setitem__(3, -5),
            "in_elems = [5, 1005, 0, -5, 4, 'cuda:0'] holds a tensor with a negative numel",
        ),
        (
            "pg payload garbage",
            lambda d: _at(d, 3)["inputs"].update(values=["[{not json"]),
            "process-group record '[{not json' is neither JSON nor a Python literal",
        ),
        (
            "pg payload without name",
            lambda d: _at(d, 3)["inputs"].update(values=['[{"ranks": []}]']),
            "a process group entry skipped: has no pg_name or pg_id",
        ),
        (
            "pg ranks garbage",
            lambda d: _at(d, 3)["inputs"].update(values=['[{"pg_name": "0", "ranks": "all"}]']),
            "process group '0' skipped: ranks are not a list of ranks ('all')",
        ),
    ]


@pytest.mark.parametrize("label,mutate,expected", _value_mutations(), ids=[m[0] for m in _value_mutations()])
def test_values_that_do_not_fit_are_null_with_a_warning(label: str, mutate: Any, expected: Any) -> None:
    doc = _good_doc()
    mutate(doc)
    meta, colls, ops = run(doc)
    assert len(ops) == len(doc["nodes"]) and len(colls) == 2
    [warning] = meta.warnings
    assert warning.message.startswith(expected), warning.message
    assert (warning.where or "").startswith("node id ")


def test_random_corruption_only_raises_trace_error() -> None:
    """Replace random values inside nodes by values of other types: parse or TraceError, nothing else."""
    rng = random.Random(1234)
    junk = [None, "x", -1, 3.5, True, [], {}, [1, "a"], {"values": 1}, "[1,2]"]
    base = _good_doc()

    def slots(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
        if isinstance(obj, dict):
            for k, v in obj.items():
                yield (*path, k)
                yield from slots(v, (*path, k))
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                yield (*path, i)
                yield from slots(v, (*path, i))

    all_slots = list(slots(base["nodes"]))
    for _ in range(400):
        doc = copy.deepcopy(base)
        for _ in range(rng.randint(1, 3)):
            path = rng.choice(all_slots)
            target = doc["nodes"]
            try:
                for key in path[:-1]:
                    target = target[key]
                target[path[-1]] = copy.deepcopy(rng.choice(junk))
            except (KeyError, IndexError, TypeError):
                continue
        try:
            run(doc)
        except TraceError:
            pass


# ------------------------------------------------------------- gloo: c10d op paired with its work


def _gloo_attrs(rf_id: int, tid: int | None = 1, schema: str = "") -> dict:
    attrs: dict[str, Any] = {"rf_id": rf_id, "op_schema": schema}
    if tid is not None:
        attrs["tid"] = tid
    return attrs


_SEND_SCHEMA = (
    "c10d::send(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup process_group, "
    "int dst, int tag) -> __torch__.torch.classes.c10d.Work"
)
_RS_SCHEMA = (
    "c10d::_reduce_scatter_base_(Tensor output_tensor, Tensor input_tensor, "
    "__torch__.torch.classes.c10d.ProcessGroup process_group, "
    "__torch__.torch.classes.c10d.ReduceOp reduce_op, bool async_op=True, int timeout=-1) "
    "-> (Tensor, __torch__.torch.classes.c10d.Work)"
)


def test_gloo_pairs_by_rf_id_whatever_the_tree_says() -> None:
    nodes = [
        pg_init(3, [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [], "group_size": 4}]),
        node(5, "autograd::engine::evaluate_function: AccumulateGrad", 2),
        # gloo node under the c10d op
        node(
            10,
            "c10d::allreduce_",
            5,
            inputs=[([tensor(5, 16)], "GenericList[Tensor(float)]")],
            attrs=_gloo_attrs(100),
        ),
        node(11, "gloo:all_reduce", 10, inputs=[(tensor(5, 16), "Tensor(float)")], attrs=_gloo_attrs(101)),
        # gloo node written after a later c10d op, under an unrelated node (DDP backward)
        node(
            20,
            "c10d::allreduce_",
            5,
            inputs=[([tensor(6, 8)], "GenericList[Tensor(float)]")],
            attrs=_gloo_attrs(200),
        ),
        node(
            30,
            "c10d::allreduce_",
            11,
            inputs=[([tensor(7, 2)], "GenericList[Tensor(float)]")],
            attrs=_gloo_attrs(300),
        ),  # hangs under the first gloo node: not a nested collective
        node(31, "gloo:all_reduce", 5, inputs=[(tensor(6, 8), "Tensor(float)")], attrs=_gloo_attrs(201)),
        node(32, "gloo:all_reduce", 31, inputs=[(tensor(7, 2), "Tensor(float)")], attrs=_gloo_attrs(301)),
        # FSDP reduce-scatter: gloo runs an all-reduce of the whole input, rf_ids not adjacent
        node(
            40,
            "c10d::_reduce_scatter_base_",
            2,
            inputs=[
                (tensor(8, 4), "Tensor(float)"),
                (tensor(9, 16), "Tensor(float)"),
                ("<Object>", "Object"),
                ("<Object>", "Object"),
                (False, "Bool"),
                (-1, "Int"),
            ],
            attrs=_gloo_attrs(400, schema=_RS_SCHEMA),
        ),
        node(41, "gloo:all_reduce", 2, inputs=[(tensor(10, 16), "Tensor(float)")], attrs=_gloo_attrs(404)),
        # send: peer is the dst argument; the group cannot be told, so the identity is inferred
        node(
            50,
            "c10d::send",
            2,
            inputs=[
                ([tensor(11, 128)], "GenericList[Tensor(float)]"),
                ("<Object>", "Object"),
                (3, "Int"),
                (0, "Int"),
            ],
            attrs=_gloo_attrs(500, schema=_SEND_SCHEMA),
        ),
        node(51, "gloo:send", 2, inputs=[(tensor(11, 128), "Tensor(float)")], attrs=_gloo_attrs(501)),
        # a gloo node of another kind does not pair with the c10d op before it
        node(
            60,
            "c10d::_allgather_base_",
            2,
            inputs=[(tensor(12, 8), "Tensor(float)"), (tensor(13, 2), "Tensor(float)")],
            attrs=_gloo_attrs(600),
        ),
        node(61, "gloo:broadcast", 2, inputs=[(tensor(14, 3), "Tensor(float)")], attrs=_gloo_attrs(601)),
    ]
    _meta, colls, ops = run(et("1.1.1-chakra.0.0.4", nodes))
    rows = by_id(colls)
    assert sorted(rows) == [10, 20, 30, 40, 50, 60, 61]
    assert [rows[i]["in_elems"] for i in (10, 20, 30)] == [16, 8, 2]
    assert {rows[i]["source"] for i in (10, 20, 30, 40, 50, 60)} == {"c10d"}
    assert [rows[i]["rf_id"] for i in (10, 20, 30, 40, 50, 60)] == [100, 200, 300, 400, 500, 600]
    rs = rows[40]
    assert (rs["comm_type"], rs["op_name"], rs["in_elems"], rs["out_elems"], rs["in_bytes"]) == (
        "REDUCE_SCATTER",
        "_reduce_scatter_base_",
        16,
        4,
        64,
    )
    assert rs["is_uneven"] is False and rows[60]["is_uneven"] is False
    send = rows[50]
    # The file lists one group: it is the op's (inferred); its ranks are not listed, so the peer's
    # identity is assumed (inferred).
    assert (send["comm_type"], send["peer"], send["inferred"], send["in_bytes"]) == (
        "SEND",
        3,
        ["pg_name", "group_size", "peer"],
        512,
    )
    assert (rows[61]["source"], rows[61]["comm_type"]) == ("annotation", "BROADCAST")
    types = {o["op_id"]: o["type"] for o in ops}
    assert (types[50], types[51], types[11], types[41]) == (
        "COMM_SEND_NODE",
        "COMP_NODE",
        "COMP_NODE",
        "COMP_NODE",
    )


_FUNCTIONAL_ALL_REDUCE = "_c10d_functional::all_reduce(Tensor input, str reduce_op, Any group_name) -> Tensor"
_TWO_GROUPS = [
    {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo", "ranks": [], "group_size": 4},
    {"pg_name": "1", "pg_desc": "dp_stage0", "backend_config": "cpu:gloo", "ranks": [0, 2], "group_size": 2},
]


def _gloo_all_reduce(nid: int, parent: int, numel: int) -> list[dict]:
    """A c10d::allreduce_ (its group an opaque object) and its gloo work, rf_ids nid*10 and nid*10+1."""
    return [
        node(
            nid,
            "c10d::allreduce_",
            parent,
            inputs=[
                ([tensor(nid, numel)], "GenericList[Tensor(float)]"),
                ("<Object>", "Object"),
                ("<Object>", "Object"),
                ("<None>", "None"),
                (False, "Bool"),
                (-1, "Int"),
            ],
            attrs=_gloo_attrs(nid * 10),
        ),
        node(
            nid + 1,
            "gloo:all_reduce",
            parent,
            inputs=[(tensor(nid, numel), "Tensor(float)")],
            attrs=_gloo_attrs(nid * 10 + 1),
        ),
    ]


def test_a_c10d_op_runs_in_the_group_its_functional_collective_names() -> None:
    nodes = [
        pg_init(3, _TWO_GROUPS),
        # funcol.all_reduce(t, "sum", dp_group): the functional op names group "1"; the c10d op under it does not
        node(
            10,
            "_c10d_functional::all_reduce",
            2,
            inputs=[(tensor(9, 8), "Tensor(float)"), ("sum", "String"), ("1", "String")],
            attrs={"rf_id": 5, "op_schema": _FUNCTIONAL_ALL_REDUCE},
        ),
        node(11, "aten::clone", 10, inputs=[(tensor(9, 8), "Tensor(float)")]),
        *_gloo_all_reduce(20, 10, 8),
        # no op_schema: the last string argument; a group the file does not describe keeps no size
        node(
            30,
            "_c10d_functional::all_reduce",
            2,
            inputs=[(tensor(8, 4), "Tensor(float)"), ("sum", "String"), ("7", "String")],
        ),
        *_gloo_all_reduce(40, 30, 4),
        # an eager all-reduce: the rank has two groups, the op names none
        *_gloo_all_reduce(50, 2, 16),
        # under a functional op of another kind (a broadcast): not its group
        node(
            60, "_c10d_functional::broadcast", 2, inputs=[(tensor(7, 2), "Tensor(float)"), (0, "Int"), ("0", "String")]
        ),
        *_gloo_all_reduce(70, 60, 2),
    ]
    meta, colls, _ = run(et("1.1.1-chakra.0.0.4", nodes))
    rows = by_id(colls)
    assert sorted(rows) == [20, 40, 50, 70]
    assert [(rows[i]["pg_name"], rows[i]["group_size"], rows[i]["inferred"]) for i in (20, 40, 50, 70)] == [
        ("1", 2, ["group_size"]),
        ("7", None, None),
        (None, None, None),
        (None, None, None),
    ]
    assert rows[20]["in_bytes"] == 32 and rows[20]["source"] == "c10d" and meta.warnings == []


def test_a_functional_group_name_that_is_no_string_is_null_with_a_warning() -> None:
    nodes = [
        pg_init(3, _TWO_GROUPS),
        node(
            10,
            "_c10d_functional::all_reduce",
            2,
            inputs=[(tensor(9, 8), "Tensor(float)"), ("sum", "String"), (5, "String")],
        ),
        *_gloo_all_reduce(20, 10, 8),
    ]
    meta, colls, _ = run(et("1.1.1-chakra.0.0.4", nodes))
    assert colls[0]["pg_name"] is None
    assert [w.message.split(" =")[0] for w in meta.warnings] == ["pg_name"]


def test_gloo_pairing_keeps_threads_apart() -> None:
    nodes = [
        node(
            10,
            "c10d::allreduce_",
            2,
            inputs=[([tensor(5, 16)], "GenericList[Tensor(float)]")],
            attrs=_gloo_attrs(100, tid=1),
        ),
        node(
            20,
            "c10d::allreduce_",
            2,
            inputs=[([tensor(6, 8)], "GenericList[Tensor(float)]")],
            attrs=_gloo_attrs(102, tid=2),
        ),
        node(11, "gloo:all_reduce", 2, inputs=[(tensor(5, 16), "Tensor(float)")], attrs=_gloo_attrs(103, tid=1)),
        node(21, "gloo:all_reduce", 2, inputs=[(tensor(6, 8), "Tensor(float)")], attrs=_gloo_attrs(104, tid=2)),
    ]
    _meta, colls, _ = run(et("1.1.1-chakra.0.0.4", nodes))
    assert [(r["op_id"], r["in_elems"], r["source"]) for r in colls] == [(10, 16, "c10d"), (20, 8, "c10d")]


def test_gloo_pairing_without_rf_ids_uses_tree_then_file_order() -> None:
    def bare(nid: int, name: str, parent: int, inputs: Sequence[tuple[Any, str]]) -> dict[str, Any]:
        n = node(nid, name, parent, inputs=inputs)
        n["attrs"] = [a for a in n["attrs"] if a["name"] != "rf_id"]
        return n

    nodes = [
        bare(10, "c10d::allreduce_", 2, [([tensor(5, 16)], "GenericList[Tensor(float)]")]),
        bare(11, "gloo:all_reduce", 10, [(tensor(5, 16), "Tensor(float)")]),
        bare(20, "c10d::broadcast_", 2, [([tensor(6, 4)], "GenericList[Tensor(float)]")]),
        bare(21, "gloo:broadcast", 2, [(tensor(6, 4), "Tensor(float)")]),
    ]
    _meta, colls, _ = run(et("1.1.1-chakra.0.0.4", nodes))
    assert [(r["op_id"], r["comm_type"], r["source"], r["rf_id"]) for r in colls] == [
        (10, "ALL_REDUCE", "c10d", None),
        (20, "BROADCAST", "c10d", None),
    ]


# ------------------------------------------------------- real: captured torch 2.13 gloo traces

CAPTURED = Path(__file__).parents[2] / "sample_traces" / "captured"


@pytest.fixture(scope="module")
def captured() -> dict[tuple[str, int], list[dict]]:
    import gzip

    if not CAPTURED.is_dir():
        pytest.skip(f"captured sample traces not present at {CAPTURED}")
    out = {}
    for path in sorted(CAPTURED.glob("*/et_rank*.json.gz")):
        rank = int(path.name[len("et_rank") :].split(".")[0])
        _meta, colls, _ops = run(gzip.decompress(path.read_bytes()), path.name[: -len(".gz")])
        out[(path.parent.name, rank)] = colls
    assert len(out) == 16
    return out


def _of(rows: list[dict], comm_type: str) -> list[dict]:
    return [r for r in rows if r["comm_type"] == comm_type]


@pytest.mark.parametrize("rank", range(4))
def test_captured_ddp_mlp(captured: dict[tuple[str, int], list[Row]], rank: int) -> None:
    rows = captured[("ddp_mlp", rank)]
    assert Counter(r["comm_type"] for r in rows) == {"ALL_REDUCE": 8, "BROADCAST": 2}
    ar = _of(rows, "ALL_REDUCE")
    assert Counter(r["in_elems"] for r in ar) == {69904: 2, 65792: 4, 16640: 2}
    assert {r["dtype"] for r in ar} == {"Float"}
    assert all(r["in_bytes"] == 4 * r["in_elems"] == r["out_bytes"] for r in ar)
    assert [(r["in_elems"], r["dtype"]) for r in _of(rows, "BROADCAST")] == [(11, "Int"), (4, "Int")]
    assert [r["op_name"] for r in rows] == ["broadcast_"] * 2 + ["allreduce_"] * 8


@pytest.mark.parametrize("rank", range(4))
def test_captured_fsdp_mlp(captured: dict[tuple[str, int], list[Row]], rank: int) -> None:
    rows = captured[("fsdp_mlp", rank)]
    assert Counter(r["comm_type"] for r in rows) == {"ALL_GATHER": 12, "REDUCE_SCATTER": 6}
    ag, rs = _of(rows, "ALL_GATHER"), _of(rows, "REDUCE_SCATTER")
    assert Counter(r["in_elems"] for r in ag) == {2080: 4, 4128: 4, 516: 4}
    assert all(r["out_elems"] == 4 * r["in_elems"] and r["in_bytes"] == 4 * r["in_elems"] for r in ag)
    # on gloo the work is a gloo:all_reduce of the whole input; the collective is still a reduce-scatter
    assert Counter(r["in_elems"] for r in rs) == {8320: 2, 16512: 2, 2064: 2}
    assert all(r["in_elems"] == 4 * r["out_elems"] and r["in_bytes"] == 4 * r["in_elems"] for r in rs)
    assert {r["op_name"] for r in rs} == {"_reduce_scatter_base_"}
    assert {r["is_uneven"] for r in rows} == {False} and {r["dtype"] for r in rows} == {"Float"}


@pytest.mark.parametrize("rank", range(4))
def test_captured_moe_alltoall(captured: dict[tuple[str, int], list[Row]], rank: int) -> None:
    rows = captured[("moe_alltoall", rank)]
    assert Counter(r["comm_type"] for r in rows) == {"ALL_TO_ALL": 10, "ALL_REDUCE": 2}
    a2a = _of(rows, "ALL_TO_ALL")
    even = [r for r in a2a if not r["is_uneven"]]
    uneven = [r for r in a2a if r["is_uneven"]]
    assert len(even) == 2 and len(uneven) == 8
    assert all(
        (r["in_elems"], r["out_elems"], r["dtype"], r["in_splits"], r["out_splits"]) == (4, 4, "Long", None, None)
        for r in even
    )
    for r in uneven:  # rows of 32 fp32: the trace's splits count rows, the table's count elements
        assert len(r["in_splits"]) == len(r["out_splits"]) == 4 and r["dtype"] == "Float"
        assert r["in_elems"] == sum(r["in_splits"]) and r["out_elems"] == sum(r["out_splits"])
        assert all(s % 32 == 0 for s in r["in_splits"] + r["out_splits"])
        assert {"in_splits", "out_splits"} <= set(r["inferred"])
        assert r["in_bytes"] == 4 * r["in_elems"]
    assert [(r["in_elems"], r["dtype"]) for r in _of(rows, "ALL_REDUCE")] == [(1056, "Float")] * 2


def test_captured_moe_alltoall_splits_match_readme(captured: dict[tuple[str, int], list[Row]]) -> None:
    # README: rank 1, first profiled step: in splits [5,2,4,1] -> out splits [4,2,5,3] (384 -> 448),
    # rows of 32 elements
    r = _of(captured[("moe_alltoall", 1)], "ALL_TO_ALL")[1]
    assert (r["in_splits"], r["out_splits"], r["in_elems"], r["out_elems"]) == (
        [160, 64, 128, 32],
        [128, 64, 160, 96],
        384,
        448,
    )
    # what rank i sends to rank j is what rank j receives from rank i
    for k in range(10):
        sent = [_of(captured[("moe_alltoall", i)], "ALL_TO_ALL")[k]["in_splits"] or [1] * 4 for i in range(4)]
        got = [_of(captured[("moe_alltoall", j)], "ALL_TO_ALL")[k]["out_splits"] or [1] * 4 for j in range(4)]
        assert all(sent[i][j] == got[j][i] for i in range(4) for j in range(4))


@pytest.mark.parametrize("rank", range(4))
def test_captured_pipeline_p2p(captured: dict[tuple[str, int], list[Row]], rank: int) -> None:
    rows = captured[("pipeline_p2p", rank)]
    other = rank + 1 if rank % 2 == 0 else rank - 1
    assert Counter(r["comm_type"] for r in rows) == {"BROADCAST": 2, "ALL_REDUCE": 8, "SEND": 4, "RECV": 4}
    p2p = [r for r in rows if r["comm_type"] in ("SEND", "RECV")]
    assert {(r["peer"], r["in_elems"], r["in_bytes"], r["dtype"]) for r in p2p} == {(other, 128, 512, "Float")}
    # the process group is "<Object>": the peer argument is read in the world group (the only one that
    # can hold it on ranks 2 and 3, the default one assumed on ranks 0 and 1), and the row says so
    assert all(r["inferred"] == ["peer", "pg_name", "group_size"] for r in p2p)
    assert {(r["pg_name"], r["group_size"]) for r in p2p} == {("0", 4)}
    # stage 0 sends activations then receives gradients; stage 1 the other way round
    first, second = ("SEND", "RECV") if rank % 2 == 0 else ("RECV", "SEND")
    assert [r["comm_type"] for r in p2p] == [first, second] * 4
    assert Counter(r["in_elems"] for r in _of(rows, "ALL_REDUCE")) == {2048: 4, 64: 2, 32: 2}
    assert [r["in_elems"] for r in _of(rows, "BROADCAST")] == [4, 4]
    assert all(r["peer"] is None for r in rows if r["comm_type"] not in ("SEND", "RECV"))
    # funcol.all_reduce / funcol.broadcast name their group: the DP pair ("1" = [0, 2], "2" = [1, 3])
    # and the world; the size comes from the process-group node
    dp = "1" if rank % 2 == 0 else "2"
    assert {(r["pg_name"], r["group_size"], tuple(r["inferred"])) for r in _of(rows, "ALL_REDUCE")} == {
        (dp, 2, ("group_size",))
    }
    assert {(r["pg_name"], r["group_size"]) for r in _of(rows, "BROADCAST")} == {("0", 4)}


def test_captured_one_row_per_collective_with_rf_id(captured: dict[tuple[str, int], list[Row]]) -> None:
    for (job, rank), rows in captured.items():
        assert rows, (job, rank)
        assert all(r["source"] == "c10d" and r["rf_id"] is not None for r in rows), (job, rank)
        assert all(r["source"] == "c10d" and not r["op_name"].startswith("c10d::") for r in rows), (job, rank)
        assert len({r["rf_id"] for r in rows}) == len(rows), (job, rank)


# -------------------------------------------------------------------------------------------- golden


def _golden_doc() -> dict:
    groups = [
        {
            "pg_name": "0",
            "pg_desc": "default_pg",
            "backend_config": "cuda:nccl",
            "ranks": [],
            "group_size": 4,
            "group_count": 2,
        },
        {
            "pg_name": "1",
            "pg_desc": "pp",
            "backend_config": "cuda:nccl",
            "ranks": [0, 2],
            "group_size": 2,
            "group_count": 2,
        },
    ]
    a2av_attrs = {
        "collective_name": "all_to_allv",
        "dtype": "Float",
        "in_msg_nelems": 10,
        "out_msg_nelems": 8,
        "in_split_size": "[4, 3, 2, 1]",
        "out_split_size": "[2, 2, 2, 2]",
        "pg_name": "0",
        "pg_desc": "default_pg",
        "pg_size": 4,
    }
    return et(
        "1.1.0-chakra.0.0.4",
        [
            pg_init(3, groups),
            node(10, "c10d::allreduce_", 2, inputs=[([tensor(5, 256)], "GenericList[Tensor(float)]")]),
            rpc_c(11, 10, "allreduce", tensor(5, 256), tensor(5, 256), 1, ("0", "default_pg"), 0, tail=(0, 1, 4)),
            node(12, "nccl:all_reduce", 11, inputs=[(tensor(5, 256), "Tensor(float)")]),
            rpc_c(
                20,
                2,
                "all_to_allv",
                tensor(6, 10),
                tensor(7, 8),
                2,
                ("0", "default_pg"),
                0,
                splits=([4, 3, 2, 1], [2, 2, 2, 2]),
                tail=(0, 1, 4),
                attrs=a2av_attrs,
            ),
            rpc_c(30, 2, "send", tensor(8, 32), None, 1, ("1", "pp"), 1, tail=(0, 2, 2)),
            rpc_c(40, 2, "wait", None, None, 1, ("", ""), 0, tail=(-1, -1, 1)),
            node(
                50,
                "c10d::_allgather_base_",
                2,
                inputs=[(tensor(9, 64, 2), "Tensor(c10::Half)"), (tensor(10, 16, 2), "Tensor(c10::Half)")],
            ),
            node(
                60,
                "gloo:broadcast",
                2,
                inputs=[(tensor(11, 3, 8), "Tensor(double)")],
                ts=5.0,
                inclusive_dur=2.5,
            ),
        ],
    )


def test_golden_collectives() -> None:
    _meta, colls, _ops = run(_golden_doc())
    assert_golden("pytorch_et_collectives", colls)


def test_bytes_source_reads_gzip_member() -> None:
    import gzip

    data = gzip.compress(json.dumps(_golden_doc()).encode())
    sink = MemorySink()
    meta = pytorch_et.parse(BytesSource(data, "a.tgz!et.json.gz", "et.json.gz"), sink)
    assert meta.node_count == 11 and sink.table("collectives").num_rows == 5


# ------------------------------------------------------------------------------------- hostile input


@pytest.mark.parametrize("attrs", [None, {"pg_size": 2_147_483_647}])
def test_a_huge_group_size_never_becomes_the_world_size(attrs: dict[str, Any] | None) -> None:
    # The world size came from default-group rows before their values were bounded: a process group
    # of 2,147,483,647 ranks reached TraceMeta and made the ingest build one row per missing rank.
    tail = (0, 1, 2_147_483_647)  # layout C: global_rank_start, stride, world_size
    rpc = rpc_c(11, 2, "allreduce", tensor(5, 16), tensor(5, 16), 1, ("0", ""), 0, tail=tail, attrs=attrs)
    doc = et("1.1.0", [rpc])
    meta, colls, _ = run(doc)
    assert meta.world_size is None and colls[0]["group_size"] is None
    assert any("out of bounds [1, 1048576]" in w.message for w in meta.warnings)


def test_a_node_id_beyond_int64_is_null_and_a_duplicate_a_short_error() -> None:
    big = 10**50
    meta, _, ops = run(et("1.1.0", [node(big, "a", 2)]))
    assert [o["op_id"] for o in ops if o["name"] == "a"] == [None]
    assert [w.message.split(" = ")[0] for w in meta.warnings] == ["op_id"]
    huge = int("9" * 4000)
    with pytest.raises(TraceError, match="duplicate node id") as info:
        run(et("1.1.0", [node(huge, "a", 2), node(huge, "b", 2)]))
    line = info.value.describe("et.json")
    assert len(line) <= 500


def test_a_peer_from_huge_rank_start_and_stride_is_null() -> None:
    doc = et("1.1.0", [rpc_c(11, 2, "send", tensor(6, 4), None, 2, ("5", ""), 3, tail=(2**62, 2**62, 8))])
    meta, colls, _ = run(doc)
    assert colls[0]["peer"] is None and colls[0]["comm_type"] == "SEND"


def test_a_zero_filled_tail_is_refused_at_its_first_byte() -> None:
    head = json.dumps(_good_doc()).encode()[:500]
    with pytest.raises(TraceError, match="NUL byte") as info:
        run(head + bytes(1 << 20))
    assert info.value.where == "byte offset 500"


@pytest.mark.parametrize("value", ["[" * 900 + "]" * 900, "[" + "1, " * 1_000_000 + "1]"])
def test_a_bad_value_is_quoted_as_a_short_excerpt(value: str) -> None:
    # The excerpt renders what it shows, not the whole value (repr(value)[:80] built all of it).
    with pytest.raises(TraceError, match="no integer id") as info:
        run(f'{{"schema": "1.1.0", "nodes": [{{"id": {value}, "name": "a"}}]}}'.encode())
    assert len(info.value.message) < 200


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=10,
)
_attr_names = st.sampled_from(
    [
        "collective_name",
        "dtype",
        "in_msg_nelems",
        "out_msg_nelems",
        "in_split_size",
        "out_split_size",
        "pg_name",
        "pg_size",
        "global_rank_start",
        "global_rank_stride",
        "rf_id",
        "tid",
        "op_schema",
    ]
)
_types = st.sampled_from(["Int", "String", "GenericList[Int,Int]", "Tensor(float)", "Tuple[String,String]", "x"])


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["record_param_comms", "c10d::alltoall_base_", "gloo:send", "nccl:all_reduce"]),
            st.lists(st.tuples(_values, _types), max_size=8),
            st.dictionaries(_attr_names, _values, max_size=5),
            st.dictionaries(st.sampled_from(["ts", "inclusive_dur", "cat"]), _values, max_size=2),
        ),
        max_size=5,
    ),
    _values,
)
def test_any_node_values_give_rows_or_a_trace_error(nodes: list[Any], pg_payload: Any) -> None:
    made = [pg_init(3, [{"pg_name": "0", "ranks": pg_payload}])]
    for i, (name, inputs, attrs, extra) in enumerate(nodes):
        made.append(node(10 + i, name, 2, inputs=inputs, attrs=attrs, **extra))
    try:
        meta, colls, ops = run(et("1.1.0", made))
    except TraceError as exc:
        exc.describe("et.json").encode("utf-8")
        return
    assert len(ops) == len(made) + 2
    assert meta.world_size is None or 1 <= meta.world_size <= 2**20
    for row in colls:
        assert row["group_size"] is None or 1 <= row["group_size"] <= 2**20
        assert row["in_bytes"] is None or 0 <= row["in_bytes"] <= 2**62
        if row["in_splits"] and row["in_elems"] is not None:
            assert sum(row["in_splits"]) == row["in_elems"]  # splits are elements, or null


# ------------------------------------------------------------------------- values of megabytes


def _timed(doc: dict[str, Any]) -> tuple[Parsed, float]:
    data = json.dumps(doc).encode()
    started = time.process_time()
    parsed = run(data)
    return parsed, time.process_time() - started


def _a2a_attrs(**extra: Any) -> dict[str, Any]:
    attrs = {"collective_name": "all_to_allv", "dtype": "Float", "in_msg_nelems": 8, "out_msg_nelems": 8}
    attrs.update({"pg_name": "0", "pg_size": 4, **extra})
    return attrs


def test_an_attribute_of_megabytes_is_dropped_with_a_warning_in_well_under_a_second() -> None:
    # 8 MiB of split sizes as text took 6 s (one integer parse per part) and no warning said why.
    attrs = _a2a_attrs(in_split_size=",".join(["1"] * (4 << 20)))
    rpc = rpc_c(11, 2, "all_to_allv", tensor(5, 8), tensor(6, 8), 3, ("0", "default_pg"), 2, attrs=attrs)
    (meta, colls, _), took = _timed(et("1.1.0-chakra.0.0.4", [rpc]))
    assert took < 0.5
    [row] = colls
    assert (row["comm_type"], row["in_elems"], row["pg_name"], row["in_splits"]) == ("ALL_TO_ALL", 8, "0", None)
    [warning] = meta.warnings
    line = warning.describe("et_rank0.json")
    assert line.startswith("et_rank0.json at node id 11 (nodes[1]): in_split_size = '1,1,1,")
    assert line.endswith(" is 8,388,607 characters long, more than 1,048,576: dropped")


def test_inputs_and_names_of_megabytes_are_dropped_or_cut() -> None:
    huge = "x" * (8 << 20)
    rpc = rpc_c(11, 2, "all_reduce", tensor(5, 8), tensor(6, 8), 3, ("0", huge), 2)
    rpc["inputs"]["types"][0] = "GenericList[" + "Tensor(float)," * (1 << 20) + "]"
    named = node(12, "aten::mm" + huge, 2)
    (meta, colls, ops), took = _timed(et("1.0.3-chakra.0.0.4", [rpc, named]))
    assert took < 1.0
    [row] = colls
    assert (row["op_id"], row["comm_type"], row["pg_name"], row["in_elems"], row["out_elems"]) == (
        11,
        "ALL_REDUCE",
        None,  # the (pg_name, pg_desc) tuple held the huge description: dropped whole
        None,  # the input tensor's type was dropped: its size is not read
        8,
    )
    assert [len(o["name"]) for o in ops if o["op_id"] == 12] == [MAX_TEXT_CHARS]
    messages = sorted(w.message.split(" = ")[0] + " " + w.message.rsplit(": ", 1)[1] for w in meta.warnings)
    assert messages == ["inputs[0] type dropped", "inputs[2] dropped", "name cut to its first 1,048,576"]


def test_a_process_group_payload_longer_than_a_value_is_still_read() -> None:
    groups = [{"pg_name": str(i), "pg_desc": "d" * 100, "ranks": [i]} for i in range(20_000)]
    meta, _, _ = run(et("1.1.0", [pg_init(3, groups)]))
    assert len(meta.process_groups) == 20_000 and meta.warnings == []

"""The PyTorch ET JSON writer: document shape (read back with the stdlib json), and what
tracekit.parsers.pytorch_et makes of it (sizes in elements x dtype, peers, groups, splits)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from tracekit.parsers import pytorch_et as parser
from tracekit.parsers.base import MemorySink
from tracekit.sources import BytesSource
from tracekit.writers import pytorch_et

GROUPS = [
    {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "ranks": [], "group_size": 4},
    {"pg_name": "1", "pg_desc": "pp", "backend_config": "cuda:nccl", "ranks": [1, 3], "group_size": 2},
]


def _doc() -> dict[str, Any]:
    common: dict[str, Any] = {"rank_start": 0, "rank_stride": 1, "pg_name": "0", "pg_desc": "default_pg", "pg_size": 4}
    nodes = [
        pytorch_et.thread_node(),
        pytorch_et.pg_init_node(3, [{**g, "group_count": 2} for g in GROUPS]),
        pytorch_et.op_node(4, "dense_forward", 2),
        pytorch_et.comm_node(
            5, "allreduce", rf_id=3, seq=1, dtype="BFloat16", in_nelems=512, out_nelems=512, rank=3, **common
        ),
        pytorch_et.comm_node(
            6,
            "all_to_allv",
            rf_id=4,
            seq=2,
            dtype="Byte",
            in_nelems=10,
            out_nelems=8,
            rank=3,
            in_splits=[4, 3, 2, 1],
            out_splits=[2, 2, 2, 2],
            **common,
        ),
        pytorch_et.comm_node(
            7,
            "send",
            rf_id=5,
            seq=1,
            dtype="BFloat16",
            in_nelems=64,
            out_nelems=64,
            rank=0,  # group-local peer: global rank 1 in group "1"
            pg_name="1",
            pg_desc="pp",
            pg_size=2,
            rank_start=1,
            rank_stride=2,
            p2p=True,
        ),
        pytorch_et.process_node(),
    ]
    return pytorch_et.document(nodes, pid=1003, time="2024-05-01 12:00:00", start_ts=1714564800000, finish_ts=1)


def _parse(data: bytes) -> tuple[Any, list[dict[str, Any]]]:
    sink = MemorySink()
    meta = parser.parse(BytesSource(data, "job.3.json", "job.3.json"), sink)
    return meta, sink.table("collectives").to_pylist()


def test_document_layout() -> None:
    doc = json.loads(pytorch_et.dumps(_doc()))
    assert list(doc) == ["schema", "pid", "time", "start_ts", "nodes", "finish_ts"]
    assert doc["schema"] == "1.1.1-chakra.0.0.4"
    nodes = {n["id"]: n for n in doc["nodes"]}
    assert doc["nodes"][-1]["id"] == 1  # the root comes last, as the observer writes it
    assert nodes[1]["name"] == "[pytorch|profiler|execution_trace|process]" and nodes[1]["ctrl_deps"] == 1
    assert nodes[2]["name"] == "[pytorch|profiler|execution_trace|thread]" and nodes[2]["ctrl_deps"] == 1
    assert all(n["ctrl_deps"] == 2 for i, n in nodes.items() if i > 2)
    for node in doc["nodes"]:
        assert set(node) == {"id", "name", "ctrl_deps", "inputs", "outputs", "attrs"}
        for side in ("inputs", "outputs"):
            assert set(node[side]) == {"values", "shapes", "types", "strides"}
            assert len({len(v) for v in node[side].values()}) == 1
        names = [a["name"] for a in node["attrs"]]
        assert names[:7] == ["rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema"]
        assert all(set(a) == {"name", "type", "value"} for a in node["attrs"])

    pg = nodes[3]
    assert pg["name"] == "## process_group:init ##"
    assert pg["inputs"]["types"] == ["String"]
    groups = json.loads(pg["inputs"]["values"][0])
    assert [g["pg_name"] for g in groups] == ["0", "1"]
    assert groups[0]["ranks"] == [] and groups[0]["group_size"] == 4  # the whole world, as PyTorch records it
    assert set(groups[1]) == {"pg_name", "pg_desc", "backend_config", "ranks", "group_size", "group_count"}

    rpc = nodes[6]
    assert rpc["name"] == "record_param_comms"
    attrs = {a["name"]: a["value"] for a in rpc["attrs"]}
    assert attrs["collective_name"] == "all_to_allv" and attrs["dtype"] == "Byte"
    assert (attrs["in_msg_nelems"], attrs["out_msg_nelems"]) == (10, 8)
    assert (attrs["in_split_size"], attrs["out_split_size"]) == ("[4, 3, 2, 1]", "[2, 2, 2, 2]")
    assert (attrs["pg_name"], attrs["pg_desc"], attrs["pg_size"]) == ("0", "default_pg", 4)
    assert rpc["inputs"]["types"][:5] == [
        "Tensor(unsigned char)",
        "Tuple[Int,Bool]",
        "Tuple[String,String]",
        "Int",
        "String",
    ]
    assert rpc["inputs"]["values"][0][3:5] == [10, 1]  # [tensor_id, storage_id, offset, numel, itemsize, device]
    assert nodes[5]["inputs"]["types"][0] == "Tensor(c10::BFloat16)"


def test_parser_reads_what_the_writer_wrote() -> None:
    meta, rows = _parse(pytorch_et.dumps(_doc()))
    assert meta.format == "pytorch_et" and meta.schema_version == pytorch_et.SCHEMA
    assert meta.world_size == 4 and meta.rank_hint == 3
    assert meta.started_at is not None and meta.started_at.isoformat() == "2024-05-01T12:00:00+00:00"
    assert [g.pg_name for g in meta.process_groups] == ["0", "1"]
    got = [
        (r["op_name"], r["comm_type"], r["in_bytes"], r["out_bytes"], r["group_size"], r["pg_name"], r["peer"])
        for r in rows
    ]
    assert got == [
        ("allreduce", "ALL_REDUCE", 1024, 1024, 4, "0", None),
        ("all_to_allv", "ALL_TO_ALL", 10, 8, 4, "0", None),
        ("send", "SEND", 128, 128, 2, "1", 1),
    ]
    assert [r["is_uneven"] for r in rows] == [False, True, False]
    assert rows[1]["in_splits"] == [4, 3, 2, 1] and rows[1]["out_splits"] == [2, 2, 2, 2]
    assert all(r["source"] == "record_param_comms" and not r["inferred"] for r in rows)


def test_rank_range() -> None:
    assert pytorch_et.rank_range([]) == (0, 1)
    assert pytorch_et.rank_range([2, 5, 8]) == (2, 3)
    assert pytorch_et.rank_range([0, 1, 3]) == (-1, -1)
    assert pytorch_et.rank_range([7]) == (7, 1)


def test_write_is_gzip_and_deterministic(tmp_path: Path) -> None:
    a, b = tmp_path / "a.0.json.gz", tmp_path / "b.0.json.gz"
    size = pytorch_et.write(a, _doc())
    pytorch_et.write(b, _doc())
    assert a.read_bytes() == b.read_bytes() and size == a.stat().st_size
    assert json.loads(gzip.decompress(a.read_bytes())) == json.loads(pytorch_et.dumps(_doc()))
    plain = tmp_path / "c.json"
    pytorch_et.write(plain, _doc())
    assert plain.read_bytes() == pytorch_et.dumps(_doc())

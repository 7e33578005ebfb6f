"""Chakra .et parser: public ASTRA-sim files, golden files, framing, attribute variants, bad input.

The helpers at the top build .et bytes field by field, independently of tracekit's writer and of
the protobuf serializer, so that the parser is not only checked against the code that wrote its
input. test_jsonizer.py imports them. Golden files: tests/parsers/golden/chakra_et_*.json,
rewritten with TRACEKIT_REGEN_GOLDEN=1.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tests.golden import assert_golden
from tracekit.parsers import detect_format, parser_for
from tracekit.parsers.base import MemorySink, ProcessGroup, TraceError, TraceMeta
from tracekit.parsers.chakra import et as chakra_et
from tracekit.parsers.chakra import framing
from tracekit.parsers.chakra import rows as chakra_rows
from tracekit.sources import BytesSource, FileSource
from tracekit.writers.chakra_et import (
    COMM_TYPE_NUMBERS,
    EtWriter,
    comm_node,
    comp_node,
    encode_varint,
    frame,
    pg_init_node,
    recv_node,
    send_node,
)

# --- protobuf wire format, by hand ------------------------------------------------------------


def varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1  # negative int32/int64 are sign-extended to 10 bytes
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def key(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def vint(field: int, value: int) -> bytes:
    return key(field, 0) + varint(value)


def ld(field: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return key(field, 2) + varint(len(data)) + data


def zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def record(payload: bytes) -> bytes:
    return varint(len(payload)) + payload


# AttributeProto: name=1; scalar oneof variants by field number and encoding.
def attr_bytes(name: str, variant: str, value: Any) -> bytes:
    number, wire, encode = _VARIANTS[variant]
    return ld(1, name) + key(number, wire) + encode(value)


_VARIANTS: dict[str, tuple[int, int, Any]] = {
    "double_val": (3, 1, lambda v: struct.pack("<d", v)),
    "float_val": (5, 5, lambda v: struct.pack("<f", v)),
    "int32_val": (7, 0, varint),
    "int64_val": (9, 0, varint),
    "uint32_val": (11, 0, varint),
    "uint64_val": (13, 0, varint),
    "sint32_val": (15, 0, lambda v: varint(zigzag(v))),
    "sint64_val": (17, 0, lambda v: varint(zigzag(v))),
    "fixed32_val": (19, 5, lambda v: struct.pack("<I", v)),
    "fixed64_val": (21, 1, lambda v: struct.pack("<Q", v)),
    "sfixed32_val": (23, 5, lambda v: struct.pack("<i", v)),
    "sfixed64_val": (25, 1, lambda v: struct.pack("<q", v)),
    "bool_val": (27, 0, lambda v: varint(int(v))),
    "string_val": (29, 2, lambda v: varint(len(v.encode())) + v.encode()),
}
INT_VARIANTS = [v for v in _VARIANTS if v not in ("double_val", "float_val", "string_val", "bool_val")]


def metadata_bytes(version: str = "", attrs: tuple[bytes, ...] = ()) -> bytes:
    """A GlobalMetadata message (unframed): version=1, attr=2."""
    out = ld(1, version) if version else b""
    return out + b"".join(ld(2, a) for a in attrs)


def node_bytes(
    node_id: int = 0,
    name: str = "",
    node_type: int = 0,
    ctrl: tuple[int, ...] = (),
    data: tuple[int, ...] = (),
    start: int = 0,
    duration: int = 0,
    inputs: str = "",
    attrs: tuple[bytes, ...] = (),
) -> bytes:
    """A Node message (unframed), proto3-style: default values omitted, deps packed."""
    out = b""
    if node_id:
        out += vint(1, node_id)
    if name:
        out += ld(2, name)
    if node_type:
        out += vint(3, node_type)
    if ctrl:
        out += ld(4, b"".join(varint(d) for d in ctrl))
    if data:
        out += ld(5, b"".join(varint(d) for d in data))
    if start:
        out += vint(6, start)
    if duration:
        out += vint(7, duration)
    if inputs:
        out += ld(8, ld(1, inputs))
    return out + b"".join(ld(10, a) for a in attrs)


# --- parsing --------------------------------------------------------------------------------


@dataclasses.dataclass
class Parsed:
    meta: TraceMeta
    ops: list[dict[str, Any]]
    collectives: list[dict[str, Any]]

    def snapshot(self) -> dict[str, Any]:
        """What golden files hold: metadata and both tables, JSON-ready."""
        return {
            "meta": dataclasses.asdict(self.meta),
            "ops": self.ops,
            "collectives": self.collectives,
        }


def parse_with(module: Any, data: bytes, name: str = "trace.0.et") -> Parsed:
    sink = MemorySink()
    meta = module.parse(BytesSource(data, name, name), sink)
    return Parsed(meta, sink.table("ops").to_pylist(), sink.table("collectives").to_pylist())


def check_golden(name: str, parsed: Parsed) -> None:
    assert_golden(name, parsed.snapshot())


# --- public traces --------------------------------------------------------------------------

ASTRA_FOLDERS = {
    "all_reduce": "ALL_REDUCE",
    "all_gather": "ALL_GATHER",
    "all_to_all": "ALL_TO_ALL",
    "reduce_scatter": "REDUCE_SCATTER",
}


@pytest.mark.shared
def test_astra_sim_microbenchmarks_parse(public_traces: Path) -> None:
    root = public_traces / "astra-sim-microbenchmarks"
    files = sorted(root.glob("*/*.et"))
    assert len(files) == 16
    for path in files:
        sink = MemorySink()
        meta = chakra_et.parse(FileSource(path, str(path)), sink)
        rank = int(path.name.split(".")[-2])
        collectives = sink.table("collectives").to_pylist()
        ops = sink.table("ops").to_pylist()
        assert meta.schema_version == "0.0.4"
        assert meta.node_count == 1 and meta.rank is None
        assert len(collectives) == 1 and len(ops) == 1
        (row,) = collectives
        assert row["comm_type"] == ASTRA_FOLDERS[path.parent.name]
        assert row["in_bytes"] == 1_048_576
        assert row["op_id"] == rank == ops[0]["op_id"]
        assert row["op_name"] == f"{path.parent.name}_4npus_1MB"
        assert row["source"] == "chakra_node" and row["inferred"] == []
        assert ops[0]["type"] == "COMM_COLL_NODE"
        assert ops[0]["start_us"] is None and ops[0]["duration_us"] == 0.0


@pytest.mark.shared
def test_writer_reproduces_astra_sim_bytes(public_traces: Path) -> None:
    """The writer produces byte-identical files to ASTRA-sim's generator for the same content."""
    path = public_traces / "astra-sim-microbenchmarks" / "all_reduce" / "all_reduce.1.et"
    buf = io.BytesIO()
    with EtWriter(buf) as w:
        w.write_metadata("0.0.4")
        w.write_node(comm_node(1, "all_reduce_4npus_1MB", "ALL_REDUCE", 1_048_576))
    assert buf.getvalue() == path.read_bytes()


# --- golden files ---------------------------------------------------------------------------


def _golden_writer_mixed() -> bytes:
    buf = io.BytesIO()
    groups = [
        {
            "pg_name": "0",
            "pg_desc": "default_pg",
            "backend_config": "cuda:nccl",
            "ranks": [],
            "group_size": 4,
        },
        {"pg_name": "1", "pg_desc": "tp", "backend_config": "cuda:nccl", "ranks": [0, 1], "group_size": 2},
    ]
    with EtWriter(buf) as w:
        w.write_metadata("", {"schema": "1.1.0-chakra.0.0.4", "pid": 1234})
        w.write_node(pg_init_node(1, groups))
        w.write_node(comp_node(2, "aten::mm", 17, ctrl_deps=[1], start_us=1000, num_ops=4096))
        w.write_node(comm_node(3, "ncclDevKernel_AllReduce", "ALL_REDUCE", 4096, "0", data_deps=[2]))
        w.write_node(comm_node(4, "ncclDevKernel_ReduceScatter", "REDUCE_SCATTER_BLOCK", 8192, "1", duration_us=9))
        w.write_node(send_node(5, "send_to_3", 256, peer=3, rank=1, tag=7, data_deps=[3, 4]))
        w.write_node(recv_node(6, "recv_from_0", 512, peer=0, rank=1, attrs={"rf_id": 99}))
        w.write_node(comm_node(7, "c10d::allreduce_", "ALL_REDUCE", 0, is_cpu_op=True, attrs={"x": 1}))
        w.write_node(
            comm_node(
                8,
                "a2av",
                "ALL_TO_ALL",
                48,
                "1",
                in_splits=[8, 4],
                out_splits=[6, 6],
                attrs={"dtype": "float", "out_msg_nelems": 12},
            )
        )
    return buf.getvalue()


def _golden_hand_bytes() -> bytes:
    """Built field by field: metadata with only a `schema` attr, mixed attribute variants."""
    meta = metadata_bytes("", (attr_bytes("schema", "string_val", "1.0.2-chakra.0.0.4"),))
    nodes = [
        node_bytes(10, "gemm", 4, data=(9,), start=5, duration=20),
        node_bytes(
            11,
            "ar",
            7,
            ctrl=(10,),
            attrs=(
                attr_bytes("comm_type", "sint32_val", 7),
                attr_bytes("comm_size", "uint64_val", 1 << 40),
                attr_bytes("pg_name", "string_val", "3"),
                attr_bytes("rf_id", "fixed64_val", 55),
            ),
        ),
        b"",  # zero-length record: an all-default Node
        node_bytes(12, "storage", 8, duration=3),  # NodeType from an unmerged schema extension
        node_bytes(13, "old c10d", 7, attrs=(attr_bytes("is_cpu_op", "int32_val", 1),)),
        node_bytes(14, "bcast", 7, attrs=(attr_bytes("comm_type", "fixed32_val", 5),)),
    ]
    return record(meta) + b"".join(record(n) for n in nodes)


def _golden_no_metadata() -> bytes:
    """Early ASTRA-sim files start directly with a Node (id as field 1 varint)."""
    nodes = [
        node_bytes(
            1,
            "a2a",
            7,
            attrs=(attr_bytes("comm_type", "int64_val", 6), attr_bytes("comm_size", "int64_val", 64)),
        ),
        node_bytes(2, "comp", 4, duration=1, data=(1,)),
    ]
    return b"".join(record(n) for n in nodes)


GOLDEN_CASES = {
    "chakra_et_writer_mixed": _golden_writer_mixed,
    "chakra_et_hand_bytes": _golden_hand_bytes,
    "chakra_et_no_metadata": _golden_no_metadata,
}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden(name: str) -> None:
    check_golden(name, parse_with(chakra_et, GOLDEN_CASES[name]()))


def test_golden_hand_bytes_values() -> None:
    """Spot-check the hand-built golden case, so a regenerated golden cannot silently be wrong."""
    parsed = parse_with(chakra_et, _golden_hand_bytes())
    assert parsed.meta.schema_version == "1.0.2-chakra.0.0.4"
    assert parsed.meta.node_count == 6
    assert [r["op_id"] for r in parsed.ops] == [10, 11, 0, 12, 13, 14]
    assert [r["type"] for r in parsed.ops] == [
        "COMP_NODE",
        "COMM_COLL_NODE",
        "INVALID_NODE",
        "NODE_TYPE_8",
        "COMM_COLL_NODE",
        "COMM_COLL_NODE",
    ]
    assert parsed.ops[0] | {} == {
        "job_id": None,
        "rank": None,
        "trace_id": None,
        "op_id": 10,
        "name": "gemm",
        "type": "COMP_NODE",
        "start_us": 5.0,
        "duration_us": 20.0,
        "ctrl_deps": [],
        "data_deps": [9],
    }
    assert parsed.ops[1]["ctrl_deps"] == [10]
    ar, bcast = parsed.collectives
    assert (ar["comm_type"], ar["in_bytes"], ar["pg_name"], ar["rf_id"]) == (
        "REDUCE_SCATTER",
        1 << 40,
        "3",
        55,
    )
    assert (bcast["op_id"], bcast["comm_type"], bcast["in_bytes"]) == (14, "BROADCAST", None)


def test_golden_writer_mixed_values() -> None:
    parsed = parse_with(chakra_et, _golden_writer_mixed())
    assert parsed.meta.schema_version == "1.1.0-chakra.0.0.4"
    by_id = {r["op_id"]: r for r in parsed.collectives}
    assert sorted(by_id) == [3, 4, 5, 6, 7, 8]
    assert (by_id[8]["in_splits"], by_id[8]["out_splits"], by_id[8]["is_uneven"]) == ([8, 4], [6, 6], True)
    assert by_id[4]["comm_type"] == "REDUCE_SCATTER" and by_id[4]["duration_us"] == 9.0
    assert (by_id[5]["comm_type"], by_id[5]["peer"], by_id[5]["in_bytes"]) == ("SEND", 3, 256)
    assert (by_id[6]["comm_type"], by_id[6]["peer"], by_id[6]["rf_id"]) == ("RECV", 0, 99)
    assert [g.pg_name for g in parsed.meta.process_groups] == ["0", "1"]


def test_registry_finds_this_parser() -> None:
    assert parser_for("chakra_et").parse_many is not None
    assert detect_format(_golden_writer_mixed()[:4096], "x") == "chakra_et"
    assert detect_format(_golden_no_metadata(), "x") == "chakra_et"


# --- framing and node variants --------------------------------------------------------------


def test_file_starting_with_node() -> None:
    data = record(node_bytes(5, "x", 4, duration=2)) + record(node_bytes(6, "y", 4))
    parsed = parse_with(chakra_et, data)
    assert parsed.meta.schema_version is None
    assert [r["op_id"] for r in parsed.ops] == [5, 6]


def test_first_node_with_only_type_field() -> None:
    """A first Node without id or name still shows itself by field 3 (type)."""
    parsed = parse_with(chakra_et, record(node_bytes(0, "", 4)) + record(node_bytes(1, "n", 4)))
    assert parsed.meta.node_count == 2 and parsed.ops[0]["type"] == "COMP_NODE"


def test_zero_length_records() -> None:
    meta = record(metadata_bytes("0.0.4"))
    data = meta + record(node_bytes(1, "a", 4)) + b"\x00\x00" + record(node_bytes(2, "b", 4)) + b"\x00"
    parsed = parse_with(chakra_et, data)
    assert parsed.meta.node_count == 5
    assert [(r["op_id"], r["name"], r["type"]) for r in parsed.ops] == [
        (1, "a", "COMP_NODE"),
        (0, "", "INVALID_NODE"),
        (0, "", "INVALID_NODE"),
        (2, "b", "COMP_NODE"),
        (0, "", "INVALID_NODE"),
    ]


def test_zero_length_first_record_is_empty_metadata() -> None:
    parsed = parse_with(chakra_et, b"\x00" + record(node_bytes(1, "a", 4)))
    assert parsed.meta.schema_version is None and parsed.meta.node_count == 1


def test_empty_stream_has_no_nodes() -> None:
    parsed = parse_with(chakra_et, b"")
    assert parsed.meta.node_count == 0 and parsed.ops == [] and parsed.collectives == []


@pytest.mark.parametrize("variant", INT_VARIANTS)
def test_integer_attribute_variants(variant: str) -> None:
    attrs = (attr_bytes("comm_type", variant, 2), attr_bytes("comm_size", variant, 123_456))
    data = record(metadata_bytes("0.0.4")) + record(node_bytes(1, "ag", 7, attrs=attrs))
    (row,) = parse_with(chakra_et, data).collectives
    assert (row["comm_type"], row["in_bytes"]) == ("ALL_GATHER", 123_456)


def test_negative_and_float_integer_attributes() -> None:
    attrs = (attr_bytes("comm_type", "double_val", 9.0), attr_bytes("comm_size", "sint64_val", -1))
    parsed = parse_with(chakra_et, record(node_bytes(1, "b", 7, attrs=attrs)))
    (row,) = parsed.collectives
    # A negative byte count is no message size: null, and noted on the file.
    assert (row["comm_type"], row["in_bytes"]) == ("BARRIER", None)
    [warning] = parsed.meta.warnings
    assert warning.message == "in_bytes = -1 is out of bounds [0, 4611686018427387904]: left null"


def test_comm_type_outside_enum_is_kept_as_its_integer_with_a_warning() -> None:
    # astra-sim/chakra's et_def.proto @b8d2e8b9 adds INVALID_COMM_TYPE = 99 to CollectiveCommType.
    for code in (42, 99):
        attrs = (attr_bytes("comm_type", "int64_val", code), attr_bytes("comm_size", "int64_val", 8))
        parsed = parse_with(chakra_et, record(node_bytes(1, "?", 7, attrs=attrs)))
        (row,) = parsed.collectives
        assert row["comm_type"] == f"COMM_TYPE_{code}" and row["in_bytes"] == 8
        (warning,) = parsed.meta.warnings
        assert warning.where == "node id 1" and f"kept as COMM_TYPE_{code}" in warning.message


def test_coll_node_without_comm_type_is_not_a_collective() -> None:
    attrs = (attr_bytes("is_cpu_op", "bool_val", True), attr_bytes("comm_size", "int64_val", 8))
    parsed = parse_with(chakra_et, record(node_bytes(1, "c10d::allreduce_", 7, attrs=attrs)))
    assert parsed.collectives == [] and parsed.ops[0]["type"] == "COMM_COLL_NODE"


def test_unknown_node_types_kept() -> None:
    data = b"".join(record(node_bytes(i, f"n{i}", t)) for i, t in enumerate((8, 9, 10, 1000), start=1))
    parsed = parse_with(chakra_et, data)
    assert [r["type"] for r in parsed.ops] == ["NODE_TYPE_8", "NODE_TYPE_9", "NODE_TYPE_10", "NODE_TYPE_1000"]


def test_send_recv_peers_and_msccl_comm_type_ignored() -> None:
    send = node_bytes(
        1,
        "send",
        5,
        attrs=(
            attr_bytes("comm_type", "int64_val", 5),  # MSCCL writes the NodeType number here
            attr_bytes("comm_src", "int32_val", 2),
            attr_bytes("comm_dst", "int32_val", 3),
            attr_bytes("comm_size", "int64_val", 1024),
        ),
    )
    recv = node_bytes(2, "recv", 6, attrs=(attr_bytes("comm_src", "int64_val", 1),))
    bare = node_bytes(3, "recv2", 6, attrs=(attr_bytes("comm_dst", "int32_val", 2),))
    rows = parse_with(chakra_et, record(send) + record(recv) + record(bare)).collectives
    assert [(r["comm_type"], r["peer"], r["in_bytes"]) for r in rows] == [
        ("SEND", 3, 1024),
        ("RECV", 1, None),
        ("RECV", None, None),
    ]


def _a2a(node_id: int, *attrs: bytes) -> bytes:
    return node_bytes(node_id, "a2av", 7, attrs=(attr_bytes("comm_type", "int64_val", 6), *attrs))


def _int_list(name: str, field: int, values: list[int]) -> bytes:
    """A list attribute: `field` is the *_list member (8 int32_list, 10 int64_list, 14 uint64_list)."""
    return ld(1, name) + ld(field, ld(1, b"".join(varint(v) for v in values)))


def _float(comm_size: int, out_elems: int | None = None) -> tuple[bytes, ...]:
    """A float32 node's size attributes: comm_size in bytes and, given, out_msg_nelems."""
    sizes = (attr_bytes("comm_size", "int64_val", comm_size), attr_bytes("dtype", "string_val", "float"))
    return sizes if out_elems is None else (*sizes, attr_bytes("out_msg_nelems", "int64_val", out_elems))


def test_all_to_allv_splits_are_read_in_elements_from_any_integer_list() -> None:
    nodes = [
        _a2a(1, *_float(1536), _int_list("in_split_size", 10, [160, 64, 128, 32])),
        _a2a(2, *_float(16, 4), _int_list("in_split_size", 8, [3, 1]), _int_list("out_split_size", 14, [2, 2])),
        # empty lists: the splits are even, as c10d takes an empty split list
        _a2a(3, _int_list("in_split_size", 10, []), _int_list("out_split_size", 10, [])),
        _a2a(4),  # none: unknown
        _a2a(5, attr_bytes("in_split_size", "string_val", "[1, 2]")),  # not a list of integers
    ]
    parsed = parse_with(chakra_et, b"".join(record(n) for n in nodes))
    assert [(r["in_splits"], r["out_splits"], r["is_uneven"]) for r in parsed.collectives] == [
        ([160, 64, 128, 32], None, True),
        ([3, 1], [2, 2], True),
        (None, None, False),
        (None, None, None),
        (None, None, True),  # carries a split attribute, and "a2av" names the variable-split all-to-all
    ]
    # Elements as written (they sum to the element count): nothing is converted or inferred. The
    # text list of node 5 reads as [1, 2], but with no element count its unit is unknown.
    assert all(r["inferred"] == [] for r in parsed.collectives)
    assert [(w.where, "no element count" in w.message) for w in parsed.meta.warnings] == [("node id 5", True)]


def test_split_values_beyond_the_bounds_are_null_with_a_warning() -> None:
    node = _a2a(
        1, *_float(32, 8), _int_list("in_split_size", 10, [1, (1 << 63) + 5]), _int_list("out_split_size", 10, [4, 4])
    )
    parsed = parse_with(chakra_et, record(node))
    (row,) = parsed.collectives
    assert (row["in_splits"], row["out_splits"]) == (None, [4, 4])
    [warning] = parsed.meta.warnings
    assert warning.message.startswith("in_splits = ") and "not an integer in" in warning.message


def test_a_split_list_longer_than_any_group_is_null_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    from tracekit.parsers.common import values

    monkeypatch.setattr(values, "MAX_RANKS", 4)
    parsed = parse_with(chakra_et, record(_a2a(1, *_float(20, 5), _int_list("out_split_size", 10, [1] * 5))))
    assert parsed.collectives[0]["out_splits"] is None
    assert [w.message.split(" =")[0] for w in parsed.meta.warnings] == ["out_splits"]


PG_NEW = str(
    ['[{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "ranks": [], "group_size": 2}]']
)
# Old PyTorch: pg_id, backend_id and ranks as {global rank: group rank}.
PG_OLD = str(['[{"pg_id": 0, "backend_id": 140, "backend_config": "cpu:gloo,cuda:nccl", "ranks": {"4": 1, "2": 0}}]'])


def test_process_group_init_new_layout() -> None:
    data = record(node_bytes(1, "## process_group:init ##", 1, inputs=PG_NEW))
    meta = parse_with(chakra_et, data).meta
    assert meta.process_groups == [ProcessGroup("0", "default_pg", "nccl", 2, [])]


def test_process_group_init_old_layout() -> None:
    data = record(node_bytes(1, "## process_group:init ##", 1, inputs=PG_OLD))
    meta = parse_with(chakra_et, data).meta
    assert meta.process_groups == [ProcessGroup("0", None, "gloo,nccl", 2, [2, 4])]


@pytest.mark.parametrize("payload", ["", "not a list", "['{broken json']", "[1, 2]", "['[1, \"x\"]']"])
def test_process_group_init_unreadable_is_ignored(payload: str) -> None:
    parsed = parse_with(chakra_et, record(node_bytes(1, "## process_group:init ##", 1, inputs=payload)))
    assert parsed.meta.process_groups == [] and parsed.meta.node_count == 1


def test_process_groups_are_read_once_per_payload_and_warn_on_every_file() -> None:
    """Every rank of a job records the same payload: read once per process (cached), yet a payload
    that warns warns on each file, at its own node."""
    bad = str(['[{"pg_name": "0", "group_size": 2}, {"pg_desc": "no name"}]'])
    chakra_rows._groups_read_cleanly.cache_clear()
    for node_id in (1, 2):
        meta = parse_with(chakra_et, record(node_bytes(node_id, "## process_group:init ##", 1, inputs=PG_NEW))).meta
        assert meta.process_groups == [ProcessGroup("0", "default_pg", "nccl", 2, [])]
        meta = parse_with(chakra_et, record(node_bytes(node_id, "## process_group:init ##", 1, inputs=bad))).meta
        assert [g.pg_name for g in meta.process_groups] == ["0"]
        assert [w.where for w in meta.warnings] == [f"node id {node_id}"]
    assert chakra_rows._groups_read_cleanly.cache_info().hits == 2


def test_gzip_file(tmp_path: Path) -> None:
    path = tmp_path / "trace.3.et.gz"
    with EtWriter(path) as w:
        w.write_metadata("0.0.4")
        w.write_node(comm_node(3, "ar", "ALL_REDUCE", 1 << 20))
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    sink = MemorySink()
    meta = chakra_et.parse(FileSource(path, str(path)), sink)
    assert meta.schema_version == "0.0.4"
    assert sink.table("collectives").to_pylist()[0]["in_bytes"] == 1 << 20


def test_hand_gzip_file(tmp_path: Path) -> None:
    path = tmp_path / "t.et.gz"
    path.write_bytes(gzip.compress(record(metadata_bytes("1.0.0")) + record(node_bytes(1, "x", 4))))
    meta = chakra_et.parse(FileSource(path, str(path)), MemorySink())
    assert (meta.schema_version, meta.node_count) == ("1.0.0", 1)


def test_many_nodes_span_chunks_and_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Records cut by chunk boundaries and several ops batches give every node once, in order."""
    monkeypatch.setattr(chakra_et, "CHUNK_SIZE", 37)
    monkeypatch.setattr(chakra_et, "FLUSH_ROWS", 100)
    payloads = [node_bytes(i, "n" * (i % 300), 4, data=(i - 1,) if i else ()) for i in range(1000)]
    data = record(metadata_bytes("0.0.4")) + b"".join(record(p) for p in payloads)
    sink = MemorySink()
    meta = chakra_et.parse(BytesSource(data, "x", "x.et"), sink)
    assert meta.node_count == 1000 and len(sink.batches["ops"]) == 10
    ops = sink.table("ops")
    assert ops.column("op_id").to_pylist() == list(range(1000))
    assert [len(n) for n in ops.column("name").to_pylist()] == [i % 300 for i in range(1000)]


# --- bad input ------------------------------------------------------------------------------


def _error(data: bytes) -> TraceError:
    with pytest.raises(TraceError) as info:
        parse_with(chakra_et, data)
    return info.value


def test_truncated_record_names_record_and_offset() -> None:
    first = record(metadata_bytes("0.0.4"))
    second = record(node_bytes(1, "abc", 4))
    exc = _error(first + second + record(node_bytes(2, "defgh", 4))[:-3])
    assert exc.where == f"record 2 (byte offset {len(first) + len(second)})"
    assert "truncated" in exc.message


def test_length_beyond_eof() -> None:
    first = record(metadata_bytes("0.0.4"))
    exc = _error(first + varint(1 << 20) + b"\x08\x01")
    assert exc.where == f"record 1 (byte offset {len(first)})"
    assert "truncated" in exc.message and "1,048,576" in exc.message


def test_length_beyond_protobuf_limit() -> None:
    exc = _error(varint(1 << 40) + b"\x08\x01")
    assert "exceeds" in exc.message and exc.where == "record 0 (byte offset 0)"


def test_file_ends_inside_length_varint() -> None:
    exc = _error(record(node_bytes(1, "a", 4)) + b"\x80\x80")
    assert "record 1" in (exc.where or "")


def test_overlong_varint() -> None:
    first = record(metadata_bytes("0.0.4"))
    exc = _error(first + b"\xff" * 11 + b"\x01")
    assert "varint" in exc.message and exc.where == f"record 1 (byte offset {len(first)})"


def test_undecodable_node() -> None:
    bad = b"\x0a\x05ab"  # field 1 as length-delimited, length beyond the message
    exc = _error(record(metadata_bytes("0.0.4")) + record(node_bytes(1, "a", 4)) + record(bad))
    assert exc.where is not None and exc.where.startswith("record 2 (byte offset")
    assert "decode" in exc.message


def test_garbage_bytes() -> None:
    exc = _error(b"\x07garbage!" + b"\xfe\xfe\xfe")
    assert exc.where is not None and exc.where.startswith("record ")


def test_truncated_gzip(tmp_path: Path) -> None:
    path = tmp_path / "t.0.et.gz"
    body = b"".join(record(node_bytes(i, "n" * 50, 4)) for i in range(2000))
    path.write_bytes(gzip.compress(record(metadata_bytes("0.0.4")) + body)[:-200])
    with pytest.raises(TraceError):
        chakra_et.parse(FileSource(path, str(path)), MemorySink())


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_trace_error(data: bytes) -> None:
    try:
        parse_with(chakra_et, data)
    except TraceError:
        pass


@settings(max_examples=examples(100), deadline=None)
@given(st.binary(min_size=1, max_size=60), st.integers(min_value=1, max_value=59))
def test_truncated_valid_file_raises_trace_error(tail: bytes, cut: int) -> None:
    data = record(metadata_bytes("0.0.4")) + record(node_bytes(1, "a" * len(tail), 4))
    cut_at = len(data) - min(cut, len(data) - 9)  # keep a byte of the Node record
    with pytest.raises(TraceError):
        parse_with(chakra_et, data[:cut_at])


# --- property tests -------------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_varint_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert encoded == varint(value)
    assert framing.decode_varint(encoded + b"\x99", 0) == (value, len(encoded))


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=20_000), max_size=12),
    st.integers(min_value=1, max_value=64),
)
def test_framing_round_trip(lengths: list[int], chunk: int) -> None:
    payloads = [bytes([i % 251]) * n for i, n in enumerate(lengths)]
    data = b"".join(frame(p) for p in payloads)
    got = list(framing.iter_records(io.BytesIO(data), chunk_size=chunk))
    assert [p for _, _, p in got] == payloads
    offsets = [0]
    for p in payloads[:-1]:
        offsets.append(offsets[-1] + len(frame(p)))
    assert [(i, o) for i, o, _ in got] == list(enumerate(offsets[: len(payloads)]))


@given(st.integers(min_value=1 << 32, max_value=(1 << 31) * 4))
def test_huge_lengths_are_framing_errors(length: int) -> None:
    with pytest.raises(TraceError):
        list(framing.iter_records(io.BytesIO(varint(length) + b"\x00" * 5)))


_ids = st.integers(min_value=0, max_value=(1 << 63) - 1)
_node_spec = st.fixed_dictionaries(
    {
        "id": _ids,
        "name": st.text(max_size=20),
        "kind": st.sampled_from(["comp", "coll", "send", "recv"]),
        "comm_type": st.sampled_from(sorted(set(COMM_TYPE_NUMBERS) - {"REDUCE_SCATTER_BLOCK"})),
        # Within the rulebook's bounds (tracekit.parsers.common.values): counts to 2**62, ranks below 2**20.
        "size": st.integers(min_value=0, max_value=1 << 62),
        "peer": st.integers(min_value=0, max_value=(1 << 20) - 1),
        "ctrl": st.lists(_ids, max_size=4),
        "data": st.lists(_ids, max_size=4),
        "start": st.integers(min_value=0, max_value=1 << 53),
        "duration": st.integers(min_value=0, max_value=1 << 53),
        "splits": st.none() | st.lists(st.integers(min_value=0, max_value=1 << 40), max_size=8),
    }
)


def _size(spec: dict[str, Any]) -> int:
    """The node's comm_size: with split lists, their sum in bytes (dtype Byte), which tells their unit."""
    return sum(spec["splits"]) if spec["kind"] == "coll" and spec["splits"] is not None else spec["size"]


def _build(spec: dict[str, Any]) -> Any:
    common = {
        "ctrl_deps": spec["ctrl"],
        "data_deps": spec["data"],
        "start_us": spec["start"],
        "duration_us": spec["duration"],
    }
    if spec["kind"] == "comp":
        return comp_node(spec["id"], spec["name"], **common)
    if spec["kind"] == "coll":
        splits = spec["splits"]
        reverse = None if splits is None else splits[::-1]
        typed = None if splits is None else {"dtype": "uint8", "out_msg_nelems": sum(splits)}
        return comm_node(
            spec["id"],
            spec["name"],
            spec["comm_type"],
            _size(spec),
            "pg",
            in_splits=splits,
            out_splits=reverse,
            attrs=typed,
            **common,
        )
    builder = send_node if spec["kind"] == "send" else recv_node
    return builder(spec["id"], spec["name"], spec["size"], spec["peer"], **common)


@settings(max_examples=examples(80), deadline=None)
@given(st.lists(_node_spec, max_size=25), st.booleans())
def test_writer_parser_round_trip(specs: list[dict[str, Any]], with_metadata: bool) -> None:
    buf = io.BytesIO()
    with EtWriter(buf) as w:
        if with_metadata:
            w.write_metadata("0.0.4")
        for spec in specs:
            w.write_node(_build(spec))
    parsed = parse_with(chakra_et, buf.getvalue())
    assert parsed.meta.node_count == len(specs)
    assert parsed.meta.schema_version == ("0.0.4" if with_metadata else None)
    assert parsed.meta.warnings == []
    kinds = {
        "comp": "COMP_NODE",
        "coll": "COMM_COLL_NODE",
        "send": "COMM_SEND_NODE",
        "recv": "COMM_RECV_NODE",
    }
    assert [
        (r["op_id"], r["name"], r["type"], r["ctrl_deps"], r["data_deps"], r["start_us"], r["duration_us"])
        for r in parsed.ops
    ] == [
        (
            s["id"],
            s["name"],
            kinds[s["kind"]],
            s["ctrl"],
            s["data"],
            float(s["start"]) if s["start"] else None,
            float(s["duration"]),
        )
        for s in specs
    ]
    comms = [s for s in specs if s["kind"] != "comp"]
    assert [(r["op_id"], r["comm_type"], r["in_bytes"], r["peer"]) for r in parsed.collectives] == [
        (
            s["id"],
            s["comm_type"] if s["kind"] == "coll" else s["kind"].upper(),
            _size(s),
            None if s["kind"] == "coll" else s["peer"],
        )
        for s in comms
    ]
    # Split lists in elements come back as written; an empty one is even.
    splits = [s["splits"] if s["kind"] == "coll" else None for s in comms]
    assert [r["in_splits"] for r in parsed.collectives] == [x or None for x in splits]
    assert [r["out_splits"] for r in parsed.collectives] == [x[::-1] if x else None for x in splits]
    assert [r["is_uneven"] for r in parsed.collectives] == [None if x is None else len(set(x)) > 1 for x in splits]


def test_ids_beyond_int64_are_null_with_a_warning() -> None:
    """Node ids and dependencies are uint64 in the proto; the int64 columns cannot hold the top half."""
    big = (1 << 64) - 1
    nodes = [node_bytes(1, "a", 4), node_bytes(big, "b", 4, ctrl=(1,)), node_bytes(3, "c", 4, data=(big,))]
    parsed = parse_with(chakra_et, b"".join(record(n) for n in nodes))
    assert [(o["op_id"], o["name"], o["ctrl_deps"], o["data_deps"]) for o in parsed.ops] == [
        (1, "a", [], []),
        (None, "b", [1], []),
        (3, "c", [], None),
    ]
    assert [w.message.split(" = ")[0] for w in parsed.meta.warnings] == ["op_id", "data_deps"]


# --- hostile input: values, counts and sizes out of all proportion ---------------------------


def test_times_beyond_int64_do_not_break_the_ops_columns() -> None:
    # start_time_micros/duration_micros are uint64: 2**64 - 1 used to raise ArrowInvalid ("PyLong is
    # too large to fit int64") from the checked columns, which converted ids but not times.
    big = (1 << 64) - 1
    parsed = parse_with(
        chakra_et, record(node_bytes(1, "a", 4)) + record(node_bytes(2, "b", 4, start=big, duration=big))
    )
    assert [(o["op_id"], o["start_us"], o["duration_us"]) for o in parsed.ops] == [
        (1, None, 0.0),
        (2, float(big), float(big)),
    ]


def test_a_run_of_empty_records_is_refused_by_count() -> None:
    # Zero bytes frame valid empty records: after one real node, a zero-filled tail (a half-copied
    # file) used to give one INVALID_NODE ops row per byte. It is refused once untyped records are
    # out of proportion, a count reached within the first few thousand records.
    data = record(metadata_bytes("0.0.4")) + record(node_bytes(1, "a", 4)) + bytes(1 << 20)
    exc = _error(data)
    assert "carry no node type" in exc.message and exc.where is not None and exc.where.startswith("record ")
    index = int(exc.where.split()[1])
    assert index < 2 * chakra_rows.DECODE_ROWS


def test_records_without_type_are_refused_even_when_not_empty() -> None:
    # A node with only an id (`02 08 01`) says nothing a trace needs; a stream of them is garbage.
    data = record(node_bytes(1, "a", 4)) + record(node_bytes(1)) * 10_000
    assert "carry no node type" in _error(data).message


def test_a_few_untyped_records_are_kept() -> None:
    nodes = [record(node_bytes(i, f"n{i}", 4)) for i in range(1, 3000)]
    nodes[1::100] = [b"\x00"] * len(nodes[1::100])  # 30 empty records among 3,000
    parsed = parse_with(chakra_et, b"".join(nodes))
    assert parsed.meta.node_count == 2999 and sum(o["type"] == "INVALID_NODE" for o in parsed.ops) == 30


def test_a_record_longer_than_any_node_is_refused_before_it_is_read() -> None:
    from tracekit.parsers.common.limits import MAX_RECORD_BYTES

    first = record(node_bytes(1, "a", 4))
    exc = _error(first + varint(MAX_RECORD_BYTES + 1) + b"\x08\x01")
    assert "exceeds" in exc.message and exc.where == f"record 1 (byte offset {len(first)})"
    assert f"{MAX_RECORD_BYTES:,}" in exc.message


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=30), st.builds(bytes, st.integers(0, 3000))), max_size=20))
def test_any_framed_records_give_rows_or_a_trace_error(payloads: list[bytes]) -> None:
    try:
        parsed = parse_with(chakra_et, b"".join(record(p) for p in payloads))
    except TraceError as exc:
        exc.describe("t.0.et").encode("utf-8")
    else:
        assert parsed.meta.node_count <= len(payloads)

"""The .et writer: varint framing, attribute types, node builders, gzip, file handling.

The written bytes are checked with protobuf's own decoder (not tracekit's parser), so a bug shared
by writer and parser cannot hide; parser round-trips live in tests/parsers/chakra/test_et.py.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.internal.decoder import _DecodeVarint  # type: ignore[attr-defined]
from hypothesis import given
from hypothesis import strategies as st

from tracekit.parsers import et_def_pb2
from tracekit.writers.chakra_et import (
    EtWriter,
    attr,
    comm_node,
    comp_node,
    encode_varint,
    frame,
    int64_list,
    int64_list_fields,
    pg_init_node,
    recv_node,
    send_node,
)


def _split(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        length, pos = _DecodeVarint(data, pos)
        out.append(data[pos : pos + length])
        pos += length
    assert pos == len(data)
    return out


def _attrs(node: Any) -> dict[str, tuple[str, Any]]:
    return {a.name: (a.WhichOneof("value"), getattr(a, a.WhichOneof("value"))) for a in node.attr}


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (16384, b"\x80\x80\x01"),
    ],
)
def test_encode_varint_known_values(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_encode_varint_matches_protobuf(value: int) -> None:
    assert _DecodeVarint(encode_varint(value) + b"\x00", 0) == (value, len(encode_varint(value)))
    assert len(encode_varint(value)) <= 10


def test_encode_varint_rejects_negative() -> None:
    with pytest.raises(ValueError):
        encode_varint(-1)


@given(st.binary(max_size=40_000))
def test_frame(payload: bytes) -> None:
    assert _split(frame(payload)) == [payload]


@pytest.mark.parametrize(
    ("value", "variant", "expected"),
    [
        (True, "bool_val", True),
        (False, "bool_val", False),
        (7, "int64_val", 7),
        (-3, "int64_val", -3),
        (2.5, "double_val", 2.5),
        ("nccl", "string_val", "nccl"),
        (b"\x00\x01", "bytes_val", b"\x00\x01"),
    ],
)
def test_attr_scalar_types(value: Any, variant: str, expected: Any) -> None:
    a = attr("x", value)
    assert a.name == "x" and a.WhichOneof("value") == variant and getattr(a, variant) == expected


@pytest.mark.parametrize(
    ("value", "variant"),
    [
        ([True, False], "bool_list"),
        ([1, 2, 3], "int64_list"),
        ([], "int64_list"),
        (("a", "b"), "string_list"),
        ([1.5, 2], "double_list"),
        ([b"a"], "bytes_list"),
    ],
)
def test_attr_list_types(value: Any, variant: str) -> None:
    a = attr("x", value)
    assert a.WhichOneof("value") == variant
    assert list(getattr(a, variant).values) == list(value)


@pytest.mark.parametrize("value", [None, {"a": 1}, [1, "a"]])
def test_attr_unsupported(value: Any) -> None:
    with pytest.raises(TypeError):
        attr("x", value)


def test_comm_node_attributes() -> None:
    node = comm_node(5, "ar", "REDUCE_SCATTER", 4096, "2", data_deps=[4], start_us=10, duration_us=3)
    assert (node.id, node.name, node.type) == (5, "ar", et_def_pb2.COMM_COLL_NODE)
    assert list(node.data_deps) == [4] and (node.start_time_micros, node.duration_micros) == (10, 3)
    assert _attrs(node) == {
        "is_cpu_op": ("bool_val", False),
        "comm_type": ("int64_val", et_def_pb2.REDUCE_SCATTER),
        "comm_size": ("int64_val", 4096),
        "pg_name": ("string_val", "2"),
    }
    assert _attrs(comm_node(1, "b", 9, 0))["comm_type"] == ("int64_val", 9)


@given(
    st.integers(1, 70).flatmap(
        lambda n: st.lists(
            st.lists(st.one_of(st.integers(0, 300), st.integers(0, (1 << 63) - 1)), min_size=n, max_size=n),
            min_size=1,
            max_size=4,
        )
    )
)
def test_int64_list_fields_are_what_protobuf_serializes(rows: list[list[int]]) -> None:
    """The `attr` fields appended to a serialized node: the bytes of the same node built with them,
    whether encoded by numpy (wide rows) or by protobuf (narrow ones)."""
    import numpy as np

    base = comm_node(3, "a2a", "ALL_TO_ALL", 64, "0", attrs={"dtype": "Float"})
    for row, field in zip(rows, int64_list_fields("in_split_size", np.array(rows)), strict=True):
        expected = comm_node(
            3, "a2a", "ALL_TO_ALL", 64, "0", attrs={"dtype": "Float", "s": int64_list("in_split_size", row)}
        )
        assert base.SerializeToString() + field == expected.SerializeToString()
        assert list(et_def_pb2.Node.FromString(base.SerializeToString() + field).attr[-1].int64_list.values) == row
    with pytest.raises(ValueError, match="non-negative"):
        int64_list_fields("x", np.array([[1, -1]]))


def test_comm_node_split_lists_are_int64_lists() -> None:
    node = comm_node(5, "a2av", "ALL_TO_ALL", 96, "0", in_splits=[4, 8], out_splits=[])
    attrs = {a.name: a for a in node.attr}
    assert attrs["in_split_size"].WhichOneof("value") == "int64_list"
    assert list(attrs["in_split_size"].int64_list.values) == [4, 8]
    # An empty list is written (even splits); None writes nothing.
    assert (
        attrs["out_split_size"].WhichOneof("value") == "int64_list"
        and list(attrs["out_split_size"].int64_list.values) == []
    )
    assert "in_split_size" not in {a.name for a in comm_node(1, "a2a", "ALL_TO_ALL", 8).attr}


def test_send_recv_peers_are_int32() -> None:
    send = send_node(1, "s", 64, peer=3, rank=1, tag=5)
    assert send.type == et_def_pb2.COMM_SEND_NODE
    attrs = _attrs(send)
    assert (attrs["comm_src"], attrs["comm_dst"], attrs["comm_tag"]) == (
        ("int32_val", 1),
        ("int32_val", 3),
        ("int32_val", 5),
    )
    recv = recv_node(2, "r", 64, peer=0, ctrl_deps=[1], attrs={"rf_id": 8})
    attrs = _attrs(recv)
    assert recv.type == et_def_pb2.COMM_RECV_NODE and list(recv.ctrl_deps) == [1]
    assert attrs["comm_src"] == ("int32_val", 0) and "comm_dst" not in attrs
    assert attrs["rf_id"] == ("int64_val", 8)


def test_comp_node() -> None:
    node = comp_node(3, "gemm", 12, num_ops=100, attrs={"op_type": "mm"})
    assert (node.type, node.duration_micros) == (et_def_pb2.COMP_NODE, 12)
    assert _attrs(node) == {
        "is_cpu_op": ("bool_val", False),
        "num_ops": ("int64_val", 100),
        "op_type": ("string_val", "mm"),
    }


def test_pg_init_node_payload_shape() -> None:
    node = pg_init_node(1, [{"pg_name": "0", "ranks": []}])
    assert node.type == et_def_pb2.METADATA_NODE and "process_group:init" in node.name
    assert node.inputs.values == str(['[{"pg_name": "0", "ranks": []}]'])


def test_writer_records_decode_with_protobuf(tmp_path: Path) -> None:
    path = tmp_path / "w.0.et"
    with EtWriter(path) as w:
        w.write_metadata("0.0.4", {"schema": "s", "pid": 9})
        w.write_nodes(comp_node(i, f"n{i}", i) for i in range(3))
        w.write_node(et_def_pb2.Node())  # all-default: a zero-length record
    assert w.records == 5
    payloads = _split(path.read_bytes())
    assert payloads[-1] == b""
    meta = et_def_pb2.GlobalMetadata.FromString(payloads[0])
    assert meta.version == "0.0.4" and _attrs(meta) == {
        "schema": ("string_val", "s"),
        "pid": ("int64_val", 9),
    }
    assert [et_def_pb2.Node.FromString(p).name for p in payloads[1:4]] == ["n0", "n1", "n2"]


def test_gzip_when_name_ends_gz(tmp_path: Path) -> None:
    path = tmp_path / "w.0.et.gz"
    with EtWriter(path) as w:
        w.write_metadata()
        w.write_node(comp_node(1, "x"))
    raw = path.read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    assert len(_split(gzip.decompress(raw))) == 2


def test_binary_file_target_left_open_and_large_output() -> None:
    """Many records cross the internal buffer size and still come out whole and in order."""
    buf = io.BytesIO()
    with EtWriter(buf) as w:
        for i in range(20_000):
            w.write_node(comm_node(i, "x" * (i % 200), "ALL_TO_ALL", i))
    assert not buf.closed
    payloads = _split(buf.getvalue())
    assert len(payloads) == 20_000
    assert [et_def_pb2.Node.FromString(p).id for p in payloads[::997]] == list(range(0, 20_000, 997))

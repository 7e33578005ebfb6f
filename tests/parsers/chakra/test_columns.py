"""The column-wise .et path (`et.parse`, tracekit.parsers.chakra.columns) against the record
by record upb path (`et.parse_records`): the same rows, metadata, warnings and errors, on
every sample and public trace and on generated Node streams of every wire shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tracekit.parsers import et_def_pb2
from tracekit.parsers.base import MemorySink, TraceError
from tracekit.parsers.chakra import et as chakra_et
from tracekit.parsers.chakra.columns import decode_nodes, varints
from tracekit.sources import BytesSource, FileSource

from .test_et import key, record, varint

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"


def outcome(parse: Any, source: Any) -> tuple[Any, ...]:
    """What a parse gives: its metadata and tables, or its error's message and place."""
    sink = MemorySink()
    try:
        meta = parse(source, sink)
    except TraceError as exc:
        return ("error", exc.message, exc.where)
    return ("ok", meta, {name: sink.table(name) for name in ("ops", "collectives")})


def assert_same(source: Any) -> tuple[Any, ...]:
    """The column path (on blocks of any size) and the record path agree on `source`."""
    with mock.patch.object(chakra_et, "COLUMN_MIN_RECORDS", 1):
        columns = outcome(chakra_et.parse, source)
    records = outcome(chakra_et.parse_records, source)
    assert columns[0] == records[0], (columns, records)
    if columns[0] == "error":
        assert columns == records
    else:
        assert columns[1] == records[1]
        for name, table in columns[2].items():
            assert table.equals(records[2][name]), name
    return columns


def et_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.et") if p.is_file())


@pytest.mark.parametrize("path", et_files(SAMPLES / "chakra"), ids=lambda p: p.name)
def test_sample_traces(path: Path) -> None:
    assert assert_same(FileSource(path, str(path)))[0] == "ok"


def test_public_traces(public_traces: Path) -> None:
    paths = et_files(public_traces)
    if not paths:
        pytest.skip("no .et files among the public traces")
    for path in paths:
        assert_same(FileSource(path, str(path)))


# --- generated Node streams -------------------------------------------------------------------

_U64 = st.integers(0, (1 << 64) - 1)
_SMALL = st.integers(0, 300)
_ID = st.one_of(_SMALL, _U64, st.sampled_from([(1 << 63) - 1, 1 << 63, (1 << 64) - 1]))
_NAME = st.text(max_size=12)


def _attr(name: str, value: int | str) -> bytes:
    if isinstance(value, str):
        return et_def_pb2.AttributeProto(name=name, string_val=value).SerializeToString()
    return et_def_pb2.AttributeProto(name=name, int64_val=value).SerializeToString()


def _ld(field: int, payload: bytes) -> bytes:
    return key(field, 2) + varint(len(payload)) + payload


_FIELD = st.one_of(
    st.builds(lambda v: key(1, 0) + varint(v), _ID),
    st.builds(lambda s: _ld(2, s.encode()), _NAME),
    st.builds(lambda v: key(3, 0) + varint(v), st.one_of(st.integers(0, 9), st.integers(-5, -1), _U64)),
    st.builds(
        lambda f, vs: _ld(f, b"".join(varint(v) for v in vs)), st.sampled_from([4, 5]), st.lists(_ID, max_size=4)
    ),
    st.builds(lambda f, v: key(f, 0) + varint(v), st.sampled_from([4, 5]), _ID),
    st.builds(lambda f, v: key(f, 0) + varint(v), st.sampled_from([6, 7]), st.one_of(_SMALL, _U64)),
    st.builds(
        lambda f, s: _ld(f, et_def_pb2.IOInfo(values=s, shapes="[[2]]").SerializeToString()),
        st.sampled_from([8, 9]),
        _NAME,
    ),
    st.builds(
        lambda n, v: _ld(10, _attr(n, v)),
        st.sampled_from(["comm_type", "comm_size", "comm_src", "comm_dst", "pg_name", "is_cpu_op"]),
        st.one_of(st.integers(-3, 12), st.sampled_from(["0", "1"])),
    ),
    # unknown fields of every wire type upb skips
    st.builds(lambda f, v: key(f, 0) + varint(v), st.integers(11, 3000), _U64),
    st.builds(lambda f, b: _ld(f, b), st.integers(11, 3000), st.binary(max_size=6)),
    st.builds(lambda f, b: key(f, 1) + b, st.integers(11, 3000), st.binary(min_size=8, max_size=8)),
    st.builds(lambda f, b: key(f, 5) + b, st.integers(11, 3000), st.binary(min_size=4, max_size=4)),
)
# Node types the rows depend on: comm and metadata nodes take the upb path for their collective rows.
_TYPED = st.builds(lambda t: key(3, 0) + varint(t), st.sampled_from([4, 4, 4, 5, 6, 7, 1]))
_NODE = st.builds(lambda typed, fields: typed + b"".join(fields), _TYPED, st.lists(_FIELD, max_size=8))
_RECORD = st.one_of(_NODE, _NODE, _NODE, st.just(b""), st.lists(_FIELD, max_size=4).map(b"".join))


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(_RECORD, max_size=40),
    st.booleans(),
    st.sampled_from([(4, 2), (8, 4), (65_536, 4_096)]),
    st.sampled_from([7, 64, 1 << 20]),
)
def test_generated_streams(records: list[bytes], metadata: bool, rows: tuple[int, int], chunk: int) -> None:
    head = record(et_def_pb2.GlobalMetadata(version="0.0.4").SerializeToString()) if metadata else b""
    data = head + b"".join(record(r) for r in records)
    flush, decode = rows
    with mock.patch.multiple(chakra_et, FLUSH_ROWS=flush, DECODE_ROWS=decode, CHUNK_SIZE=chunk, BLOCK_CHUNKS=1):
        assert_same(BytesSource(data, "x", "x.et"))


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(_RECORD, min_size=1, max_size=12), st.binary(max_size=12), st.integers(0, 400))
def test_damaged_streams_fail_alike(records: list[bytes], garbage: bytes, cut: int) -> None:
    """Garbage spliced in or a cut anywhere: the same rows or the same error at the same record."""
    data = b"".join(record(r) for r in records)
    at = cut % (len(data) + 1)
    with mock.patch.multiple(chakra_et, FLUSH_ROWS=8, DECODE_ROWS=4, CHUNK_SIZE=16, BLOCK_CHUNKS=1):
        assert_same(BytesSource(data[:at] + garbage + data[at:], "x", "x.et"))
        assert_same(BytesSource(data[:at], "x", "x.et"))


def test_small_blocks_go_record_by_record() -> None:
    data = b"".join(record(et_def_pb2.Node(id=i, name="n", type="COMP_NODE").SerializeToString()) for i in range(10))
    with mock.patch.object(chakra_et, "decode_nodes", side_effect=AssertionError("column path")):
        sink = MemorySink()
        assert chakra_et.parse(BytesSource(data, "x", "x.et"), sink).node_count == 10


def test_untyped_refusal_at_the_same_record() -> None:
    data = record(bytes([0x08, 0x01, 0x18, 0x04])) + record(b"") * 20_000
    assert assert_same(BytesSource(data, "x", "x.et"))[0] == "error"


def test_ids_beyond_int64_are_null_and_noted_alike() -> None:
    nodes = [
        et_def_pb2.Node(id=(1 << 64) - 1, name="a", type="COMP_NODE", ctrl_deps=[1, 1 << 63], data_deps=[2]),
        et_def_pb2.Node(id=5, name="b", type="COMP_NODE", data_deps=[(1 << 64) - 2], start_time_micros=1 << 60),
    ]
    data = b"".join(record(n.SerializeToString()) for n in nodes * 3000)
    status, meta, tables = assert_same(BytesSource(data, "x", "x.et"))
    ops = tables["ops"]
    assert ops.column("op_id").null_count == 3000 and ops.column("ctrl_deps").null_count == 3000
    assert [w.message.split(" =")[0] for w in meta.warnings] == ["op_id", "ctrl_deps", "data_deps"]


# --- the decoder alone --------------------------------------------------------------------------


@given(st.lists(_U64, min_size=1, max_size=30))
def test_varints_decode_what_protobuf_encodes(values: list[int]) -> None:
    data = b"".join(varint(v) for v in values)
    buf = np.frombuffer(data + bytes(16), np.uint8)
    starts = np.cumsum([0] + [len(varint(v)) for v in values[:-1]]).astype(np.int64)
    decoded, after = varints(buf, starts)
    assert decoded.tolist() == values and after[-1] == len(data)


def test_unusual_records_are_left_to_upb() -> None:
    group = key(12, 3) + key(12, 4)  # a group: upb skips it, the column decoder does not try
    fixed_id = key(1, 1) + bytes(8)  # a known field under a wire type proto3 does not give it
    for payload in (group, fixed_id):
        buf = np.frombuffer(payload + bytes(16), np.uint8)
        assert decode_nodes(buf, np.array([0]), np.array([len(payload)])) is None

"""Collective rows built column-wise (tracekit.parsers.chakra.collectives) against the reference,
`rules.collective_row` reading upb messages node by node: the same rows, warnings and errors
for communication nodes whose attributes use every member of the `value` oneof, repeat names,
carry values the rules null, or are left to upb; in `parse` (blocks) and `parse_many` (files)."""

from __future__ import annotations

import struct
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tracekit.parsers import et_def_pb2
from tracekit.parsers.base import TraceMeta
from tracekit.parsers.chakra import collectives as chakra_collectives
from tracekit.parsers.chakra import et as chakra_et
from tracekit.parsers.chakra import framing, many, rules
from tracekit.parsers.chakra import rows as chakra_rows
from tracekit.parsers.chakra.columns import attribute_ints, decode_attributes
from tracekit.sources import BytesSource

from .test_columns import assert_same
from .test_et import key, ld, node_bytes, record, varint
from .test_many import FilesMemory, assert_many_as_one

_EDGES = [0, 1, 9, 10, (1 << 20) - 1, 1 << 20, 1 << 31, (1 << 32) - 1, 1 << 62, (1 << 62) + 1, (1 << 63) - 1, 1 << 63]
_EDGES += [(1 << 64) - n for n in (1, 2, 5)]
_U64 = st.one_of(st.integers(0, 12), st.sampled_from(_EDGES), st.integers(0, (1 << 64) - 1))
_FLOAT = st.one_of(st.integers(-3, 300).map(float), st.floats(), st.sampled_from([2.0**62, 2.0**63, -(2.0**63), 0.5]))

# One member of AttributeProto's `value` oneof, by field number and wire type.
_MEMBER = st.one_of(
    st.builds(lambda n, v: key(n, 0) + varint(v), st.sampled_from([7, 9, 11, 13, 15, 17, 27]), _U64),
    st.builds(lambda f: key(3, 1) + struct.pack("<d", f), _FLOAT),
    st.builds(lambda f: key(5, 5) + struct.pack("<f", f), _FLOAT.filter(lambda f: abs(f) < 3e38 or f != f)),
    st.builds(lambda n, b: key(n, 1) + b, st.sampled_from([21, 25]), st.binary(min_size=8, max_size=8)),
    st.builds(lambda n, b: key(n, 5) + b, st.sampled_from([19, 23]), st.binary(min_size=4, max_size=4)),
    st.builds(lambda s: ld(29, s), st.sampled_from(["0", "1", "pg", "", "é"])),
    st.builds(lambda b: ld(31, b), st.sampled_from([b"0", b"pg", b"\xff"])),
    st.builds(lambda n, v: ld(n, key(1, 0) + varint(v)), st.sampled_from([8, 10, 14, 28]), _U64),
    st.builds(lambda n: ld(n, b""), st.sampled_from([4, 30, 32])),
)
_NAME = st.sampled_from(
    ["comm_type", "comm_src", "comm_dst", "comm_size", "rf_id", "pg_name", "is_cpu_op", "x", ""]
    + ["dtype", "out_msg_nelems", "in_split_size", "out_split_size"]
)
_EXTRA = st.sampled_from([ld(2, "doc"), key(40, 0) + varint(7), ld(41, b"ab"), key(42, 5) + bytes(4)])


@st.composite
def _attribute(draw: st.DrawFn) -> bytes:
    parts = [ld(1, draw(_NAME))] if draw(st.integers(0, 9)) else []
    parts += draw(st.lists(_MEMBER, max_size=2)) + draw(st.lists(_EXTRA, max_size=1))
    return b"".join(draw(st.permutations(parts)))


_SPLITS = ("in_split_size", "out_split_size")
_SPLIT_VALUES: tuple[list[int], ...] = ([], [1, 3], [2, 2], [131_072, 131_072], [(1 << 64) - 1])

# Mostly the sizes and ranks of real traces, so that most blocks are regular.
_TYPICAL = st.sampled_from(
    [ld(1, "comm_type") + key(9, 0) + varint(code) for code in range(10)]
    + [ld(1, "comm_size") + key(9, 0) + varint(size) for size in (0, 4, 1 << 20)]
    + [ld(1, name) + key(9, 0) + varint(3) for name in ("comm_src", "comm_dst", "rf_id")]
    + [ld(1, "pg_name") + ld(29, "0")]
    + [ld(1, "dtype") + ld(29, name) for name in ("Float", "BFloat16", "c10::Half", "Long", "no such type")]
    + [ld(1, "out_msg_nelems") + key(9, 0) + varint(n) for n in (0, 4, 1 << 18, 1 << 62)]
    + [ld(1, name) + ld(10, ld(1, b"".join(varint(v) for v in values))) for name in _SPLITS for values in _SPLIT_VALUES]
    + [ld(1, "in_split_size") + ld(29, "[1, 3]"), ld(1, "out_split_size") + ld(30, ld(1, "2"))]
)


@st.composite
def _comm_node(draw: st.DrawFn) -> bytes:
    attrs = draw(st.lists(st.one_of(_TYPICAL, _TYPICAL, _attribute()), max_size=6))
    return node_bytes(
        node_id=draw(st.one_of(st.integers(0, 50), _U64)),
        name=draw(st.sampled_from(["", "ar", "all_to_all"])),
        node_type=draw(st.sampled_from([5, 6, 7, 7, 4, 1])),
        start=draw(st.sampled_from([0, 5, 1 << 60])),
        duration=draw(st.sampled_from([0, 3])),
        attrs=tuple(attrs),
    )


def _file(nodes: list[bytes]) -> bytes:
    return record(et_def_pb2.GlobalMetadata(version="0.0.4").SerializeToString()) + b"".join(map(record, nodes))


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_comm_node(), max_size=30), st.sampled_from([(4, 2), (8, 4), (65_536, 4_096)]))
def test_generated_comm_nodes_in_blocks(nodes: list[bytes], rows: tuple[int, int]) -> None:
    flush, decode = rows
    with mock.patch.multiple(chakra_et, FLUSH_ROWS=flush, DECODE_ROWS=decode):
        assert_same(BytesSource(_file(nodes), "x", "x.et"))


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(st.lists(_comm_node(), max_size=10), max_size=8))
def test_generated_comm_nodes_in_many_files(files: list[list[bytes]]) -> None:
    assert_many_as_one([BytesSource(_file(nodes), f"f{i}", f"f{i}.et") for i, nodes in enumerate(files)])


@settings(max_examples=examples(500), deadline=None)
@given(st.lists(_attribute(), min_size=1, max_size=20))
def test_attribute_ints_read_as_attr_int(attributes: list[bytes]) -> None:
    data = b"".join(attributes)
    buf = np.frombuffer(data + bytes(16), np.uint8)
    ends = np.cumsum([len(a) for a in attributes])
    columns = decode_attributes(buf, ends - [len(a) for a in attributes], ends)
    assert columns is not None
    values, present, beyond = attribute_ints(columns)
    for i, payload in enumerate(attributes):
        expected = rules.attr_int(et_def_pb2.AttributeProto.FromString(payload))
        got = None if not present[i] else ("beyond" if beyond[i] else int(values[i]))
        assert got == (expected if expected is None or -(1 << 63) <= expected < 1 << 63 else "beyond"), (i, payload)


def _comm(node_id: int, attrs: tuple[bytes, ...]) -> bytes:
    return node_bytes(node_id=node_id, name="ar", node_type=7, start=5, duration=3, attrs=attrs)


_ALL_REDUCE = (ld(1, "comm_type") + key(9, 0) + varint(0), ld(1, "comm_size") + key(9, 0) + varint(4096))


def test_regular_rows_never_take_the_node_by_node_path() -> None:
    files = [_file([_comm(i, _ALL_REDUCE) for i in range(1, 40)]) for _ in range(5)]
    with mock.patch.object(chakra_rows, "collective_row", side_effect=AssertionError("node by node")):
        outcomes = many.parse_many([BytesSource(d, f"f{i}", "f.et") for i, d in enumerate(files)], FilesMemory())
    assert all(isinstance(o, TraceMeta) and o.node_count == 39 for o in outcomes)


def test_a_value_the_rules_null_sends_its_group_to_the_reference() -> None:
    """A peer beyond the ranks and a comm_size beyond 2**62: null, with the reference's warnings."""
    send = node_bytes(node_id=7, name="s", node_type=5, attrs=(ld(1, "comm_dst") + key(9, 0) + varint(1 << 40),))
    huge = _comm(8, (_ALL_REDUCE[0], ld(1, "comm_size") + key(13, 0) + varint((1 << 64) - 1)))
    nodes = [_comm(i, _ALL_REDUCE) for i in range(1, 7)] + [send, huge]
    source = BytesSource(_file(nodes), "x", "x.et")
    status, meta, tables = assert_same(source)
    assert [w.message.split(" =")[0] for w in meta.warnings] == ["peer", "in_bytes"]
    assert tables["collectives"].column("peer").to_pylist()[-2:] == [None, None]
    assert_many_as_one([source, BytesSource(_file(nodes[:6]), "y", "y.et")])


def _attr(name: str, value: object) -> bytes:
    from tracekit.writers.chakra_et import attr

    return bytes(attr(name, value).SerializeToString())


def test_element_types_and_splits_are_read_column_wise() -> None:
    """An all-to-allv as tracekit's generator writes it: dtype, out_msg_nelems and the per-peer
    splits in elements; its row is built column-wise and is the reference's."""
    a2a = (
        ld(1, "comm_type") + key(9, 0) + varint(6),
        _attr("comm_size", 16),
        _attr("dtype", "Float"),
        _attr("out_msg_nelems", 6),
        _attr("in_split_size", [1, 3]),
        _attr("out_split_size", [2, 4]),
    )
    plain = (*_ALL_REDUCE, _attr("dtype", "BFloat16"))
    nodes = [_comm(1, a2a), _comm(2, plain), _comm(3, _ALL_REDUCE)]
    _, _, tables = assert_same(BytesSource(_file(nodes), "x", "x.et"))
    with mock.patch.object(chakra_rows, "collective_row", side_effect=AssertionError("node by node")):
        many.parse_many([BytesSource(_file(nodes), "x", "x.et")], FilesMemory())
    rows = (
        tables["collectives"]
        .select(["dtype", "in_elems", "out_elems", "out_bytes", "in_splits", "out_splits", "is_uneven"])
        .to_pylist()
    )
    assert rows == [
        {
            "dtype": "Float",
            "in_elems": 4,
            "out_elems": 6,
            "out_bytes": 24,
            "in_splits": [1, 3],
            "out_splits": [2, 4],
            "is_uneven": True,
        },
        {
            "dtype": "BFloat16",
            "in_elems": 2048,
            "out_elems": None,
            "out_bytes": None,
            "in_splits": None,
            "out_splits": None,
            "is_uneven": None,
        },
        {
            "dtype": None,
            "in_elems": None,
            "out_elems": None,
            "out_bytes": None,
            "in_splits": None,
            "out_splits": None,
            "is_uneven": None,
        },
    ]


def test_splits_in_rows_go_to_the_reference_which_converts_them() -> None:
    """Splits that count rows of 4 elements (PyTorch's convention): the split rules turn them into
    elements and mark them inferred, as for every format."""
    a2a = (
        ld(1, "comm_type") + key(9, 0) + varint(6),
        _attr("comm_size", 64),
        _attr("dtype", "Float"),
        _attr("in_split_size", [1, 3]),
    )
    _, _, tables = assert_same(BytesSource(_file([_comm(1, a2a)]), "x", "x.et"))
    row = tables["collectives"].to_pylist()[0]
    assert (row["in_splits"], row["inferred"]) == ([4, 12], ["in_splits"])


def test_irregular_records_are_found() -> None:
    data = _file([_comm(1, _ALL_REDUCE), _comm(1 << 63, _ALL_REDUCE), _comm(3, (ld(1, "pg_name") + ld(31, b"0"),))])
    buf = np.frombuffer(data + bytes(16), np.uint8)
    frames, pos = [], len(record(et_def_pb2.GlobalMetadata(version="0.0.4").SerializeToString()))
    while pos < len(data):
        length, body = framing.decode_varint(data, pos)
        frames.append((body, body + length))
        pos = body + length
    from tracekit.parsers.chakra.columns import decode_nodes

    begins, ends = (np.array(side) for side in zip(*frames, strict=True))
    nodes = decode_nodes(buf, begins, ends)
    assert nodes is not None
    columns = chakra_collectives.collective_columns(buf, nodes, [0, 1, 2])
    # node 3 has no comm_type: no row; node 2's id is beyond int64; node 3's pg_name is bytes
    assert columns.records == [0, 1] and columns.irregular == [1]
    assert columns.regular(0, 1) and not columns.regular(0, 2)

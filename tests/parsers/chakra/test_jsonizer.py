"""chakra_jsonizer JSON: the same trace as .et and as glued protobuf-JSON gives identical rows.

The JSON is produced the way chakra_jsonizer does it (MessageToJson of each record, concatenated
with no separator), from .et files decoded by the protobuf library, not by tracekit's framing code.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tests.parsers.chakra.test_et import (
    GOLDEN_CASES,
    attr_bytes,
    metadata_bytes,
    node_bytes,
    parse_with,
    record,
)
from tracekit.parse import ParsedTrace, parse_file
from tracekit.parsers import detect_format, et_def_pb2
from tracekit.parsers.base import TraceError
from tracekit.parsers.chakra import et as chakra_et
from tracekit.parsers.chakra import jsonizer as chakra_json
from tracekit.parsers.common.values import MAX_TEXT_CHARS
from tracekit.writers.chakra_et import EtWriter, comm_node, comp_node


def _records(data: bytes) -> list[bytes]:
    """Split .et bytes into payloads with protobuf's own varint decoder."""
    from google.protobuf.internal.decoder import _DecodeVarint  # type: ignore[attr-defined]

    out, pos = [], 0
    while pos < len(data):
        length, pos = _DecodeVarint(data, pos)
        out.append(data[pos : pos + length])
        pos += length
    return out


def jsonize(data: bytes, *, metadata: bool = True, separator: str = "") -> bytes:
    """What `chakra_jsonizer` writes for an .et file."""
    parts = []
    for i, payload in enumerate(_records(data)):
        message = et_def_pb2.GlobalMetadata() if i == 0 and metadata else et_def_pb2.Node()
        message.ParseFromString(payload)
        parts.append(json_format.MessageToJson(message))
    return separator.join(parts).encode()


def assert_same_rows(et_data: bytes, json_data: bytes) -> None:
    et = parse_with(chakra_et, et_data, "t.0.et")
    js = parse_with(chakra_json, json_data, "t.0.json")
    assert js.ops == et.ops
    assert js.collectives == et.collectives
    assert js.meta.format == "chakra_json"
    assert (js.meta.schema_version, js.meta.node_count, js.meta.process_groups) == (
        et.meta.schema_version,
        et.meta.node_count,
        et.meta.process_groups,
    )


@pytest.mark.parametrize("case", ["chakra_et_writer_mixed", "chakra_et_hand_bytes"])
def test_golden_cases_identical(case: str) -> None:
    data = GOLDEN_CASES[case]()
    assert_same_rows(data, jsonize(data))


def test_file_without_metadata_identical() -> None:
    data = GOLDEN_CASES["chakra_et_no_metadata"]()
    text = jsonize(data, metadata=False)
    assert text.startswith(b'{\n  "id": "1"')
    assert_same_rows(data, text)


@pytest.mark.shared
def test_astra_sim_microbenchmarks_identical(public_traces: Path) -> None:
    files = sorted((public_traces / "astra-sim-microbenchmarks").glob("*/*.et"))
    assert files
    for path in files:
        data = path.read_bytes()
        assert_same_rows(data, jsonize(data))


@pytest.mark.parametrize("separator", ["\n", " \r\n\t ", "\n\n"])
def test_whitespace_between_objects(separator: str) -> None:
    data = GOLDEN_CASES["chakra_et_writer_mixed"]()
    assert_same_rows(data, jsonize(data, separator=separator) + b"\n")


def test_detected_as_chakra_json() -> None:
    text = jsonize(GOLDEN_CASES["chakra_et_writer_mixed"]())
    assert detect_format(text[:4096], "x.json") == "chakra_json"


def test_objects_cut_by_chunk_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chakra_json, "CHUNK_CHARS", 7)
    buf = io.BytesIO()
    with EtWriter(buf) as w:
        w.write_metadata("0.0.4", {"schema": "x"})
        for i in range(300):
            w.write_node(comp_node(i, "é" * (i % 5), 3, data_deps=[i - 1] if i else []))
            w.write_node(comm_node(1000 + i, "ar", "ALL_GATHER", i * 8, "0"))
    data = buf.getvalue()
    assert_same_rows(data, jsonize(data))


def test_unknown_node_type_and_int_variants() -> None:
    attrs = (attr_bytes("comm_type", "uint32_val", 6), attr_bytes("comm_size", "fixed64_val", 1 << 50))
    data = record(metadata_bytes("0.0.4")) + record(node_bytes(1, "x", 9)) + record(node_bytes(2, "a", 7, attrs=attrs))
    text = jsonize(data)
    assert b'"type": 9' in text and b'"fixed64Val": "1125899906842624"' in text
    assert_same_rows(data, text)


def test_empty_metadata_object_then_nodes() -> None:
    data = b"\x00" + record(node_bytes(1, "n", 4))
    assert jsonize(data).startswith(b"{}")
    assert_same_rows(data, jsonize(data))


# --- bad input ------------------------------------------------------------------------------


def _error(text: str) -> TraceError:
    with pytest.raises(TraceError) as info:
        parse_with(chakra_json, text.encode(), "t.json")
    return info.value


def test_malformed_json_names_line_and_column() -> None:
    exc = _error('{\n  "version": "0.0.4"\n}{\n  "id": "1",\n  "name": oops\n}')
    assert exc.where == "line 5 column 11"
    assert "object 1" in exc.message


def test_malformed_json_after_chunk_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chakra_json, "CHUNK_CHARS", 5)
    exc = _error('{"version": "0.0.4"}\n{"id": "1"}\n\n  {"id": "2", ]')
    assert exc.where == "line 4 column 15"
    assert "object 2" in exc.message


def test_truncated_json() -> None:
    exc = _error('{"version": "0.0.4"}{"id": "1", "name": "ab')
    assert exc.where is not None and exc.where.startswith("line 1 column ")
    assert "object 1" in exc.message


def test_invalid_field_value_names_object() -> None:
    exc = _error('{"version": "0.0.4"}\n{"id": "1"}\n{"id": "abc"}')
    assert exc.where == "object 2 at line 3 column 1"


def test_unknown_node_type_name_is_read_as_invalid_node_with_a_warning() -> None:
    # A fork's name (Keysight/chakra's DATA_OP_NODE = 9) keeps its number; a name no schema gives has
    # none to keep: the node is INVALID_NODE, and the warning names it and its type.
    text = b'{"version": "0.0.4"}{"id": "3", "type": "DATA_OP_NODE"}{"id": "4", "type": "NO_SUCH_NODE"}'
    parsed = parse_with(chakra_json, text, "t.json")
    assert [r["type"] for r in parsed.ops] == ["NODE_TYPE_9", "INVALID_NODE"]
    messages = {w.where: w.message for w in parsed.meta.warnings}
    assert "NO_SUCH_NODE" in messages["node id 4"] and "read as INVALID_NODE" in messages["node id 4"]
    assert "kept as NODE_TYPE_9" in messages["node id 3"]


def test_extension_node_type_names_match_et() -> None:
    parsed = parse_with(chakra_json, b'{"version": "1.0.0"}{"id": "3", "type": "STORAGE_NODE"}', "t.json")
    assert parsed.ops[0]["type"] == "NODE_TYPE_8"


def test_non_object_value() -> None:
    exc = _error('{"version": "0.0.4"} [1, 2]')
    assert "not an object" in exc.message and exc.where == "line 1 column 22"


def test_not_utf8() -> None:
    with pytest.raises(TraceError):
        parse_with(chakra_json, b'{"version": "0.0.4"}{"name": "\xff\xfe"}', "t.json")


def test_unknown_fields_are_ignored() -> None:
    parsed = parse_with(chakra_json, b'{"version": "1.0.0"}{"id": "3", "storage": {"level": 1}}', "t.json")
    assert [r["op_id"] for r in parsed.ops] == [3]


# --- the fast dict->Node path agrees with json_format.ParseDict ------------------------------

_INT_RANGES = {
    "int32_val": (-(1 << 31), (1 << 31) - 1),
    "int64_val": (-(1 << 63), (1 << 63) - 1),
    "uint32_val": (0, (1 << 32) - 1),
    "uint64_val": (0, (1 << 64) - 1),
    "sint32_val": (-(1 << 31), (1 << 31) - 1),
    "sint64_val": (-(1 << 63), (1 << 63) - 1),
    "fixed32_val": (0, (1 << 32) - 1),
    "fixed64_val": (0, (1 << 64) - 1),
    "sfixed32_val": (-(1 << 31), (1 << 31) - 1),
    "sfixed64_val": (-(1 << 63), (1 << 63) - 1),
}


@st.composite
def _attributes(draw: st.DrawFn) -> et_def_pb2.AttributeProto:
    name = draw(st.text(max_size=8))
    kind = draw(st.sampled_from([*_INT_RANGES, "bool_val", "string_val", "double_val", "int64_list"]))
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        value: Any = draw(st.integers(min_value=low, max_value=high))
    elif kind == "bool_val":
        value = draw(st.booleans())
    elif kind == "string_val":
        value = draw(st.text(max_size=8))
    elif kind == "double_val":
        value = draw(st.floats(allow_nan=False))
    else:
        return et_def_pb2.AttributeProto(
            name=name, int64_list=et_def_pb2.Int64List(values=draw(st.lists(st.integers(0, 99))))
        )
    return et_def_pb2.AttributeProto(name=name, **{kind: value})


_u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
_nodes = st.builds(
    et_def_pb2.Node,
    id=_u64,
    name=st.text(max_size=10),
    type=st.integers(min_value=0, max_value=12),
    ctrl_deps=st.lists(_u64, max_size=3),
    data_deps=st.lists(_u64, max_size=3),
    start_time_micros=_u64,
    duration_micros=_u64,
    inputs=st.builds(et_def_pb2.IOInfo, values=st.text(max_size=6), types=st.text(max_size=6)),
    attr=st.lists(_attributes(), max_size=4),
)


@settings(max_examples=examples(300), deadline=None)
@given(_nodes)
def test_fast_node_matches_parse_dict(node: et_def_pb2.Node) -> None:
    obj = json.loads(json_format.MessageToJson(node))
    fast = chakra_json.fast_node(json.loads(json_format.MessageToJson(node)))
    slow = json_format.ParseDict(obj, et_def_pb2.Node())
    assert slow == node
    if fast is not None:
        assert fast == node


def test_fast_node_takes_jsonizer_output_and_defers_the_rest() -> None:
    node = comm_node(7, "ar", "ALL_REDUCE", 1 << 20, "0", data_deps=[1, 2], start_us=3, duration_us=4)
    assert chakra_json.fast_node(json.loads(json_format.MessageToJson(node))) == node
    assert chakra_json.fast_node({"ctrl_deps": ["1"]}) is None  # snake_case: ParseDict's job
    assert chakra_json.fast_node({"id": "-1"}) is None  # out of range: ParseDict words the error
    assert chakra_json.fast_node({"attr": [{"name": "x", "doubleVal": "NaN"}]}) is None


def test_snake_case_and_special_values_via_parse_dict() -> None:
    text = b'{"version": "0.0.4"}{"id": 4, "type": "COMM_COLL_NODE", "data_deps": ["3"], "attr": [' + (
        b'{"name": "comm_type", "int64_val": 0}, {"name": "comm_size", "doubleVal": 64.0}]}'
    )
    parsed = parse_with(chakra_json, text, "t.json")
    assert parsed.ops[0]["data_deps"] == [3]
    assert [(r["op_id"], r["comm_type"], r["in_bytes"]) for r in parsed.collectives] == [(4, "ALL_REDUCE", 64)]


# --- hostile input --------------------------------------------------------------------------


def test_deep_nesting_is_a_trace_error() -> None:
    # json's raw_decode raised RecursionError past ~1,000 levels.
    exc = _error('{"version": "0.0.4"}{"id": "1", "name": ' + "[" * 5000 + "]" * 5000 + "}")
    assert "nested too deeply" in exc.message and "object 1" in (exc.where or "")


def test_an_integer_of_thousands_of_digits_is_a_trace_error() -> None:
    # raw_decode raises a bare ValueError (Python's 4,300-digit limit), not a JSONDecodeError.
    exc = _error('{"version": "0.0.4"}{"id": 1' + "0" * 5000 + "}")
    assert "object 1" in exc.message and len(exc.message) < 300


@pytest.mark.parametrize(
    "node",
    [
        '{"id": "1", "\\ud800": 1}',
        # found by the fuzz smoke campaign: the key inside an attribute, not at the top
        '{"id": "1", "attr": [{"name": "comm_size", "int64Val": "4", "\\ud800": 1}]}',
    ],
)
def test_a_lone_surrogate_key_is_a_trace_error_that_can_be_written(node: str) -> None:
    # json_format.ParseDict raised SystemError from upb for a key that is not valid Unicode.
    exc = _error('{"version": "0.0.4"}' + node)
    assert "not valid Unicode" in exc.message
    exc.describe("t.json").encode("utf-8")


@pytest.mark.parametrize(
    ("key", "value"),
    [(key, value) for key in ("id", "durationMicros") for value in ("-Infinity", "Infinity", "NaN", "1e999")]
    + [("type", "-Infinity"), ("type", "1e999")],  # ParseDict raised OverflowError for an enum
)
def test_non_finite_numbers_in_integer_fields_are_trace_errors(key: str, value: str) -> None:
    exc = _error(f'{{"version": "0.0.4"}}{{"name": "a", "{key}": {value}}}')
    assert exc.where == "object 1 at line 1 column 21"


def test_an_echoed_value_is_cut_in_the_message() -> None:
    text = '{"version": "0.0.4"}{"id": "1", "type": "' + "X\\ud800\\n" * 3000 + '"}'  # JSON escapes
    (warning,) = parse_with(chakra_json, text.encode(), "t.json").meta.warnings
    assert len(warning.message) <= 500 and "\n" not in warning.message
    warning.message.encode("utf-8")


def test_empty_objects_are_refused_by_count() -> None:
    # `{}` decodes to a Node without a type: a file of them gave one ops row per two bytes.
    exc = _error('{"version": "0.0.4"}{"id": "1", "type": "COMP_NODE"}' + "{}" * 100_000)
    assert "carry no node type" in exc.message and (exc.where or "").startswith("object ")


def test_an_object_longer_than_any_node_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chakra_json, "MAX_OBJECT_CHARS", 1000)
    monkeypatch.setattr(chakra_json, "CHUNK_CHARS", 64)
    assert parse_with(chakra_json, ('{"id": "1", "name": "' + "n" * 900 + '"}').encode(), "t.json").ops
    exc = _error('{"id": "1", "name": "' + "n" * 5000 + '"}')
    assert "longer than" in exc.message and exc.where == "line 1 column 1"


def test_megabytes_of_whitespace_between_objects() -> None:
    parsed = parse_with(
        chakra_json, b'{"id": "1", "type": "COMP_NODE"}' + b" \n" * 4_000_000 + b'{"id": "2"}', "t.json"
    )
    assert [r["op_id"] for r in parsed.ops] == [1, 2]


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=10,
)
_node_keys = st.sampled_from(
    [
        "id",
        "name",
        "type",
        "ctrlDeps",
        "dataDeps",
        "startTimeMicros",
        "durationMicros",
        "inputs",
        "outputs",
        "attr",
        "ctrl_deps",
        "x",
    ]
)
_attr = st.dictionaries(
    st.sampled_from(["name", "int64Val", "uint64Val", "stringVal", "boolVal", "doubleVal", "int32Val"]),
    _values,
    max_size=3,
)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.dictionaries(_node_keys, _values | st.lists(_attr, max_size=3), max_size=6), max_size=6))
def test_any_object_values_give_rows_or_a_trace_error(objects: list[dict[str, Any]]) -> None:
    text = '{"version": "0.0.4"}' + "".join(json.dumps(o) for o in objects)
    try:
        parsed = parse_with(chakra_json, text.encode(), "t.json")
    except TraceError as exc:
        exc.describe("t.json").encode("utf-8")
        return
    assert parsed.meta.node_count == len(objects)


# --- values of megabytes ---------------------------------------------------------------------


def _timed_parse(text: str, name: str = "t.0.json") -> tuple[ParsedTrace, float]:
    data = text.encode()
    started = time.process_time()
    parsed = parse_file(data=data, name=name)
    return parsed, time.process_time() - started


def test_an_attribute_of_megabytes_is_dropped_with_a_warning_in_well_under_a_second() -> None:
    # 8 MiB of split sizes as text took 6 s (one integer parse per part) and no warning said why.
    splits = ",".join(["1"] * (4 << 20))
    attrs = [
        {"name": "comm_type", "int64Val": "6"},
        {"name": "comm_size", "int64Val": "4096"},
        {"name": "in_split_size", "stringVal": splits},
        {"name": "pg_name", "stringVal": "0"},
    ]
    node = {"id": "7", "name": "all_to_all", "type": "COMM_COLL_NODE", "attr": attrs}
    parsed, took = _timed_parse('{"version": "0.0.4"}' + json.dumps(node) + '{"id": "8", "type": "COMP_NODE"}')
    assert took < 0.5
    [row] = parsed.collectives.to_pylist()
    assert (row["comm_type"], row["in_bytes"], row["pg_name"], row["in_splits"]) == ("ALL_TO_ALL", 4096, "0", None)
    [warning] = parsed.meta.warnings
    line = warning.describe("t.0.json")
    assert line.startswith("t.0.json at node id 7: in_split_size = '1,1,1,")
    assert line.endswith(" is 8,388,607 characters long, more than 1,048,576: dropped") and "\n" not in line


def test_a_node_name_of_megabytes_is_cut_with_a_warning() -> None:
    node = {"id": "3", "name": "x" * (8 << 20), "type": "COMP_NODE"}
    parsed, took = _timed_parse(json.dumps(node))
    assert took < 0.5
    assert [len(n) for n in parsed.ops.column("name").to_pylist()] == [MAX_TEXT_CHARS]
    [warning] = parsed.meta.warnings
    assert warning.where == "node id 3" and warning.message.endswith(": cut to its first 1,048,576")


def test_an_object_of_megabytes_whose_strings_fit_keeps_them() -> None:
    attrs = [{"name": f"a{i}", "stringVal": "v" * 1000} for i in range(2000)]
    parsed, _ = _timed_parse(json.dumps({"id": "1", "name": "n", "type": "COMP_NODE", "attr": attrs}))
    assert parsed.meta.warnings == [] and parsed.ops.num_rows == 1

"""Kineto traces read in pieces (past the memory budget: tracekit.parsers.kineto.stream) give the
rows, metadata and warnings of the whole-document path, wherever the pieces are cut."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tracekit.parsers import kineto
from tracekit.parsers.base import MemorySink, TraceError
from tracekit.parsers.common import limits
from tracekit.sources import BytesSource, FileSource

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces" / "captured"


def outcome(source: Any) -> tuple[Any, ...]:
    sink = MemorySink()
    try:
        meta = kineto.parse(source, sink)
    except TraceError as exc:
        return ("error", exc.message, exc.where)
    warnings = sorted(str(w) for w in meta.warnings)
    meta.warnings = []
    return ("ok", meta, warnings, {name: sink.table(name) for name in ("ops", "collectives")})


def both_ways(source: Any, monkeypatch: pytest.MonkeyPatch, chunk: int) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(whole, in pieces): the second with a budget of 500 bytes and chunks of `chunk` bytes."""
    with monkeypatch.context() as m:
        m.setenv(limits.MEMORY_BUDGET_ENV, "1G")
        whole = outcome(source)
        m.setenv(limits.MEMORY_BUDGET_ENV, "500")
        m.setattr(limits, "DOCUMENT_CHUNK", chunk)
        pieces = outcome(source)
    return whole, pieces


def assert_same(whole: tuple[Any, ...], pieces: tuple[Any, ...]) -> None:
    assert whole[0] == pieces[0] == "ok", (whole[:3], pieces[:3])
    assert whole[1] == pieces[1] and whole[2] == pieces[2]
    for name, table in whole[3].items():
        assert table.equals(pieces[3][name]), name


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*/kineto_rank*.json.gz")), ids=lambda p: p.parent.name + p.name)
@pytest.mark.parametrize("chunk", [997, 1 << 16])
def test_sample_traces(path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_same(*both_ways(FileSource(path, str(path)), monkeypatch, chunk))


def test_public_traces(public_traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sources: list[Any] = []
    hta = public_traces / "hta-nccl-2gpu" / "nccl_data.json.gz"
    if hta.is_file():
        sources.append(FileSource(hta, str(hta)))
    dlrm = public_traces / "param-dlrm-8rank" / "dlrm_kineto.tar.gz"
    if dlrm.is_file():
        with tarfile.open(dlrm) as tar:
            for member in tar.getmembers()[:3]:
                data = tar.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
                if data:
                    sources.append(BytesSource(data, member.name, member.name))
    if not sources:
        pytest.skip("no Kineto traces among the public traces")
    for source in sources:
        assert_same(*both_ways(source, monkeypatch, 4096))


# --- generated documents, cut anywhere ----------------------------------------------------------

_TRICKY = st.sampled_from(['}, {"ph": "X"}', "]", "[", '\\"', "\\\\", "}]", "},\n{", '"traceEvents": [', "é€"])
_TEXT = st.lists(st.one_of(_TRICKY, st.text(max_size=5)), max_size=4).map("".join)
_ARG = st.one_of(
    st.integers(-5, 10**12),
    _TEXT,
    st.lists(st.integers(0, 9), max_size=3),
    st.lists(st.fixed_dictionaries({"a": _TEXT}), max_size=2),
)


def _event(i: int, name: str, cat: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": 10.0 * i, "dur": 5, "args": args}


_EVENT = st.builds(
    lambda name, cat, args, ph: {**_event(0, name, cat, args), "ph": ph},
    st.one_of(_TEXT, st.sampled_from(["aten::mm", "record_param_comms", "nccl:all_reduce", "cudaLaunchKernel"])),
    st.sampled_from(["cpu_op", "kernel", "cuda_runtime", "user_annotation"]),
    st.dictionaries(st.sampled_from(["x", "correlation", "External id", "Input Dims"]), _ARG, max_size=3),
    st.sampled_from(["X", "X", "i", "M"]),
)


@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(_EVENT, max_size=30),
    st.integers(7, 400),
    st.sampled_from(["", ' "deviceProperties": [{"a": [1, {"b": "}, {"}]}],', ' "x": "\\"traceEvents\\": [",']),
    st.sampled_from(["", ', "traceName": "] }, {"', ', "tail": [{"c": 1}, {"d": [2]}]']),
    st.sampled_from([" ", "\n  ", ""]),
)
def test_generated_documents(events: list[dict[str, Any]], chunk: int, before: str, after: str, gap: str) -> None:
    for i, ev in enumerate(events):
        ev["ts"] = 10.0 * i
    body = ("," + gap).join(json.dumps(ev) for ev in events)
    doc = (
        f'{{"schemaVersion": 1,{before} "distributedInfo": {{"rank": 0, "world_size": 2}}, '
        f'"baseTimeNanoseconds": 1700000000000000000, "traceEvents": [{gap}{body}{gap}]{after}}}'
    ).encode()
    monkeypatch = pytest.MonkeyPatch()
    try:
        assert_same(*both_ways(BytesSource(doc, "t.json", "t.json"), monkeypatch, chunk))
    finally:
        monkeypatch.undo()


# --- the guards hold in pieces --------------------------------------------------------------------


def _doc(events: int) -> bytes:
    one = json.dumps(_event(1, "aten::mm", "cpu_op", {"External id": 1}))
    return ('{"traceEvents": [' + ", ".join([one] * events) + "]}").encode()


def test_a_nul_byte_is_refused_at_the_same_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _doc(200)
    data = data[:5000] + bytes(64) + data[5000:]
    whole, pieces = both_ways(BytesSource(data, "t.json", "t.json"), monkeypatch, 1024)
    assert whole[0] == pieces[0] == "error" and "NUL byte" in pieces[1]
    assert whole[2] == pieces[2] == "byte offset 5000"


def test_invalid_json_names_its_byte_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _doc(200)
    at = data.index(b", {", 9000) + 1  # between two events
    data = data[:at] + b"}}}" + data[at:]
    whole, pieces = both_ways(BytesSource(data, "t.json", "t.json"), monkeypatch, 1024)
    assert whole[0] == pieces[0] == "error" and pieces[1].startswith("invalid JSON")
    assert pieces[2].startswith("byte offset ")


def test_deep_nesting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _doc(100)[:-2] + b", " + b'{"args": ' * 5000 + b"1" + b"}" * 5000 + b"]}"
    whole, pieces = both_ways(BytesSource(data, "t.json", "t.json"), monkeypatch, 4096)
    assert whole[:2] == pieces[:2] and "nested too deeply" in pieces[1]


def test_tiny_objects_are_refused_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    data = b'{"traceEvents": [' + b"{}," * 1_200_000 + b"{}]}"
    whole, pieces = both_ways(BytesSource(data, "t.json", "t.json"), monkeypatch, 1 << 20)
    assert whole[0] == pieces[0] == "error" and "JSON objects" in pieces[1]


def test_no_events_array_near_the_top(monkeypatch: pytest.MonkeyPatch) -> None:
    data = b'{"events": [' + b'{"ph": "X"}, ' * 1000 + b"{}]}"
    whole, pieces = both_ways(BytesSource(data, "t.json", "t.json"), monkeypatch, 1024)
    assert whole[0] == pieces[0] == "error" and pieces[2] == "traceEvents"


def test_memory_budget_sizes() -> None:
    assert limits.parse_size("1.5G") == 3 << 29 and limits.parse_size("512m") == 512 << 20
    assert limits.parse_size("64KiB") == 64 << 10 and limits.parse_size("1000") == 1000
    assert limits.parse_size("lots") is None and limits.parse_size("-1G") is None

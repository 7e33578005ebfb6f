"""`many.parse_many` (many .et files decoded together) against `et.parse` file by file:
per file the same rows, metadata, warnings and errors, on every sample and public trace and on
generated sets of good, truncated, garbage, empty and metadata-only files."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tracekit.parsers import et_def_pb2
from tracekit.parsers.base import TraceError, TraceMeta
from tracekit.parsers.chakra import et as chakra_et
from tracekit.parsers.chakra import many
from tracekit.schema import arrow_schema
from tracekit.sources import BytesSource, FileSource

from .test_columns import _RECORD, SAMPLES, et_files, outcome
from .test_et import record


class FilesMemory:
    """A FilesSink keeping every batch with its file indices."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, pa.RecordBatch, pa.Array]] = []

    def write(self, table: str, batch: pa.RecordBatch, files: pa.Array) -> None:
        assert len(files) == batch.num_rows
        self.parts.append((table, batch, files))

    def table(self, name: str, index: int) -> pa.Table:
        batches = [batch.filter(pc.equal(files, index)) for table, batch, files in self.parts if table == name]
        return pa.Table.from_batches(batches, schema=arrow_schema(name))


def assert_many_as_one(sources: list[Any]) -> list[Any]:
    """parse_many on `sources` gives, file by file, what `parse` gives each alone."""
    sink = FilesMemory()
    outcomes = many.parse_many(sources, sink)
    assert len(outcomes) == len(sources)
    alone = [outcome(chakra_et.parse, source) for source in sources]
    for index, (got, expected) in enumerate(zip(outcomes, alone, strict=True)):
        if got is None:  # too big to hold: left to `parse`, which the caller runs
            assert all(sink.table(name, index).num_rows == 0 for name in ("ops", "collectives"))
            continue
        if expected[0] == "error":
            assert isinstance(got, TraceError), (index, got, expected)
            assert ("error", got.message, got.where) == expected, index
            continue
        assert isinstance(got, TraceMeta), (index, got, expected)
        assert got == expected[1], index
        for name, table in expected[2].items():
            assert sink.table(name, index).equals(table), (index, name)
    return alone


def test_sample_traces_together() -> None:
    paths = et_files(SAMPLES / "chakra")
    alone = assert_many_as_one([FileSource(p, str(p)) for p in paths])
    assert all(o[0] == "ok" for o in alone)


def test_public_traces_together(public_traces: Path) -> None:
    paths = et_files(public_traces)
    if not paths:
        pytest.skip("no .et files among the public traces")
    assert_many_as_one([FileSource(p, str(p)) for p in paths])


_METADATA = record(et_def_pb2.GlobalMetadata(version="0.0.4").SerializeToString())


@st.composite
def _file(draw: st.DrawFn) -> bytes:
    """A good file, or one truncated, with garbage spliced in, empty, or holding only metadata."""
    head = _METADATA if draw(st.booleans()) else b""
    body = b"".join(record(r) for r in draw(st.lists(_RECORD, max_size=30)))
    data = head + body
    kind = draw(st.sampled_from(["good", "good", "good", "truncated", "garbage", "empty", "metadata"]))
    if kind == "truncated":
        return data[: draw(st.integers(0, max(0, len(data) - 1)))]
    if kind == "garbage":
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.binary(min_size=1, max_size=12)) + data[at:]
    if kind == "empty":
        return b""
    if kind == "metadata":
        return _METADATA
    return data


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_file(), max_size=12), st.sampled_from([1, 2, 5, 1000]))
def test_generated_sets_of_files(files: list[bytes], lockstep: int) -> None:
    """Framed in lockstep down to `lockstep` files, the rest record by record."""
    with mock.patch.object(many, "LOCKSTEP_MIN_FILES", lockstep):
        assert_many_as_one([BytesSource(data, f"f{i}", f"f{i}.et") for i, data in enumerate(files)])


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(_file(), min_size=2, max_size=8), st.integers(1, 4))
def test_generated_sets_of_files_in_small_groups(files: list[bytes], limit: int) -> None:
    """Files too big to hold or with more than one group of nodes (left to `parse`), groups cut by
    size: the same outcomes."""
    patched: dict[str, Any] = {"MANY_FILE_BYTES": limit * 40, "MANY_GROUP_BYTES": limit * 60}
    # DECODE_ROWS bounds the files read together (many) and the groups `parse` takes (et).
    with (
        mock.patch.multiple(many, **patched, LOCKSTEP_MIN_FILES=1, DECODE_ROWS=limit + 1),
        mock.patch.object(chakra_et, "DECODE_ROWS", limit + 1),
    ):
        assert_many_as_one([BytesSource(data, f"f{i}", f"f{i}.et") for i, data in enumerate(files)])


def test_one_bad_file_costs_only_itself() -> None:
    good = _METADATA + b"".join(
        record(et_def_pb2.Node(id=i, name="n", type="COMP_NODE").SerializeToString()) for i in range(5)
    )
    bad = good[:-3]
    zeros = good + record(b"") * 2_000
    alone = assert_many_as_one([BytesSource(d, f"f{i}", "f.et") for i, d in enumerate([good, bad, good, zeros])])
    assert [o[0] for o in alone] == ["ok", "error", "ok", "error"]


def test_a_corrupt_gzip_fails_as_alone() -> None:
    """Found by hypothesis: a file starting with the gzip magic but cut short."""
    import gzip

    good = record(et_def_pb2.Node(id=1, name="n", type="COMP_NODE").SerializeToString())
    cut = gzip.compress(good * 40)[:-9]
    alone = assert_many_as_one([BytesSource(d, f"f{i}", "f.et") for i, d in enumerate([b"\x1f\x8b", good, cut])])
    assert [o[0] for o in alone] == ["error", "ok", "error"]


def test_a_file_too_big_to_hold_is_left_to_parse() -> None:
    node = record(et_def_pb2.Node(id=1, name="n", type="COMP_NODE").SerializeToString())
    sources = [BytesSource(node * n, f"f{n}", "f.et") for n in (3, 300, 4)]
    with mock.patch.object(many, "MANY_FILE_BYTES", len(node) * 10):
        outcomes = many.parse_many(sources, FilesMemory())
    assert [o.node_count if isinstance(o, TraceMeta) else o for o in outcomes] == [3, None, 4]


def test_files_decoded_together_go_through_one_upb_call() -> None:
    good = b"".join(record(et_def_pb2.Node(id=i, name="n", type="COMP_NODE").SerializeToString()) for i in range(5))
    sources = [BytesSource(good, f"f{i}", "f.et") for i in range(6)]
    with mock.patch.object(chakra_et, "parse", side_effect=AssertionError("file by file")):
        outcomes = many.parse_many(sources, FilesMemory())
    assert [o.node_count for o in outcomes if isinstance(o, TraceMeta)] == [5] * 6


def test_a_fleet_of_files_framed_in_lockstep() -> None:
    """More files than LOCKSTEP_MIN_FILES, of different lengths, a damaged one among them."""
    node = record(et_def_pb2.Node(id=1, name="n", type="COMP_NODE").SerializeToString())
    files = [_METADATA * (i % 2) + node * (i % 7 + 1) for i in range(many.LOCKSTEP_MIN_FILES + 9)]
    files[5] = files[5][:-2]
    alone = assert_many_as_one([BytesSource(d, f"f{i}", "f.et") for i, d in enumerate(files)])
    assert [o[0] for o in alone].count("error") == 1

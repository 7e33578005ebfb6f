"""tracekit.parsers.formats: one module per trace format; detection, dispatch and pairing read it.

A toy format is added as one module in a folder appended to the registry package's path (a
temporary extension of the registry, gone after the test): it is discovered, sniffed, taken by its
suffix, parsed, and its role and file names are what the ingest reads.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import tracekit
from tracekit.ingest.discover import looks_like_trace
from tracekit.parsers import detect_format, format_names, formats, parser_for
from tracekit.parsers.formats import parsers, role_of, sniff_order

TOY_MODULE = '''
"""A toy trace format: "TOYTRACE" on the first line, then one "name duration_us" line per op."""

from __future__ import annotations

from tracekit.parsers.base import BatchSink, Source, TableBuffer, TraceError, TraceMeta
from tracekit.parsers.formats import Parser

MAGIC = b"TOYTRACE\\n"


def sniff(head: bytes) -> bool:
    return head.startswith(MAGIC)


def parse(source: Source, sink: BatchSink) -> TraceMeta:
    meta = TraceMeta(format="toy")
    ops = TableBuffer("ops", sink)
    data = source.read()
    if not data.startswith(MAGIC):
        raise TraceError("no TOYTRACE line", "byte 0")
    for number, line in enumerate(data[len(MAGIC) :].decode().splitlines()):
        name, _, duration = line.partition(" ")
        ops.append({"op_id": number, "name": name, "duration_us": float(duration)})
        meta.node_count += 1
    ops.flush()
    return meta


PARSER = Parser(
    name="toy",
    summary="a toy format",
    content="binary",
    priority=5,
    sniff=sniff,
    suffixes=(".toy",),
    role="host",
    parse=parse,
)
'''


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "toy.py").write_text(TOY_MODULE)
    monkeypatch.setattr(formats, "__path__", [*formats.__path__, str(folder)])
    parsers.cache_clear()
    yield
    parsers.cache_clear()
    sys.modules.pop("tracekit.parsers.formats.toy", None)


def test_the_registry_holds_the_seven_formats_with_todays_sniff_order() -> None:
    assert set(format_names()) == {
        "chakra_et", "chakra_json", "flight_recorder", "kineto", "nccl_inspector", "nccl_log", "pytorch_et"
    }  # fmt: skip
    assert [p.name for p in sniff_order("json")] == [
        "nccl_inspector", "kineto", "flight_recorder", "chakra_json", "pytorch_et"
    ]  # fmt: skip
    assert [p.name for p in sniff_order("binary")] == ["nccl_log", "chakra_et", "flight_recorder"]
    assert {name: role_of(name) for name in format_names()} == {
        "chakra_et": "graph",
        "chakra_json": "graph",
        "flight_recorder": "log",
        "kineto": "device",
        "nccl_inspector": "log",
        "nccl_log": "log",
        "pytorch_et": "host",
    }
    assert role_of(None) is None and role_of("no such format") is None
    assert all(parser.summary for parser in parsers().values())


def test_a_toy_format_module_is_discovered_detected_and_parsed(toy: None) -> None:
    assert "toy" in format_names() and parser_for("toy").role == "host" and role_of("toy") == "host"
    # Its priority puts its rule before Chakra ET's (after the NCCL log's, of the same priority, by name); JSON
    # heads are never asked of it.
    assert [p.name for p in sniff_order("binary")] == ["nccl_log", "toy", "chakra_et", "flight_recorder"]
    assert detect_format(b"TOYTRACE\nmatmul 3\n", "x") == "toy"
    assert detect_format(b'{"traceEvents": []}', "x.toy") == "kineto"
    # A binary head no rule takes is the format its name ends with.
    assert detect_format(b"\x01\x02", "rank0.toy") == "toy"
    parsed = tracekit.parse_file(data=b"TOYTRACE\nmatmul 3\nallreduce 2.5\n", name="rank0.toy")
    assert parsed.format == "toy" and parsed.meta.node_count == 2
    assert parsed.ops.select(["op_id", "name", "duration_us"]).to_pylist() == [
        {"op_id": 0, "name": "matmul", "duration_us": 3.0},
        {"op_id": 1, "name": "allreduce", "duration_us": 2.5},
    ]
    assert looks_like_trace("rank0.toy")


def test_reading_the_registry_imports_no_heavy_module() -> None:
    code = (
        "import sys, tracekit.parsers as p\n"
        "p.detect_format(b'{\"traceEvents\": []}', 'x')\n"
        "p.parser_for('chakra_et')\n"
        "heavy = {'polars', 'pyarrow', 'google.protobuf', 'msgspec', 'numpy'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

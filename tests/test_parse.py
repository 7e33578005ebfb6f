"""tracekit.parse_file: any input gives a ParsedTrace or a TraceError, never another exception."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import tracekit
import tracekit.parsers
from tests.builders import et_bytes
from tracekit.errors import ParserBug, TraceError


@pytest.mark.parser_bug_expected
def test_a_stray_exception_in_a_parser_becomes_a_parser_bug_naming_parser_and_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(source: object, sink: object) -> None:
        raise ZeroDivisionError("division by zero\nsecond line \ud800")

    monkeypatch.setattr(tracekit.parsers, "parser_for", lambda fmt: SimpleNamespace(parse=broken))
    with pytest.raises(ParserBug) as caught:
        tracekit.parse_file(data=et_bytes([("ALL_REDUCE", 64)]), name="t.0.et")
    line = caught.value.describe("t.0.et")
    assert line.startswith("t.0.et: internal error in the chakra_et parser (ZeroDivisionError: division by zero")
    assert "test_parse.py:" in line and line.endswith("please report")
    line.encode("utf-8")
    assert "\n" not in line


def test_a_file_that_cannot_be_read_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        tracekit.parse_file(tmp_path / "gone.et")
    with pytest.raises(TraceError, match="cannot read"):
        tracekit.parse_file(tmp_path)  # a folder


def test_what_the_sink_raises_is_not_blamed_on_the_file() -> None:
    from tracekit.parsers import read_trace
    from tracekit.sources import BytesSource

    class FullDisk:
        def write(self, table: str, batch: object) -> None:
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        read_trace(BytesSource(et_bytes([("ALL_REDUCE", 64)]), "t.0.et", "t.0.et"), FullDisk())


def test_every_error_of_a_file_names_the_file(tmp_path: Path) -> None:
    """`tracekit.parse_file("trace.0.et")` said `cannot read (No such file or directory)`: which file?"""
    with pytest.raises(TraceError) as missing:
        tracekit.parse_file(tmp_path / "gone.0.et")
    assert str(missing.value) == f"{tmp_path / 'gone.0.et'}: cannot read (No such file or directory)"
    cut = tmp_path / "cut.0.et"
    cut.write_bytes(et_bytes([("ALL_REDUCE", 64), ("ALL_GATHER", 64)])[:-3])
    with pytest.raises(TraceError) as truncated:
        tracekit.parse_file(cut)
    assert str(truncated.value).startswith(f"{cut} at record "), truncated.value
    with pytest.raises(TraceError) as named:
        tracekit.parse_file(data=b"\x00" * 100, name="blob.0.et")
    assert str(named.value).startswith("blob.0.et at byte 0: "), named.value

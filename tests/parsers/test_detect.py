"""tracekit.parsers: the content sniffing that picks a parser, and the guard around every parse."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import et_bytes
from tests.examples import examples
from tracekit.errors import TraceError
from tracekit.parsers import SNIFF_BYTES, detect_format, format_names


@pytest.mark.parametrize("name", ["trace.json", "trace.et", "rank0.pt.trace.json", "x"])
@pytest.mark.parametrize("size", [1, 8, 8192, SNIFF_BYTES])
def test_zero_bytes_are_never_taken_for_a_chakra_stream(name: str, size: int) -> None:
    # Runs of zero bytes frame valid empty records: a zero-filled file (a preallocated, half-copied
    # one) used to parse as Chakra ET into millions of empty ops rows.
    with pytest.raises(TraceError, match="zero bytes"):
        detect_format(bytes(size), name)


def test_a_stream_after_one_empty_record_is_still_chakra() -> None:
    # An empty GlobalMetadata is a zero-length first record: real, and followed by nodes.
    stream = et_bytes([("ALL_REDUCE", 64)], version="")
    assert stream[0] == 0
    assert detect_format(stream, "x") == "chakra_et"


@settings(max_examples=examples(300))
@given(st.binary(max_size=256), st.sampled_from(["x", "t.json", "t.et", "t.et.gz", "t.json.gz"]))
def test_detect_format_names_a_format_or_raises_trace_error(head: bytes, name: str) -> None:
    try:
        assert detect_format(head, name) in format_names()
    except TraceError as exc:
        exc.describe(name).encode("utf-8")


@given(st.lists(st.binary(max_size=40), max_size=6), st.sampled_from(["x", "t.et"]))
def test_any_framing_of_records_is_decided_without_error(records: list[bytes], name: str) -> None:
    from tests.builders import _VarintBytes

    head = b"".join(_VarintBytes(len(r)) + r for r in records)
    try:
        assert detect_format(head, name) in format_names()
    except TraceError:
        pass

"""tracekit.parsers.common.limits: garbage is refused by count, early."""

from __future__ import annotations

import io
from typing import IO

import pytest

from tracekit.parsers.base import TraceError
from tracekit.parsers.common import limits
from tracekit.parsers.common.limits import UNTYPED_ALLOWANCE, UntypedRecords, read_json_document


class _CountingSource:
    """A source whose reads are counted (a zero-filled tail must not be read to its end)."""

    display = name = "t.json"

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.read_bytes = 0

    def open(self) -> IO[bytes]:
        source = self

        class Stream(io.BytesIO):
            def read(self, size: int | None = -1) -> bytes:
                chunk = super().read(size)
                source.read_bytes += len(chunk)
                return chunk

        return Stream(self.data)

    def read(self) -> bytes:
        return self.data


def test_a_json_document_is_refused_at_the_chunk_holding_its_first_nul(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "DOCUMENT_CHUNK", 1000)
    source = _CountingSource(b'{"traceEvents": [' + b" " * 2500 + bytes(100_000))
    with pytest.raises(TraceError, match="NUL byte") as info:
        read_json_document(source)
    assert info.value.where == f"byte offset {17 + 2500}"
    assert source.read_bytes == 3000  # the chunk that holds the first zero, and nothing after


def test_a_json_document_without_nul_is_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "DOCUMENT_CHUNK", 7)
    data = b'{"nodes": [' + b"1, " * 100 + b"1]}"
    assert read_json_document(_CountingSource(data)) == data


def test_untyped_records_are_allowed_up_to_a_share() -> None:
    counter = UntypedRecords()
    counter.add(4096, UNTYPED_ALLOWANCE)  # a thousand among four thousand: allowed
    counter.add(100_000, 1_000)  # 2,000 of 104,096: within 1,000 + 1%
    with pytest.raises(TraceError, match="2,100 of the first 105,096 records carry no node type"):
        counter.add(1_000, 100)


def test_a_document_of_tiny_objects_is_refused_before_it_is_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    # `{},` decodes into a ~90-byte event each: 256 MiB of them would need 9 GB (real traces hold
    # one object per 70-500 bytes and decode into about 5x their size).
    monkeypatch.setattr(limits, "DOCUMENT_CHUNK", 1 << 20)
    source = _CountingSource(b'{"traceEvents": [' + b"{}," * 3_000_000 + b"{}]}")
    with pytest.raises(TraceError, match="objects in the first") as info:
        read_json_document(source)
    assert "JSON objects" in info.value.message and source.read_bytes <= 6 << 20


def test_many_objects_of_real_size_are_read() -> None:
    event = b'{"ph": "X", "name": "a", "ts": 1, "dur": 2},'
    data = b'{"traceEvents": [' + event * 1_200_000 + b"{}]}"
    assert len(read_json_document(_CountingSource(data))) == len(data)

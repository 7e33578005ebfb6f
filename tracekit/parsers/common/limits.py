"""Limits: how much of a file a reader takes before it refuses it, counted, never timed.

A fleet ingest reads files written by crashed jobs and half-copied archives. Garbage must be
refused early and by a count of what was read, so that the refusal is the same on every machine
and load (a clock would refuse a real trace on a busy machine and accept garbage on an idle one).
Each limit below is far beyond what any real trace holds; past it a file is a TraceError.

* Zero bytes. A run of zero bytes frames valid empty Chakra records, but no writer starts a trace
  with one: format sniffing (tracekit.parsers.detect_format) refuses a file whose first bytes are
  all zero, whatever its name.
* Chakra records carrying no node type (`UntypedRecords`, .et and its JSON alike). Every node a
  real writer makes has a type (COMP_NODE, COMM_COLL_NODE, ...; INVALID_NODE is proto3's unset
  default), yet an empty record, a `{}` object or a record of unknown fields decodes to such a
  node, one ops row each: a zero-filled tail would make a row per byte. They may be at most
  UNTYPED_ALLOWANCE plus UNTYPED_SHARE of the records read; the count is checked every few
  thousand records, so a zero-filled file is refused within its first few kilobytes.
* A Chakra record's length (MAX_RECORD_BYTES) and a Chakra JSON object's text (MAX_OBJECT_CHARS):
  the largest node a writer makes is a `process_group:init` listing every group's ranks, a few
  megabytes at 2**20 ranks; a longer length is a corrupt header, refused before it is read.
* NUL bytes in a JSON document (Kineto, PyTorch ET: `read_json_document`). JSON never holds one
  (control characters inside strings are escaped), yet a document is decoded whole: a valid head
  with a zero-filled tail was read to the end, gigabytes of it, before the decoder saw the first
  zero. The document is read in chunks of DOCUMENT_CHUNK bytes and refused at the first chunk that
  holds a NUL byte. (Chakra JSON is decoded object by object and stops at the first zero anyway.)
* Objects in a JSON document (`read_json_document`): a document is decoded whole into Python
  objects of about 100 bytes each (Kineto events, PyTorch ET nodes); real traces hold one JSON
  object per 70-500 bytes and decode into about 5x their size, but a document of `{},` holds one
  per 3 bytes (256 MiB of it would decode into 9 GB and the kernel would kill the worker). Past
  DENSE_OBJECTS objects, a document averaging fewer than MIN_OBJECT_BYTES bytes per `{` is
  refused, counted chunk by chunk before anything is decoded.
* JSON nesting. The decoders (msgspec, json) recurse once per level and stop at the interpreter's
  recursion limit (1,000 frames by default); traces nest fewer than 10 levels. Their RecursionError
  becomes `too_deep()`. Code that walks a decoded value recursively stops at MAX_WALK_DEPTH.
* Memory. A JSON document is decoded whole only while it is at most 1/WHOLE_DOCUMENT_FACTOR of the
  memory budget (`memory_budget`: TRACEKIT_MEMORY_BUDGET, `tracekit ingest --memory-budget`, else
  a quarter of RAM); a longer Kineto trace is read incrementally (tracekit.parsers.kineto.stream),
  its traceEvents in pieces of whole events, with the same guards chunk by chunk.
* Decompressed size: tracekit.sources refuses a gzip that inflates beyond 200x its stored size
  (and beyond 256 MiB). The counts above refuse zero-filled content long before that; the
  inflation limit bounds what any reader can be made to read when the content itself looks valid
  (a document padded with whitespace, for one).
"""

from __future__ import annotations

import os
from typing import IO, TYPE_CHECKING

from tracekit.parsers.base import TraceError

if TYPE_CHECKING:
    from tracekit.parsers.base import Source

UNTYPED_ALLOWANCE = 1_000
UNTYPED_SHARE = 0.01
MAX_RECORD_BYTES = 64 << 20
MAX_OBJECT_CHARS = 64 << 20
MAX_WALK_DEPTH = 32
DOCUMENT_CHUNK = 16 << 20
DENSE_OBJECTS = 1_000_000
MIN_OBJECT_BYTES = 16
MEMORY_BUDGET_ENV = "TRACEKIT_MEMORY_BUDGET"
WHOLE_DOCUMENT_FACTOR = 5
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class UntypedRecords:
    """Counts the records read and those that carry no node type; refuses the file when the
    untyped ones are out of proportion (see the module docstring)."""

    __slots__ = ("records", "untyped")

    def __init__(self) -> None:
        self.records = 0
        self.untyped = 0

    def add(self, records: int, untyped: int) -> None:
        self.records += records
        self.untyped += untyped
        if untyped and self.untyped > UNTYPED_ALLOWANCE + UNTYPED_SHARE * self.records:
            raise TraceError(
                f"{self.untyped:,} of the first {self.records:,} records carry no node type "
                "(no writer makes them): zero-filled or corrupt data"
            )


def too_deep() -> TraceError:
    """The error of a JSON document nested beyond what its decoder can follow."""
    return TraceError("JSON nested too deeply (hundreds of levels; traces nest fewer than 10)")


def read_json_document(source: Source) -> bytearray:
    """The whole (decompressed) content of a JSON document file, refused at the first NUL byte or
    once it holds objects out of all proportion to its size (see the module docstring)."""
    with source.open() as stream:
        reader = JsonChunks(stream)
        data = reader.read_up_to(None)
    return data


class JsonChunks:
    """Reads a JSON document in DOCUMENT_CHUNK pieces with the guards above: refused at the first NUL
    byte, or once it holds objects out of all proportion to its size, counted chunk by chunk."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self.offset = 0  # bytes read so far
        self._objects = 0
        self.eof = False

    def read(self, size: int | None = None) -> bytes:
        """The next piece of `size` bytes (default DOCUMENT_CHUNK; b"" at the end), checked."""
        chunk = self._stream.read(size or DOCUMENT_CHUNK)
        if not chunk:
            self.eof = True
            return b""
        self._check(chunk, 0, len(chunk))
        return chunk

    def read_up_to(self, limit: int | None, size: int | None = None) -> bytearray:
        """The document from here on, or its next `limit` bytes or so when it is longer (see `eof`).
        `size`, the document's length when known, lets it be read in place, without copies."""
        data = bytearray()
        readinto = getattr(self._stream, "readinto", None)
        if size is not None and readinto is not None and (limit is None or size <= limit):
            data = bytearray(size)
            with memoryview(data) as view:
                filled = 0
                while filled < size and (got := readinto(view[filled : filled + DOCUMENT_CHUNK])):
                    self._check(data, filled, got)
                    filled += got
            del data[filled:]
            data += self.read()  # the end, or what the file grew by
        while limit is None or len(data) < limit:
            chunk = self.read()
            if not chunk:
                break
            data += chunk
        return data

    def _check(self, data: bytes | bytearray, start: int, length: int) -> None:
        """Refuse the document at a NUL byte in data[start:start+length], or once it holds objects
        out of all proportion to its size."""
        zero = data.find(0, start, start + length)
        if zero >= 0:
            where = f"byte offset {self.offset + zero - start}"
            raise TraceError("NUL byte in a JSON document: zero-filled or corrupt data", where)
        self.offset += length
        self._objects += data.count(b"{", start, start + length)
        if self._objects > DENSE_OBJECTS and self.offset < self._objects * MIN_OBJECT_BYTES:
            raise TraceError(
                f"{self._objects:,} JSON objects in the first {self.offset:,} bytes, fewer than {MIN_OBJECT_BYTES} "
                "bytes each (a trace's average 70 or more): refused before they are decoded",
                f"byte offset {self.offset}",
            )


def memory_budget() -> int:
    """Bytes one parse may hold: TRACEKIT_MEMORY_BUDGET (bytes, or with a K/M/G suffix: 1.5G), else
    a quarter of the machine's RAM. `tracekit ingest --memory-budget` sets it for its workers."""
    text = os.environ.get(MEMORY_BUDGET_ENV, "").strip()
    if text:
        value = parse_size(text)
        if value is not None:
            return value
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError, AttributeError):
        return 4 << 30


def parse_size(text: str) -> int | None:
    """A byte count written as 123, 64K, 512M, 1.5G or 2T (binary units); None if it is none."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = 1
    if text and text[-1] in _UNITS:
        scale = _UNITS[text[-1]]
        text = text[:-1]
    try:
        value = float(text)
    except ValueError:
        return None
    if not value > 0 or value * scale > 1 << 62:
        return None
    return int(value * scale)


def whole_document_bytes() -> int:
    """The largest JSON document decoded whole: decoding holds about WHOLE_DOCUMENT_FACTOR times the
    document; a longer one is read incrementally (Kineto)."""
    return memory_budget() // WHOLE_DOCUMENT_FACTOR

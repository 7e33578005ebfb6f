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
* Decompressed size: tracekit.sources refuses a gzip that inflates beyond 200x its stored size
  (and beyond 256 MiB). The counts above refuse zero-filled content long before that; the
  inflation limit bounds what any reader can be made to read when the content itself looks valid
  (a document padded with whitespace, for one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    data = bytearray()
    objects = 0
    with source.open() as stream:
        while chunk := stream.read(DOCUMENT_CHUNK):
            zero = chunk.find(0)
            if zero >= 0:
                offset = len(data) + zero
                raise TraceError("NUL byte in a JSON document: zero-filled or corrupt data", f"byte offset {offset}")
            data += chunk
            objects += chunk.count(b"{")
            if objects > DENSE_OBJECTS and len(data) < objects * MIN_OBJECT_BYTES:
                raise TraceError(
                    f"{objects:,} JSON objects in the first {len(data):,} bytes, fewer than {MIN_OBJECT_BYTES} "
                    "bytes each (a trace's average 70 or more): refused before they are decoded",
                    f"byte offset {len(data)}",
                )
    return data

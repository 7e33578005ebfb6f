"""Trace file content as parsers see it: decompressed, size-bounded, named for error messages.

A `.gz` name is not trusted: gzip is recognised by its magic bytes, and a file named .gz that is not
gzip is an error. Decompression is bounded, so a small gzip that inflates to gigabytes is refused
with a TraceError instead of exhausting memory.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tracekit.errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
# A gzip member may inflate to this many times its stored size (trace JSON compresses 5-20x) ...
MAX_INFLATE_RATIO = 200
# ... but never below this floor (tiny files) nor above this ceiling (memory on a 24 GiB machine).
MIN_INFLATE_LIMIT = 256 << 20
MAX_INFLATE_LIMIT = 16 << 30


def inflate_limit(stored_size: int) -> int:
    """Most bytes a compressed file of `stored_size` bytes may inflate to."""
    return min(MAX_INFLATE_LIMIT, max(MIN_INFLATE_LIMIT, stored_size * MAX_INFLATE_RATIO))


class BoundedReader(io.RawIOBase):
    """Reads a decompressing stream, raising TraceError once more than `limit` bytes come out."""

    def __init__(self, inner: IO[bytes] | gzip.GzipFile, limit: int) -> None:
        self._inner = inner
        self._limit = limit
        self._count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        try:
            data = self._inner.read(len(buffer))
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(f"corrupt gzip data ({exc})", f"decompressed byte {self._count}") from exc
        n = len(data)
        self._count += n
        if self._count > self._limit:
            raise TraceError(
                f"gzip inflates beyond {self._limit:,} bytes (refused as a decompression bomb)",
                f"decompressed byte {self._limit}",
            )
        buffer[:n] = data
        return n

    def close(self) -> None:
        self._inner.close()
        super().close()


def _open_content(raw: IO[bytes], stored_size: int, name: str) -> IO[bytes]:
    magic = raw.read(2)
    raw.seek(0)
    if magic == GZIP_MAGIC:
        inner = gzip.GzipFile(fileobj=raw, mode="rb")
        return io.BufferedReader(BoundedReader(inner, inflate_limit(stored_size)), 1 << 20)
    if name.endswith(".gz"):
        raw.close()
        raise TraceError("named .gz but is not gzip (no 1f 8b magic)", "byte 0")
    return raw


def known_size(stream: IO[bytes]) -> int | None:
    """The content size of an opened source, when known without reading it: a plain file or bytes
    (a gzip's content size is known only once inflated)."""
    if isinstance(stream, io.BytesIO):
        return stream.getbuffer().nbytes
    if isinstance(stream, io.BufferedReader) and isinstance(stream.raw, io.FileIO):
        return os.fstat(stream.fileno()).st_size
    return None


@dataclass(frozen=True)
class FileSource:
    """A trace file on disk."""

    path: Path
    display: str

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    def open(self) -> IO[bytes]:
        return _open_content(open(self.path, "rb"), self.size, self.name)

    def read(self) -> bytes:
        with self.open() as f:
            return f.read()


@dataclass(frozen=True)
class BytesSource:
    """A trace held in memory (an archive member)."""

    data: bytes
    display: str
    name: str

    @property
    def size(self) -> int:
        return len(self.data)

    def open(self) -> IO[bytes]:
        return _open_content(io.BytesIO(self.data), self.size, self.name)

    def read(self) -> bytes:
        with self.open() as f:
            return f.read()


def source_for(path: str | Path) -> FileSource:
    """A FileSource for a path given on the command line or in a test."""
    p = Path(path)
    return FileSource(p, str(path))

"""Framing of Chakra .et streams: varint-length records, read one by one or in blocks of whole records.

Each record is a base-128 varint length followed by that many bytes of a serialized message. The
first record is a `GlobalMetadata`, except in early ASTRA-sim files, which start directly with a
`Node`; every later record is a `Node`. There is no header, trailer or index, and a zero-length
record is valid (an all-default Node, or an empty GlobalMetadata when first), so a reader stops
only at the true end of the stream, never at an empty record. A record length beyond
MAX_RECORD_BYTES (tracekit.parsers.common.limits) is refused as corrupt.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

from tracekit.parsers.base import TraceError
from tracekit.parsers.common.limits import MAX_RECORD_BYTES

CHUNK_SIZE = 1 << 20
MAX_VARINT_BYTES = 10


def where(index: int, offset: int) -> str:
    """The place of a record in error messages."""
    return f"record {index} (byte offset {offset})"


def decode_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the base-128 varint at buf[pos].

    Raises IndexError when buf ends inside the varint, ValueError when it runs past 10 bytes.
    """
    value = 0
    shift = 0
    for i in range(pos, pos + MAX_VARINT_BYTES):
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    raise ValueError("varint longer than 10 bytes")


def iter_records(stream: IO[bytes], chunk_size: int = CHUNK_SIZE) -> Iterator[tuple[int, int, bytes]]:
    """Yield (record index, byte offset, payload) for each varint-framed record of `stream`.

    Reads `chunk_size` bytes at a time; zero-length records are yielded as b"". Raises TraceError
    naming the record and its byte offset for a truncated or malformed frame.
    """
    read = stream.read
    buf = b""
    pos = 0  # next unread byte in buf
    base = 0  # stream offset of buf[0]
    eof = False
    index = 0
    while True:
        if not eof and len(buf) - pos < MAX_VARINT_BYTES:
            more = read(chunk_size)
            if more:
                buf = buf[pos:] + more
                base += pos
                pos = 0
                continue
            eof = True
        if pos >= len(buf):
            return
        start = pos
        offset = base + start
        byte = buf[pos]
        if byte < 0x80:
            length = byte
            pos += 1
        else:
            length, pos = _frame_length(buf, pos, index, base)
        end = pos + length
        if end > len(buf):
            if not eof:
                buf, base, pos, end = _fill(read, buf, base, start, pos, end, chunk_size)
            if end > len(buf):
                raise _truncated(index, offset, length, len(buf) - pos)
        yield index, offset, buf[pos:end]
        pos = end
        index += 1


def _frame_length(buf: bytes, pos: int, index: int, base: int) -> tuple[int, int]:
    try:
        length, after = decode_varint(buf, pos)
    except IndexError:
        raise TraceError("file ends inside a record's length varint", where(index, base + pos)) from None
    except ValueError:
        raise TraceError("bad length varint (more than 10 bytes)", where(index, base + pos)) from None
    if length > MAX_RECORD_BYTES:
        raise TraceError(
            f"record length {length:,} exceeds {MAX_RECORD_BYTES:,} bytes, more than any node (corrupt length)",
            where(index, base + pos),
        )
    return length, after


def _fill(
    read: Any, buf: bytes, base: int, start: int, pos: int, end: int, chunk_size: int
) -> tuple[bytes, int, int, int]:
    """Read until buf holds the record [pos, end) or the stream ends; the buffer restarts at `start`."""
    parts = [buf[start:]]
    have = len(buf) - start
    need = end - start
    while have < need:
        more = read(max(chunk_size, min(need - have, 1 << 26)))
        if not more:
            break
        parts.append(more)
        have += len(more)
    shift = start
    return b"".join(parts), base + shift, pos - shift, end - shift


class Block:
    """Whole records framed in `data`: frame starts, the stream offset of data[0], the index of the
    first record, and the framing error found right after the last one (raised once they are read)."""

    __slots__ = ("base", "data", "end", "error", "frames", "index")

    def __init__(self, data: bytes, frames: list[int], base: int, index: int, end: int, error: TraceError | None):
        self.data, self.frames, self.base, self.index, self.end, self.error = data, frames, base, index, end, error

    def offset(self, i: int) -> int:
        return self.base + self.frames[i]

    def payload(self, i: int) -> bytes:
        length, body = decode_varint(self.data, self.frames[i])
        return self.data[body : body + length]


class BlockReader:
    """Frames a stream into blocks of whole records (`read(limit)`), reading `chunk_size` bytes at a
    time: memory is bounded by the chunk, the block and the largest record. Framing errors are the
    ones `iter_records` raises, at the same record and byte offset."""

    def __init__(self, stream: IO[bytes], chunk_size: int) -> None:
        self._read = stream.read
        self._chunk = chunk_size
        self._data = b""
        self._pos = 0  # next unframed byte of _data
        self._base = 0  # stream offset of _data[0]
        self._index = 0  # record index of the record at _pos
        self._eof = False
        self._done = False

    def rewind(self, block: Block) -> None:
        """Frame `block`'s records again on the next read (its bytes are still held)."""
        if block.frames:
            self._pos = block.frames[0] + block.base - self._base
            self._index = block.index
            self._done = False

    def read(self, limit: int) -> Block | None:
        """Up to `limit` whole records; fewer only at the end of the stream or before a framing error."""
        if self._done:
            return None
        frames: list[int] = []
        while True:
            need, error = self._frame(frames, limit)
            if error is not None or len(frames) >= limit or (self._eof and self._pos >= len(self._data)):
                index = self._index
                self._index += len(frames)
                self._done = error is not None or (self._eof and self._pos >= len(self._data))
                if not frames and error is None:
                    return None
                return Block(self._data, frames, self._base, index, self._pos, error)
            keep = frames[0] if frames else self._pos
            more = self._read(max(self._chunk, need - len(self._data)))
            if not more:
                self._eof = True
                continue
            self._data = self._data[keep:] + more
            self._base += keep
            self._pos -= keep
            frames[:] = [f - keep for f in frames]

    def _frame(self, frames: list[int], limit: int) -> tuple[int, TraceError | None]:
        """Frame records from _pos into `frames`: (bytes of _data needed to go on, error)."""
        data, pos, eof = self._data, self._pos, self._eof
        n = len(data)
        room = limit - len(frames)
        append = frames.append
        try:
            while room and pos < n:
                first = data[pos]
                if first < 0x80:
                    length, body = first, pos + 1
                elif pos + 1 < n and data[pos + 1] < 0x80:
                    length, body = (first & 0x7F) | (data[pos + 1] << 7), pos + 2
                elif not eof and n - pos < MAX_VARINT_BYTES:
                    return pos + MAX_VARINT_BYTES, None
                else:
                    length, body = _frame_length(data, pos, self._index + len(frames), self._base)
                end = body + length
                if end > n:
                    if eof:
                        return 0, _truncated(self._index + len(frames), self._base + pos, length, n - body)
                    return end, None
                append(pos)
                pos = end
                room -= 1
            return 0, None
        except TraceError as exc:
            return 0, exc
        finally:
            self._pos = pos


def _truncated(index: int, offset: int, length: int, available: int) -> TraceError:
    return TraceError(
        f"truncated record: length says {length:,} bytes but only {available:,} remain", where(index, offset)
    )


def first_record_is_node(payload: bytes) -> bool:
    """Whether the first record is a Node (old files) rather than a GlobalMetadata.

    GlobalMetadata has only fields 1 (version, string) and 2 (attr, message). A Node's id is field 1
    as a varint, and fields 3-10 exist only in Node; field 2 (string name vs attr) is ambiguous.
    """
    pos = 0
    try:
        while pos < len(payload):
            tag, pos = decode_varint(payload, pos)
            field, wire = tag >> 3, tag & 7
            if (field == 1 and wire == 0) or 3 <= field <= 10:
                return True
            pos = _skip_field(payload, pos, wire)
    except (IndexError, ValueError):
        return False
    return False


def _skip_field(payload: bytes, pos: int, wire: int) -> int:
    if wire == 0:
        return decode_varint(payload, pos)[1]
    if wire == 1:
        return pos + 8
    if wire == 2:
        length, pos = decode_varint(payload, pos)
        return pos + length
    if wire == 5:
        return pos + 4
    raise ValueError(f"wire type {wire}")

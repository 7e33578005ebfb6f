"""Kineto traces too long to decode whole: traceEvents read in pieces of whole events.

Decoding a document whole holds about five times its size; past the memory budget
(tracekit.parsers.common.limits.whole_document_bytes) a trace is read incrementally instead:

* the `traceEvents` key is found at the top level of the document's head (a scan of the bytes
  before it that follows strings and nesting);
* the array's text is cut into pieces of about DOCUMENT_CHUNK bytes, each cut after an event's
  closing brace followed by a comma and the next event's opening brace (`}, {`), and each piece is
  decoded as its own array with the same typed decoder as the whole document (the tolerant path for
  a piece of odd types). A cut inside a string or inside an event's nested values leaves a piece
  that is not valid JSON, so a piece that decodes was cut between events; one that does not is cut
  at an earlier candidate, or grown by the next chunk;
* at the end, the array's closing bracket is the first `]` after which the document's remainder,
  with the head before the array and an empty array in its place, decodes as a Kineto document:
  that small document gives the trace's metadata (distributedInfo, baseTimeNanoseconds, ...).

Every chunk goes through the guards of whole documents (NUL bytes, tiny objects: JsonChunks), and
a JSON error names the byte offset in the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import msgspec

from tracekit.parsers.base import TraceError
from tracekit.parsers.common import limits
from tracekit.parsers.common.limits import JsonChunks, too_deep
from tracekit.parsers.common.values import Checker
from tracekit.parsers.kineto.decode import Event, Trace, coerce_events, decode

_KEY = b'"traceEvents"'
_TOKENS = re.compile(rb'["\\{}\[\]]')
_WHITESPACE = b" \t\r\n"
_EVENTS_DECODER = msgspec.json.Decoder(list[Event])
_ANY_DECODER = msgspec.json.Decoder()
# A cut point is tried at most this many times per piece before the piece is grown.
_MAX_TRIES = 16
_BYTE_AT = re.compile(r"\(byte (\d+)\)")
# How far into a document its traceEvents key is looked for.
_MAX_HEAD = 256 << 20


class EventStream:
    """The events of a Kineto document, piece by piece (`pieces()`), then its metadata (`top`)."""

    def __init__(self, reader: JsonChunks, head: bytearray, checker: Checker) -> None:
        self._reader = reader
        self._checker = checker
        start = _array_start(head)
        while start < 0 and not reader.eof and len(head) < _MAX_HEAD:
            head += reader.read()  # the key further in: metadata before it can be long
            start = _array_start(head)
        if start < 0:
            raise TraceError(
                f"no traceEvents array at the top of the first {len(head):,} bytes of a trace too long to decode "
                "whole: raise the memory budget (--memory-budget) to read it whole",
                "traceEvents",
            )
        self._prefix = bytes(head[:start])
        self._buf = bytearray(head[start + 1 :])
        self._offset = start + 1  # file offset of _buf[0]
        self.top: Trace | None = None

    def pieces(self) -> Iterator[tuple[int, list[Event]]]:
        """(index of the first event, events) for each piece of the traceEvents array, in order."""
        index = 0
        reader, buf = self._reader, self._buf
        while True:
            if not reader.eof and len(buf) < limits.DOCUMENT_CHUNK:
                buf += reader.read()
                continue
            cut = self._cut(buf, index)
            if cut is None:
                if reader.eof:
                    break
                buf += reader.read()  # an event longer than a piece, or no cut found: grow
                continue
            end, events = cut
            if events:
                yield index, events
                index += len(events)
            self._offset += end
            del buf[:end]
        events = self._finish(buf, index)
        if events:
            yield index, events

    def _cut(self, buf: bytearray, index: int) -> tuple[int, list[Event]] | None:
        """(bytes consumed, events) of a piece of whole events of about DOCUMENT_CHUNK bytes (the
        longest within it, or within twice as many when none is), cut at a `}, {`; or None."""
        span = limits.DOCUMENT_CHUNK
        while True:
            cut = self._cut_within(buf, min(span, len(buf)), index)
            if cut is not None or span >= len(buf):
                return cut
            span *= 2

    def _cut_within(self, buf: bytearray, limit: int, index: int) -> tuple[int, list[Event]] | None:
        for _ in range(_MAX_TRIES):
            brace = buf.rfind(b"}", 0, limit)
            if brace < 0:
                return None
            limit = brace
            comma = _skip(buf, brace + 1)
            if comma >= len(buf) or buf[comma] != 0x2C:  # ","
                continue
            nxt = _skip(buf, comma + 1)
            if nxt >= len(buf) or buf[nxt] != 0x7B:  # "{"
                continue
            events = self._decode(buf, brace + 1, index)
            if events is not None:
                return nxt, events
        return None

    def _finish(self, buf: bytearray, index: int) -> list[Event]:
        """The last events, up to the array's closing bracket, and the document's metadata."""
        for match in re.finditer(rb"\]", buf):
            close = match.start()
            before = buf[:close].rstrip(_WHITESPACE)
            if before and not before.endswith(b"}"):
                continue
            events = self._decode(buf, close, index) if before else []
            if events is None:
                continue
            try:
                self.top = decode(self._prefix + b"[]" + bytes(buf[close + 1 :]), self._checker)
            except TraceError:
                continue
            return events
        raise self._error(buf, index)

    def _decode(self, buf: bytearray, end: int, index: int) -> list[Event] | None:
        """The events of buf[:end] (a piece of the array), or None when it is no run of whole values."""
        piece = b"[" + bytes(buf[:end]) + b"]"
        try:
            return _EVENTS_DECODER.decode(piece)
        except msgspec.ValidationError:
            pass
        except msgspec.DecodeError:
            return None
        except RecursionError:
            raise too_deep() from None
        try:
            raw = _ANY_DECODER.decode(piece)  # valid JSON of unexpected types: coerce field by field
        except msgspec.DecodeError:
            return None
        except RecursionError:
            raise too_deep() from None
        return coerce_events(raw, self._checker, index)

    def _error(self, buf: bytearray, index: int) -> TraceError:
        """Why the rest of the array does not decode, at its byte offset in the file."""
        try:
            _ANY_DECODER.decode(b"[" + bytes(buf))
        except msgspec.DecodeError as exc:
            text = str(exc)
            match = _BYTE_AT.search(text)
            where = f"byte offset {self._offset + int(match.group(1)) - 1}" if match else f"traceEvents[{index}]"
            return TraceError(f"invalid JSON: {_BYTE_AT.sub('', text).strip()}", where)
        except RecursionError:
            return too_deep()
        return TraceError("invalid JSON: traceEvents is not closed", f"byte offset {self._offset + len(buf)}")


def _skip(buf: bytearray, pos: int) -> int:
    while pos < len(buf) and buf[pos] in _WHITESPACE:
        pos += 1
    return pos


def _array_start(head: bytearray) -> int:
    """The offset of the `[` that opens the top-level traceEvents array in the document's head (-1:
    not in it)."""
    start = 0
    while (key := head.find(_KEY, start)) >= 0:
        start = key + 1
        if _depth_before(head, key) != 1:
            continue
        colon = _skip(head, key + len(_KEY))
        if colon < len(head) and head[colon] == 0x3A:  # ":"
            bracket = _skip(head, colon + 1)
            if bracket < len(head) and head[bracket] == 0x5B:  # "["
                return bracket
        break
    return -1


def _depth_before(head: bytearray, end: int) -> int | None:
    """Nesting depth at head[end] (None inside a string), following strings and escapes."""
    depth, in_string, escaped_at = 0, False, -1
    for match in _TOKENS.finditer(head, 0, end):
        at = match.start()
        if at == escaped_at:
            continue  # the character after a backslash in a string
        char = head[at]
        if in_string:
            if char == 0x5C:  # "\\"
                escaped_at = at + 1
            elif char == 0x22:  # '"'
                in_string = False
        elif char == 0x22:
            in_string = True
        elif char in (0x7B, 0x5B):  # "{", "["
            depth += 1
        elif char in (0x7D, 0x5D):  # "}", "]"
            depth -= 1
    return None if in_string else depth

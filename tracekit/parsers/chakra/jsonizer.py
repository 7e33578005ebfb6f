"""Chakra ET as `chakra_jsonizer` writes it: protobuf-JSON objects glued back to back.

`chakra_jsonizer` writes `MessageToJson(...)` of the GlobalMetadata and of every Node one after the
other with no separator and no enclosing array (`}{`, possibly with whitespace between), so the
file as a whole is not JSON. Keys are lowerCamelCase, 64-bit integers are strings, enums are names
and default values are omitted: the protobuf JSON mapping, so each object is turned back into the
et_def_pb2 message, and rows are made by the very same code as for binary .et (`rows.NodeRows`,
by the rules of tracekit.parsers.chakra.rules): one trace gives identical rows in both formats.
`json_format.ParseDict` is pure Python and slow (~60 us a node), so the keys chakra_jsonizer
writes are converted by `fast_node` and only other objects go through ParseDict (a property test keeps the two equal).

The text is read in chunks and objects are decoded one by one with `JSONDecoder.raw_decode`;
an object cut by a chunk boundary is retried with more text. Errors name the object number and
the line and column in the file. The first object is a GlobalMetadata unless it carries a key only
a Node has (old files without metadata). Garbage is refused by count, as for .et
(tracekit.parsers.common.limits): an object longer than MAX_OBJECT_CHARS, objects that carry no
node type (`{}`) beyond a small share, nesting deeper than the decoder can follow.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from typing import IO, Any

from google.protobuf import json_format  # noqa: TID253 (parser modules are imported lazily)

from tracekit.parsers import et_def_pb2
from tracekit.parsers.base import BatchSink, Source, TraceError, TraceMeta
from tracekit.parsers.chakra.rows import NodeRows
from tracekit.parsers.chakra.rules import EXTENSION_NODE_TYPES, INT_VARIANTS, NODE_TYPE_NAMES
from tracekit.parsers.common.limits import MAX_OBJECT_CHARS, too_deep
from tracekit.parsers.common.values import MAX_TEXT_CHARS, Checker, too_long

FORMAT = "chakra_json"

CHUNK_CHARS = 1 << 20
_METADATA_KEYS = frozenset(("version", "attr"))
_NODE_TYPE_NAMES = frozenset(NODE_TYPE_NAMES.values())
_NOT_WHITESPACE = re.compile(r"[^ \t\n\r]")


class _TextStream:
    """Decoded text of a byte stream, held from the start of the next unread object onward.

    Tracks the line and column of the buffer's first character so that errors can name the place
    in the whole file, not in the current chunk.
    """

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self.text = ""
        self.pos = 0
        self.eof = False
        self.line = 1  # line of text[0]
        self.column = 1  # column of text[0]

    def more(self, chars: int | None = None) -> bool:
        """Append at least one chunk of text; False at end of stream."""
        if self.eof:
            return False
        data = self._stream.read(chars or CHUNK_CHARS)
        final = not data
        try:
            added = self._decoder.decode(data, final)
        except UnicodeDecodeError as exc:
            raise TraceError(f"not UTF-8 text ({exc.reason})", self.place(len(self.text))) from exc
        self._drop_consumed()
        self.text += added
        if final:
            self.eof = True
        return not final or bool(added)

    def _drop_consumed(self) -> None:
        consumed = self.text[: self.pos]
        newlines = consumed.count("\n")
        if newlines:
            self.line += newlines
            self.column = len(consumed) - consumed.rfind("\n")
        else:
            self.column += len(consumed)
        self.text = self.text[self.pos :]
        self.pos = 0

    def place(self, index: int) -> str:
        """'line L column C' of text[index]."""
        before = self.text[:index]
        newlines = before.count("\n")
        if newlines:
            column = index - before.rfind("\n")
            return f"line {self.line + newlines} column {column}"
        return f"line {self.line} column {self.column + index}"

    def skip_whitespace(self) -> bool:
        """Move past whitespace; False when only whitespace remains in the whole stream."""
        while True:
            found = _NOT_WHITESPACE.search(self.text, self.pos)
            if found is not None:
                self.pos = found.start()
                return True
            self.pos = len(self.text)
            if not self.more():
                return False


class ObjectReader:
    """Iterates (object number, dict) over the glued JSON objects of a byte stream.

    `place()` names where the object last yielded starts ("line L column C"); it is computed only
    on demand (for error messages), since counting lines for every object would cost a rescan.
    """

    def __init__(self, stream: IO[bytes]) -> None:
        self._text = _TextStream(stream)
        self._start = 0
        self.chars = 0  # the length of the object last yielded, as text

    def place(self) -> str:
        return self._text.place(self._start)

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        text = self._text
        decode = json.JSONDecoder().raw_decode
        number = 0
        while text.skip_whitespace():
            self._start = text.pos
            obj, end = self._decode_one(decode, number)
            if not isinstance(obj, dict):
                kind = type(obj).__name__
                raise TraceError(f"object {number} is a JSON {kind}, not an object", self.place())
            self.chars = end - self._start
            yield number, obj
            text.pos = end
            number += 1

    def _decode_one(self, decode: Any, number: int) -> tuple[Any, int]:
        text = self._text
        chars = CHUNK_CHARS
        while True:
            try:
                return decode(text.text, self._start)
            except json.JSONDecodeError as exc:
                # The object may just be cut by the chunk boundary: retry with more text. Only
                # errors at the end of the text can be cuts, so a malformed object early in a
                # big file is reported at once instead of reading the rest of the file.
                place = text.place(exc.pos)  # before more(), which moves the buffer
                cut = _maybe_cut(exc, text.text)
                if cut and len(text.text) - self._start >= MAX_OBJECT_CHARS:
                    message = f"object {number} is longer than {MAX_OBJECT_CHARS:,} characters, more than any node"
                    raise TraceError(message, self.place()) from exc
                if cut and text.more(chars):
                    chars *= 2  # doubling keeps a huge object from being re-decoded quadratically
                    self._start = text.pos
                    continue
                raise TraceError(f"invalid JSON in object {number}: {exc.msg}", place) from exc
            except RecursionError:
                error = too_deep()
                error.where = f"object {number} at {self.place()}"
                raise error from None
            except ValueError as exc:  # an integer beyond Python's 4,300-digit conversion limit
                raise TraceError(f"invalid JSON in object {number}: {exc}", self.place()) from None


def _maybe_cut(exc: json.JSONDecodeError, text: str) -> bool:
    return len(text) - exc.pos < 16 or exc.msg.startswith("Unterminated string")


def parse(source: Source, sink: BatchSink) -> TraceMeta:
    """Read one chakra_jsonizer file into `sink` (see the module docstring)."""
    rows = NodeRows(sink, FORMAT)
    number = 0
    with source.open() as stream:
        reader = ObjectReader(stream)
        try:
            for number, obj in reader:
                if reader.chars > MAX_TEXT_CHARS:  # no string in a shorter object can be longer
                    _bound_text(obj, rows.checker, number)
                if number == 0 and _METADATA_KEYS.issuperset(obj):
                    rows.add_metadata(_message(obj, et_def_pb2.GlobalMetadata(), number, reader))
                else:
                    node_type = obj.get("type")
                    if node_type.__class__ is str and node_type not in _NODE_TYPE_NAMES:
                        obj["type"] = _extension_node_type(obj, node_type, number, rows.checker)
                    node = fast_node(obj)
                    rows.add(node if node is not None else _message(obj, et_def_pb2.Node(), number, reader))
            return rows.finish()
        except TraceError as exc:
            if exc.where is None:  # a count limit of NodeRows: the place is the last object read
                exc.where = f"object {number} at {reader.place()}"
            raise


def _bound_text(obj: dict[str, Any], checker: Checker, number: int) -> None:
    """Cut the object's name, and drop its version and the attributes whose value holds a string,
    that are longer than MAX_TEXT_CHARS (tracekit.parsers.common.values), noted on the file."""
    node_id = obj.get("id")
    where = f"node id {node_id}" if node_id.__class__ in (str, int) and len(str(node_id)) < 24 else f"object {number}"
    name = obj.get("name")
    if name.__class__ is str:
        obj["name"] = checker.name(name, "name", where)
    if "version" in obj:
        obj["version"] = checker.text(obj["version"], "version", where)
        if obj["version"] is None:
            del obj["version"]
    attrs = obj.get("attr")
    if attrs.__class__ is list:
        kept = []
        for attr in attrs:
            value = (
                next((v for k, v in attr.items() if k != "name" and too_long(v)), None)
                if attr.__class__ is dict
                else None
            )
            if value is None:
                kept.append(attr)
                continue
            label = attr.get("name")
            checker.text(value, label if label.__class__ is str and len(label) < 100 else "attr", where)
        obj["attr"] = kept


# --- fast path ------------------------------------------------------------------------------
# json_format.ParseDict is pure Python and costs ~60 us per node. chakra_jsonizer output uses a
# handful of keys, so those are converted directly; anything else (snake_case keys, floats, bytes,
# lists, odd values) returns None and goes through ParseDict, which also words the errors.

_UINT64 = re.compile(r"[0-9]{1,20}", re.ASCII)
_INT64 = re.compile(r"-?[0-9]{1,19}", re.ASCII)
_NODE_TYPE_NUMBERS = {name: number for number, name in NODE_TYPE_NAMES.items()} | EXTENSION_NODE_TYPES
# The protobuf-JSON (camelCase) keys of the integer members of an attribute's `value` (boolVal aside).
_INT_ATTR_KEYS = {kind.split("_")[0] + "Val": kind for kind in sorted(INT_VARIANTS) if kind != "bool_val"}
_Node = et_def_pb2.Node
_Attr = et_def_pb2.AttributeProto
_IOInfo = et_def_pb2.IOInfo


def _as_int(value: Any) -> int:
    """A protobuf-JSON integer (a JSON number or a decimal string); ValueError otherwise."""
    if value.__class__ is int:
        return value
    if value.__class__ is str and _INT64.fullmatch(value):
        return int(value)
    raise ValueError(value)


def _as_uints(values: Any) -> list[int]:
    if values.__class__ is not list:
        raise ValueError(values)
    return [v if v.__class__ is int else int(_UINT64.fullmatch(v)[0]) for v in values]  # type: ignore[index]


def fast_node(obj: dict[str, Any]) -> Any:
    """The Node of a chakra_jsonizer object, or None when only ParseDict can tell."""
    fields: dict[str, Any] = {}
    try:
        for key, value in obj.items():
            if key == "name":
                if value.__class__ is not str:
                    return None
                fields["name"] = value
            elif key == "id" or key == "startTimeMicros" or key == "durationMicros":
                fields[_NODE_INT_FIELDS[key]] = _as_int(value)
            elif key == "type":
                fields["type"] = _NODE_TYPE_NUMBERS[value] if value.__class__ is str else _as_int(value)
            elif key == "ctrlDeps" or key == "dataDeps":
                fields[_NODE_LIST_FIELDS[key]] = _as_uints(value)
            elif key == "attr":
                attrs = [_fast_attr(a) for a in value]
                if None in attrs:
                    return None
                fields["attr"] = attrs
            elif key == "inputs" or key == "outputs":
                fields[key] = _fast_io(value)
            else:
                return None
        return _Node(**fields)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


_NODE_INT_FIELDS = {"id": "id", "startTimeMicros": "start_time_micros", "durationMicros": "duration_micros"}
_NODE_LIST_FIELDS = {"ctrlDeps": "ctrl_deps", "dataDeps": "data_deps"}


def _fast_attr(obj: dict[str, Any]) -> Any:
    if obj.__class__ is not dict or len(obj) > 2:
        return None
    name = obj.get("name", "")
    if name.__class__ is not str:
        return None
    for key, value in obj.items():
        if key == "name":
            continue
        if key == "stringVal" and value.__class__ is str:
            return _Attr(name=name, string_val=value)
        if key == "boolVal" and value.__class__ is bool:
            return _Attr(name=name, bool_val=value)
        field = _INT_ATTR_KEYS.get(key)
        if field is None:
            return None
        kwargs: dict[str, Any] = {field: _as_int(value)}
        return _Attr(name=name, **kwargs)
    return _Attr(name=name)


def _fast_io(obj: Any) -> Any:
    if obj.__class__ is not dict or not {"values", "shapes", "types"}.issuperset(obj):
        raise ValueError(obj)
    if any(v.__class__ is not str for v in obj.values()):
        raise ValueError(obj)
    return _IOInfo(**obj)


def _extension_node_type(obj: dict[str, Any], name: str, number: int, checker: Checker) -> int:
    """The number of a NodeType name from a schema extension; INVALID_NODE (0), with a warning
    naming the node, for a name no schema tracekit knows gives (its number cannot be known).

    json_format would silently turn an unknown enum name into INVALID_NODE; the .et parser keeps
    unknown numbers, so names of known extensions are mapped back to their numbers instead.
    """
    if name in EXTENSION_NODE_TYPES:
        return EXTENSION_NODE_TYPES[name]
    node_id = obj.get("id")
    where = f"node id {node_id}" if node_id.__class__ in (str, int) and len(str(node_id)) < 24 else f"object {number}"
    checker.note("NodeType name", "is not one of Chakra 0.0.4 or of a known fork", name, where, "read as INVALID_NODE")
    return 0


def _message(obj: dict[str, Any], message: Any, number: int, reader: ObjectReader) -> Any:
    kind = type(message).__name__
    try:
        return json_format.ParseDict(obj, message, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, OverflowError) as exc:
        # OverflowError: an infinite number (-Infinity, 1e999) where an integer or enum belongs.
        reason = f"object {number} is not a valid {kind}: {exc}"
    except SystemError as exc:
        # upb fails to look up a key that is not valid Unicode (a lone surrogate from a \ud800
        # escape) with a SystemError whose cause says so.
        if not isinstance(exc.__cause__, UnicodeError):
            raise
        reason = f"object {number} is not a valid {kind}: a key is not valid Unicode"
    except RecursionError:
        reason = f"object {number} is not a valid {kind}: nested too deeply"
    raise TraceError(reason, f"object {number} at {reader.place()}")

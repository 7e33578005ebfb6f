"""PyTorch ET decoding: the JSON document, its nodes list and its start time."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import msgspec

from tracekit.parsers.base import Source, TraceError
from tracekit.parsers.common.limits import read_json_document, too_deep
from tracekit.parsers.common.values import excerpt

_MALFORMED_BYTE = re.compile(r"\(byte (\d+)\)")
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"  # ExecutionTraceObserver's "%Y-%m-%d %X" in the C locale


def _line_column(data: bytes | bytearray, offset: int) -> str:
    offset = max(0, min(offset, len(data)))
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return f"line {line} column {column} (byte offset {offset})"


def _decode(data: bytes | bytearray) -> Any:
    try:
        return msgspec.json.decode(data)
    except RecursionError:
        raise too_deep() from None
    except msgspec.DecodeError as exc:
        text = str(exc)
        if "truncated" in text:
            if not data.strip():
                raise TraceError("empty file", "byte offset 0") from None
            raise TraceError(
                "truncated JSON (the file ends inside the document; was the job killed?)",
                _line_column(data, len(data)),
            ) from None
        match = _MALFORMED_BYTE.search(text)
        where = _line_column(data, int(match.group(1))) if match else None
        if where is None and "UTF-8" in text:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as bad:
                where = _line_column(data, bad.start)
        raise TraceError(f"invalid JSON: {text}", where) from None


def load(source: Source) -> tuple[dict[str, Any], list[Any]]:
    """The top-level object and its `nodes` list; TraceError for anything that is not an ET."""
    doc = _decode(read_json_document(source))
    if not isinstance(doc, dict):
        raise TraceError(f"not a PyTorch execution trace: top level is a JSON {type(doc).__name__}", "byte offset 0")
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        what = "no 'nodes' array" if nodes is None else f"'nodes' is a {type(nodes).__name__}, not an array"
        raise TraceError(f"not a PyTorch execution trace: {what}", "top-level object")
    schema = doc.get("schema")
    if schema is not None and not isinstance(schema, str):
        raise TraceError(f"'schema' is {excerpt(schema)}, not a string", "top-level object")
    return doc, nodes


def started_at(value: Any) -> datetime | None:
    """`time` is the writer's local wall clock with no zone; it is labelled UTC as written."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value.strip(), _TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None

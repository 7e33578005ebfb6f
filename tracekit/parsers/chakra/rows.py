"""Decoded Chakra nodes to `ops` and `collectives` batches, by the rules of tracekit.parsers.chakra.rules.

`NodeRows` is shared by the .et and the chakra_jsonizer readers so that one trace gives the same
rows in both formats: nodes decoded as upb messages (`add`, `flush`), or a block of .et records
decoded column-wise (`add_columns`, `check_records`, with the `Findings` of its columns). Count
limits, bound checks and collective rows are taken DECODE_ROWS nodes at a time on both paths, so
that they give the same rows, warnings and errors, at the same record.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa  # noqa: TID253 (parser modules are imported lazily by the registry)

from tracekit.parsers.base import BatchSink, ProcessGroup, TraceError, TraceMeta
from tracekit.parsers.chakra.collectives import CollectiveColumns, CollectivePieces, collective_columns
from tracekit.parsers.chakra.columns import NodeColumns, gather
from tracekit.parsers.chakra.rules import (
    KNOWN_NODE_TYPES,
    METADATA_NODE,
    NODE_TYPE_NAMES,
    SPECIAL_NODE_TYPES,
    TYPE_NAMES,
    attr_str,
    collective_row,
    node_where,
    note_node_types,
)
from tracekit.parsers.common.finish import finished
from tracekit.parsers.common.groups import merge_groups, read_process_groups
from tracekit.parsers.common.limits import UntypedRecords
from tracekit.parsers.common.names import PG_INIT_MARK
from tracekit.parsers.common.values import INT64, Checker
from tracekit.schema import arrow_schema

FLUSH_ROWS = 65_536
# Nodes decoded before they become columns: bounds the memory held in upb messages.
DECODE_ROWS = 4_096
COLLECTIVE_FLUSH_ROWS = 8_192


class NodeRows:
    """Turns decoded GlobalMetadata/Node messages into `ops` and `collectives` batches.

    Shared by the .et and the chakra_jsonizer JSON parsers so that one trace gives the same rows in
    both formats. Nodes are held until `decode_rows` of them are pending and then turned into Arrow
    columns with one comprehension per column: far less Python per node than a dict row each.
    The pending batch is kept small because every decoded upb message owns an arena (about 2 KB);
    the column chunks are joined into `flush_rows`-row batches for the sink. Only communication and
    metadata nodes get per-node Python here; the column path (`add_columns`, `check_records`) builds
    collective rows column-wise too.
    """

    def __init__(
        self,
        sink: BatchSink,
        fmt: str,
        flush_rows: int = FLUSH_ROWS,
        decode_rows: int = DECODE_ROWS,
        collectives: CollectivePieces | None = None,
    ) -> None:
        self.sink = sink
        self.meta = TraceMeta(format=fmt)
        self.checker = Checker(self.meta)
        self.flush_rows = flush_rows
        self.decode_rows = min(decode_rows, flush_rows)
        # `parse_many` gathers the collective rows of many files in one buffer of its own.
        self.collectives = collectives or CollectivePieces(
            lambda batch, _files: sink.write("collectives", batch), min(flush_rows, COLLECTIVE_FLUSH_ROWS)
        )
        self.pending: list[Any] = []
        self._chunks: list[dict[str, pa.Array]] = []
        self._chunk_rows = 0
        self._first_node_record = 0
        self._untyped = UntypedRecords()

    def add_metadata(self, message: Any) -> None:
        """Record the GlobalMetadata: version, or the `schema` attribute when version is empty."""
        self._first_node_record = 1
        version = message.version or None
        if version is None:
            for attr in message.attr:
                if attr.name == "schema":
                    version = attr_str(attr) or None
                    break
        self.meta.schema_version = version

    def add(self, node: Any) -> None:
        """Queue one Node; rows are made when `decode_rows` are pending (or at `finish`)."""
        self.pending.append(node)
        if len(self.pending) >= self.decode_rows:
            self.flush()

    def flush(self) -> None:
        """Turn the pending nodes into `ops` columns and `collectives` rows."""
        nodes = self.pending
        if not nodes:
            return
        self.pending = []
        self.meta.node_count += len(nodes)
        types = [n.type for n in nodes]
        self._untyped.add(len(nodes), types.count(0))  # raises once they are out of proportion
        unknown = set(types).difference(NODE_TYPE_NAMES)
        if unknown:
            first = next(n for n in nodes if n.type in unknown)
            note_node_types(self.checker, first.type, node_where(first), sum(t in unknown for t in types))
        try:
            columns = self._columns(nodes, types)
        except (OverflowError, pa.ArrowInvalid):
            columns = self._checked_columns(nodes, types)  # a uint64 id beyond int64: rare, slower
        self._chunks.append(columns)
        for node, node_type in zip(nodes, types, strict=True):
            if node_type in SPECIAL_NODE_TYPES:
                self._special(node, node_type)
        self._chunk_rows += len(nodes)
        if self._chunk_rows >= self.flush_rows:
            self._write_ops()

    @staticmethod
    def _columns(
        nodes: list[Any],
        types: list[int],
        op_ids: list[int | None] | None = None,
        ctrl_deps: list[list[int] | None] | None = None,
        data_deps: list[list[int] | None] | None = None,
        times: bool = True,
    ) -> dict[str, pa.Array]:
        names = TYPE_NAMES
        columns = {
            "op_id": pa.array([n.id for n in nodes] if op_ids is None else op_ids, pa.int64()),
            "name": pa.array([n.name for n in nodes], pa.string()),
            "type": pa.array([names[t] for t in types], pa.string()),
            "ctrl_deps": pa.array(
                [n.ctrl_deps for n in nodes] if ctrl_deps is None else ctrl_deps, pa.list_(pa.int64())
            ),
            "data_deps": pa.array(
                [n.data_deps for n in nodes] if data_deps is None else data_deps, pa.list_(pa.int64())
            ),
        }
        if times:
            columns["start_us"] = pa.array([n.start_time_micros or None for n in nodes], pa.float64())
            columns["duration_us"] = pa.array([n.duration_micros for n in nodes], pa.float64())
        return columns

    def _checked_columns(self, nodes: list[Any], types: list[int]) -> dict[str, pa.Array]:
        """Columns with every id and dependency checked: those beyond int64 are null, and noted.
        Times (uint64 too) become floats here, which Arrow does not do for ints beyond int64."""
        checker = self.checker
        op_ids = [checker.bounded(n.id, "op_id", INT64, node_where(n)) for n in nodes]

        def deps(field: str) -> list[list[int] | None]:
            out: list[list[int] | None] = []
            for n in nodes:
                values = list(getattr(n, field))
                if all(INT64.holds(v) for v in values):
                    out.append(values)
                else:
                    checker.note(field, f"holds an id out of bounds [{INT64.low}, {INT64.high}]", values, node_where(n))
                    out.append(None)
            return out

        columns = self._columns(nodes, types, op_ids, deps("ctrl_deps"), deps("data_deps"), times=False)
        columns["start_us"] = pa.array([float(n.start_time_micros) or None for n in nodes], pa.float64())
        columns["duration_us"] = pa.array([float(n.duration_micros) for n in nodes], pa.float64())
        return columns

    @property
    def node_total(self) -> int:
        """Nodes read so far (flushed and pending)."""
        return self.meta.node_count + len(self.pending)

    def add_columns(
        self,
        buf: np.ndarray,
        columns: NodeColumns,
        nodes: Any,
        place: Callable[[int], str],
        final: bool,
    ) -> bool:
        """Rows of a block decoded column-wise (`nodes`: the same records as upb messages, read only
        for communication and metadata nodes). The count limit, the bound checks and the special
        nodes are taken DECODE_ROWS nodes at a time, as `flush` takes them, so that warnings and
        errors are the same; a trailing partial group waits for the end of the stream (`final`).
        False (nothing done) when the block cannot be held as Arrow columns."""
        count = len(columns.ids)
        arrays = self._column_arrays(buf, columns)
        if arrays is None:
            return False
        findings = Findings(columns, buf)
        step = self.decode_rows
        low = 0
        while low < count:
            high = min(count, low + step - self.node_total % step)
            if high - low < step - self.node_total % step and not final:
                break  # a framing error follows: the record-by-record path never flushes these
            self.check_records(columns, findings, nodes, low, high, place)
            low = high
        if low:
            chunk = arrays if low == count else {name: array.slice(0, low) for name, array in arrays.items()}
            self._chunks.append(chunk)
            self._chunk_rows += low
            if self._chunk_rows >= self.flush_rows:
                self._write_ops()
        return True

    def check_records(
        self, columns: NodeColumns, findings: Findings, nodes: Any, low: int, high: int, place: Callable[[int], str]
    ) -> None:
        """Records [low, high) of decoded columns, as `flush` takes a group of pending nodes: counted
        against the untyped limit, their ids beyond int64 noted, their special nodes read from `nodes`
        (their collective rows taken from the columns `findings` built, unless the rules must see
        one of them: then from `nodes`, as `flush` reads them). A TraceError without a place is
        placed at record high - 1."""
        checker = self.checker
        self.meta.node_count += high - low
        try:
            untyped = findings.untyped
            self._untyped.add(high - low, int(untyped[high - 1] - (untyped[low - 1] if low else 0)))
            unknown = np.flatnonzero(~np.isin(columns.types[low:high], KNOWN_NODE_TYPES))
            if len(unknown):
                first = low + int(unknown[0])
                note_node_types(checker, int(columns.types[first]), f"node id {columns.ids[first]}", len(unknown))
            for i in findings.within(findings.bad_ids, low, high):
                checker.bounded(int(columns.ids[i]), "op_id", INT64, f"node id {columns.ids[i]}")
            for field, bad, offsets, values in (
                ("ctrl_deps", findings.bad_ctrl, columns.ctrl_offsets, columns.ctrl_values),
                ("data_deps", findings.bad_data, columns.data_offsets, columns.data_values),
            ):
                for i in findings.within(bad, low, high):
                    checker.note(
                        field,
                        f"holds an id out of bounds [{INT64.low}, {INT64.high}]",
                        values[offsets[i] : offsets[i + 1]].tolist(),
                        f"node id {columns.ids[i]}",
                    )
            collectives = findings.collectives
            if collectives is not None and collectives.regular(low, high):
                for i in findings.within(findings.metadata, low, high):
                    self._special(nodes[i], METADATA_NODE)
                self.collectives.add_span(collectives, low, high)
            else:
                types = columns.types
                for i in findings.within(findings.special, low, high):
                    self._special(nodes[i], int(types[i]))
        except TraceError as exc:
            if exc.where is None:
                exc.where = place(high - 1)
            raise

    @staticmethod
    def _column_arrays(buf: np.ndarray, c: NodeColumns) -> dict[str, pa.Array] | None:
        """The ops columns of a decoded block (ids and dependencies beyond int64 null), or None when
        its names or dependencies outgrow 32-bit Arrow offsets."""
        offsets, text = gather(buf, c.name_starts, c.name_ends)
        if offsets[-1] > _OFFSET_HIGH or len(c.ctrl_values) > _OFFSET_HIGH or len(c.data_values) > _OFFSET_HIGH:
            return None
        count = len(c.ids)
        if (c.ids > _INT64_HIGH).any():
            ids = pa.array([None if v > INT64.high else v for v in c.ids.tolist()], pa.int64())
        else:
            ids = pa.array(c.ids.astype(np.int64))
        codes, inverse = np.unique(c.types, return_inverse=True)
        labels = pa.array([TYPE_NAMES[int(code)] for code in codes], pa.string())
        return {
            "op_id": ids,
            "name": pa.StringArray.from_buffers(count, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(text)),
            "type": labels.take(pa.array(inverse.astype(np.int64))),
            "ctrl_deps": _id_lists(c.ctrl_offsets, c.ctrl_values),
            "data_deps": _id_lists(c.data_offsets, c.data_values),
            "start_us": pa.array(c.starts.astype(np.float64), mask=c.starts == 0),
            "duration_us": pa.array(c.durations.astype(np.float64)),
        }

    def _write_ops(self) -> None:
        chunks, count = self._chunks, self._chunk_rows
        if not count:
            return
        self._chunks, self._chunk_rows = [], 0
        self.sink.write("ops", ops_batch(chunks, count))

    def _special(self, node: Any, node_type: int) -> None:
        if node_type == METADATA_NODE:
            if PG_INIT_MARK in node.name:
                payload = node.inputs.values
                known = _groups_read_cleanly(payload) if len(payload) <= _CACHED_PAYLOAD_CHARS else None
                if known is not None:
                    groups = list(known)
                else:
                    groups = read_process_groups(payload, self.checker, node_where(node))
                self.meta.process_groups = merge_groups(self.meta.process_groups, groups)
            return
        row = collective_row(node, node_type, self.checker)
        if row is not None:
            self.collectives.append(finished(row, self.checker, node_where(node)))

    def finish(self) -> TraceMeta:
        """Flush what is pending and return the file's metadata."""
        self.flush()
        self._write_ops()
        self.collectives.flush()
        return self.meta


# Process-group payloads up to this size are read once per process (every rank of a job records
# the same one); the groups are shared, as ingest shares them anyway (never mutated).
_CACHED_PAYLOAD_CHARS = 1 << 16


@lru_cache(maxsize=1024)
def _groups_read_cleanly(payload: str) -> tuple[ProcessGroup, ...] | None:
    """The groups of a process-group payload that reads without a warning; None for one that warns
    (read again on its file, so its warnings name their place)."""
    meta = TraceMeta(format="chakra_et")
    groups = read_process_groups(payload, Checker(meta), None)
    return None if meta.warnings else tuple(groups)


_SPECIAL_TYPE_CODES = np.array(sorted(SPECIAL_NODE_TYPES), dtype=np.int64)
_INT64_HIGH = np.uint64(INT64.high)
_OFFSET_HIGH = (1 << 31) - 1


class Findings:
    """What the rules look at in decoded columns, found once for all their records: a running count
    of untyped records, the (sorted) records that are special (metadata among them) or hold ids
    beyond int64, and the collective rows of the communication nodes, built column-wise."""

    __slots__ = ("bad_ctrl", "bad_data", "bad_ids", "collectives", "metadata", "special", "untyped")

    def __init__(self, columns: NodeColumns, buf: np.ndarray) -> None:
        types = columns.types
        self.untyped = np.cumsum(types == 0)
        special = np.flatnonzero(np.isin(types, _SPECIAL_TYPE_CODES))
        self.special: list[int] = special.tolist()
        metadata = types[special] == METADATA_NODE
        self.metadata: list[int] = special[metadata].tolist()
        comm = special[~metadata].tolist()
        self.collectives: CollectiveColumns | None = collective_columns(buf, columns, comm) if comm else None
        self.bad_ids: list[int] = np.flatnonzero(columns.ids > _INT64_HIGH).tolist()
        self.bad_ctrl = _out_of_bounds(columns.ctrl_offsets, columns.ctrl_values)
        self.bad_data = _out_of_bounds(columns.data_offsets, columns.data_values)

    @staticmethod
    def within(records: list[int], low: int, high: int) -> list[int]:
        """The records of a sorted list that lie in [low, high)."""
        return records[bisect_left(records, low) : bisect_left(records, high)]


def ops_batch(chunks: list[dict[str, pa.Array]], count: int) -> pa.RecordBatch:
    """One `ops` batch of `count` rows from column chunks; the columns ingest fills in are null."""
    schema = arrow_schema("ops")
    arrays = []
    for field in schema:
        if field.name in chunks[0]:
            parts = [chunk[field.name] for chunk in chunks]
            arrays.append(parts[0] if len(parts) == 1 else pa.concat_arrays(parts))
        else:
            arrays.append(pa.nulls(count, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _out_of_bounds(offsets: np.ndarray, values: np.ndarray) -> list[int]:
    """The records whose id list holds a value beyond int64."""
    bad = np.flatnonzero(values > _INT64_HIGH)
    if not bad.size:
        return []
    return np.unique(np.searchsorted(offsets, bad, side="right") - 1).tolist()


def _id_lists(offsets: np.ndarray, values: np.ndarray) -> pa.Array:
    """A list<int64> column; a list holding an id beyond int64 is null (its record is noted)."""
    bad = _out_of_bounds(offsets, values)
    if not bad:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values.astype(np.int64)))
    lists: list[list[int] | None] = [values[offsets[i] : offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]
    for i in bad:
        lists[i] = None
    return pa.array(lists, pa.list_(pa.int64()))

"""Write Chakra .et files: varint-framed GlobalMetadata and Node records, as Chakra's tools do.

Used by the synthetic fleet generator and the sample-trace scripts, which write millions of nodes,
so the hot path is lean: records are framed into an in-memory list and written in large blocks, and
the length varint of small records comes from a precomputed table.

The attribute types follow what Chakra's own producers write (and the v1 ETFeeder expects):
`comm_type`/`comm_size` int64, `comm_src`/`comm_dst`/`comm_tag` int32, `is_cpu_op` bool,
`pg_name` string (the name of the process group, as PyTorch names it and Chakra's PyTorch converter
writes it: only when the op names one).

`in_split_size`/`out_split_size` (int64_list; the PyTorch ET's names for them) are tracekit's own:
the elements a rank sends to / receives from each rank of its group, in group order, as the
`collectives` columns `in_splits`/`out_splits` hold them. Chakra defines no split attribute (its
PyTorch converter writes an all-to-all's comm_size alone, and ASTRA-sim splits every all-to-all
evenly), so without them an all-to-allv becomes an even all-to-all. An empty list says the splits
are even, as an empty split list does to c10d.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, cast

import numpy as np

from tracekit.parsers import et_def_pb2
from tracekit.parsers.common.names import PG_INIT_NAME, SPLIT_ATTRS

AttributeProto = et_def_pb2.AttributeProto
Node = et_def_pb2.Node

COMM_TYPE_NUMBERS: dict[str, int] = {
    value.name: value.number for value in et_def_pb2.DESCRIPTOR.enum_types_by_name["CollectiveCommType"].values
}
NODE_TYPE_NUMBERS: dict[str, int] = {
    value.name: value.number for value in et_def_pb2.DESCRIPTOR.enum_types_by_name["NodeType"].values
}
COMP_NODE = NODE_TYPE_NUMBERS["COMP_NODE"]
COMM_SEND_NODE = NODE_TYPE_NUMBERS["COMM_SEND_NODE"]
COMM_RECV_NODE = NODE_TYPE_NUMBERS["COMM_RECV_NODE"]
COMM_COLL_NODE = NODE_TYPE_NUMBERS["COMM_COLL_NODE"]
METADATA_NODE = NODE_TYPE_NUMBERS["METADATA_NODE"]

_BUFFER_BYTES = 1 << 20


def encode_varint(value: int) -> bytes:
    """Base-128 varint of a non-negative integer (up to 2**64 - 1, i.e. at most 10 bytes)."""
    if value < 0:
        raise ValueError("varint of a negative number")
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [bytes((n,)) for n in range(0x80)]
# Lengths of nearly every record fit here: one list index instead of a loop per record.
_VARINTS = _SMALL + [bytes(((n & 0x7F) | 0x80, n >> 7)) for n in range(0x80, 1 << 14)]


def frame(payload: bytes) -> bytes:
    """One record: the varint length of `payload`, then `payload`."""
    n = len(payload)
    return (_VARINTS[n] if n < 16384 else encode_varint(n)) + payload


# ---------------------------------------------------------------------------------------------
# Builders


def attr(name: str, value: Any) -> Any:
    """An AttributeProto whose oneof variant follows the Python type of `value`.

    bool -> bool_val, int -> int64_val, float -> double_val, str -> string_val, bytes -> bytes_val,
    and lists of those to the matching *_list (an empty list is an int64_list). The `attrs` of the
    node builders below take these values, or AttributeProto messages as they are.
    """
    if isinstance(value, bool):
        return AttributeProto(name=name, bool_val=value)
    if isinstance(value, int):
        return AttributeProto(name=name, int64_val=value)
    if isinstance(value, str):
        return AttributeProto(name=name, string_val=value)
    if isinstance(value, float):
        return AttributeProto(name=name, double_val=value)
    if isinstance(value, bytes):
        return AttributeProto(name=name, bytes_val=value)
    if isinstance(value, list | tuple):
        return _list_attr(name, list(value))
    raise TypeError(f"attribute {name!r}: no Chakra attribute type for {type(value).__name__}")


def _list_attr(name: str, values: list[Any]) -> Any:
    if all(isinstance(v, bool) for v in values) and values:
        return AttributeProto(name=name, bool_list=et_def_pb2.BoolList(values=values))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return AttributeProto(name=name, int64_list=et_def_pb2.Int64List(values=values))
    if all(isinstance(v, str) for v in values):
        return AttributeProto(name=name, string_list=et_def_pb2.StringList(values=values))
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return AttributeProto(name=name, double_list=et_def_pb2.DoubleList(values=values))
    if all(isinstance(v, bytes) for v in values):
        return AttributeProto(name=name, bytes_list=et_def_pb2.BytesList(values=values))
    raise TypeError(f"attribute {name!r}: list of mixed or unsupported types")


def int64_list(name: str, values: list[int]) -> Any:
    """An int64_list attribute, without looking at each value's type (long split lists)."""
    return AttributeProto(name=name, int64_list=et_def_pb2.Int64List(values=values))


def int64_list_fields(name: str, matrix: np.ndarray) -> list[bytes]:
    """Per row of a matrix of non-negative integers, the serialized `attr` field of a Node holding it
    as an int64_list attribute `name`: bytes to append to a serialized Node (a repeated field's
    entries may come anywhere in a message). Every varint of the matrix is encoded at once with
    numpy (protobuf, row by row, costs about 20 µs a row of 128; numpy's fixed cost is less only
    from a few dozen columns on, so narrower matrices are built by protobuf)."""
    values = np.ascontiguousarray(matrix, dtype=np.int64)
    if (values < 0).any():
        raise ValueError("int64_list_fields encodes non-negative integers only")
    if values.shape[1] < _NUMPY_COLUMNS:
        return [_field(int64_list(name, row).SerializeToString()) for row in values.tolist()]
    flat, lengths = _varints(values.astype(np.uint64))
    ends = np.cumsum(lengths.sum(axis=1))
    starts = ends - lengths.sum(axis=1)
    key = frame(name.encode())
    out = []
    for begin, end in zip(starts.tolist(), ends.tolist(), strict=True):
        packed = b"\x0a" + encode_varint(end - begin) + flat[begin:end]  # Int64List.values, packed
        attribute = b"\x0a" + key + b"\x52" + encode_varint(len(packed)) + packed  # name, int64_list
        out.append(_field(attribute))
    return out


_NUMPY_COLUMNS = 48


def _field(attribute: bytes) -> bytes:
    """A serialized AttributeProto as a Node's `attr` field (number 10, length-delimited)."""
    return b"\x52" + encode_varint(len(attribute)) + attribute


def _varints(values: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The base-128 varints of every value in row-major order, and each value's length in bytes."""
    lengths = np.ones(values.shape, np.int64)
    rest = values >> np.uint64(7)
    while rest.any():
        lengths += rest > 0
        rest >>= np.uint64(7)
    width = int(lengths.max()) if values.size else 1
    narrow = values.astype(np.uint32) if width <= 4 else values  # 28 bits: cheaper shifts
    shifts = np.arange(width, dtype=narrow.dtype) * narrow.dtype.type(7)
    groups = ((narrow[..., None] >> shifts) & narrow.dtype.type(0x7F)).astype(np.uint8)
    position = np.arange(width, dtype=np.int8)
    more = lengths.astype(np.int8)[..., None]
    groups |= (position < more - 1).view(np.uint8) << np.uint8(7)
    return groups[position < more].tobytes(), lengths


def _int32(name: str, value: int) -> Any:
    return AttributeProto(name=name, int32_val=value)


def _node(
    node_id: int,
    name: str,
    node_type: int,
    attrs: list[Any],
    ctrl_deps: Iterable[int],
    data_deps: Iterable[int],
    start_us: int,
    duration_us: int,
    extra: dict[str, Any] | None,
) -> Any:
    if extra:
        attrs.extend(v if isinstance(v, AttributeProto) else attr(k, v) for k, v in extra.items())
    return Node(
        id=node_id,
        name=name,
        type=cast("et_def_pb2.NodeType", node_type),
        ctrl_deps=ctrl_deps,
        data_deps=data_deps,
        start_time_micros=start_us,
        duration_micros=duration_us,
        attr=attrs,
    )


def comm_node(
    node_id: int,
    name: str,
    comm_type: str | int,
    comm_size: int,
    pg_name: str | None = None,
    *,
    ctrl_deps: Iterable[int] = (),
    data_deps: Iterable[int] = (),
    start_us: int = 0,
    duration_us: int = 0,
    is_cpu_op: bool = False,
    in_splits: Sequence[int] | None = None,
    out_splits: Sequence[int] | None = None,
    attrs: dict[str, Any] | None = None,
) -> Any:
    """A COMM_COLL_NODE; `comm_type` is a CollectiveCommType name ("ALL_REDUCE") or number.

    `in_splits`/`out_splits`: elements sent to / received from each rank of the group (see the
    module docstring); None writes no attribute.
    """
    code = COMM_TYPE_NUMBERS[comm_type] if isinstance(comm_type, str) else comm_type
    node_attrs = [
        AttributeProto(name="is_cpu_op", bool_val=is_cpu_op),
        AttributeProto(name="comm_type", int64_val=code),
        AttributeProto(name="comm_size", int64_val=comm_size),
    ]
    if pg_name is not None:
        node_attrs.append(AttributeProto(name="pg_name", string_val=pg_name))
    for key, splits in ((SPLIT_ATTRS[0], in_splits), (SPLIT_ATTRS[1], out_splits)):
        if splits is not None:
            node_attrs.append(AttributeProto(name=key, int64_list=et_def_pb2.Int64List(values=splits)))
    return _node(node_id, name, COMM_COLL_NODE, node_attrs, ctrl_deps, data_deps, start_us, duration_us, attrs)


@dataclass(frozen=True)
class _Links:
    """What every node may carry besides its kind: dependencies, times, extra attributes."""

    ctrl_deps: Iterable[int] = ()
    data_deps: Iterable[int] = ()
    start_us: int = 0
    duration_us: int = 0
    is_cpu_op: bool = False
    attrs: dict[str, Any] | None = None


def _p2p_node(
    node_type: int,
    node_id: int,
    name: str,
    comm_size: int,
    src: int | None,
    dst: int | None,
    tag: int | None,
    pg_name: str | None,
    links: _Links,
) -> Any:
    node_attrs = [
        AttributeProto(name="is_cpu_op", bool_val=links.is_cpu_op),
        AttributeProto(name="comm_size", int64_val=comm_size),
    ]
    for key, value in (("comm_src", src), ("comm_dst", dst), ("comm_tag", tag)):
        if value is not None:
            node_attrs.append(_int32(key, value))
    if pg_name is not None:
        node_attrs.append(AttributeProto(name="pg_name", string_val=pg_name))
    return _node(node_id, name, node_type, node_attrs, links.ctrl_deps, links.data_deps, links.start_us,
                 links.duration_us, links.attrs)  # fmt: skip


def send_node(
    node_id: int,
    name: str,
    comm_size: int,
    peer: int,
    *,
    rank: int | None = None,
    tag: int | None = 0,
    pg_name: str | None = None,
    ctrl_deps: Iterable[int] = (),
    data_deps: Iterable[int] = (),
    start_us: int = 0,
    duration_us: int = 0,
    is_cpu_op: bool = False,
    attrs: dict[str, Any] | None = None,
) -> Any:
    """A COMM_SEND_NODE to global rank `peer` (comm_dst); `rank` is this file's rank (comm_src)."""
    links = _Links(ctrl_deps, data_deps, start_us, duration_us, is_cpu_op, attrs)
    return _p2p_node(COMM_SEND_NODE, node_id, name, comm_size, rank, peer, tag, pg_name, links)


def recv_node(
    node_id: int,
    name: str,
    comm_size: int,
    peer: int,
    *,
    rank: int | None = None,
    tag: int | None = 0,
    pg_name: str | None = None,
    ctrl_deps: Iterable[int] = (),
    data_deps: Iterable[int] = (),
    start_us: int = 0,
    duration_us: int = 0,
    is_cpu_op: bool = False,
    attrs: dict[str, Any] | None = None,
) -> Any:
    """A COMM_RECV_NODE from global rank `peer` (comm_src); `rank` is this file's rank (comm_dst)."""
    links = _Links(ctrl_deps, data_deps, start_us, duration_us, is_cpu_op, attrs)
    return _p2p_node(COMM_RECV_NODE, node_id, name, comm_size, peer, rank, tag, pg_name, links)


def comp_node(
    node_id: int,
    name: str,
    duration_us: int = 0,
    *,
    ctrl_deps: Iterable[int] = (),
    data_deps: Iterable[int] = (),
    start_us: int = 0,
    num_ops: int | None = None,
    is_cpu_op: bool = False,
    attrs: dict[str, Any] | None = None,
) -> Any:
    """A COMP_NODE (compute), optionally with `num_ops` as the generator writes it."""
    node_attrs = [AttributeProto(name="is_cpu_op", bool_val=is_cpu_op)]
    if num_ops is not None:
        node_attrs.append(AttributeProto(name="num_ops", int64_val=num_ops))
    return _node(node_id, name, COMP_NODE, node_attrs, ctrl_deps, data_deps, start_us, duration_us, attrs)


def pg_init_node(node_id: int, groups: list[dict[str, Any]]) -> Any:
    """The METADATA_NODE the PyTorch converter writes for `## process_group:init ##`.

    `inputs.values` is Python's str() of a one-element list holding the JSON of the groups.
    """
    values = str([json.dumps(groups)])
    return Node(
        id=node_id,
        name=PG_INIT_NAME,
        type=cast("et_def_pb2.NodeType", METADATA_NODE),
        inputs=et_def_pb2.IOInfo(values=values),
    )


# ---------------------------------------------------------------------------------------------
# Writer


class EtWriter:
    """Writes one .et stream: `write_metadata` once first, then `write_node` per node.

    `target` is a path (gzip-compressed when it ends in .gz, as Chakra's C++ writer does) or an open
    binary file, which is left open on close.
    """

    def __init__(self, target: str | Path | IO[bytes], *, compresslevel: int = 6) -> None:
        self._owns = isinstance(target, str | Path)
        if self._owns:
            path = Path(target)  # type: ignore[arg-type]
            if path.name.endswith(".gz"):
                self._file: IO[bytes] | gzip.GzipFile = gzip.open(path, "wb", compresslevel=compresslevel)
            else:
                self._file = open(path, "wb")
        else:
            self._file = target  # type: ignore[assignment]
        self._parts: list[bytes] = []
        self._pending = 0
        self.records = 0

    def write_metadata(self, version: str = "0.0.4", attrs: dict[str, Any] | None = None) -> None:
        """The GlobalMetadata record (must come first)."""
        message = et_def_pb2.GlobalMetadata(version=version, attr=[attr(k, v) for k, v in (attrs or {}).items()])
        self.write_raw(message.SerializeToString())

    def write_node(self, node: Any) -> None:
        """One Node message."""
        self.write_raw(node.SerializeToString())

    def write_nodes(self, nodes: Iterable[Any]) -> None:
        for node in nodes:
            self.write_raw(node.SerializeToString())

    def write_raw(self, payload: bytes) -> None:
        """One record of already-serialized bytes (the framing is added here)."""
        n = len(payload)
        self._parts.append(_VARINTS[n] if n < 16384 else encode_varint(n))
        self._parts.append(payload)
        self.records += 1
        self._pending += n
        if self._pending >= _BUFFER_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._parts:
            self._file.write(b"".join(self._parts))
            self._parts = []
            self._pending = 0

    def close(self) -> None:
        self.flush()
        if self._owns:
            self._file.close()
        else:
            self._file.flush()

    def __enter__(self) -> EtWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


__all__ = [
    "EtWriter",
    "attr",
    "comm_node",
    "comp_node",
    "encode_varint",
    "frame",
    "int64_list",
    "int64_list_fields",
    "pg_init_node",
    "recv_node",
    "send_node",
]

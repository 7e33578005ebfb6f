"""The Chakra rulebook: node types, attribute names, and how a node becomes `ops` and `collectives` rows.

Every Chakra reader takes these rules from here: the .et reader's record path and its column-wise
path (tracekit.parsers.chakra.rows, .collectives), and the chakra_jsonizer reader, so that one
trace gives identical rows in both formats and a fix is made once.

* `ops`: one row per Node. proto3 cannot tell an unset uint64 from 0. `start_us` is null when
  `start_time_micros` is 0, because the PyTorch converter never sets start times and a real trace
  does not start every op at clock zero. `duration_us` keeps 0 as 0.0: simulators replay
  `duration_micros` as written, and a zero-duration node (the converter forces `Optimizer.step` to
  0, synthetic collectives carry none) is still what the trace says. Unknown NodeType integers
  (forks disagree: mlcommons/chakra PR #216 has STORAGE_NODE=8, BATCH_NODE=9, CHECKPOINT_NODE=10,
  Keysight/chakra STORAGE_NODE=8, DATA_OP_NODE=9) are kept as "NODE_TYPE_9" (`TYPE_NAMES`), with a
  warning naming the first such node (`note_node_types`); never a failure.
* `collectives`: COMM_COLL_NODE carrying a `comm_type` attribute, COMM_SEND_NODE ("SEND") and
  COMM_RECV_NODE ("RECV") (`gives_row`, `comm_type`). A COMM_COLL_NODE without `comm_type` is an
  old converter's CPU-side c10d op (is_cpu_op=true), not a collective: it gets an `ops` row only.
  A `comm_type` code outside CollectiveCommType 0-9 (astra-sim/chakra's INVALID_COMM_TYPE = 99, a
  fork's new collective) still gives a row, its comm_type kept as the integer, "COMM_TYPE_99", so
  that neither its bytes nor what it was are lost, with a warning naming the first such node; the
  replay skips such rows with a note naming the type. The `comm_type` attribute on SEND/RECV is
  ignored (the MSCCL converter writes NodeType numbers there). The peer of a send is its
  `comm_dst`, of a recv its `comm_src` (`PEER_ATTRS`). Integer attributes are read from whichever
  integer oneof variant the producer used (`attr_int`); the last attribute of a name wins.
* Element type and split sizes, where a comm node carries them as attributes named as PyTorch ET's
  comm attrs (Chakra's converter writes none; tracekit's generator does): `dtype` (a c10
  ScalarType name) gives `in_elems` = comm_size / its size (null when that does not divide) and, with
  `out_msg_nelems`, `out_elems` and `out_bytes`; `in_split_size` and `out_split_size` (an integer
  list, or its text) are the all-to-allv's per-peer splits, read by the rulebook's split rules
  (tracekit.parsers.common.sizes), and tell `is_uneven`, which is null on nodes without them.
* METADATA_NODE named `process_group:init`: its payload becomes `TraceMeta.process_groups`
  (tracekit.parsers.common.groups: a bad entry is skipped with a warning).
* Values follow the rulebook's policy (tracekit.parsers.common.values): a node id or dependency
  beyond int64 (they are uint64 in the proto), a comm_size beyond [0, 2**62], a peer beyond
  [0, 2**20) is null, with one warning per field on the file.

`collective_row` applies these rules to one decoded node: it is the reference. The column-wise
reader (tracekit.parsers.chakra.collectives) applies the same tables to a whole block of nodes and
leaves to `collective_row` every node whose values the value rules would null or note.
"""

from __future__ import annotations

from typing import Any

from tracekit.parsers import et_def_pb2
from tracekit.parsers.common.names import CHAKRA_COMM_TYPES, elements, normalize_dtype, times
from tracekit.parsers.common.rows import CollectiveRow
from tracekit.parsers.common.sizes import is_uneven, split_sizes
from tracekit.parsers.common.values import Checker

# ---------------------------------------------------------------------------------------------
# Node types

NODE_TYPE_NAMES: dict[int, str] = {
    value.number: value.name for value in et_def_pb2.DESCRIPTOR.enum_types_by_name["NodeType"].values
}
# NodeType names of schema extensions not on Chakra main: PR #216 ("Add storage operations") and the
# Keysight/chakra fork (schema/protobuf/et_def.proto @0e8de7ad), which gives 9 another name.
EXTENSION_NODE_TYPES = {"STORAGE_NODE": 8, "BATCH_NODE": 9, "CHECKPOINT_NODE": 10, "DATA_OP_NODE": 9}
METADATA_NODE: int = et_def_pb2.METADATA_NODE
COMM_SEND_NODE: int = et_def_pb2.COMM_SEND_NODE
COMM_RECV_NODE: int = et_def_pb2.COMM_RECV_NODE
COMM_COLL_NODE: int = et_def_pb2.COMM_COLL_NODE
COMM_NODE_TYPES = frozenset((COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE))
# The nodes read beyond their ops row: communication nodes (a collectives row) and metadata nodes
# (process groups).
SPECIAL_NODE_TYPES = frozenset((METADATA_NODE, *COMM_NODE_TYPES))


class _TypeNames(dict[int, str]):
    """NodeType names; unknown integers (schema extensions) are kept as NODE_TYPE_<n>."""

    def __missing__(self, key: int) -> str:
        return f"NODE_TYPE_{key}"


TYPE_NAMES = _TypeNames(NODE_TYPE_NAMES)
KNOWN_NODE_TYPES = tuple(sorted(NODE_TYPE_NAMES))


def note_node_types(checker: Checker, node_type: int, where: str, count: int = 1) -> None:
    """Warn of `count` nodes of NodeTypes Chakra 0.0.4 does not name, the first `node_type` at `where`."""
    checker.note(
        "NodeType",
        "is not one of Chakra 0.0.4 (forks: 8 STORAGE_NODE, 9 BATCH_NODE or DATA_OP_NODE, 10 CHECKPOINT_NODE)",
        node_type,
        where,
        f"kept as {TYPE_NAMES[node_type]}",
        count,
    )


# ---------------------------------------------------------------------------------------------
# Attributes

# The attributes a communication node's row is read from.
COMM_TYPE = "comm_type"  # a COMM_COLL_NODE's CollectiveCommType code
COMM_SRC = "comm_src"  # the peer of a recv
COMM_DST = "comm_dst"  # the peer of a send
COMM_SIZE = "comm_size"  # in_bytes
RF_ID = "rf_id"
PG_NAME = "pg_name"  # text; STG's legacy integer group ids as their decimal text
DTYPE = "dtype"  # a c10 ScalarType name
OUT_ELEMS = "out_msg_nelems"
IN_SPLITS = "in_split_size"
OUT_SPLITS = "out_split_size"
ROW_ATTRS = (COMM_TYPE, COMM_SRC, COMM_DST, COMM_SIZE, RF_ID, PG_NAME, DTYPE, OUT_ELEMS, IN_SPLITS, OUT_SPLITS)
# The split-size attributes, by the row field they fill (the name split_sizes gives in warnings).
SPLIT_ATTRS = {"in_splits": IN_SPLITS, "out_splits": OUT_SPLITS}

# The comm type of a send and of a recv, whatever their comm_type attribute says.
NODE_COMM_TYPES = {COMM_SEND_NODE: "SEND", COMM_RECV_NODE: "RECV"}
# The attribute naming the other rank of a send (its destination) and of a recv (its source).
PEER_ATTRS = {COMM_SEND_NODE: COMM_DST, COMM_RECV_NODE: COMM_SRC}
SOURCE = "chakra_node"  # the rows' `source`

# The members of AttributeProto's `value` oneof an integer is read from (bool: is_cpu_op), and
# those of integer lists.
INT_VARIANTS = frozenset(
    (
        "int32_val",
        "int64_val",
        "uint32_val",
        "uint64_val",
        "sint32_val",
        "sint64_val",
        "fixed32_val",
        "fixed64_val",
        "sfixed32_val",
        "sfixed64_val",
        "bool_val",
    )
)
FLOAT_VARIANTS = frozenset(("double_val", "float_val"))
INT_LIST_VARIANTS = frozenset(kind.replace("_val", "_list") for kind in INT_VARIANTS if kind != "bool_val")


def attr_int(attr: Any) -> int | None:
    """An attribute's value as an int, whichever integer (or bool) oneof variant carries it.

    Producers disagree on types (comm_size as int64 or uint64, comm_src as int32 or int64,
    is_cpu_op as bool or int32); integral floats are accepted too. None for anything else.
    """
    kind = attr.WhichOneof("value")
    if kind in INT_VARIANTS:
        return int(getattr(attr, kind))
    if kind in FLOAT_VARIANTS:
        value = getattr(attr, kind)
        return int(value) if value == value and value.is_integer() else None
    return None


def attr_str(attr: Any) -> str | None:
    """An attribute's value as a string (string_val, or bytes_val as UTF-8)."""
    kind = attr.WhichOneof("value")
    if kind == "string_val":
        return attr.string_val
    if kind == "bytes_val":
        return attr.bytes_val.decode("utf-8", "replace")
    return None


# ---------------------------------------------------------------------------------------------
# Communication nodes


def gives_row(node_type: int, code: int | None) -> bool:
    """Whether a communication node is a collective: a COMM_COLL_NODE only with a comm_type code."""
    return node_type != COMM_COLL_NODE or code is not None


def comm_type(node_type: int, code: int | None) -> str | None:
    """The comm type of a communication node that gives a row: a send's or recv's by its node type,
    a collective's by its comm_type code (None for a code outside CollectiveCommType)."""
    fixed = NODE_COMM_TYPES.get(node_type)
    if fixed is not None:
        return fixed
    if code is None:
        return None
    return CHAKRA_COMM_TYPES.get(code) or unknown_comm_type(code)


def unknown_comm_type(code: int) -> str:
    """The comm_type of a CollectiveCommType code Chakra 0.0.4 does not name: the integer, kept."""
    return f"COMM_TYPE_{code}"


def node_where(node: Any) -> str:
    """The place of a node in warnings."""
    return f"node id {node.id}"


def collective_row(node: Any, node_type: int, checker: Checker) -> CollectiveRow | None:
    """The `collectives` row of a communication node; None for a COMM_COLL_NODE without comm_type."""
    attrs = {attr.name: attr for attr in node.attr}
    code = _int_attr(attrs, COMM_TYPE) if node_type == COMM_COLL_NODE else None
    if not gives_row(node_type, code):
        return None  # an old converter's CPU-side c10d node: not a collective
    kind = comm_type(node_type, code)
    peer_attr = PEER_ATTRS.get(node_type)
    start = node.start_time_micros
    dtype = normalize_dtype(attr_str(attrs[DTYPE])) if DTYPE in attrs else None
    in_bytes = _int_attr(attrs, COMM_SIZE)
    out_elems = _int_attr(attrs, OUT_ELEMS)
    where = node_where(node)
    if code is not None and code not in CHAKRA_COMM_TYPES:
        checker.note(COMM_TYPE, "is not a CollectiveCommType of Chakra 0.0.4 (0-9)", code, where, f"kept as {kind}")
    splits = {field: _splits(attrs, name, field, checker, where) for field, name in SPLIT_ATTRS.items()}
    split = any(name in attrs for name in SPLIT_ATTRS.values())
    in_splits, out_splits = splits["in_splits"], splits["out_splits"]
    return CollectiveRow(
        op_id=node.id,
        op_name=node.name,
        comm_type=kind,
        is_uneven=is_uneven(node.name, kind, in_splits, out_splits, known=True) if split else None,
        pg_name=_pg_name(attrs.get(PG_NAME)),
        peer=_int_attr(attrs, peer_attr) if peer_attr is not None else None,
        dtype=dtype,
        in_elems=elements(in_bytes, dtype),
        out_elems=out_elems,
        in_bytes=in_bytes,
        out_bytes=times(out_elems, dtype),
        in_splits=in_splits or None,  # an empty list says the splits are even: no list, is_uneven false
        out_splits=out_splits or None,
        start_us=float(start) if start else None,
        duration_us=float(node.duration_micros),
        rf_id=_int_attr(attrs, RF_ID),
        source=SOURCE,
    )


def _splits(attrs: dict[str, Any], name: str, field: str, checker: Checker, where: str) -> list[int] | None:
    """A split-size attribute: any integer list member, or its text (split_sizes reads both)."""
    attr = attrs.get(name)
    if attr is None:
        return None
    kind = attr.WhichOneof("value")
    value = list(getattr(attr, kind).values) if kind in INT_LIST_VARIANTS else attr_str(attr)
    return split_sizes(value, field, checker, where) if value is not None else None


def _pg_name(attr: Any) -> str | None:
    """pg_name is a string; STG's legacy integer group ids are accepted as their decimal text."""
    if attr is None:
        return None
    text = attr_str(attr)
    if text is not None:
        return text
    number = attr_int(attr)
    return str(number) if number is not None else None


def _int_attr(attrs: dict[str, Any], name: str) -> int | None:
    attr = attrs.get(name)
    return attr_int(attr) if attr is not None else None

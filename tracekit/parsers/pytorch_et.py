"""PyTorch Execution Trace JSON (`torch.profiler.ExecutionTraceObserver`), every schema version.

One file is one rank's host-side op tree: `{"schema", "pid", "time", "start_ts", "nodes": [...],
"finish_ts"}`. Two node layouts exist and are told apart per node, not by the version string, so
unknown future versions parse with the nearest layout instead of being rejected:

* 1.0.1: flat keys `parent`, `rf_id`, `inputs`/`input_types`, `outputs`/`output_types`;
* 1.0.2-chakra.0.0.4 and later (1.0.3, 1.0.4, 1.1.0, 1.1.1, any `-chakra.x.y.z`): `ctrl_deps`
  (a single parent id), `inputs`/`outputs` objects of parallel `values`/`types`(/`shapes`/`strides`)
  arrays, `attrs` as a list of `{name, type, value}`; ET+ files written by chakra_trace_link add
  `ts`/`inclusive_dur`/`exclusive_dur` on CPU nodes and one node per GPU kernel (with `cat`).

Collectives. PyTorch records each c10d collective as a chain
`c10d::allreduce_` -> `record_param_comms` -> `nccl:all_reduce` (-> kernel launch / ET+ kernel node).
Each logical collective becomes exactly one row, anchored on the outermost `record_param_comms`
whose collective name is a communication op (`wait`, `coalesced` are not).

Without `record_param_comms` (gloo: torch 2.13 emits it for NCCL/XCCL only; any other backend) a
collective is a pair: the `c10d::` dispatcher op and the backend's work annotation (`gloo:all_reduce`).
Their ctrl_deps do not link them reliably (the annotation hangs under the c10d op, under its parent,
or under an unrelated earlier node; a c10d op may even hang under an earlier gloo node), so they are
paired by `rf_id`: the work's record function opens right after its dispatcher's, and an annotation
belongs to the not yet paired c10d op with the greatest smaller rf_id, on the same `tid`, of a kind
the work can run as (equal comm_type, or a `gloo:all_reduce` for a reduce-scatter or barrier: gloo
has no reduce-scatter of one tensor). Without rf_ids: the nearest enclosing c10d op, else the nearest
earlier one in the file. The pair is ONE row read from the c10d op (source 'c10d'): its id, rf_id and
name (`c10d::_reduce_scatter_base_`), its comm_type (so a reduce-scatter stays REDUCE_SCATTER), sizes
from its tensor arguments by `op_schema` name (output/input order), all-to-all splits from its
split-size arguments, peer from the dst/src argument. The ProcessGroup argument is an opaque
`<Object>`, so pg_name and group_size stay null; a peer is mapped through a group's rank list only
when the file lists a single group, else the group-local value is taken as global (`peer` inferred).
An annotation that pairs with nothing is a row of its own (source 'annotation'), and so is a c10d op
with no annotation (source 'c10d'), unless an unpaired annotation or a paired c10d op hangs under it.
`record_param_comms` inputs are read by type, since their positions moved between versions
(research note §4, layouts A-D):

    A  [tensors?, seq:Int, pg_ptr:Int, rank:Int, coll:String, in_split, out_split]
    B  A + [world_size:Int]
    C  [tensors?, seq:Int, (pg_name, pg_desc):Tuple, rank:Int, coll:String, in_split, out_split,
        global_rank_start:Int, global_rank_stride:Int, world_size:Int]
    D  C with seq as a [seq, isP2P] pair

From schema 1.1.0 the same facts are also in attrs (`collective_name`, `dtype`, `in_msg_nelems`,
`out_msg_nelems`, `in_split_size`, `out_split_size`, `pg_name`, `pg_desc`, `pg_size`,
`global_rank_start`, `global_rank_stride`); attrs win when present.

The file has no rank: `TraceMeta.rank` stays None and `rank_hint` carries the `rank` argument of a
default-group collective whose `rank` is the caller's own (not send/recv, whose argument is the peer,
nor broadcast/reduce/gather/scatter, whose argument is the root). For send/recv that argument is
the group-local peer; it is mapped to a global rank through the group's rank list (from the
`## process_group:init ##` node) or `global_rank_start + k * global_rank_stride`; when the group is
the whole world (empty rank list) or unknown, the identity is assumed and `peer` is marked inferred.

Times. Plain ET files carry none (start/duration stay null). ET+ files carry `ts`/`inclusive_dur`
(microseconds, profiler clock) on CPU nodes; a collective row takes the span of the NCCL kernel
nodes under it when there are any (device time), else its anchor's host times.
`TraceMeta.started_at` is the top-level `time`, the writer's local wall clock ("%Y-%m-%d %X") with
no zone in the string: it is labelled UTC as written, so it is off by the host's UTC offset.
"""

from __future__ import annotations

import bisect
import gc
import json
import re
from datetime import UTC, datetime
from typing import Any, TypeGuard

import msgspec

from tracekit import comms
from tracekit.parsers.base import ProcessGroup, TableBuffer, TraceError, TraceMeta

FORMAT = "pytorch_et"

RPC_NAME = "record_param_comms"
PG_INIT_MARK = "process_group:init"
_ANNOTATION_PREFIXES = ("nccl:", "gloo:", "mpi:", "ucc:", "xccl:")
_C10D_PREFIX = "c10d::"
# Collectives whose `rank` argument is not the caller's own rank.
_PEER_RANK_TYPES = ("SEND", "RECV")
_ROOT_RANK_TYPES = ("BROADCAST", "REDUCE", "GATHER", "SCATTER")
# Collectives whose per-peer sizes may differ; for others "no splits" means even.
_SPLITTABLE_TYPES = ("ALL_TO_ALL", "ALL_GATHER", "REDUCE_SCATTER", "GATHER", "SCATTER")
_NODE_TYPE = {"SEND": "COMM_SEND_NODE", "RECV": "COMM_RECV_NODE"}
_MALFORMED_BYTE = re.compile(r"\(byte (\d+)\)")
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"  # ExecutionTraceObserver's "%Y-%m-%d %X" in the C locale

_KIND_RPC, _KIND_ANNOTATION, _KIND_C10D = 1, 2, 3
# What reading a wrongly typed value raises; turned into a TraceError naming the node.
_BAD_CONTENT = (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError)


# --------------------------------------------------------------------------------------------- decode


def _line_column(data: bytes, offset: int) -> str:
    offset = max(0, min(offset, len(data)))
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return f"line {line} column {column} (byte offset {offset})"


def _decode(data: bytes) -> Any:
    try:
        return msgspec.json.decode(data)
    except RecursionError:
        raise TraceError("JSON nested too deeply", None) from None
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


# ------------------------------------------------------------------------------------- node access


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


_INT64 = 1 << 63
_INT32 = 1 << 31
_INT32_COLUMNS = ("group_size", "peer")


def _check_ranges(row: dict[str, Any], where: str) -> None:
    """Integers that do not fit the table's column types are a bad file, not an Arrow crash."""
    for key, value in row.items():
        if _is_int(value):
            bound = _INT32 if key in _INT32_COLUMNS else _INT64
            if not -bound <= value < bound:
                raise TraceError(f"{key} = {value} is out of range", where)
        elif isinstance(value, list):
            for item in value:
                if _is_int(item) and not -_INT64 <= item < _INT64:
                    raise TraceError(f"{key} holds {item}, out of range", where)


class _Node:
    """One ET node, normalized over the 1.0.1 flat and the 1.0.2+ nested layouts."""

    __slots__ = ("raw", "id", "name", "parent", "index")

    def __init__(self, raw: dict[str, Any], index: int) -> None:
        self.raw = raw
        self.index = index
        node_id = raw.get("id")
        if not _is_int(node_id) or not -_INT64 <= node_id < _INT64:
            raise TraceError(f"node has no integer id (id = {node_id!r})", f"nodes[{index}]")
        self.id: int = node_id
        name = raw.get("name", "")
        if not isinstance(name, str):
            raise TraceError(f"node {node_id}: name is {type(name).__name__}, not a string", self.where)
        self.name: str = name
        parent = raw.get("ctrl_deps", raw.get("parent"))
        if isinstance(parent, list):  # tolerated: a list of parents; the first one is the tree parent
            parent = parent[0] if parent else None
        if parent is not None and (not _is_int(parent) or not -_INT64 <= parent < _INT64):
            raise TraceError(f"node {node_id}: ctrl_deps/parent is {parent!r}, not an integer id", self.where)
        self.parent: int | None = None if parent == node_id else parent

    @property
    def where(self) -> str:
        return f"node id {self.id} (nodes[{self.index}])"

    def _pairs(self, side: str) -> list[tuple[Any, str]]:
        raw = self.raw
        block = raw.get(side)
        if block is None:
            return []
        if isinstance(block, dict):  # >= 1.0.2
            values = block.get("values") or []
            types = block.get("types") or []
        else:  # 1.0.1 flat keys
            values = block
            types = raw.get("input_types" if side == "inputs" else "output_types") or []
        if not isinstance(values, list) or not isinstance(types, list):
            raise TypeError(f"{side} values/types are not arrays")
        if len(types) != len(values):
            raise ValueError(f"{side}: {len(values)} values but {len(types)} types")
        for t in types:
            if not isinstance(t, str):
                raise TypeError(f"{side} type {t!r} is not a string")
        return list(zip(values, types, strict=True))

    def inputs(self) -> list[tuple[Any, str]]:
        return self._pairs("inputs")

    def outputs(self) -> list[tuple[Any, str]]:
        return self._pairs("outputs")

    def attrs(self) -> dict[str, Any]:
        raw = self.raw
        attrs = raw.get("attrs")
        if attrs is None:  # 1.0.1: the standard attrs are top-level keys
            return {
                k: raw[k] for k in ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema") if k in raw
            }
        if not isinstance(attrs, list):
            raise TypeError("attrs is not an array")
        out: dict[str, Any] = {}
        for attr in attrs:
            if not isinstance(attr, dict) or not isinstance(attr.get("name"), str):
                raise TypeError(f"attr {attr!r} has no name")
            out[attr["name"]] = attr.get("value")
        return out

    def time(self) -> tuple[float | None, float | None]:
        raw = self.raw
        start = raw.get("ts")
        duration = raw.get("inclusive_dur", raw.get("dur"))
        return _number(start, "ts"), _number(duration, "inclusive_dur")


def _number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} is {value!r}, not a number")
    return float(value)


def _kind(name: str) -> int | None:
    if name == RPC_NAME:
        return _KIND_RPC
    if name.startswith(_ANNOTATION_PREFIXES):
        return _KIND_ANNOTATION
    if name.startswith(_C10D_PREFIX):
        return _KIND_C10D
    return None


# ---------------------------------------------------------------------------------- value decoding


def _is_tensor_type(type_name: str) -> bool:
    return "Tensor" in type_name


def _tensors(value: Any, type_name: str) -> list[tuple[int, int, str | None]]:
    """(numel, itemsize, dtype) of every tensor in an input of type `type_name` (lists nested)."""
    out: list[tuple[int, int, str | None]] = []
    dtype = comms.normalize_dtype(type_name) if type_name.startswith("Tensor(") else None
    _collect_tensors(value, dtype, _tensor_dtypes(type_name), out)
    return out


def _tensor_dtypes(type_name: str) -> list[str | None]:
    return [comms.normalize_dtype(t) for t in re.findall(r"Tensor\([^)]*\)", type_name)]


def _collect_tensors(value: Any, dtype: str | None, dtypes: list[str | None], out: list) -> None:
    if isinstance(value, list) and len(value) >= 5 and _is_int(value[0]) and _is_int(value[3]) and _is_int(value[4]):
        # [tensor_id, storage_id, offset, numel, itemsize, device]
        if value[3] < 0 or value[4] < 0:
            raise ValueError(f"tensor {value!r} has a negative numel or itemsize")
        index = len(out)
        use = dtype or (dtypes[index] if index < len(dtypes) else (dtypes[0] if len(set(dtypes)) == 1 else None))
        out.append((value[3], value[4], use))
        return
    if isinstance(value, list):
        for item in value:
            _collect_tensors(item, dtype, dtypes, out)


def _int_list(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(_is_int(v) for v in value):
        raise TypeError(f"{what} is {value!r}, not a list of integers")
    return value


def _split_attr(value: Any, what: str) -> list[int] | None:
    """`in_split_size`/`out_split_size`: a string holding a list (or, tolerated, the list itself)."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{what} {text[:60]!r} is not a list") from exc
    return list(_int_list(value, what))


def _attr_int(attrs: dict[str, Any], key: str) -> int | None:
    value = attrs.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    if not _is_int(value):
        raise TypeError(f"attr {key} is {value!r}, not an integer")
    return value


def _attr_str(attrs: dict[str, Any], key: str) -> str | None:
    value = attrs.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"attr {key} is {value!r}, not a string")
    return value


class _Sizes:
    """Elements, bytes and dtype of a list of tensors."""

    def __init__(self, tensors: list[tuple[int, int, str | None]]) -> None:
        self.present = bool(tensors)
        self.elems = sum(t[0] for t in tensors) if tensors else None
        self.bytes = sum(t[0] * t[1] for t in tensors) if tensors else None
        dtypes = {t[2] for t in tensors if t[2]}
        self.dtype = dtypes.pop() if len(dtypes) == 1 else None


def _sizes_of(pairs: list[tuple[Any, str]]) -> _Sizes:
    tensors: list[tuple[int, int, str | None]] = []
    for value, type_name in pairs:
        if _is_tensor_type(type_name):
            tensors.extend(_tensors(value, type_name))
    return _Sizes(tensors)


# --------------------------------------------------------------------------------- process groups


def _process_groups(node: _Node) -> list[ProcessGroup]:
    values = [v for v, _ in node.inputs()]
    if not values:
        return []
    payload = values[0]
    if isinstance(payload, str):
        text = payload.strip()
        try:
            payload = json.loads(text)
        except ValueError:
            # Chakra's converter wrote the Python str() of the input list: ['[{...}]']
            try:
                payload = json.loads(json.loads(text[1:-1].replace("'", '"')))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"process-group payload is not JSON: {text[:80]!r}") from exc
    if isinstance(payload, dict):
        payload = [payload]
    if not isinstance(payload, list):
        raise TypeError(f"process-group payload is {type(payload).__name__}, not a list")
    groups = []
    for entry in payload:
        if not isinstance(entry, dict):
            raise TypeError(f"process-group entry {entry!r} is not an object")
        name = entry.get("pg_name", entry.get("pg_id"))
        if name is None:
            raise KeyError("process-group entry has neither pg_name nor pg_id")
        ranks_raw = entry.get("ranks") or []
        if isinstance(ranks_raw, dict):  # oldest generation: {global rank: group rank}
            ranks = [int(k) for k, _ in sorted(ranks_raw.items(), key=lambda kv: int(kv[1]))]
        else:
            ranks = [int(r) for r in _int_list(ranks_raw, "ranks")]
        size = entry.get("group_size")
        if size is not None and not _is_int(size):
            raise TypeError(f"group_size {size!r} is not an integer")
        if size is None and ranks:
            size = len(ranks)
        desc = entry.get("pg_desc")
        groups.append(
            ProcessGroup(
                pg_name=str(name),
                pg_desc=str(desc) if desc is not None else None,
                backend=comms.backend_name(entry.get("backend_config")),
                group_size=size,
                ranks=ranks,
            )
        )
    return groups


# -------------------------------------------------------------------------------- collective rows


class _RpcArgs:
    """record_param_comms positional inputs, read by type (layouts A-D)."""

    def __init__(self, pairs: list[tuple[Any, str]]) -> None:
        self.coll_name: str | None = None
        self.seq: int | None = None
        self.rank: int | None = None
        self.pg_name: str | None = None
        self.pg_desc: str | None = None
        self.pg_ptr: int | None = None
        self.in_split: list[int] | None = None
        self.out_split: list[int] | None = None
        self.rank_start: int | None = None
        self.rank_stride: int | None = None
        self.world_size: int | None = None
        before: list[int] = []
        after: list[int] = []
        splits: list[list[int]] = []
        seq_pair = False
        for value, type_name in pairs:
            if _is_tensor_type(type_name):
                continue
            if type_name == "String":
                if self.coll_name is None:
                    if not isinstance(value, str):
                        raise TypeError(f"String input {value!r} is not a string")
                    self.coll_name = value
                continue
            if type_name == "Int":
                if not _is_int(value):
                    raise TypeError(f"Int input {value!r} is not an integer")
                (after if self.coll_name is not None else before).append(value)
                continue
            if type_name.startswith("Tuple[String"):
                if not isinstance(value, list) or not value:
                    raise TypeError(f"{type_name} input {value!r} is not a tuple")
                self.pg_name = str(value[0]) if value[0] not in (None, "") else None
                if len(value) > 1 and value[1] not in (None, ""):
                    self.pg_desc = str(value[1])
                continue
            if type_name.startswith(("GenericList", "Tuple[Int")):
                if self.coll_name is None:
                    # Layout D: seq recorded as [seq, isP2P]
                    if isinstance(value, list) and value and _is_int(value[0]) and not before:
                        self.seq = value[0]
                        seq_pair = True
                    continue
                splits.append(list(_int_list(value, f"split input {type_name}")))
        if seq_pair:
            if before:
                self.rank = before[-1]
                if len(before) >= 2:
                    self.pg_ptr = before[0]
        elif len(before) >= 2:
            self.seq = before[0]
            self.rank = before[-1]
            if len(before) >= 3:
                self.pg_ptr = before[1]
        if len(splits) >= 1:
            self.in_split = splits[0]
        if len(splits) >= 2:
            self.out_split = splits[1]
        if after:
            self.world_size = after[-1]
        if len(after) >= 3:
            self.rank_start, self.rank_stride = after[-3], after[-2]


def _uneven(
    name: str | None, comm_type: str, in_splits: list[int] | None, out_splits: list[int] | None, known: bool
) -> bool | None:
    if comms.is_uneven_name(name):
        return True
    for splits in (in_splits, out_splits):
        if splits and len(set(splits)) > 1:
            return True
    if known or in_splits or out_splits or comm_type not in _SPLITTABLE_TYPES:
        return False
    return None


class _Groups:
    def __init__(self, groups: list[ProcessGroup]) -> None:
        self.by_name = {g.pg_name: g for g in groups}
        self.groups = groups

    def get(self, name: str | None) -> ProcessGroup | None:
        if name is not None:
            return self.by_name.get(name)
        if len(self.groups) == 1:
            return self.groups[0]
        return None


def _global_peer(
    local: int | None, group: ProcessGroup | None, start: int | None, stride: int | None, inferred: list[str]
) -> int | None:
    """Group-local peer rank -> global rank."""
    if local is None or local < 0:
        return None
    if group is not None and group.ranks:
        return group.ranks[local] if local < len(group.ranks) else None
    if start is not None and stride is not None and start >= 0 and stride > 0:
        return start + local * stride
    inferred.append("peer")  # whole-world group (empty rank list) or nothing known: identity
    return local


class _Row:
    """A collective row plus the facts used for the rank hint."""

    __slots__ = ("row", "node_type", "own_rank", "group_key")

    def __init__(self, row: dict[str, Any], node_type: str, own_rank: int | None, group_key: Any) -> None:
        self.row = row
        self.node_type = node_type
        self.own_rank = own_rank
        self.group_key = group_key


def _rpc_row(
    node: _Node, comm_type: str, coll_name: str, attrs: dict[str, Any], args: _RpcArgs, groups: _Groups
) -> _Row:
    inferred: list[str] = []
    ins = _sizes_of(node.inputs())
    outs = _sizes_of(node.outputs())
    dtype = comms.normalize_dtype(_attr_str(attrs, "dtype")) or ins.dtype or outs.dtype

    in_elems = _attr_int(attrs, "in_msg_nelems")
    out_elems = _attr_int(attrs, "out_msg_nelems")
    in_bytes = comms.times(in_elems, dtype) if in_elems is not None else ins.bytes
    out_bytes = comms.times(out_elems, dtype) if out_elems is not None else outs.bytes
    if in_elems is None:
        in_elems = ins.elems
    if out_elems is None:
        out_elems = outs.elems

    in_splits = _split_attr(attrs.get("in_split_size"), "in_split_size")
    out_splits = _split_attr(attrs.get("out_split_size"), "out_split_size")
    splits_known = in_splits is not None or args.in_split is not None
    if in_splits is None:
        in_splits = args.in_split
    if out_splits is None:
        out_splits = args.out_split

    pg_name = _attr_str(attrs, "pg_name") or args.pg_name
    group = groups.get(pg_name) if pg_name is not None else None
    group_size = _attr_int(attrs, "pg_size")
    if group_size is None:
        group_size = args.world_size
    if group_size is None and group is not None and group.group_size is not None:
        group_size = group.group_size
        inferred.append("group_size")
    if group_size is None and comm_type not in _PEER_RANK_TYPES:
        for splits in (in_splits, out_splits):
            if splits:
                group_size = len(splits)
                inferred.append("group_size")
                break

    start = _attr_int(attrs, "global_rank_start")
    stride = _attr_int(attrs, "global_rank_stride")
    if start is None:
        start, stride = args.rank_start, args.rank_stride

    peer = None
    own_rank = args.rank
    if comm_type in _PEER_RANK_TYPES:
        peer = _global_peer(args.rank, group if pg_name is not None else groups.get(None), start, stride, inferred)
        own_rank = None
    elif comm_type in _ROOT_RANK_TYPES:
        own_rank = None

    start_us, duration_us = node.time()
    row = {
        "op_id": node.id,
        "op_name": coll_name,
        "comm_type": comm_type,
        "is_uneven": _uneven(coll_name, comm_type, in_splits or None, out_splits or None, splits_known),
        "pg_name": pg_name,
        "group_size": group_size,
        "peer": peer,
        "dtype": dtype,
        "in_elems": in_elems,
        "out_elems": out_elems,
        "in_bytes": in_bytes,
        "out_bytes": out_bytes,
        "in_splits": in_splits or None,
        "out_splits": out_splits or None,
        "seq": args.seq,
        "start_us": start_us,
        "duration_us": duration_us,
        "rf_id": _attr_int(attrs, "rf_id"),
        "source": "record_param_comms",
        "inferred": inferred or None,
    }
    group_key = pg_name if pg_name is not None else ("ptr", args.pg_ptr)
    return _Row(row, _NODE_TYPE.get(comm_type, "COMM_COLL_NODE"), own_rank, group_key)


_SCHEMA_ARGS = re.compile(r"^[^(]*\((.*)\)\s*(->.*)?$", re.S)


def _schema_arg_names(op_schema: Any) -> list[str] | None:
    if not isinstance(op_schema, str) or "(" not in op_schema:
        return None
    match = _SCHEMA_ARGS.match(op_schema.split(") ->")[0] + ")")
    if not match:
        return None
    names = []
    for arg in match.group(1).split(", "):
        arg = arg.split("=")[0].strip()
        if arg == "*":
            continue
        names.append(arg.rsplit(" ", 1)[-1] if " " in arg else arg)
    return names


# c10d ops whose first tensor argument is the output and second the input (when op_schema is absent).
_C10D_OUTPUT_FIRST = (
    "alltoall",
    "allgather",
    "_allgather",
    "reduce_scatter",
    "_reduce_scatter",
    "gather",
    "scatter",
)


# c10d ops on one input and one output tensor: the shards are equal by definition.
_C10D_EVEN = ("_allgather_base", "_reduce_scatter_base", "allgather_into_tensor", "reduce_scatter_tensor")


def _c10d_row(node: _Node, comm_type: str, attrs: dict[str, Any], groups: _Groups, work: _Node | None = None) -> _Row:
    """A row read from a `c10d::` op; `work` is the backend annotation of its work, when paired."""
    inferred: list[str] = []
    pairs = node.inputs()
    names = _schema_arg_names(attrs.get("op_schema"))
    if names is not None and len(names) != len(pairs):
        names = None
    stem = node.name[len(_C10D_PREFIX) :]
    in_tensors: list[tuple[int, int, str | None]] = []
    out_tensors: list[tuple[int, int, str | None]] = []
    int_lists: list[tuple[str | None, list[int]]] = []
    ints: list[tuple[str | None, int]] = []
    tensor_args = 0
    for index, (value, type_name) in enumerate(pairs):
        name = names[index] if names else None
        if _is_tensor_type(type_name):
            found = _tensors(value, type_name)
            if name is not None:
                is_out = name.startswith("output")
            else:
                is_out = stem.startswith(_C10D_OUTPUT_FIRST) and tensor_args == 0
            (out_tensors if is_out else in_tensors).extend(found)
            tensor_args += 1
        elif type_name.startswith("GenericList[Int") or type_name == "GenericList[]":
            int_lists.append((name, list(_int_list(value, type_name))))
        elif type_name == "Int":
            if not _is_int(value):
                raise TypeError(f"Int input {value!r} is not an integer")
            ints.append((name, value))
    if not out_tensors:
        out_tensors = [t for v, t_name in node.outputs() if _is_tensor_type(t_name) for t in _tensors(v, t_name)]
    if comm_type == "RECV" and in_tensors and not out_tensors:
        out_tensors = in_tensors  # recv_(Tensor[] tensors, ...): the buffer the message lands in
    ins, outs = _Sizes(in_tensors), _Sizes(out_tensors)
    if work is not None and not ins.present and comm_type == comms.comm_type_of(work.name):
        ins = _sizes_of(work.inputs())  # the c10d op recorded no tensors; its work did

    in_splits = out_splits = None
    if int_lists:
        by_name = {n: v for n, v in int_lists if n}
        if by_name:
            in_splits = by_name.get("input_split_sizes")
            out_splits = by_name.get("output_split_sizes")
        elif len(int_lists) >= 2:  # alltoall_base_(output, input, pg, output_splits, input_splits, ...)
            out_splits, in_splits = int_lists[0][1], int_lists[1][1]

    peer = None
    if comm_type in _PEER_RANK_TYPES:
        wanted = ("dstRank", "srcRank", "dst", "src", "peer")
        local = next((v for n, v in ints if n in wanted), None)
        if local is None and names is None and ints:
            local = ints[0][1]
        peer = _global_peer(local, groups.get(None), None, None, inferred)

    splits_known = (bool(int_lists) and comm_type == "ALL_TO_ALL") or stem.startswith(_C10D_EVEN)
    start_us, duration_us = node.time()
    if start_us is None and work is not None:
        start_us, duration_us = work.time()
    row = {
        "op_id": node.id,
        # Without the `c10d::` namespace, as the profiler (Kineto) rows of the same op are named.
        "op_name": node.name.removeprefix(_C10D_PREFIX),
        "comm_type": comm_type,
        "is_uneven": _uneven(node.name, comm_type, in_splits or None, out_splits or None, splits_known),
        "pg_name": None,
        "group_size": None,
        "peer": peer,
        "dtype": ins.dtype or outs.dtype,
        "in_elems": ins.elems,
        "out_elems": outs.elems,
        "in_bytes": ins.bytes,
        "out_bytes": outs.bytes,
        "in_splits": in_splits or None,
        "out_splits": out_splits or None,
        "seq": None,
        "start_us": start_us,
        "duration_us": duration_us,
        "rf_id": _attr_int(attrs, "rf_id"),
        "source": "c10d",
        "inferred": inferred or None,
    }
    return _Row(row, _NODE_TYPE.get(comm_type, "COMM_COLL_NODE"), None, None)


_ARROW_PEER = re.compile(r"(-?\d+)\s*(->|<-)\s*(-?\d+)")


def _annotation_row(node: _Node, comm_type: str, attrs: dict[str, Any], groups: _Groups) -> _Row:
    inferred: list[str] = []
    ins = _sizes_of(node.inputs())
    outs = _sizes_of(node.outputs())
    peer = None
    if comm_type in _PEER_RANK_TYPES:
        # `nccl:send 0->1`, `nccl:recv 0<-1`: group-local ranks, the peer on the right.
        match = _ARROW_PEER.search(node.name)
        if match:
            peer = _global_peer(int(match.group(3)), groups.get(None), None, None, inferred)
    start_us, duration_us = node.time()
    row = {
        "op_id": node.id,
        "op_name": node.name,
        "comm_type": comm_type,
        "is_uneven": _uneven(node.name, comm_type, None, None, False),
        "pg_name": _attr_str(attrs, "pg_name") or None,
        "group_size": None,
        "peer": peer,
        "dtype": ins.dtype or outs.dtype,
        "in_elems": ins.elems,
        "out_elems": outs.elems,
        "in_bytes": ins.bytes,
        "out_bytes": outs.bytes,
        "in_splits": None,
        "out_splits": None,
        "seq": None,
        "start_us": start_us,
        "duration_us": duration_us,
        "rf_id": _attr_int(attrs, "rf_id"),
        "source": "annotation",
        "inferred": inferred or None,
    }
    return _Row(row, _NODE_TYPE.get(comm_type, "COMM_COLL_NODE"), None, None)


# ---------------------------------------------------------------------------------------- driver


def _load(source: Any) -> tuple[dict[str, Any], list[Any]]:
    data = source.read()
    doc = _decode(data)
    if not isinstance(doc, dict):
        raise TraceError(f"not a PyTorch execution trace: top level is a JSON {type(doc).__name__}", "byte offset 0")
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        what = "no 'nodes' array" if nodes is None else f"'nodes' is a {type(nodes).__name__}, not an array"
        raise TraceError(f"not a PyTorch execution trace: {what}", "top-level object")
    schema = doc.get("schema")
    if schema is not None and not isinstance(schema, str):
        raise TraceError(f"'schema' is {schema!r}, not a string", "top-level object")
    return doc, nodes


# The work a backend runs for a c10d op may be named after another collective: gloo has no
# reduce-scatter of one tensor (`_reduce_scatter_base_` runs `gloo:all_reduce` of the whole input).
_WORK_RUNS_AS = {("ALL_REDUCE", "REDUCE_SCATTER"), ("ALL_REDUCE", "BARRIER")}


def _work_fits(annotation_type: str, op_type: str) -> bool:
    return annotation_type == op_type or (annotation_type, op_type) in _WORK_RUNS_AS


class _Lane:
    """c10d ops of one comm_type and thread, sorted by a key; finds the untaken one just below a key."""

    __slots__ = ("keys", "ids", "up")

    def __init__(self, items: list[tuple[int, int]]) -> None:
        items.sort()
        self.keys = [k for k, _ in items]
        self.ids = [i for _, i in items]
        self.up = list(range(len(items)))  # union-find: up[i] == i while untaken

    def _find(self, i: int) -> int:
        root = i
        while root >= 0 and self.up[root] != root:
            root = self.up[root]
        while i >= 0 and self.up[i] != i:
            self.up[i], i = root, self.up[i]
        return root

    def below(self, key: int) -> tuple[int, int] | None:
        """(key, position) of the untaken op with the greatest key smaller than `key`."""
        position = self._find(bisect.bisect_left(self.keys, key) - 1)
        return (self.keys[position], position) if position >= 0 else None

    def take(self, position: int) -> None:
        self.up[position] = position - 1


def _lanes(ops: list[int], key: Any, candidates: dict, links: dict) -> tuple[dict, dict]:
    grouped: dict[tuple[str, Any], list[tuple[int, int]]] = {}
    for op in ops:
        grouped.setdefault((candidates[op][2], links[op][1]), []).append((key(op), op))
    lanes = {k: _Lane(v) for k, v in grouped.items()}
    where = {op: (lanes[k], p) for k, lane in lanes.items() for p, op in enumerate(lane.ids)}
    return lanes, where


def _nearest_below(lanes: dict, annotation_type: str, tid: Any, key: int) -> tuple[_Lane, int] | None:
    best: tuple[int, _Lane, int] | None = None
    for (op_type, op_tid), lane in lanes.items():
        if not _work_fits(annotation_type, op_type) or not (tid is None or op_tid is None or tid == op_tid):
            continue
        found = lane.below(key)
        if found is not None and (best is None or found[0] > best[0]):
            best = (found[0], lane, found[1])
    return (best[1], best[2]) if best is not None else None


def _pair_dispatchers(
    loose: list[int],
    dispatchers: list[int],
    candidates: dict[int, tuple[_Node, int, str, str, dict[str, Any], _RpcArgs | None]],
    links: dict[int, tuple[int | None, Any]],
    ancestors: dict[int, list[int]],
) -> dict[int, int]:
    """Annotation id -> id of the c10d op that dispatched its work.

    The work's record function is opened right after its dispatcher's, so by rf_id the annotation
    belongs to the untaken c10d op of a fitting kind with the greatest smaller rf_id on the same
    thread (tid). Its ctrl_deps parent does not tell: it is sometimes the c10d op, sometimes that op's
    parent, and sometimes an unrelated earlier node. Without rf_ids: the nearest enclosing c10d op,
    else the nearest one before it in the file.
    """
    pairs: dict[int, int] = {}
    if not loose or not dispatchers:
        return pairs
    taken: set[int] = set()
    with_rf = [d for d in dispatchers if links[d][0] is not None]
    lanes, _ = _lanes(with_rf, lambda d: links[d][0], candidates, links)
    rest: list[int] = []
    for a in sorted(loose, key=lambda a: (links[a][0] is None, links[a][0] or 0, candidates[a][0].index)):
        rf, tid = links[a]
        found = _nearest_below(lanes, candidates[a][2], tid, rf) if rf is not None and lanes else None
        if found is None:
            rest.append(a)
            continue
        lane, position = found
        lane.take(position)
        pairs[a] = lane.ids[position]
        taken.add(lane.ids[position])
    if not rest:
        return pairs

    # Fallback: annotations without rf_id pair with any op; those with one only with ops without.
    index = {d: candidates[d][0].index for d in dispatchers if d not in taken}
    lanes_any, where_any = _lanes(list(index), index.__getitem__, candidates, links)
    no_rf = [d for d in index if links[d][0] is None]
    lanes_no_rf, where_no_rf = _lanes(no_rf, index.__getitem__, candidates, links)

    def take(op: int) -> None:
        taken.add(op)
        for where in (where_any, where_no_rf):
            if op in where:
                lane, position = where[op]
                lane.take(position)

    for a in sorted(rest, key=lambda a: candidates[a][0].index):
        rf, tid = links[a]
        a_type = candidates[a][2]
        chosen = None
        for ancestor in ancestors.get(a, []):
            if (
                ancestor in index
                and ancestor not in taken
                and (rf is None or links[ancestor][0] is None)
                and _work_fits(a_type, candidates[ancestor][2])
            ):
                chosen = ancestor
                break
        if chosen is None:
            found = _nearest_below(lanes_any if rf is None else lanes_no_rf, a_type, tid, candidates[a][0].index)
            if found is not None:
                chosen = found[0].ids[found[1]]
        if chosen is not None:
            take(chosen)
            pairs[a] = chosen
    return pairs


def _started_at(value: Any) -> datetime | None:
    """`time` is the writer's local wall clock with no zone; it is labelled UTC as written."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value.strip(), _TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


def _ancestor_ids(node_id: int, parents: dict[int, int | None], limit: int) -> list[int]:
    out = []
    current = parents.get(node_id)
    while current is not None:
        out.append(current)
        if len(out) > limit:
            raise TraceError("ctrl_deps form a cycle", f"node id {node_id}")
        current = parents.get(current)
    return out


def parse(source: Any, sink: Any) -> TraceMeta:
    """Read one PyTorch ET file into `ops` and `collectives` batches; see the module docstring."""
    # The decoded document is millions of containers that live until the end: the cyclic GC would
    # rescan them over and over (half the parse time) and can free none of them.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(source, sink)
    finally:
        if enabled:
            gc.enable()


def _parse(source: Any, sink: Any) -> TraceMeta:
    doc, raw_nodes = _load(source)
    meta = TraceMeta(
        format=FORMAT,
        schema_version=doc.get("schema"),
        started_at=_started_at(doc.get("time")),
        node_count=len(raw_nodes),
    )

    nodes: list[_Node] = []
    parents: dict[int, int | None] = {}
    for index, raw in enumerate(raw_nodes):
        if not isinstance(raw, dict):
            raise TraceError(f"node is a JSON {type(raw).__name__}, not an object", f"nodes[{index}]")
        node = _Node(raw, index)
        if node.id in parents:
            raise TraceError(f"duplicate node id {node.id}", node.where)
        parents[node.id] = node.parent
        nodes.append(node)

    # Process groups first: collective rows map peers through them.
    pg_nodes: set[int] = set()
    for node in nodes:
        if PG_INIT_MARK in node.name:
            pg_nodes.add(node.id)
            try:
                meta.process_groups.extend(_process_groups(node))
            except _BAD_CONTENT as exc:
                raise TraceError(f"process_group:init node: {exc}", node.where) from None
    groups = _Groups(meta.process_groups)

    # Collective candidates: (node, kind, comm_type, name, attrs, rpc args).
    candidates: dict[int, tuple[_Node, int, str, str, dict[str, Any], _RpcArgs | None]] = {}
    # rf_id and thread of the annotation and c10d candidates, for pairing them.
    links: dict[int, tuple[int | None, Any]] = {}
    for node in nodes:
        kind = _kind(node.name)
        if kind is None:
            continue
        try:
            attrs = node.attrs()
            args = None
            if kind == _KIND_RPC:
                args = _RpcArgs(node.inputs())
                name = _attr_str(attrs, "collective_name") or args.coll_name
            else:
                name = node.name
            comm_type = comms.comm_type_of(name)
            if comm_type is not None and kind != _KIND_RPC:
                tid = attrs.get("tid")
                links[node.id] = (_attr_int(attrs, "rf_id"), tid if isinstance(tid, int | str) else None)
        except _BAD_CONTENT as exc:
            raise TraceError(f"malformed {node.name} node: {exc}", node.where) from None
        if comm_type is not None and name is not None:
            candidates[node.id] = (node, kind, comm_type, name, attrs, args)

    # Keep one node per logical collective: outermost record_param_comms; else a c10d op paired with
    # the annotation of its work; else a lone annotation; else a lone c10d op.
    limit = len(nodes)
    above: dict[int, set[int]] = {}  # candidate id -> kinds of candidate ancestors
    below: set[int] = set()  # ids with an anchor/annotation candidate underneath
    rpc_below: set[int] = set()  # ids with an anchor underneath
    ancestors: dict[int, list[int]] = {}
    for cid, (_, kind, *_rest) in candidates.items():
        kinds: set[int] = set()
        chain = _ancestor_ids(cid, parents, limit)
        for ancestor in chain:
            entry = candidates.get(ancestor)
            if entry is not None:
                kinds.add(entry[1])
            if kind != _KIND_C10D:
                below.add(ancestor)
            if kind == _KIND_RPC:
                rpc_below.add(ancestor)
        above[cid] = kinds
        if kind == _KIND_ANNOTATION:
            ancestors[cid] = chain

    # Annotations with no anchor (gloo, or NCCL without record_param_comms) and the c10d ops that
    # dispatched them: each pair is one collective, read from the c10d op. With gloo the ctrl_deps
    # of these nodes are unreliable (a c10d op or gloo node may hang under an earlier, unrelated
    # gloo node or c10d op), so only record_param_comms above or below rules a node out here.
    loose = [
        cid
        for cid, entry in candidates.items()
        if entry[1] == _KIND_ANNOTATION and _KIND_RPC not in above[cid] and cid not in rpc_below
    ]
    dispatchers = [
        cid
        for cid, entry in candidates.items()
        if entry[1] == _KIND_C10D and _KIND_RPC not in above[cid] and cid not in rpc_below
    ]
    paired = _pair_dispatchers(loose, dispatchers, candidates, links, ancestors)  # annotation -> c10d op
    dispatched = {op: annotation for annotation, op in paired.items()}
    # A lone c10d op stays out when an unpaired annotation or a paired c10d op hangs under it.
    blocked: set[int] = set()
    for cid, chain in ancestors.items():
        if cid not in paired:
            blocked.update(chain)
    for op in dispatched:
        blocked.update(_ancestor_ids(op, parents, limit))

    rows: list[_Row] = []
    for cid, (node, kind, comm_type, name, attrs, args) in candidates.items():
        kinds = above[cid]
        if kind == _KIND_RPC:
            keep = _KIND_RPC not in kinds
        elif kind == _KIND_ANNOTATION:
            keep = not kinds & {_KIND_RPC, _KIND_ANNOTATION} and cid not in below and cid not in paired
        else:
            keep = cid in dispatched or (not kinds and cid not in rpc_below and cid not in blocked)
        if not keep:
            continue
        count = len(rows)
        try:
            if kind == _KIND_RPC:
                assert args is not None
                rows.append(_rpc_row(node, comm_type, name, attrs, args, groups))
            elif kind == _KIND_ANNOTATION:
                rows.append(_annotation_row(node, comm_type, attrs, groups))
            else:
                work = candidates[dispatched[cid]][0] if cid in dispatched else None
                rows.append(_c10d_row(node, comm_type, attrs, groups, work))
        except TraceError:
            raise
        except _BAD_CONTENT as exc:
            raise TraceError(f"malformed {node.name} node: {exc}", node.where) from None
        if len(rows) > count:
            _check_ranges(rows[-1].row, node.where)
    rows.sort(key=lambda r: candidates[r.row["op_id"]][0].index)
    _device_times(nodes, parents, rows, limit)

    _fill_world_and_hint(meta, rows, groups)

    # ops: every node, in file order.
    node_types = {r.row["op_id"]: r.node_type for r in rows}
    ops = TableBuffer("ops", sink)
    for node in nodes:
        try:
            start_us, duration_us = node.time()
        except TypeError as exc:
            raise TraceError(str(exc), node.where) from None
        ops.append(
            {
                "op_id": node.id,
                "name": node.name,
                "type": "METADATA_NODE" if node.id in pg_nodes else node_types.get(node.id, "COMP_NODE"),
                "start_us": start_us,
                "duration_us": duration_us,
                "ctrl_deps": [node.parent] if node.parent is not None else None,
                "data_deps": None,
            }
        )
    ops.flush()

    collectives = TableBuffer("collectives", sink)
    for r in rows:
        collectives.append(r.row)
    collectives.flush()
    return meta


def _device_times(nodes: list[_Node], parents: dict[int, int | None], rows: list[_Row], limit: int) -> None:
    """ET+ (chakra_trace_link output): a collective's times become its NCCL kernels' span.

    The linker adds one node per GPU kernel (it has a `cat` key) under the CPU op that launched it;
    kernels of a row's subtree give the device start and duration, the row's own are host times.
    """
    by_id = {r.row["op_id"]: r.row for r in rows}
    spans: dict[int, tuple[float, float]] = {}
    for node in nodes:
        raw = node.raw
        if "cat" not in raw or "nccl" not in node.name.lower():
            continue
        try:
            start, duration = node.time()
        except TypeError as exc:
            raise TraceError(str(exc), node.where) from None
        if start is None or duration is None:
            continue
        for ancestor in _ancestor_ids(node.id, parents, limit):
            if ancestor in by_id:
                low, high = spans.get(ancestor, (start, start + duration))
                spans[ancestor] = (min(low, start), max(high, start + duration))
                break
    for op_id, (low, high) in spans.items():
        by_id[op_id]["start_us"] = low
        by_id[op_id]["duration_us"] = high - low


def _fill_world_and_hint(meta: TraceMeta, rows: list[_Row], groups: _Groups) -> None:
    default = groups.by_name.get("0") or next((g for g in groups.groups if g.pg_desc == "default_pg"), None)
    if default is None and len(groups.groups) == 1:
        default = groups.groups[0]
    if default is not None and default.group_size is not None:
        meta.world_size = default.group_size
    if meta.world_size is None:
        sizes = {r.row["group_size"] for r in rows if r.row["pg_name"] == "0" and r.row["group_size"] is not None}
        if len(sizes) == 1:
            meta.world_size = sizes.pop()

    own = [r for r in rows if r.own_rank is not None and r.own_rank >= 0]
    keys = {r.group_key for r in own}
    chosen: list[_Row] = []
    if default is not None and default.pg_name in keys:
        chosen = [r for r in own if r.group_key == default.pg_name]
    elif "0" in keys:
        chosen = [r for r in own if r.group_key == "0"]
    elif len(keys) == 1:  # a single group (layout A/B record only a pointer)
        chosen = own
    else:
        whole = {g.pg_name for g in groups.groups if not g.ranks}
        chosen = [r for r in own if r.group_key in whole] if len(whole) == 1 else []
    ranks = {r.own_rank for r in chosen}
    if len(ranks) == 1:
        meta.rank_hint = ranks.pop()

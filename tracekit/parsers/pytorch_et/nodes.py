"""PyTorch ET nodes: one view over every node layout, their tensors, attrs and record_param_comms inputs.

Attribute and argument names are data (the per-version tables below); a node whose shape
contradicts itself (an id that is no integer, values and types of different lengths, an `Int`
input that is no integer) is a TraceError naming the node, while a value that merely does not fit
its column (a count that is no integer, a time that is no number, a negative numel) is null with a
warning on the file (tracekit.parsers.common.values).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypeGuard

from tracekit.parsers.base import TraceError
from tracekit.parsers.common.limits import MAX_WALK_DEPTH
from tracekit.parsers.common.names import (
    C10D_PREFIX,
    PG_INIT_MARK,
    RECORD_PARAM_COMMS,
    is_backend_annotation,
    normalize_dtype,
)
from tracekit.parsers.common.values import MAX_TEXT_CHARS, Bound, Checker, excerpt, too_long

# record_param_comms attrs of schema >= 1.1.0 (they win over the positional inputs).
COLLECTIVE_NAME = "collective_name"
DTYPE = "dtype"
IN_ELEMS = "in_msg_nelems"
OUT_ELEMS = "out_msg_nelems"
IN_SPLITS = "in_split_size"
OUT_SPLITS = "out_split_size"
PG_NAME = "pg_name"
PG_SIZE = "pg_size"
RANK_START = "global_rank_start"
RANK_STRIDE = "global_rank_stride"
# PyTorch 2026+ (pytorch/pytorch#169416, execution_trace_observer.cpp getCommsNodeAttrs): "0" or "1",
# whether the collective was issued async (a send passes true). No column holds it: checked as a flag.
IS_ASYNC = "is_asynchronized_op"
# Standard attrs of every node; in the 1.0.1 flat layout they are top-level keys.
RF_ID = "rf_id"
TID = "tid"
OP_SCHEMA = "op_schema"
FLAT_ATTRS = ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema")

KIND_RPC, KIND_ANNOTATION, KIND_C10D = 1, 2, 3
# An attr name longer than this is not quoted as the field of a warning.
_LABEL_CHARS = 100


def is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def kind(name: str) -> int | None:
    if name == RECORD_PARAM_COMMS:
        return KIND_RPC
    if is_backend_annotation(name):
        return KIND_ANNOTATION
    if name.startswith(C10D_PREFIX):
        return KIND_C10D
    return None


class Node:
    """One ET node, normalized over the 1.0.1 flat and the 1.0.2+ nested layouts.

    Strings longer than MAX_TEXT_CHARS (tracekit.parsers.common.values) are bounded where they
    enter: the name as the node is made, the attrs, inputs and outputs the first time any of them
    is read (only the nodes the rules read beyond their name pay for the walk)."""

    __slots__ = ("raw", "id", "name", "parent", "index", "_checker")

    def __init__(self, raw: dict[str, Any], index: int, checker: Checker | None = None) -> None:
        self.raw = raw
        self.index = index
        node_id = raw.get("id")
        if not is_int(node_id):
            raise TraceError(f"node has no integer id (id = {excerpt(node_id)})", f"nodes[{index}]")
        self.id: int = node_id
        name = raw.get("name", "")
        if not isinstance(name, str):
            raise TraceError(f"node {node_id}: name is {type(name).__name__}, not a string", self.where)
        self.name: str = (
            name if checker is None or len(name) <= MAX_TEXT_CHARS else checker.name(name, "name", self.where)
        )
        self._checker = checker  # None once the node's values are bounded
        parent = raw.get("ctrl_deps", raw.get("parent"))
        if isinstance(parent, list):  # tolerated: a list of parents; the first one is the tree parent
            parent = parent[0] if parent else None
        if parent is not None and not is_int(parent):
            raise TraceError(f"node {node_id}: ctrl_deps/parent is {excerpt(parent)}, not an integer id", self.where)
        self.parent: int | None = None if parent == node_id else parent

    @property
    def where(self) -> str:
        return f"node id {self.id} (nodes[{self.index}])"

    def _bound_values(self, checker: Checker) -> None:
        """Drop the attrs, inputs and outputs that hold a string longer than MAX_TEXT_CHARS, noted on
        the file; once per node. A dropped input or output is null with no type: it is not read."""
        self._checker = None
        raw, where = self.raw, self.where
        attrs = raw.get("attrs")
        if isinstance(attrs, list):
            for attr in attrs:
                if isinstance(attr, dict) and too_long(attr.get("value")):
                    name = attr.get("name")
                    label = name if isinstance(name, str) and len(name) < _LABEL_CHARS else "attr"
                    attr["value"] = checker.text(attr["value"], label, where)
        elif attrs is None:
            for key in FLAT_ATTRS:
                if too_long(raw.get(key)):
                    raw[key] = checker.text(raw[key], key, where)
        if PG_INIT_MARK in self.name:
            return  # its input is the process-group payload, read whole (tracekit.parsers.common.groups)
        for side in ("inputs", "outputs"):
            block = raw.get(side)
            if isinstance(block, dict):
                values, types = block.get("values"), block.get("types")
            else:
                values, types = block, raw.get("input_types" if side == "inputs" else "output_types")
            if not isinstance(types, list):
                continue  # a structural error, reported where the node is read
            for i, type_name in enumerate(types):
                if too_long(type_name):
                    checker.text(type_name, f"{side}[{i}] type", where)
                    types[i] = ""
            if isinstance(values, list):
                for i, value in enumerate(values):
                    if too_long(value):
                        values[i] = checker.text(value, f"{side}[{i}]", where)
                        if i < len(types):
                            types[i] = ""

    def _pairs(self, side: str) -> list[tuple[Any, str]]:
        if self._checker is not None:
            self._bound_values(self._checker)
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
                raise TypeError(f"{side} type {excerpt(t)} is not a string")
        return list(zip(values, types, strict=True))

    def inputs(self) -> list[tuple[Any, str]]:
        return self._pairs("inputs")

    def outputs(self) -> list[tuple[Any, str]]:
        return self._pairs("outputs")

    def attrs(self) -> dict[str, Any]:
        if self._checker is not None:
            self._bound_values(self._checker)
        raw = self.raw
        attrs = raw.get("attrs")
        if attrs is None:  # 1.0.1: the standard attrs are top-level keys
            return {k: raw[k] for k in FLAT_ATTRS if k in raw}
        if not isinstance(attrs, list):
            raise TypeError("attrs is not an array")
        out: dict[str, Any] = {}
        for attr in attrs:
            if not isinstance(attr, dict) or not isinstance(attr.get("name"), str):
                raise TypeError(f"attr {excerpt(attr)} has no name")
            out[attr["name"]] = attr.get("value")
        return out

    def time(self, checker: Checker) -> tuple[float | None, float | None]:
        """Host start and duration (µs) of an ET+ node; null (with a warning) when not numbers."""
        raw = self.raw
        return (
            checker.time(raw.get("ts"), "start_us", self.where),
            checker.time(raw.get("inclusive_dur", raw.get("dur")), "duration_us", self.where),
        )


def attr_int(attrs: dict[str, Any], key: str, bound: Bound, checker: Checker, where: str) -> int | None:
    return checker.integer(attrs.get(key), key, bound, where)


def attr_str(attrs: dict[str, Any], key: str, checker: Checker, where: str) -> str | None:
    value = attrs.get(key)
    if value is None or isinstance(value, str):
        return value
    checker.note(key, "is not a string", value, where)
    return None


# ------------------------------------------------------------------------------------- tensors


def is_tensor_type(type_name: str) -> bool:
    return "Tensor" in type_name


@dataclass
class Sizes:
    """Elements, bytes and dtype of a list of tensors; `bad` holds a tensor whose numel or
    itemsize is negative (the sizes are then unknown)."""

    present: bool
    elems: int | None
    bytes: int | None
    dtype: str | None
    bad: Any = None

    @classmethod
    def of(cls, tensors: list[tuple[int, int, str | None]], bad: Any = None) -> Sizes:
        dtypes = {t[2] for t in tensors if t[2]}
        dtype = dtypes.pop() if len(dtypes) == 1 else None
        if bad is not None or not tensors:
            return cls(bool(tensors) or bad is not None, None, None, dtype, bad)
        return cls(True, sum(t[0] for t in tensors), sum(t[0] * t[1] for t in tensors), dtype)

    def note(self, field: str, checker: Checker, where: str) -> None:
        if self.bad is not None:
            checker.note(field, "holds a tensor with a negative numel or itemsize", self.bad, where)


def tensors(value: Any, type_name: str, found: list[tuple[int, int, str | None]]) -> Any:
    """Add (numel, itemsize, dtype) of every tensor in an input of `type_name` (lists nested) to
    `found`; returns the first malformed tensor, if any."""
    dtype = normalize_dtype(type_name) if type_name.startswith("Tensor(") else None
    dtypes = [normalize_dtype(t) for t in re.findall(r"Tensor\([^)]*\)", type_name)]
    return _collect(value, dtype, dtypes, found)


def _collect(
    value: Any, dtype: str | None, dtypes: list[str | None], out: list[tuple[int, int, str | None]], depth: int = 0
) -> Any:
    if depth > MAX_WALK_DEPTH:  # tensor lists nest two or three levels: nothing down there is a tensor
        return None
    if isinstance(value, list) and len(value) >= 5 and is_int(value[0]) and is_int(value[3]) and is_int(value[4]):
        # [tensor_id, storage_id, offset, numel, itemsize, device]
        if value[3] < 0 or value[4] < 0:
            return value
        index = len(out)
        use = dtype or (dtypes[index] if index < len(dtypes) else (dtypes[0] if len(set(dtypes)) == 1 else None))
        out.append((value[3], value[4], use))
        return None
    bad = None
    if isinstance(value, list):
        for item in value:
            bad = _collect(item, dtype, dtypes, out, depth + 1) or bad
    return bad


def sizes_of(pairs: list[tuple[Any, str]]) -> Sizes:
    found: list[tuple[int, int, str | None]] = []
    bad = None
    for value, type_name in pairs:
        if is_tensor_type(type_name):
            bad = tensors(value, type_name, found) or bad
    return Sizes.of(found, bad)


def int_list(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(is_int(v) for v in value):
        raise TypeError(f"{what} is {excerpt(value)}, not a list of integers")
    return value


# ------------------------------------------------------------------------ record_param_comms


class RpcArgs:
    """record_param_comms positional inputs, read by type (layouts A-D of the package docstring)."""

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
            if is_tensor_type(type_name):
                continue
            if type_name == "String":
                if self.coll_name is None:
                    if not isinstance(value, str):
                        raise TypeError(f"String input {excerpt(value)} is not a string")
                    self.coll_name = value
                continue
            if type_name == "Int":
                if not is_int(value):
                    raise TypeError(f"Int input {excerpt(value)} is not an integer")
                (after if self.coll_name is not None else before).append(value)
                continue
            if type_name.startswith("Tuple[String"):
                if not isinstance(value, list) or not value:
                    raise TypeError(f"{type_name} input {excerpt(value)} is not a tuple")
                self.pg_name = str(value[0]) if value[0] not in (None, "") else None
                if len(value) > 1 and value[1] not in (None, ""):
                    self.pg_desc = str(value[1])
                continue
            if type_name.startswith(("GenericList", "Tuple[Int")):
                if self.coll_name is None:
                    # Layout D: seq recorded as [seq, isP2P]
                    if isinstance(value, list) and value and is_int(value[0]) and not before:
                        self.seq = value[0]
                        seq_pair = True
                    continue
                splits.append(list(int_list(value, f"split input {type_name}")))
        self._place(before, after, splits, seq_pair)

    def _place(self, before: list[int], after: list[int], splits: list[list[int]], seq_pair: bool) -> None:
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

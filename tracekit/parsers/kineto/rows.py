"""Kineto rows: one collective row per unit (or loose kernel), by the rulebook's rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracekit.parsers.base import ProcessGroup
from tracekit.parsers.common import c10d
from tracekit.parsers.common.finish import take_only_group, take_peer_group
from tracekit.parsers.common.groups import group_named
from tracekit.parsers.common.names import (
    RECORD_PARAM_COMMS,
    c10d_stem,
    comm_type_of,
    normalize_dtype,
    parse_nccl_kernel,
    times,
)
from tracekit.parsers.common.peers import PEER_TYPES, peer_in_unnamed_group, peer_of_rank_arg
from tracekit.parsers.common.rows import CollectiveRow
from tracekit.parsers.common.sizes import is_uneven, split_sizes
from tracekit.parsers.common.values import COUNT, INT64, RANK, SIZE, UINT64, Checker, as_int, elements
from tracekit.parsers.kineto import args as arg
from tracekit.parsers.kineto.decode import Event, Events, event_args
from tracekit.parsers.kineto.events import Unit
from tracekit.parsers.kineto.pairing import rf_id


@dataclass
class Context:
    events: Events
    groups: list[ProcessGroup]
    checker: Checker


def _where(index: int) -> str:
    return f"traceEvents[{index}]"


def unit_row(ctx: Context, unit: Unit, kernel_args: dict[int, dict[str, Any]]) -> CollectiveRow | None:
    """The row of a record_param_comms, annotation or c10d unit; None when it names no collective."""
    if unit.source == "c10d":
        return c10d_row(ctx, unit)
    events = ctx.events
    inferred: list[str] = []
    comm_args = unit.args if arg.COLLECTIVE_NAME in unit.args else {}
    if not comm_args:
        comm_args = next((kernel_args[k] for k in unit.kernels if arg.COLLECTIVE_NAME in kernel_args[k]), {})
    # The kind: Collective name, else the nested annotation, the enclosing c10d op, the own name
    # (annotation units), and last the kernel name.
    op_name = None
    comm_type = None
    if comm_args:
        op_name = str(comm_args[arg.COLLECTIVE_NAME])
        comm_type = comm_type_of(op_name)
        if comm_type is None:
            return None  # wait, coalesced, barrier-less bookkeeping
    else:
        named = [unit.annotation, unit.c10d] if unit.source == RECORD_PARAM_COMMS else [unit.index]
        for idx in named:
            if idx is not None:
                comm_type = comm_type_of(events[idx].name)
                if comm_type is not None:
                    op_name = events[idx].name
                    break
        if comm_type is None:
            for k in unit.kernels:
                comm_type, _ = parse_nccl_kernel(events[k].name or "")
                if comm_type is not None:
                    op_name = events[k].name
                    inferred.append("comm_type")
                    break
        if comm_type is None:
            return None  # a wait: names no collective anywhere
    row = comm_fields(ctx, unit.index, comm_type, op_name, comm_args, inferred)
    row.source = unit.source
    if not comm_args:
        # G1: sizes only from the tensor shapes recorded with record_shapes.
        for idx in (unit.index, unit.annotation):
            if idx is None:
                continue
            elems, dtype = first_tensor(events[idx], unit.args if idx == unit.index else None)
            if elems is not None:
                row.in_elems, row.dtype, row.in_bytes = elems, dtype, times(elems, dtype)
                inferred += ["dtype", "in_elems", "in_bytes"]
                break
    row.rf_id = ctx.checker.bounded(rf_id(unit.args), "rf_id", INT64, _where(unit.index))
    _timing(row, events[unit.index], [events[k] for k in unit.kernels])
    row.inferred = inferred
    return row


def c10d_row(ctx: Context, unit: Unit) -> CollectiveRow | None:
    """A collective from its c10d dispatcher op (backends without record_param_comms, e.g. gloo):
    kind and name from the op, sizes from its `Input Dims` / `Input type` / `Concrete Inputs`,
    time from the paired work annotation (the actual transfer) or kernels, else from the op."""
    events = ctx.events
    ev = events[unit.index]
    name = ev.name or ""
    comm_type = comm_type_of(name)
    if comm_type is None:
        return None
    stem = c10d_stem(name)
    a = unit.args
    inferred: list[str] = []
    row = CollectiveRow(op_id=unit.index, comm_type=comm_type, source="c10d", op_name=stem)
    dims, types, concrete = (_list(a.get(key)) for key in (arg.INPUT_DIMS, arg.INPUT_TYPES, arg.CONCRETE_INPUTS))
    if c10d.lists_output_first(stem):
        out_elems, out_dtype = tensor_arg(dims, types, 0)
        in_elems, in_dtype = tensor_arg(dims, types, 1)
    else:
        in_elems, in_dtype = tensor_arg(dims, types, 0)
        out_elems, out_dtype = (in_elems, in_dtype) if c10d.is_in_place(stem) else (None, None)
    ann = unit.annotation
    ann_args = event_args(events[ann]) if ann is not None else {}
    ann_elems, ann_dtype = first_tensor(events[ann], ann_args) if ann is not None and ann_args else (None, None)
    if in_elems is None and ann_elems is not None:
        in_elems = ann_elems  # the work annotation's tensor is the rank's input
        if c10d.is_in_place(stem):
            out_elems = ann_elems
    # A TensorList argument carries no dtype: the work annotation's tensor does.
    row.dtype = in_dtype or out_dtype or ann_dtype
    row.in_elems, row.out_elems = in_elems, out_elems
    row.in_bytes, row.out_bytes = times(in_elems, row.dtype), times(out_elems, row.dtype)
    in_splits, out_splits = _concrete_splits(ctx, unit.index, stem, concrete)
    row.in_splits, row.out_splits = in_splits or None, out_splits or None
    known = (in_splits is not None and out_splits is not None) or c10d.has_even_shards(stem)
    row.is_uneven = is_uneven(stem, comm_type, in_splits, out_splits, known)
    take_only_group(row, ctx.groups, inferred)
    position = c10d.arg_position(stem, c10d.PEER_ARGS)
    if comm_type in PEER_TYPES and position is not None and position < len(concrete):
        local = as_int(concrete[position])
        row.peer, guessed = peer_in_unnamed_group(local, ctx.groups)
        if guessed:
            inferred.append("peer")
        take_peer_group(row, local, ctx.groups, inferred)
    row.rf_id = ctx.checker.bounded(rf_id(a), "rf_id", INT64, _where(unit.index))
    _timing(row, events[ann] if ann is not None else ev, [events[k] for k in unit.kernels])
    row.inferred = inferred
    return row


def _concrete_splits(
    ctx: Context, index: int, stem: str, concrete: list[Any]
) -> tuple[list[int] | None, list[int] | None]:
    """All-to-all(v) split lists from `Concrete Inputs` ('[4, 2, 5, 3]', '[]'), by argument name."""
    out: list[list[int] | None] = []
    for name, field in ((c10d.IN_SPLITS_ARG, "in_splits"), (c10d.OUT_SPLITS_ARG, "out_splits")):
        position = c10d.arg_position(stem, name)
        value = concrete[position] if position is not None and position < len(concrete) else None
        text = value if isinstance(value, str) and value.strip().startswith("[") else None
        out.append(split_sizes(text, field, ctx.checker, _where(index)))
    if out[0] is None or out[1] is None:
        return None, None  # one list without the other does not tell who sends what
    return out[0], out[1]


def kernel_row(ctx: Context, k: int, args: dict[str, Any]) -> CollectiveRow | None:
    """The row of a kernel no host event owns; None when it cannot be classified."""
    ev = ctx.events[k]
    inferred: list[str] = []
    if arg.COLLECTIVE_NAME in args:
        op_name = str(args[arg.COLLECTIVE_NAME])
        comm_type = comm_type_of(op_name)
        if comm_type is None:
            return None
        row = comm_fields(ctx, k, comm_type, op_name, args, inferred)
    else:
        comm_type, dtype = parse_nccl_kernel(ev.name or "")
        if comm_type is None:
            return None  # SendRecv / Generic: send, recv or all-to-all, the name cannot tell
        row = comm_fields(ctx, k, comm_type, ev.name, {}, inferred)
        inferred.append("comm_type")
        if dtype is not None:
            row.dtype = dtype
            inferred.append("dtype")
    row.source = "kernel"
    row.rf_id = None
    _timing(row, ev, [ev])
    row.inferred = inferred
    return row


def comm_fields(
    ctx: Context, index: int, comm_type: str, op_name: str | None, a: dict[str, Any], inferred: list[str]
) -> CollectiveRow:
    """A row from the comm args (G2+) of a record_param_comms or kernel event ({} for none)."""
    check, where = ctx.checker, _where(index)
    raw_dtype = a.get(arg.DTYPE)
    dtype = normalize_dtype(raw_dtype) if isinstance(raw_dtype, str) else None
    in_elems = check.integer(a.get(arg.IN_ELEMS), "in_elems", COUNT, where)
    out_elems = check.integer(a.get(arg.OUT_ELEMS), "out_elems", COUNT, where)
    in_splits = split_sizes(a.get(arg.IN_SPLITS), "in_splits", check, where)
    out_splits = split_sizes(a.get(arg.OUT_SPLITS), "out_splits", check, where)
    raw_pg = next((a[key] for key in arg.PG_NAME if a.get(key) is not None), None)
    pg_name = str(raw_pg) if raw_pg is not None else None
    group = group_named(ctx.groups, pg_name)
    group_size = check.integer(a.get(arg.GROUP_SIZE), "group_size", SIZE, where)
    if group_size is None and group is not None and group.group_size is not None:
        group_size = group.group_size
        inferred.append("group_size")
    known = arg.IN_SPLITS in a or arg.OUT_SPLITS in a
    row = CollectiveRow(
        op_id=index,
        comm_type=comm_type,
        source=RECORD_PARAM_COMMS,
        op_name=op_name,
        is_uneven=is_uneven(op_name, comm_type, in_splits, out_splits, known),
        pg_name=pg_name,
        group_size=group_size,
        dtype=dtype,
        in_elems=in_elems,
        out_elems=out_elems,
        in_bytes=times(in_elems, dtype),
        out_bytes=times(out_elems, dtype),
        in_splits=in_splits or None,
        out_splits=out_splits or None,
        seq=check.integer(a.get(arg.SEQ), "seq", INT64, where),
    )
    # No column holds these (tracekit.parsers.kineto.args, G5): checked so a bad one is warned.
    check.integer(a.get(arg.COMMS_ID), arg.COMMS_ID, UINT64, where)
    check.flag(a.get(arg.IS_ASYNC), arg.IS_ASYNC, where)
    if comm_type in PEER_TYPES:
        row.peer, guessed = _peer(ctx, comm_type, a, pg_name, where)
        if guessed:
            inferred.append("peer")
    return row


def _peer(ctx: Context, comm_type: str, a: dict[str, Any], pg_name: str | None, where: str) -> tuple[int | None, bool]:
    for key in arg.PEER[comm_type]:
        peer = ctx.checker.integer(a.get(key), "peer", RANK, where)
        if peer is not None:
            return peer, False  # a global rank, as the op wrote it
    local = as_int(a.get(arg.RANK))
    if local is None:
        return None, False
    stated = split_sizes(a.get(arg.PG_RANKS), "Process Group Ranks", ctx.checker, where)
    return peer_of_rank_arg(local, pg_name, ctx.groups, stated)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def tensor_arg(dims: list[Any], types: list[Any], index: int) -> tuple[int | None, str | None]:
    """Elements and dtype of the tensor (or TensorList: summed, no dtype) argument at `index`."""
    if index >= len(dims) or index >= len(types) or not isinstance(dims[index], list):
        return None, None
    shape, kind = dims[index], types[index]
    if kind == "TensorList" or (shape and all(isinstance(d, list) for d in shape)):
        if not shape or not all(isinstance(d, list) for d in shape):
            return None, None
        total = 0
        for d in shape:
            n = elements(d)
            if n is None:
                return None, None
            total += n
        return total, None
    dtype = normalize_dtype(kind) if isinstance(kind, str) else None
    if dtype is None:
        return None, None
    return elements(shape), dtype


def first_tensor(ev: Event, args: dict[str, Any] | None) -> tuple[int | None, str | None]:
    """Elements and dtype of the first tensor input (`Input Dims` / `Input type`), if any."""
    a = args if args is not None else event_args(ev)
    dims, types = a.get(arg.INPUT_DIMS), a.get(arg.INPUT_TYPES)
    if not isinstance(dims, list) or not isinstance(types, list) or not dims or not types:
        return None, None
    first, dtype = dims[0], normalize_dtype(types[0]) if isinstance(types[0], str) else None
    if dtype is None or not isinstance(first, list) or not first:
        return None, None
    elems = elements(first)
    return (elems, dtype) if elems is not None else (None, None)


def _timing(row: CollectiveRow, cpu: Event, kernels: list[Event]) -> None:
    timed = [k for k in kernels if k.ts is not None]
    if len(timed) == 1:
        row.start_us, row.duration_us = timed[0].ts, timed[0].dur
    elif timed:
        # Several kernels (coalesced work): first start to last end, at Kineto's ns resolution
        # (the subtraction of two ~1e12 µs doubles would otherwise show rounding noise).
        start = min(k.ts or 0.0 for k in timed)
        end = max((k.ts or 0.0) + (k.dur or 0.0) for k in timed)
        row.start_us, row.duration_us = start, round(end - start, 3)
    else:
        row.start_us, row.duration_us = cpu.ts, cpu.dur

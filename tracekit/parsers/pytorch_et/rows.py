"""PyTorch ET rows: the collective row of each selected node, device times, world size and rank hint."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tracekit.parsers.base import ProcessGroup, TraceMeta
from tracekit.parsers.common import c10d
from tracekit.parsers.common.finish import take_only_group, take_peer_group
from tracekit.parsers.common.groups import default_group, group_named
from tracekit.parsers.common.names import RECORD_PARAM_COMMS, c10d_stem, comm_type_of, normalize_dtype, times
from tracekit.parsers.common.peers import PEER_TYPES, ROOT_TYPES, arrow_peer, peer_in_unnamed_group, peer_of_rank_arg
from tracekit.parsers.common.rows import CollectiveRow
from tracekit.parsers.common.sizes import is_uneven, split_sizes
from tracekit.parsers.common.values import COUNT, RANK, SIZE, Checker, excerpt
from tracekit.parsers.pytorch_et import nodes as attr
from tracekit.parsers.pytorch_et.nodes import (
    Node,
    Sizes,
    attr_int,
    attr_str,
    int_list,
    is_int,
    is_tensor_type,
    sizes_of,
    tensors,
)
from tracekit.parsers.pytorch_et.pairing import Candidate, ancestor_ids

_NODE_TYPE = {"SEND": "COMM_SEND_NODE", "RECV": "COMM_RECV_NODE"}
_SCHEMA_ARGS = re.compile(r"^[^(]*\((.*)\)\s*(->.*)?$", re.S)


@dataclass
class EtRow:
    """A collective row plus what the ops table and the rank hint need from it."""

    row: CollectiveRow
    node: Node
    node_type: str
    own_rank: int | None = None
    group_key: Any = None


def _et_row(row: CollectiveRow, node: Node, inferred: list[str], own_rank: int | None = None, key: Any = None) -> EtRow:
    row.inferred = inferred or None  # this parser has always written null for "nothing inferred"
    return EtRow(row, node, _NODE_TYPE.get(row.comm_type or "", "COMM_COLL_NODE"), own_rank, key)


def _note_bad(sizes: Sizes, field: str, checker: Checker, where: str) -> Sizes:
    sizes.note(field, checker, where)
    return sizes


def rpc_row(cand: Candidate, groups: list[ProcessGroup], checker: Checker) -> EtRow:
    node, attrs, args, comm_type, where = cand.node, cand.attrs, cand.args, cand.comm_type, cand.node.where
    assert args is not None
    inferred: list[str] = []
    ins = _note_bad(sizes_of(node.inputs()), "in_elems", checker, where)
    outs = _note_bad(sizes_of(node.outputs()), "out_elems", checker, where)
    dtype = normalize_dtype(attr_str(attrs, attr.DTYPE, checker, where)) or ins.dtype or outs.dtype

    in_elems = attr_int(attrs, attr.IN_ELEMS, COUNT, checker, where)
    out_elems = attr_int(attrs, attr.OUT_ELEMS, COUNT, checker, where)
    in_bytes = times(in_elems, dtype) if in_elems is not None else ins.bytes
    out_bytes = times(out_elems, dtype) if out_elems is not None else outs.bytes
    if in_elems is None:
        in_elems = ins.elems
    if out_elems is None:
        out_elems = outs.elems

    in_splits = split_sizes(attrs.get(attr.IN_SPLITS), "in_splits", checker, where)
    out_splits = split_sizes(attrs.get(attr.OUT_SPLITS), "out_splits", checker, where)
    splits_known = in_splits is not None or args.in_split is not None
    if in_splits is None:
        in_splits = args.in_split
    if out_splits is None:
        out_splits = args.out_split

    pg_name = attr_str(attrs, attr.PG_NAME, checker, where) or args.pg_name
    group = group_named(groups, pg_name) if pg_name is not None else None
    group_size = attr_int(attrs, attr.PG_SIZE, SIZE, checker, where)
    if group_size is None:
        group_size = args.world_size
    if group_size is None and group is not None and group.group_size is not None:
        group_size = group.group_size
        inferred.append("group_size")
    if group_size is None and comm_type not in PEER_TYPES:
        for splits in (in_splits, out_splits):
            if splits:
                group_size = len(splits)
                inferred.append("group_size")
                break

    start = attr_int(attrs, attr.RANK_START, RANK, checker, where)
    stride = attr_int(attrs, attr.RANK_STRIDE, SIZE, checker, where)
    if start is None:
        start, stride = args.rank_start, args.rank_stride

    peer = None
    own_rank = args.rank
    if comm_type in PEER_TYPES:
        peer, guessed = peer_of_rank_arg(args.rank, pg_name, groups, None, start, stride)
        if guessed:
            inferred.append("peer")
        own_rank = None
    elif comm_type in ROOT_TYPES:
        own_rank = None

    checker.flag(attrs.get(attr.IS_ASYNC), attr.IS_ASYNC, where)
    start_us, duration_us = node.time(checker)
    row = CollectiveRow(
        op_id=node.id,
        comm_type=comm_type,
        source=RECORD_PARAM_COMMS,
        op_name=cand.name,
        is_uneven=is_uneven(cand.name, comm_type, in_splits or None, out_splits or None, splits_known),
        pg_name=pg_name,
        group_size=group_size,
        peer=peer,
        dtype=dtype,
        in_elems=in_elems,
        out_elems=out_elems,
        in_bytes=in_bytes,
        out_bytes=out_bytes,
        in_splits=in_splits or None,
        out_splits=out_splits or None,
        seq=args.seq,
        start_us=start_us,
        duration_us=duration_us,
        rf_id=cand.rf_id,
    )
    key = pg_name if pg_name is not None else ("ptr", args.pg_ptr)
    return _et_row(row, node, inferred, own_rank, key)


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


def functional_group_name(issuer: Node, checker: Checker) -> str | None:
    """The process group a functional collective names: its `group_name` argument (by the op schema
    the file records, else its last string argument); None when it names none."""
    pairs = issuer.inputs()
    names = _schema_arg_names(issuer.attrs().get(attr.OP_SCHEMA))
    if names is not None and len(names) == len(pairs) and c10d.GROUP_NAME_ARG in names:
        value: Any = pairs[names.index(c10d.GROUP_NAME_ARG)][0]
    else:
        value = next((v for v, type_name in reversed(pairs) if type_name == "String"), None)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        checker.note("pg_name", "is not a string", value, issuer.where)
        return None
    return value


def _take_named_group(row: CollectiveRow, name: str, groups: list[ProcessGroup], inferred: list[str]) -> None:
    row.pg_name = name
    group = group_named(groups, name)
    if group is not None and group.group_size is not None:
        row.group_size = group.group_size
        inferred.append("group_size")


def c10d_row(
    cand: Candidate, groups: list[ProcessGroup], checker: Checker, work: Node | None, issuer: Node | None = None
) -> EtRow:
    """A row read from a `c10d::` op; `work` is the backend annotation of its work, when paired;
    `issuer` the functional collective that called it, when one did (it names the group)."""
    node, comm_type, where = cand.node, cand.comm_type, cand.node.where
    inferred: list[str] = []
    pairs = node.inputs()
    stem = c10d_stem(node.name)
    # Argument names: the op_schema the file records, else the rulebook's table (by position).
    names: list[str] | tuple[str, ...] | None = _schema_arg_names(cand.attrs.get(attr.OP_SCHEMA))
    if names is not None and len(names) != len(pairs):
        names = None
    if names is None:
        names = c10d.arg_names(stem)
    in_tensors: list[tuple[int, int, str | None]] = []
    out_tensors: list[tuple[int, int, str | None]] = []
    in_bad = out_bad = None
    int_lists: list[tuple[str | None, list[int]]] = []
    ints: list[tuple[str | None, int]] = []
    tensor_args = 0
    for index, (value, type_name) in enumerate(pairs):
        name = names[index] if names is not None and index < len(names) else None
        if is_tensor_type(type_name):
            if name is not None:
                is_out = c10d.is_output_arg(name)
            else:
                is_out = c10d.lists_output_first(stem) and tensor_args == 0
            if is_out:
                out_bad = tensors(value, type_name, out_tensors) or out_bad
            else:
                in_bad = tensors(value, type_name, in_tensors) or in_bad
            tensor_args += 1
        elif type_name.startswith("GenericList[Int") or type_name == "GenericList[]":
            int_lists.append((name, list(int_list(value, type_name))))
        elif type_name == "Int":
            if not is_int(value):
                raise TypeError(f"Int input {excerpt(value)} is not an integer")
            ints.append((name, value))
    ins = _note_bad(Sizes.of(in_tensors, in_bad), "in_elems", checker, where)
    outs = _note_bad(Sizes.of(out_tensors, out_bad), "out_elems", checker, where)
    if not out_tensors and out_bad is None:
        outs = _note_bad(sizes_of([p for p in node.outputs() if is_tensor_type(p[1])]), "out_elems", checker, where)
    if not outs.present and ins.present and c10d.is_in_place(stem):
        outs = ins  # e.g. recv_(Tensor[] tensors, ...): the buffer the message lands in
    if work is not None and not ins.present and comm_type == comm_type_of(work.name):
        ins = sizes_of(work.inputs())  # the c10d op recorded no tensors; its work did

    in_splits = out_splits = None
    if int_lists:
        by_name = {n: v for n, v in int_lists if n}
        if by_name:
            in_splits = by_name.get(c10d.IN_SPLITS_ARG)
            out_splits = by_name.get(c10d.OUT_SPLITS_ARG)
        elif len(int_lists) >= 2:  # alltoall_base_(output, input, pg, output_splits, input_splits, ...)
            out_splits, in_splits = int_lists[0][1], int_lists[1][1]

    row = CollectiveRow(op_id=node.id, comm_type=comm_type, source="c10d", op_name=stem)
    named = functional_group_name(issuer, checker) if issuer is not None else None
    if named is not None:
        _take_named_group(row, named, groups, inferred)
    else:
        take_only_group(row, groups, inferred)
    if comm_type in PEER_TYPES:
        local = next((v for n, v in ints if n in c10d.PEER_ARGS), None)
        if local is None and names is None and ints:
            local = ints[0][1]
        row.peer, guessed = peer_in_unnamed_group(local, groups)
        if guessed:
            inferred.append("peer")
        take_peer_group(row, local, groups, inferred)

    splits_known = (bool(int_lists) and comm_type == "ALL_TO_ALL") or c10d.has_even_shards(stem)
    start_us, duration_us = node.time(checker)
    if start_us is None and work is not None:
        start_us, duration_us = work.time(checker)
    row.is_uneven = is_uneven(node.name, comm_type, in_splits or None, out_splits or None, splits_known)
    row.dtype = ins.dtype or outs.dtype
    row.in_elems, row.out_elems, row.in_bytes, row.out_bytes = ins.elems, outs.elems, ins.bytes, outs.bytes
    row.in_splits, row.out_splits = in_splits or None, out_splits or None
    row.start_us, row.duration_us, row.rf_id = start_us, duration_us, cand.rf_id
    return _et_row(row, node, inferred)


def annotation_row(cand: Candidate, groups: list[ProcessGroup], checker: Checker) -> EtRow:
    node, comm_type, where = cand.node, cand.comm_type, cand.node.where
    inferred: list[str] = []
    ins = _note_bad(sizes_of(node.inputs()), "in_elems", checker, where)
    outs = _note_bad(sizes_of(node.outputs()), "out_elems", checker, where)
    peer = None
    if comm_type in PEER_TYPES:
        # `nccl:send 0->1`, `nccl:recv 0<-1`: group-local ranks, the peer on the right.
        peer, guessed = peer_in_unnamed_group(arrow_peer(node.name), groups)
        if guessed:
            inferred.append("peer")
    start_us, duration_us = node.time(checker)
    row = CollectiveRow(
        op_id=node.id,
        comm_type=comm_type,
        source="annotation",
        op_name=node.name,
        is_uneven=is_uneven(node.name, comm_type, None, None, False),
        pg_name=attr_str(cand.attrs, attr.PG_NAME, checker, where) or None,
        peer=peer,
        dtype=ins.dtype or outs.dtype,
        in_elems=ins.elems,
        out_elems=outs.elems,
        in_bytes=ins.bytes,
        out_bytes=outs.bytes,
        start_us=start_us,
        duration_us=duration_us,
        rf_id=cand.rf_id,
    )
    return _et_row(row, node, inferred)


def device_times(
    nodes: list[Node], parents: dict[int, int | None], rows: list[EtRow], limit: int, checker: Checker
) -> None:
    """ET+ (chakra_trace_link output): a collective's times become its NCCL kernels' span.

    The linker adds one node per GPU kernel (it has a `cat` key) under the CPU op that launched it;
    kernels of a row's subtree give the device start and duration, the row's own are host times.
    """
    by_id = {r.node.id: r.row for r in rows}
    spans: dict[int, tuple[float, float]] = {}
    for node in nodes:
        if "cat" not in node.raw or "nccl" not in node.name.lower():
            continue
        start, duration = node.time(checker)
        if start is None or duration is None:
            continue
        for ancestor in ancestor_ids(node.id, parents, limit):
            if ancestor in by_id:
                low, high = spans.get(ancestor, (start, start + duration))
                spans[ancestor] = (min(low, start), max(high, start + duration))
                break
    for op_id, (low, high) in spans.items():
        by_id[op_id].start_us = low
        by_id[op_id].duration_us = high - low


def world_and_hint(meta: TraceMeta, rows: list[EtRow], checker: Checker) -> None:
    """The world size (the default group's, else the one size default-group rows state) and the
    rank hint (the one `rank` argument of the caller's own in the default group's collectives)."""
    groups = meta.process_groups
    default = default_group(groups)
    if default is not None and default.group_size is not None:
        meta.world_size = default.group_size
    if meta.world_size is None:
        sizes = {r.row.group_size for r in rows if r.row.pg_name == "0" and r.row.group_size is not None}
        if len(sizes) == 1:
            meta.world_size = sizes.pop()

    own = [r for r in rows if r.own_rank is not None and r.own_rank >= 0]
    keys = {r.group_key for r in own}
    chosen: list[EtRow] = []
    if default is not None and default.pg_name in keys:
        chosen = [r for r in own if r.group_key == default.pg_name]
    elif "0" in keys:
        chosen = [r for r in own if r.group_key == "0"]
    elif len(keys) == 1:  # a single group (layout A/B record only a pointer)
        chosen = own
    else:
        whole = {g.pg_name for g in groups if not g.ranks}
        chosen = [r for r in own if r.group_key in whole] if len(whole) == 1 else []
    ranks = {r.own_rank for r in chosen}
    if len(ranks) == 1:
        hint = ranks.pop()
        meta.rank_hint = checker.bounded(hint, "rank", RANK, chosen[0].node.where)

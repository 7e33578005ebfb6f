"""PyTorch ET selection: which nodes are collectives, and which one node stands for each.

A logical collective may be recorded by several nodes (`c10d::allreduce_` -> `record_param_comms`
-> `nccl:all_reduce`); exactly one becomes the row: the outermost `record_param_comms`; else a c10d
op paired with the backend annotation of its work (tracekit.parsers.common.pairing: a pair shares
the thread `tid`, "before" is file order, the enclosing ops are the annotation's ancestors); else a
lone annotation; else a lone c10d op, unless an unpaired annotation or a paired c10d op hangs under
it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracekit.parsers.base import TraceError
from tracekit.parsers.common.names import comm_type_of
from tracekit.parsers.common.pairing import Call, pair_works
from tracekit.parsers.common.values import INT64, Checker, as_number
from tracekit.parsers.pytorch_et.nodes import (
    COLLECTIVE_NAME,
    KIND_ANNOTATION,
    KIND_C10D,
    KIND_RPC,
    RF_ID,
    TID,
    Node,
    RpcArgs,
    attr_int,
    attr_str,
    kind,
)

# What reading a wrongly shaped node raises; turned into a TraceError naming the node.
BAD_CONTENT = (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError)


@dataclass
class Candidate:
    """A node that names a collective: a record_param_comms, a backend annotation or a c10d op."""

    node: Node
    kind: int
    comm_type: str
    name: str
    attrs: dict[str, Any]
    args: RpcArgs | None
    rf_id: int | None
    tid: int | str | None


@dataclass
class Selected:
    """The one candidate that is a collective's row, and the work annotation paired with it."""

    candidate: Candidate
    work: Node | None = None


def candidates(nodes: list[Node], checker: Checker) -> dict[int, Candidate]:
    """Every node that names a communication op (not `wait`, `coalesced`), by node id."""
    found: dict[int, Candidate] = {}
    for node in nodes:
        node_kind = kind(node.name)
        if node_kind is None:
            continue
        try:
            attrs = node.attrs()
            args = None
            if node_kind == KIND_RPC:
                args = RpcArgs(node.inputs())
                name = attr_str(attrs, COLLECTIVE_NAME, checker, node.where) or args.coll_name
            else:
                name = node.name
            comm_type = comm_type_of(name)
        except BAD_CONTENT as exc:
            raise TraceError(f"malformed {node.name} node: {exc}", node.where) from None
        if comm_type is None or name is None:
            continue
        tid = attrs.get(TID)
        found[node.id] = Candidate(
            node,
            node_kind,
            comm_type,
            name,
            attrs,
            args,
            attr_int(attrs, RF_ID, INT64, checker, node.where),
            tid if isinstance(tid, int | str) and not isinstance(tid, bool) else None,
        )
    return found


def ancestor_ids(node_id: int, parents: dict[int, int | None], limit: int) -> list[int]:
    out = []
    current = parents.get(node_id)
    while current is not None:
        out.append(current)
        if len(out) > limit:
            raise TraceError("ctrl_deps form a cycle", f"node id {node_id}")
        current = parents.get(current)
    return out


def select(found: dict[int, Candidate], parents: dict[int, int | None], limit: int) -> list[Selected]:
    """One candidate per logical collective (see the module docstring), in file order."""
    above: dict[int, set[int]] = {}  # candidate id -> kinds of candidate ancestors
    below: set[int] = set()  # ids with an anchor/annotation candidate underneath
    rpc_below: set[int] = set()  # ids with an anchor underneath
    ancestors: dict[int, list[int]] = {}
    for cid, cand in found.items():
        kinds: set[int] = set()
        chain = ancestor_ids(cid, parents, limit)
        for ancestor in chain:
            entry = found.get(ancestor)
            if entry is not None:
                kinds.add(entry.kind)
            if cand.kind != KIND_C10D:
                below.add(ancestor)
            if cand.kind == KIND_RPC:
                rpc_below.add(ancestor)
        above[cid] = kinds
        if cand.kind == KIND_ANNOTATION:
            ancestors[cid] = chain

    # Annotations with no anchor (gloo, or NCCL without record_param_comms) and the c10d ops that
    # dispatched them: each pair is one collective, read from the c10d op. With gloo the ctrl_deps
    # of these nodes are unreliable (a c10d op or gloo node may hang under an earlier, unrelated
    # gloo node or c10d op), so only record_param_comms above or below rules a node out here.
    def free(cid: int, wanted: int) -> bool:
        return found[cid].kind == wanted and KIND_RPC not in above[cid] and cid not in rpc_below

    works = [_call(found[cid]) for cid in found if free(cid, KIND_ANNOTATION)]
    ops = [_call(found[cid]) for cid in found if free(cid, KIND_C10D)]
    paired = pair_works(ops, works, ancestors)  # annotation -> c10d op
    dispatched = {op: annotation for annotation, op in paired.items()}
    # A lone c10d op stays out when an unpaired annotation or a paired c10d op hangs under it.
    blocked: set[int] = set()
    for cid, chain in ancestors.items():
        if cid not in paired:
            blocked.update(chain)
    for op in dispatched:
        blocked.update(ancestor_ids(op, parents, limit))

    selected = []
    for cid, cand in found.items():
        kinds = above[cid]
        if cand.kind == KIND_RPC:
            keep = KIND_RPC not in kinds
        elif cand.kind == KIND_ANNOTATION:
            keep = not kinds & {KIND_RPC, KIND_ANNOTATION} and cid not in below and cid not in paired
        else:
            keep = cid in dispatched or (not kinds and cid not in rpc_below and cid not in blocked)
        if keep:
            work = found[dispatched[cid]].node if cid in dispatched else None
            selected.append(Selected(cand, work))
    return selected


def _call(cand: Candidate) -> Call:
    start = as_number(cand.node.raw.get("ts"))  # ET+ host time, when the file has one
    return Call(cand.node.id, cand.comm_type, cand.tid, cand.rf_id, cand.node.index, start)

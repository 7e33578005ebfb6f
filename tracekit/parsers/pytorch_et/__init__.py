"""PyTorch Execution Trace JSON (`torch.profiler.ExecutionTraceObserver`), every schema version.

One file is one rank's host-side op tree: `{"schema", "pid", "time", "start_ts", "nodes": [...],
"finish_ts"}`. Two node layouts exist and are told apart per node, not by the version string, so
unknown future versions parse with the nearest layout instead of being rejected:

The package reads in stages: `decode` (the JSON document), `nodes` (one view over every node
layout, tensors, attrs and record_param_comms inputs), `pairing` (which node stands for each
collective), `rows` (the rows). Every rule of collective semantics comes from
tracekit.parsers.common.

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
paired by the rulebook (tracekit.parsers.common.pairing): by `rf_id` on the same `tid`, the work
going to the not yet paired c10d op with the greatest smaller rf_id of a kind it can run as; without
rf_ids, the nearest enclosing c10d op, else the earliest unpaired one before it in the file. The pair
is ONE row read from the c10d op (source 'c10d'): its id, rf_id and name (`_reduce_scatter_base_`),
its comm_type (so a reduce-scatter stays REDUCE_SCATTER), sizes from its tensor arguments by name
(`op_schema`, else tracekit.parsers.common.c10d), all-to-all splits from its split-size arguments,
peer from the dst/src argument. The ProcessGroup argument is an opaque `<Object>`: a c10d op called
by a functional collective (`_c10d_functional::all_reduce`, its nearest such ancestor, of the same
comm_type) runs in the group that op names by its `group_name` argument (tracekit.parsers.common.c10d;
pg_name read, group_size from the group); otherwise, when the file lists one group only, that is the
op's (pg_name and group_size inferred), and the peer is read through the rank's groups
(tracekit.parsers.common.peers).
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
`## process_group:init ##` node) or `global_rank_start + k * global_rank_stride`, as
tracekit.parsers.common.peers says. Rows write `inferred` as null when nothing was inferred.

Times. Plain ET files carry none (start/duration stay null). ET+ files carry `ts`/`inclusive_dur`
(microseconds, profiler clock) on CPU nodes; a collective row takes the span of the NCCL kernel
nodes under it when there are any (device time), else its anchor's host times.
`TraceMeta.started_at` is the top-level `time`, the writer's local wall clock ("%Y-%m-%d %X") with
no zone in the string: it is labelled UTC as written, so it is off by the host's UTC offset.
"""

from __future__ import annotations

import gc

from tracekit.parsers.base import BatchSink, Source, TableBuffer, TraceError, TraceMeta
from tracekit.parsers.common.finish import finished
from tracekit.parsers.common.groups import merge_groups, read_process_groups
from tracekit.parsers.common.names import PG_INIT_MARK, functional_comm_type
from tracekit.parsers.common.rows import CollectiveBuffer
from tracekit.parsers.common.values import INT64, Checker
from tracekit.parsers.pytorch_et.decode import load, started_at
from tracekit.parsers.pytorch_et.nodes import KIND_ANNOTATION, KIND_RPC, Node
from tracekit.parsers.pytorch_et.pairing import BAD_CONTENT, Candidate, ancestor_ids, candidates, select
from tracekit.parsers.pytorch_et.rows import EtRow, annotation_row, c10d_row, device_times, rpc_row, world_and_hint

FORMAT = "pytorch_et"


def parse(source: Source, sink: BatchSink) -> TraceMeta:
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


def _parse(source: Source, sink: BatchSink) -> TraceMeta:
    doc, raw_nodes = load(source)
    meta = TraceMeta(
        format=FORMAT,
        schema_version=doc.get("schema"),
        started_at=started_at(doc.get("time")),
        node_count=len(raw_nodes),
    )
    checker = Checker(meta)
    meta.schema_version = checker.text(meta.schema_version, "schema", "top-level object")
    nodes = _nodes(raw_nodes, checker)
    parents = {node.id: node.parent for node in nodes}

    # Process groups first: collective rows map peers through them.
    pg_nodes: set[int] = set()
    for node in nodes:
        if PG_INIT_MARK in node.name:
            pg_nodes.add(node.id)
            try:
                payload = next((v for v, _ in node.inputs()), None)
            except BAD_CONTENT as exc:
                raise TraceError(f"process_group:init node: {exc}", node.where) from None
            groups = read_process_groups(payload, checker, node.where)
            meta.process_groups = merge_groups(meta.process_groups, groups)

    rows = _rows(nodes, parents, meta, checker)
    for r in rows:  # bounded before anything reads them: the world size comes from these rows
        finished(r.row, checker, r.node.where)
    world_and_hint(meta, rows, checker)
    _write_ops(nodes, rows, pg_nodes, sink, checker)
    collectives = CollectiveBuffer(sink)
    collectives.extend([r.row for r in rows])
    collectives.flush()
    return meta


def _nodes(raw_nodes: list[object], checker: Checker) -> list[Node]:
    nodes: list[Node] = []
    seen: set[int] = set()
    for index, raw in enumerate(raw_nodes):
        if not isinstance(raw, dict):
            raise TraceError(f"node is a JSON {type(raw).__name__}, not an object", f"nodes[{index}]")
        node = Node(raw, index, checker)
        if node.id in seen:
            raise TraceError(f"duplicate node id {node.id}", node.where)
        seen.add(node.id)
        nodes.append(node)
    return nodes


def _rows(nodes: list[Node], parents: dict[int, int | None], meta: TraceMeta, checker: Checker) -> list[EtRow]:
    """One row per logical collective (pytorch_et.pairing picks the node), in file order."""
    limit = len(nodes)
    groups = meta.process_groups
    functional = {node.id: node for node in nodes if functional_comm_type(node.name) is not None}
    rows: list[EtRow] = []
    for chosen in select(candidates(nodes, checker), parents, limit):
        cand = chosen.candidate
        try:
            if cand.kind == KIND_RPC:
                rows.append(rpc_row(cand, groups, checker))
            elif cand.kind == KIND_ANNOTATION:
                rows.append(annotation_row(cand, groups, checker))
            else:
                issuer = _issuer(cand, functional, parents, limit) if functional else None
                rows.append(c10d_row(cand, groups, checker, chosen.work, issuer))
        except BAD_CONTENT as exc:
            raise TraceError(f"malformed {cand.node.name} node: {exc}", cand.node.where) from None
    rows.sort(key=lambda r: r.node.index)
    device_times(nodes, parents, rows, limit, checker)
    return rows


def _issuer(cand: Candidate, functional: dict[int, Node], parents: dict[int, int | None], limit: int) -> Node | None:
    """The functional collective that called c10d op `cand`: its nearest functional ancestor, if
    that one is of the same comm_type (an unrelated one further up names no group of this op)."""
    for ancestor in ancestor_ids(cand.node.id, parents, limit):
        issuer = functional.get(ancestor)
        if issuer is not None:
            return issuer if functional_comm_type(issuer.name) == cand.comm_type else None
    return None


def _write_ops(nodes: list[Node], rows: list[EtRow], pg_nodes: set[int], sink: BatchSink, checker: Checker) -> None:
    """Every node, in file order; ids beyond int64 are null (with a warning)."""
    node_types = {r.node.id: r.node_type for r in rows}
    ops = TableBuffer("ops", sink)
    low, high = INT64.low, INT64.high
    for node in nodes:
        raw = node.raw
        # Plain ET nodes carry no times: skip the checks for the common case.
        timed = "ts" in raw or "inclusive_dur" in raw or "dur" in raw
        start_us, duration_us = node.time(checker) if timed else (None, None)
        op_id: int | None = node.id
        if not low <= node.id <= high:
            op_id = checker.bounded(node.id, "op_id", INT64, node.where)
        parent = node.parent
        if parent is not None and not low <= parent <= high:
            parent = checker.bounded(parent, "ctrl_deps", INT64, node.where)
        ops.append(
            {
                "op_id": op_id,
                "name": node.name,
                "type": "METADATA_NODE" if node.id in pg_nodes else node_types.get(node.id, "COMP_NODE"),
                "start_us": start_us,
                "duration_us": duration_us,
                "ctrl_deps": [parent] if parent is not None else None,
                "data_deps": None,
            }
        )
    ops.flush()

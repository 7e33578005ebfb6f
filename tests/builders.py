"""Small trace builders for tests: Chakra .et files made with plain protobuf, no tracekit code, and
PyTorch execution traces of hand-made jobs (tracekit's ET writer, whose output its tests check
against the observer's layout)."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.internal.encoder import _VarintBytes  # type: ignore[attr-defined]

from tracekit.parsers import et_def_pb2 as pb
from tracekit.parsers.common.names import C10D_NAMES

COMM_TYPES = {"ALL_REDUCE": 0, "ALL_GATHER": 2, "BROADCAST": 5, "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7}


def et_bytes(collectives: list[tuple[str, int]], version: str = "0.0.4", pg_name: str | None = None) -> bytes:
    """A Chakra ET stream: GlobalMetadata, then one compute node and one COMM_COLL_NODE per entry."""
    records = [pb.GlobalMetadata(version=version).SerializeToString()]
    node_id = 0
    for comm_type, size in collectives:
        comp = pb.Node(id=node_id, name=f"compute_{node_id}", type=pb.COMP_NODE, duration_micros=10)
        node_id += 1
        attrs = [
            pb.AttributeProto(name="is_cpu_op", bool_val=False),
            pb.AttributeProto(name="comm_type", int64_val=COMM_TYPES[comm_type]),
            pb.AttributeProto(name="comm_size", int64_val=size),
        ]
        if pg_name is not None:
            attrs.append(pb.AttributeProto(name="pg_name", string_val=pg_name))
        comm = pb.Node(
            id=node_id,
            name=f"{comm_type.lower()}_{node_id}",
            type=pb.COMM_COLL_NODE,
            ctrl_deps=[node_id - 1],
            attr=attrs,
        )
        node_id += 1
        records += [comp.SerializeToString(), comm.SerializeToString()]
    return b"".join(_VarintBytes(len(r)) + r for r in records)


def write_et_job(folder: Path, ranks: list[int], collectives: list[tuple[str, int]], gz: bool = False) -> list[Path]:
    """One .et file per rank, named `<folder>.<rank>.et` as Chakra tools name them."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in ranks:
        data = et_bytes(collectives)
        path = folder / f"{folder.name}.{rank}.et"
        if gz:
            path = path.with_name(path.name + ".gz")
            data = gzip.compress(data)
        path.write_bytes(data)
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------------------
# PyTorch execution traces of hand-made jobs, written as ExecutionTraceObserver writes them


@dataclass(frozen=True)
class Comm:
    """One communication call of one rank: `kind` is a comm_type (ALL_REDUCE, ..., SEND, RECV),
    `elems` the input elements of `dtype`, `group` a name given to write_pytorch_et_job ("world" for
    the default group), `peer` the global rank on the other side of a SEND or RECV, `splits` the
    elements sent to / received from each member of the group (an all-to-allv)."""

    kind: str
    elems: int
    dtype: str = "Float"
    group: str = "world"
    peer: int | None = None
    in_splits: tuple[int, ...] | None = None
    out_splits: tuple[int, ...] | None = None


def write_pytorch_et_job(
    folder: Path,
    world: int,
    groups: dict[str, list[list[int]]],
    calls: Callable[[int], Iterable[Comm]],
    ranks: Iterable[int] | None = None,
) -> None:
    """One PyTorch ET JSON per rank (`<folder>.<rank>.json`): its `## process_group:init ##` node lists
    the default group and every group of `groups` (a name: its groups' ranks) holding the rank, and
    its `record_param_comms` nodes are `calls(rank)`, in order. Only the ranks `ranks` (default all)
    get a file, as when part of a job was traced."""
    from tracekit.writers import pytorch_et

    folder.mkdir(parents=True, exist_ok=True)
    names: dict[tuple[str, int], str] = {}
    members: dict[str, list[int]] = {"0": []}
    for desc, lists in groups.items():
        for ranks_of in lists:
            name = str(len(members))
            members[name] = list(ranks_of)
            for rank in ranks_of:
                names[(desc, rank)] = name
    descs = {name: desc for (desc, _), name in names.items()} | {"0": "default_pg"}
    for rank in range(world) if ranks is None else ranks:
        mine = ["0"] + sorted({names[(d, rank)] for d in groups if (d, rank) in names}, key=int)
        entries = [
            {
                "pg_name": name,
                "pg_desc": descs[name],
                "backend_config": "cuda:nccl",
                "ranks": members[name],
                "group_size": len(members[name]) or world,
                "group_count": len(mine),
            }
            for name in mine
        ]
        nodes = [pytorch_et.thread_node(), pytorch_et.pg_init_node(3, entries, rf_id=1)]
        seqs: dict[tuple[str, bool], int] = {}
        for comm in calls(rank):
            pg = "0" if comm.group == "world" else names[(comm.group, rank)]
            group = members[pg] or list(range(world))
            p2p = comm.peer is not None
            seq = seqs[(pg, p2p)] = seqs.get((pg, p2p), 0) + 1
            start, stride = pytorch_et.rank_range(members[pg])
            node_id = len(nodes) + 2
            nodes.append(
                pytorch_et.comm_node(
                    node_id,
                    _c10d_name(comm),
                    rf_id=node_id,
                    seq=seq,
                    dtype=comm.dtype,
                    in_nelems=comm.elems,
                    out_nelems=_out_elems(comm, len(group)),
                    rank=group.index(rank if comm.peer is None else comm.peer),
                    pg_name=pg,
                    pg_desc=descs[pg],
                    pg_size=len(group),
                    rank_start=start,
                    rank_stride=stride,
                    in_splits=list(comm.in_splits) if comm.in_splits else None,
                    out_splits=list(comm.out_splits) if comm.out_splits else None,
                    tensor_ids=(2 * node_id, 2 * node_id + 1),
                    device=f"cuda:{rank % 8}",
                    p2p=p2p,
                )
            )
        nodes.append(pytorch_et.process_node())
        doc = pytorch_et.document(nodes, pid=1000 + rank, time="2024-03-01 00:00:00", start_ts=1_709_251_200_000)
        pytorch_et.write(folder / f"{folder.name}.{rank}.json", doc)


def _c10d_name(comm: Comm) -> str:
    if comm.kind in ("SEND", "RECV"):
        return comm.kind.lower()
    if comm.kind == "ALL_TO_ALL" and comm.in_splits and len(set(comm.in_splits) | set(comm.out_splits or ())) > 1:
        return "all_to_allv"
    return C10D_NAMES[comm.kind]


def _out_elems(comm: Comm, group_size: int) -> int:
    if comm.kind == "ALL_GATHER":
        return comm.elems * group_size
    if comm.kind == "REDUCE_SCATTER":
        return comm.elems // group_size
    if comm.kind == "ALL_TO_ALL" and comm.out_splits:
        return sum(comm.out_splits)
    return comm.elems


def foreign_database(folder: Path, kind: str) -> Path:
    """DATASET/tracekit.duckdb that tracekit did not write: `empty` (0 bytes), `text`, or `another
    database` (a valid DuckDB file with a table of someone else's)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tracekit.duckdb"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("not a database\n")
    else:
        import duckdb

        with duckdb.connect(str(path)) as con:
            con.execute("create table expenses (item varchar, amount double)")
    return path

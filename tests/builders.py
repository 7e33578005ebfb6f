"""Small trace builders for tests: Chakra .et files made with plain protobuf, no tracekit code."""

from __future__ import annotations

import gzip
from pathlib import Path

from google.protobuf.internal.encoder import _VarintBytes  # type: ignore[attr-defined]

from tracekit.parsers import et_def_pb2 as pb

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

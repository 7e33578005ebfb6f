"""Convert the captured PyTorch execution traces into Chakra .et files, one per rank.

    python sample_traces/capture/to_chakra.py        # writes sample_traces/chakra/<job>/<job>.<rank>.et

Like Chakra's PyTorch converter, every ET node becomes a Node (ctrl_deps = its parent), the
`## process_group:init ##` node a METADATA_NODE, and each collective a COMM_COLL_NODE (or a
COMM_SEND_NODE / COMM_RECV_NODE with comm_src/comm_dst) whose comm_size is the bytes the rank
passes in; unlike it, peers are kept. It reads the ETs with tracekit's own parser and writes
with tracekit's Chakra writer, so the same collectives exist in two formats: tests ingest both
and expect the same (comm_type, in_bytes, peer) rows.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import tracekit
from tracekit.writers.chakra_et import EtWriter, comm_node, comp_node, pg_init_node, recv_node, send_node

HERE = Path(__file__).resolve().parent
CAPTURED = HERE.parent / "captured"
OUT = HERE.parent / "chakra"


def convert_rank(et_path: Path, rank: int, out: Path) -> int:
    parsed = tracekit.parse_file(et_path)
    collectives = {row["op_id"]: row for row in parsed.collectives.to_pylist()}
    groups = [
        {
            "pg_name": g.pg_name,
            "pg_desc": g.pg_desc,
            "backend_config": g.backend,
            "ranks": g.ranks,
            "group_size": g.group_size,
        }
        for g in parsed.meta.process_groups
    ]
    with EtWriter(out) as writer:
        writer.write_metadata(version="0.0.4", attrs={"schema": f"{parsed.meta.schema_version}-converted"})
        for op in parsed.ops.to_pylist():
            writer.write_node(_node(op, collectives.get(op["op_id"]), groups, rank))
    return len(collectives)


def _node(op: dict, coll: dict | None, groups: list[dict], rank: int):  # type: ignore[no-untyped-def]
    deps = {"ctrl_deps": op["ctrl_deps"] or ()}
    if op["type"] == "METADATA_NODE":
        return pg_init_node(op["op_id"], groups)
    if coll is None:
        return comp_node(op["op_id"], op["name"], **deps)
    size = coll["in_bytes"] or 0
    if coll["comm_type"] == "SEND":
        return send_node(op["op_id"], op["name"], size, coll["peer"], rank=rank, pg_name=coll["pg_name"], **deps)
    if coll["comm_type"] == "RECV":
        return recv_node(op["op_id"], op["name"], size, coll["peer"], rank=rank, pg_name=coll["pg_name"], **deps)
    return comm_node(op["op_id"], op["name"], coll["comm_type"], size, coll["pg_name"], **deps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captured", type=Path, default=CAPTURED)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    for job in sorted(p for p in args.captured.iterdir() if p.is_dir()):
        for et_path in sorted(job.glob("et_rank*.json.gz")):
            rank = int(et_path.name.removeprefix("et_rank").split(".")[0])
            target = args.out / job.name / f"{job.name}.{rank}.et"
            target.parent.mkdir(parents=True, exist_ok=True)
            count = convert_rank(et_path, rank, target)
            print(f"{target.relative_to(args.out.parent)}: {count} collectives")


if __name__ == "__main__":
    main()

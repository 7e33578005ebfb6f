"""Convert the captured PyTorch execution traces into Chakra .et files, one per rank.

    python sample_traces/capture/to_chakra.py        # writes sample_traces/chakra/<job>/<job>.<rank>.et

Like Chakra's PyTorch converter, every ET node becomes a Node (ctrl_deps = its parent), the
`## process_group:init ##` node a METADATA_NODE, and each collective a COMM_COLL_NODE (or a
COMM_SEND_NODE / COMM_RECV_NODE with comm_src/comm_dst) whose comm_size is the bytes the rank
passes in and whose pg_name is the group the op ran in, when the ET tells it; unlike it, peers
are kept, and so are an all-to-allv's split sizes (tracekit's in_splits/out_splits attributes,
in elements; empty lists where the trace says the splits are even: tracekit/writers/chakra_et.py).
It reads the ETs with tracekit's own parser and writes with tracekit's Chakra writer, so the
same collectives exist in two formats: tests ingest both and expect the same rows (type, bytes,
group, group size, peer, splits) for every rank.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import tracekit
from tracekit.parsers.common.sizes import SPLITTABLE_TYPES
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
    in_splits, out_splits = _splits(coll)
    return comm_node(
        op["op_id"],
        op["name"],
        coll["comm_type"],
        size,
        coll["pg_name"],
        in_splits=in_splits,
        out_splits=out_splits,
        attrs=_typed_sizes(coll),
        **deps,
    )


def _typed_sizes(coll: dict) -> dict[str, object]:
    """The element type and output size the PyTorch ET recorded, as the comm attrs tracekit reads."""
    attrs: dict[str, object] = {}
    if coll["dtype"]:
        attrs["dtype"] = coll["dtype"]
    if coll["out_elems"] is not None:
        attrs["out_msg_nelems"] = coll["out_elems"]
    return attrs


def _splits(coll: dict) -> tuple[list[int] | None, list[int] | None]:
    """The split lists the ET recorded; empty lists where it records the splits as even (c10d took
    empty split lists, or the op has even shards); none where it does not say."""
    if coll["in_splits"] is not None or coll["out_splits"] is not None:
        return coll["in_splits"], coll["out_splits"]
    if coll["is_uneven"] is False and coll["comm_type"] in SPLITTABLE_TYPES:
        return [], []
    return None, None


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

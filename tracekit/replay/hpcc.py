"""HPCC's ns-3 RDMA simulator input: flow.txt, topology.txt and trace.txt.

Target: alibaba-edu/High-Precision-Congestion-Control 9f4be2a, `simulation/scratch/third`
(research/simulators-run.md §2; checked by ../shared/simcheck/hpcc_flow.py).

* flow.txt: the flow count, then one flow per line `src dst pg dport size start`: src/dst are host
  node ids (one per GPU-NIC: node id = global rank), pg 3 and dport 100 (what HPCC's traffic
  generator writes), size in bytes, start in seconds with 9 decimals (the simulator resolves 1 ns),
  sorted by start time (the simulator does not check; its clock would run backwards). No comments
  (there is no comment syntax). A flow above 4,294,967,295 bytes (uint32) is cut into near-equal
  pieces with the same start. More than 55,535 flows between one pair (the source port wraps) is an
  error. Only flows between hosts by default: NVLink traffic is not this simulator's business.
* topology.txt: `node_num switch_num link_num`, the switch ids, then `a b rate delay 0` links of the
  two-tier Clos of tracekit.replay.clos: GPU → its rack's leaf, every leaf → every spine. Node ids:
  GPUs 0..world-1, then leaves, then spines.
* trace.txt: `0` (no node traced).

Run: point the upstream `simulation/mix/config.txt` keys TOPOLOGY_FILE, FLOW_FILE and TRACE_FILE at
these files and set SIMULATOR_STOP_TIME past the last start (written in OUT/replay.json).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.errors import InputError
from tracekit.replay.clos import Clos
from tracekit.replay.network import network_flows, split_large

if TYPE_CHECKING:
    import polars as pl

    from tracekit.replay import Replay

SIZE_LIMIT = 4_294_967_295
MAX_NODES = 65_536
MAX_FLOWS_PER_PAIR = 65_535 - 10_000
PRIORITY_GROUP = 3
DPORT = 100


def write_hpcc(result: Replay, out: Path, clos: Clos | None = None, include_intra_host: bool = False) -> list[Path]:
    import polars as pl

    clos = clos or Clos()
    out.mkdir(parents=True, exist_ok=True)
    flows = result.flows.filter(network_flows(result.flows, include_intra_host))
    flows = split_large(flows.select("flow_id", "src_rank", "dst_rank", "bytes", "start_s"), SIZE_LIMIT)
    flows = flows.with_columns(start_ns=(pl.col("start_s") * 1e9).round().cast(pl.Int64)).sort(
        "start_ns", "flow_id", "piece"
    )
    busiest = flows.group_by("src_rank", "dst_rank").len().sort("len", descending=True).head(1)
    if busiest.height and busiest["len"][0] > MAX_FLOWS_PER_PAIR:
        pair = busiest.row(0, named=True)
        raise InputError(
            f"job {result.job}: {pair['len']:,} flows from rank {pair['src_rank']} to {pair['dst_rank']}: HPCC "
            f"numbers the source ports of one pair from 10000 as uint16, so at most {MAX_FLOWS_PER_PAIR:,} fit"
        )
    lines = _lines(flows)
    flow_path = out / "flow.txt"
    flow_path.write_text(f"{flows.height}\n" + "".join(f"{line}\n" for line in lines))
    topology_path = out / "topology.txt"
    topology_path.write_text(topology_text(result, clos))
    trace_path = out / "trace.txt"
    trace_path.write_text("0\n")
    return [flow_path, topology_path, trace_path]


def _lines(flows: pl.DataFrame) -> list[str]:
    """`src dst pg dport size start` with start in seconds, 9 decimals, from integer nanoseconds."""
    import polars as pl

    seconds = (pl.col("start_ns") // 1_000_000_000).cast(pl.String)
    fraction = (pl.col("start_ns") % 1_000_000_000).cast(pl.String).str.zfill(9)
    line = pl.concat_str(
        [
            pl.col("src_rank").cast(pl.String),
            pl.col("dst_rank").cast(pl.String),
            pl.lit(str(PRIORITY_GROUP)),
            pl.lit(str(DPORT)),
            pl.col("bytes").cast(pl.String),
            pl.concat_str([seconds, fraction], separator="."),
        ],
        separator=" ",
    )
    return flows.select(line.alias("line"))["line"].to_list()


def topology_text(result: Replay, clos: Clos) -> str:
    """The two-tier Clos of the job's racks (see the module docstring)."""
    import numpy as np

    world = result.world_size
    where = result.placement.locate(np.arange(world, dtype=np.int64))
    racks = np.unique(where["rack"])
    leaf_of_rack = {int(rack): world + i for i, rack in enumerate(racks)}
    spines = [world + len(racks) + s for s in range(clos.spines)]
    node_num = world + len(racks) + clos.spines
    if node_num > MAX_NODES:
        raise InputError(f"job {result.job}: {node_num} nodes; HPCC encodes node ids in 16 bits (at most {MAX_NODES})")
    rate = f"{clos.link_gbps}Gbps"
    delay = f"{clos.link_delay_ms:g}ms"
    links = [f"{rank} {leaf_of_rack[int(rack)]} {rate} {delay} 0" for rank, rack in enumerate(where["rack"].tolist())]
    for leaf in leaf_of_rack.values():
        for spine in spines:
            links.extend(f"{leaf} {spine} {rate} {delay} 0" for _ in range(clos.links_per_spine))
    switches = list(leaf_of_rack.values()) + spines
    header = f"{node_num} {len(switches)} {len(links)}\n{' '.join(map(str, switches))}\n"
    return header + "".join(f"{link}\n" for link in links)

"""HPCC's ns-3 RDMA simulator input: flow.txt, topology.txt, trace.txt, config.txt and run.sh.

Target: alibaba-edu/High-Precision-Congestion-Control 9f4be2a, `simulation/scratch/third`
(research/simulators-run.md §2; checked by ../shared/simcheck/hpcc_flow.py).

* Hosts are NICs: host node id = global NIC id (host × NICs per host + NIC), so every flow leaves
  and enters through the NIC the replay gave it, and each QP is a flow of its own.
* flow.txt: the flow count, then one flow per line `src dst pg dport size start`: pg 3 and dport 100
  (what HPCC's traffic generator writes), size in bytes, start in seconds with 9 decimals (the
  simulator resolves 1 ns), sorted by start time (the simulator does not check; its clock would run
  backwards). No comments (there is no comment syntax). A flow above 4,294,967,295 bytes (uint32)
  is cut into near-equal pieces with the same start. More than 55,535 flows between one pair (the
  source port wraps) is an error. Only network flows by default: NVLink traffic is not this
  simulator's business. flow.txt carries no dependencies: every flow starts at its replayed time,
  so compare per-flow or per-collective completion times, not the job's end (research §4.8).
* topology.txt: `node_num switch_num link_num`, the switch ids, then `a b rate delay 0` per duplex
  link of the fabric (tracekit.fabric: NIC ↔ leaf, leaf ↔ spine, spine ↔ core; the ideal fabric is
  one switch); rates in Gb/s as the fabric has them.
* config.txt: HPCC's settings (CC_MODE 3, HPCC; the other keys as the repository's
  simulation/mix/config.txt sets them) with the file keys pointed at these files, the stop time
  past the last flow, and KMAX/KMIN/PMAX entries for every link rate of the topology (a missing
  rate is silently misread by the optimized build).
* run.sh: the command, with the link rates it assumes in a comment.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import InputError
from tracekit.replay.emitters import Emission, Emitter
from tracekit.replay.network import network_flows, split_large

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

    from tracekit.fabric.topology import Network
    from tracekit.replay.result import Replay

SIZE_LIMIT = 4_294_967_295
MAX_NODES = 65_536
MAX_FLOWS_PER_PAIR = 65_535 - 10_000
PRIORITY_GROUP = 3
DPORT = 100
# HPCC's own settings (simulation/mix/config.txt of the targeted snapshot), file keys aside.
SETTINGS = (
    ("ENABLE_QCN", "1"), ("USE_DYNAMIC_PFC_THRESHOLD", "1"), ("PACKET_PAYLOAD_SIZE", "1000"), ("CC_MODE", "3"),
    ("ALPHA_RESUME_INTERVAL", "1"), ("RATE_DECREASE_INTERVAL", "4"), ("CLAMP_TARGET_RATE", "0"),
    ("RP_TIMER", "900"), ("EWMA_GAIN", "0.00390625"), ("FAST_RECOVERY_TIMES", "1"), ("RATE_AI", "50Mb/s"),
    ("RATE_HAI", "100Mb/s"), ("MIN_RATE", "100Mb/s"), ("DCTCP_RATE_AI", "1000Mb/s"), ("ERROR_RATE_PER_LINK", "0.0000"),
    ("L2_CHUNK_SIZE", "4000"), ("L2_ACK_INTERVAL", "1"), ("L2_BACK_TO_ZERO", "0"), ("HAS_WIN", "1"),
    ("GLOBAL_T", "1"), ("VAR_WIN", "1"), ("FAST_REACT", "1"), ("U_TARGET", "0.95"), ("MI_THRESH", "0"),
    ("INT_MULTI", "1"), ("MULTI_RATE", "0"), ("SAMPLE_FEEDBACK", "0"), ("PINT_LOG_BASE", "1.05"),
    ("PINT_PROB", "1.0"), ("RATE_BOUND", "1"), ("ACK_HIGH_PRIO", "0"), ("LINK_DOWN", "0 0 0"), ("ENABLE_TRACE", "0"),
    ("BUFFER_SIZE", "32"),
)  # fmt: skip
# ECN marking thresholds per link rate: the repository's values at 25/50/100 Gb/s, scaled with the rate above.
ECN_KMAX_PER_25G, ECN_KMIN_PER_25G, ECN_PMAX = 400, 100, 0.2


def write_hpcc(result: Replay, out: Path, network: Network, include_intra_host: bool = False) -> list[Path]:
    return _write_files(result, out, network, include_intra_host)[0]


def _write_files(
    result: Replay, out: Path, network: Network, include_intra_host: bool
) -> tuple[list[Path], set[float]]:
    """The files, and the link rates (b/s) of their topology."""
    import polars as pl

    out.mkdir(parents=True, exist_ok=True)
    flows = result.flows.filter(network_flows(result.flows, include_intra_host))
    if include_intra_host:  # NVLink flows go between the two GPUs' own NICs' nodes
        flows = flows.with_columns(_own_nic(result, "src"), _own_nic(result, "dst"))
    flows = split_large(flows.select("flow_id", "src_nic", "dst_nic", "bytes", "start_s"), SIZE_LIMIT)
    flows = flows.filter(pl.col("src_nic") != pl.col("dst_nic"))
    flows = flows.with_columns(start_ns=(pl.col("start_s") * 1e9).round().cast(pl.Int64)).sort(
        "start_ns", "flow_id", "piece"
    )
    busiest = flows.group_by("src_nic", "dst_nic").len().sort("len", descending=True).head(1)
    if busiest.height and busiest["len"][0] > MAX_FLOWS_PER_PAIR:
        pair = busiest.row(0, named=True)
        raise InputError(
            f"job {result.job}: {pair['len']:,} flows from NIC {pair['src_nic']} to {pair['dst_nic']}: HPCC "
            f"numbers the source ports of one pair from 10000 as uint16, so at most {MAX_FLOWS_PER_PAIR:,} fit"
        )
    lines = _lines(flows)
    flow_path = out / "flow.txt"
    flow_path.write_text(f"{flows.height}\n" + "".join(f"{line}\n" for line in lines))
    text, rates = topology_text(result, network)
    topology_path = out / "topology.txt"
    topology_path.write_text(text)
    trace_path = out / "trace.txt"
    trace_path.write_text("0\n")
    last = float(flows["start_ns"].max()) / 1e9 if flows.height else 0.0  # type: ignore[arg-type]
    config_path = out / "config.txt"
    config_path.write_text(config_text(rates, stop_time_s=round(last + 1.0, 3)))
    run_path = out / "run.sh"
    speeds = ", ".join(f"{r / 1e9:g} Gb/s" for r in sorted(rates))
    run_path.write_text(
        "#!/bin/sh\n"
        f"# HPCC ns-3 (scratch/third) on the replay of job {result.job}: links at {speeds}, as the replay's\n"
        "# fabric has them. Run from this folder; SIMS names the folder holding bin/hpcc_third and lib/.\n"
        'cd "$(dirname "$0")" && LD_LIBRARY_PATH="${SIMS:-../../shared/sims}/lib" '
        '"${SIMS:-../../shared/sims}/bin/hpcc_third" config.txt\n'
    )
    return [flow_path, topology_path, trace_path, config_path, run_path], rates


def _own_nic(result: Replay, end: str) -> pl.Expr:
    import polars as pl

    gpus = result.placement.gpus_per_host
    nic_of_gpu = result.placement.nic_of_gpu(_arange(gpus)).tolist()
    local = (pl.col(f"{end}_rank") % gpus).replace_strict(list(range(gpus)), nic_of_gpu)
    return pl.coalesce(pl.col(f"{end}_nic"), pl.col(f"{end}_host") * result.placement.nics + local).alias(f"{end}_nic")


def _arange(n: int) -> np.ndarray:
    import numpy as np

    return np.arange(n)


def _lines(flows: pl.DataFrame) -> list[str]:
    """`src dst pg dport size start` with start in seconds, 9 decimals, from integer nanoseconds."""
    import polars as pl

    seconds = (pl.col("start_ns") // 1_000_000_000).cast(pl.String)
    fraction = (pl.col("start_ns") % 1_000_000_000).cast(pl.String).str.zfill(9)
    line = pl.concat_str(
        [
            pl.col("src_nic").cast(pl.String),
            pl.col("dst_nic").cast(pl.String),
            pl.lit(str(PRIORITY_GROUP)),
            pl.lit(str(DPORT)),
            pl.col("bytes").cast(pl.String),
            pl.concat_str([seconds, fraction], separator="."),
        ],
        separator=" ",
    )
    return flows.select(line.alias("line"))["line"].to_list()


def topology_text(result: Replay, network: Network) -> tuple[str, set[float]]:
    """The fabric's NICs and switches as HPCC nodes, its duplex links; and the link rates (b/s) used."""
    import numpy as np

    from tracekit.fabric.topology import NIC, NODE_KINDS

    kinds = network.node_kind
    nic_kind = NODE_KINDS.index("nic")
    switch_kinds = [NODE_KINDS.index(k) for k in ("leaf", "spine", "core", "fabric")]
    nic_nodes = np.flatnonzero(kinds == nic_kind)
    switch_nodes = np.flatnonzero(np.isin(kinds, switch_kinds))
    node_id = np.full(len(kinds), -1, dtype=np.int64)
    node_id[nic_nodes] = network.node_index[nic_nodes]
    node_id[switch_nodes] = len(nic_nodes) + np.arange(len(switch_nodes))
    node_num = len(nic_nodes) + len(switch_nodes)
    if node_num > MAX_NODES:
        raise InputError(f"job {result.job}: {node_num} nodes; HPCC encodes node ids in 16 bits (at most {MAX_NODES})")
    keep = network.up & (network.tier >= NIC)  # one line per duplex link: the direction towards the core
    a, b = node_id[network.link_src[keep]], node_id[network.link_dst[keep]]
    rates = network.capacity_Bps[keep] * 8
    delays = network.latency_s[keep] * 1e3
    links = [
        f"{x} {y} {_rate(r)} {d:g}ms 0"
        for x, y, r, d in zip(a.tolist(), b.tolist(), rates.tolist(), delays.tolist(), strict=True)  # fmt: skip
    ]
    header = f"{node_num} {len(switch_nodes)} {len(links)}\n{' '.join(map(str, node_id[switch_nodes].tolist()))}\n"
    return header + "".join(f"{link}\n" for link in links), {float(round(r)) for r in rates.tolist()}


def _rate(bits_per_s: float) -> str:
    gbps = bits_per_s / 1e9
    return f"{gbps:g}Gbps" if gbps == round(gbps, 6) else f"{round(bits_per_s)}bps"


def config_text(rates: set[float], stop_time_s: float) -> str:
    """config.txt for scratch/third: HPCC's settings, these files, the stop time and an ECN entry per rate."""
    files = [("TOPOLOGY_FILE", "topology.txt"), ("FLOW_FILE", "flow.txt"), ("TRACE_FILE", "trace.txt"),
             ("TRACE_OUTPUT_FILE", "mix.tr"), ("FCT_OUTPUT_FILE", "fct.txt"), ("PFC_OUTPUT_FILE", "pfc.txt"),
             ("QLEN_MON_FILE", "qlen.txt"), ("QLEN_MON_START", "2000000000"),
             ("QLEN_MON_END", "2010000000")]  # fmt: skip
    ordered = sorted(int(r) for r in rates) or [100_000_000_000]
    kmax = " ".join(f"{r} {max(1, round(ECN_KMAX_PER_25G * r / 25e9))}" for r in ordered)
    kmin = " ".join(f"{r} {max(1, round(ECN_KMIN_PER_25G * r / 25e9))}" for r in ordered)
    pmax = " ".join(f"{r} {ECN_PMAX}" for r in ordered)
    lines = [f"{k} {v}" for k, v in (*SETTINGS, *files)]
    lines += [f"SIMULATOR_STOP_TIME {stop_time_s:.3f}", f"KMAX_MAP {len(ordered)} {kmax}",
              f"KMIN_MAP {len(ordered)} {kmin}", f"PMAX_MAP {len(ordered)} {pmax}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _write(e: Emission) -> tuple[list[Path], dict[str, Any]]:
    files, rates = _write_files(e.result, e.out, e.network, e.include_intra_host)
    return files, {"run": "sh hpcc/run.sh", "link_gbps": sorted({round(r / 1e9, 6) for r in rates})}


EMITTER = Emitter(
    name="hpcc",
    simulator="HPCC's ns-3",
    folder="hpcc",
    summary="HPCC ns-3: flow.txt, topology.txt, trace.txt, config.txt and run.sh",
    write=_write,
)

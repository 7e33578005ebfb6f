"""Which algorithm, protocol and how many channels NCCL runs a collective with: its own cost model.

Transcribed from NVIDIA/nccl 2.30.7 src/graph/tuning.cc (`ncclTopoTuneModel`, `ncclTopoGetAlgoTime`)
and src/enqueue.cc (the channel count of one collective), as numbers and formulas, not code. For
each enabled (algorithm, protocol) NCCL estimates `latency + bytes / bandwidth` and runs the
cheapest:

* bandwidth per graph channel is the graph search's bwIntra (two nodes or fewer) or bwInter; bus
  bandwidth = graph channels × that, then Ring LL min(llMaxBw, ½), Ring LL128 min(0.92×, ch ×
  perChMaxRingLL128), Tree min(0.92×, ch × perChMaxTree), Tree LL min(÷3.8, llMaxBw), Tree LL128
  min(×120/128 (7/9 on one node), ch × perChMaxTreeLL128), ×0.85 when a node's tree is NCCL's TREE
  pattern; algorithm bandwidth = bus × nRanks/nsteps (Ring), × ½ (Tree);
* latency: Ring base + (nsteps − inter steps) × max(intra hw latency, net overhead) + inter steps ×
  NET hw latency; Tree base + 2 × ((ppn − 1) × intra + ⌊log2 nodes⌋ × NET); the tables below;
* Tree AllReduce bandwidth × NCCL's tree correction factor per power-of-two size; Ring Simple
  AllReduce latency × 1.4 across nodes once bytes/(channels × ranks) ≥ 64;
* Tree serves only AllReduce; AllGather/ReduceScatter run Ring (PAT needs one GPU per node and is
  not modelled); Broadcast/Reduce Ring; LL128 needs NVLink inside the host; NVLS (NVLink SHARP,
  NVLSTree across nodes) and CollNet Direct (SHARP) compete too where `--in-network-reduction`
  switches them on and NCCL would allow them (tracekit.replay.nccl.in_network: their numbers);
* channels: the communicator's, lowered while bytes < channels × threads × threshold (Simple 512
  threads × 64 B, LL 512 × 8 B (× ranks for Ring), LL128 640 × 8 B).

The host's CPU is taken as Intel (NCCL reads llMaxBw's multi-node row and the 1 µs net overhead
from the CPU vendor).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracekit.replay.layout import GroupLayout
    from tracekit.replay.nccl.comm import CommTopology
    from tracekit.replay.nccl.options import NcclOptions
    from tracekit.replay.placement import Placement

NO_DATA = ("BARRIER",)
PROTOCOLS = ("LL", "LL128", "Simple")
# µs, per protocol (LL, LL128, Simple)
BASE_LATENCY = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
HW_LATENCY = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
    "pcie": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)},
}  # fmt: skip
ARCH_ROW = {70: 0, 80: 1, 90: 2, 100: 3}
# [arch row][1 node, 2 nodes, more]; multi-node llMaxBw uses the CPU row (Intel: 0)
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
PER_CH_RING_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (40.0, 40.0, 40.0))
PER_CH_TREE_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
PER_CH_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
NET_OVERHEAD_US = 1.0  # Intel CPUs (2.0 on AMD); × 3 for Simple
# Tree AllReduce bandwidth correction per log2(bytes / 64), 64 B .. 256 MiB (LL, LL128, Simple)
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)  # fmt: skip
THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}  # bytes per thread before NCCL drops a channel
# Bytes a pipeline piece carries (NCCL's chunk: one buffer step; LL and LL128 hold half or 15/16 data)
CHUNK_BYTES = {"LL": 32 * 1024, "LL128": 576_000, "Simple": 512 * 1024}
MAX_PIECES = 16  # pipeline pieces per channel at most (bounds the flows of a pipelined tree or chain)
P2P_CHUNK = 128 * 1024  # NCCL_P2P_NET_CHUNKSIZE across nodes
NCCL_ALGORITHMS = {"ALL_REDUCE": ("tree", "ring"), "ALL_GATHER": ("ring",), "REDUCE_SCATTER": ("ring",),
                   "BROADCAST": ("ring",), "REDUCE": ("ring",)}  # fmt: skip
P2P_TYPES = ("ALL_TO_ALL", "GATHER", "SCATTER")
# `--algorithm observed`: the algorithm a collective ran as NCCL names it (ncclAlgoStr, NCCL
# Inspector's coll_algo) onto the replay's; NVLS_TREE (NVLS inside the node, a tree between nodes)
# is replayed as NVLS, the COLLNET variants as CollNet. PAT (NCCL 2.23+, one GPU per node) has no
# replay algorithm: NCCL's model chooses for it.
OBSERVED = "observed"
NCCL_ALGORITHM_NAMES = {"RING": "ring", "TREE": "tree", "NVLS": "nvls", "NVLS_TREE": "nvls",
                        "COLLNET_DIRECT": "collnet", "COLLNET_CHAIN": "collnet"}  # fmt: skip
NCCL_PROTOCOL_NAMES = {"SIMPLE": "Simple", "LL": "LL", "LL128": "LL128"}  # ncclProtoStr


@dataclass(frozen=True)
class Choice:
    algorithm: str
    protocol: str
    channels: int  # ring/tree channels, or p2p channels per peer
    chunks: int = 1  # pipeline pieces per channel
    estimate_us: float = 0.0  # NCCL's own estimate of the collective's time (0 when it has none)


def choose(
    comm_type: str,
    layout: GroupLayout,
    topo: CommTopology,
    placement: Placement,
    options: NcclOptions,
    size: int,
    forced: str = "auto",
) -> Choice:
    """The algorithm, protocol, channels and pipeline pieces of one collective of `size` bytes (S = in_bytes)."""
    if comm_type in NO_DATA:
        return Choice("", "Simple", 0)
    if comm_type in P2P_TYPES:
        return Choice("direct", "Simple", p2p_parts(topo, max(size // max(layout.n, 1), 0)), 1)
    from tracekit.replay.nccl import in_network

    candidates = NCCL_ALGORITHMS.get(comm_type, ()) + in_network.candidates(comm_type, layout, topo, placement, options)
    if forced in in_network.ALGORITHMS and forced not in candidates:
        # asked for by name: NCCL_ALGO=NVLS / COLLNETDIRECT forces it where NCCL's rules allow it at all
        candidates += in_network.candidates(comm_type, layout, topo, placement, replace(options, in_network=(forced,)))
    if forced != "auto" and forced not in candidates:
        return Choice(forced, "Simple", 1, 1)  # not one of NCCL's: its own template, one channel
    nbytes = size * layout.n if comm_type == "ALL_GATHER" else size
    options_list = [
        (a, p) for a in (candidates if forced == "auto" else (forced,)) for p in _protocols(placement, options)
    ]
    best: tuple[float, str, str] | None = None
    for algorithm, protocol in options_list:
        t = estimate_us(comm_type, algorithm, protocol, topo, placement, options, nbytes, layout.n)
        if t is not None and (best is None or t < best[0]):
            best = (t, algorithm, protocol)
    if best is None:
        return Choice(candidates[0] if candidates else "ring", "Simple", 1, 1)
    t, algorithm, protocol = best
    channels = (
        in_network.channels(algorithm, topo, options)
        if algorithm in in_network.ALGORITHMS
        else channels_for(algorithm, protocol, topo, nbytes, layout.n)
    )
    return Choice(algorithm, protocol, channels, pieces(comm_type, algorithm, protocol, size, channels), t)


def _protocols(placement: Placement, options: NcclOptions) -> tuple[str, ...]:
    if options.protocol is not None:
        return (options.protocol,)
    # LL128 is on by default only where the host's GPUs talk over NVLink (tuning.cc ll128 enable rule)
    return PROTOCOLS if placement.intra_host == "nvlink" else ("LL", "Simple")


def estimate_us(
    comm_type: str,
    algorithm: str,
    protocol: str,
    topo: CommTopology,
    placement: Placement,
    options: NcclOptions,
    nbytes: int,
    ranks: int,
) -> float | None:
    """NCCL's modelled time in µs (None where its model disables the pair)."""
    from tracekit.replay.nccl import in_network

    if algorithm in in_network.ALGORITHMS:
        if protocol != "Simple":
            return None
        bw = in_network.bandwidth(comm_type, algorithm, topo, placement, options, ranks)
        return in_network.latency(algorithm, topo, ranks) + nbytes / (1000 * bw) if bw > 0 else None
    bw = bandwidth(comm_type, algorithm, protocol, topo, placement, options, ranks)
    if bw <= 0:
        return None
    lat = latency(comm_type, algorithm, protocol, topo, placement, ranks)
    p = PROTOCOLS.index(protocol)
    log_size = int(math.log2(nbytes >> 6)) if nbytes >> 6 > 0 else -1
    if algorithm == "tree" and comm_type == "ALL_REDUCE" and 0 <= log_size < 23:
        bw *= TREE_CORRECTION[p][log_size]
    if (algorithm == "ring" and protocol == "Simple" and topo.nodes > 1 and comm_type == "ALL_REDUCE"
            and nbytes // max(topo.channels * ranks, 1) >= 64):  # fmt: skip
        lat *= 1.4 if options.gpu_arch >= 80 else 1.9
    return lat + nbytes / (1000 * bw)


def bandwidth(
    comm_type: str,
    algorithm: str,
    protocol: str,
    topo: CommTopology,
    placement: Placement,
    options: NcclOptions,
    ranks: int,
) -> float:
    """NCCL's algorithm bandwidth in GB/s for the pair (tuning.cc, see the module docstring)."""
    row = ARCH_ROW[options.gpu_arch]
    nodes = topo.nodes
    index = 0 if nodes <= 1 else 1 if nodes == 2 else 2
    ll_max = LL_MAX_BW[row if nodes == 1 else 0][index]
    nsteps = _steps(comm_type, ranks)
    channels = topo.graph_channels
    per = topo.bw_intra if nodes <= 2 else topo.bw_inter
    bus = channels * per
    if algorithm == "ring" and protocol == "LL":
        bus = min(ll_max, bus * 0.5)
    if algorithm == "ring" and protocol == "LL128":
        bus = min(bus * 0.92, channels * PER_CH_RING_LL128[row][index])
    if algorithm == "tree" and comm_type == "ALL_REDUCE":
        bus = min(bus * 0.92, channels * PER_CH_TREE[row][index])
    if algorithm == "tree" and protocol == "LL":
        bus = min(bus / 3.8, ll_max)
    if algorithm == "tree" and protocol == "LL128":
        bus = min(bus * (7 / 9 if nodes == 1 else 120 / 128), channels * PER_CH_TREE_LL128[row][index])
    if algorithm == "tree" and topo.tree_pattern_tree:
        bus *= 0.85
    if algorithm == "ring" and nsteps == 0:
        return 0.0  # a ring of one rank: NCCL copies locally and never tunes it (none of its pairs apply)
    ratio = ranks / nsteps if algorithm == "ring" else 0.5
    return bus * ratio


def latency(
    comm_type: str, algorithm: str, protocol: str, topo: CommTopology, placement: Placement, ranks: int
) -> float:
    """NCCL's modelled latency in µs for the pair (tuning.cc)."""
    p = PROTOCOLS.index(protocol)
    nodes = topo.nodes
    intra_hw = "nvlink" if placement.intra_host == "nvlink" else "pcie"
    base = BASE_LATENCY[algorithm][p]
    intra = HW_LATENCY[intra_hw][algorithm][p]
    ppn = ranks / max(nodes, 1)
    inter = HW_LATENCY["net"]["tree" if ppn == 1 else algorithm][p]
    nsteps = _steps(comm_type, ranks)
    if algorithm == "ring":
        hw = HW_LATENCY["net" if nodes > 1 else intra_hw]
        if comm_type in ("BROADCAST", "REDUCE"):
            # NCCL's rings on these hosts are not "same channels": chunk latency per step (Simple: Tree's)
            step = hw["tree" if protocol == "Simple" else "ring"][p]
            return base + nsteps * step
        overhead = NET_OVERHEAD_US * (3 if protocol == "Simple" else 1) if nodes > 1 else 0.0
        intra = max(intra, overhead)
        inter_steps = 0 if nodes == 1 else 2 * (nodes - 1) if comm_type == "ALL_REDUCE" else nodes - 1
        return base + (nsteps - inter_steps) * intra + inter_steps * inter
    if algorithm == "tree":
        return base + 2 * ((int(ppn) - 1) * intra + _log2i(nodes) * inter)
    return base


def channels_for(algorithm: str, protocol: str, topo: CommTopology, nbytes: int, ranks: int) -> int:
    """Channels one collective of `nbytes` (NCCL's nBytes) runs on: lowered while each thread would get
    fewer bytes than NCCL's threshold (enqueue.cc)."""
    nc = topo.channels
    if algorithm not in ("ring", "tree"):
        return nc
    threshold = THRESHOLD[protocol] * (ranks if algorithm == "ring" and protocol == "LL" else 1)
    while nc >= 2 and nbytes < nc * THREADS[protocol] * threshold:
        nc -= 1
    return nc


def pieces(comm_type: str, algorithm: str, protocol: str, size: int, channels: int) -> int:
    """Pipeline pieces per channel of a tree, a chain (Broadcast/Reduce) or an in-network reduction:
    NCCL's chunks, at most MAX_PIECES."""
    from tracekit.replay.nccl.in_network import ALGORITHMS, NVLS_CHUNK

    if algorithm not in ("tree", *ALGORITHMS) and comm_type not in ("BROADCAST", "REDUCE"):
        return 1
    per_channel = size / max(channels, 1)
    chunk = NVLS_CHUNK if algorithm == "nvls" else CHUNK_BYTES[protocol]
    return max(1, min(MAX_PIECES, math.ceil(per_channel / chunk)))


def p2p_parts(topo: CommTopology, peer_bytes: int) -> int:
    """p2p channels a send of `peer_bytes` to a remote peer is split over (enqueue.cc: 64-128 KiB parts)."""
    if topo.nodes <= 1:
        return 1
    most = max(topo.p2p_per_peer, 1)
    least = most
    while least > 1 and least * topo.n > topo.p2p_channels:
        least //= 2
    parts = min(least, max(1, math.ceil(peer_bytes / (P2P_CHUNK // 2))))
    while peer_bytes / parts > P2P_CHUNK and parts <= most // 2:
        parts *= 2
    return parts


def _steps(comm_type: str, ranks: int) -> int:
    if comm_type == "ALL_REDUCE":
        return 2 * (ranks - 1)
    if comm_type in ("ALL_GATHER", "REDUCE_SCATTER"):
        return max(ranks - 1, 1)
    return ranks


def _log2i(value: int) -> int:
    return max(value, 1).bit_length() - 1

"""NCCL's cost model for its in-network reductions: NVLS / NVLSTree and CollNet Direct.

Transcribed from NVIDIA/nccl 2.30.7 src/graph/tuning.cc (`ncclTopoTuneModel`) and the NVLS and
CollNet graph searches of src/graph/search.cc, as numbers and formulas, not code:

* NVLS graph: one channel per GPU of the host (NCCL's NVLS heads); per channel bwIntra is NCCL's
  highest search speed s with (g + 1) · s within a GPU's NVLink bandwidth (the search takes s from
  every GPU and 2s from the head; H100: 9 · 40 ≤ 370.8 → 40 GB/s); the second pass then raises
  bwInter speed by speed while it is below 2 · bwIntra: inside a node to the array's top (60 GB/s
  on Hopper), across nodes to the NIC path's speed (48 GB/s for 400 Gb/s NICs on PCIe Gen5).
* NVLS bandwidth per channel: min(bwIntra · nvlsEfficiency · (ch − 1)/ch · (2 for AllReduce, else
  (ppn − 1)/ppn), bwInter (× 2 for NVLSTree on 2 nodes), NVLSTree's per-channel cap); bus = ch ×
  that; algorithm bandwidth = bus · nRanks/nsteps (AllReduce; AG/RS are not converted).
* NVLS latency: the NVLink hardware latency (25 µs), + the NET one for NVLSTree per tree level
  (2 · log2(nodes) · 20.9 µs); no base latency.
* CollNet Direct (Simple only): bus = channels · bwIntra, divided by the GPU/NIC factor
  f = ppn/ch − (ppn/ch − 1)/2, × 0.85 on Hopper and later, × ½ to algorithm bandwidth; latency
  2 · (min(1, ppn − 1) · 3.7 + (ppn − 1) · 0.4) + 31 µs (14 µs with one GPU per node).

Which groups may use them (NCCL's enable rules): NVLS on Hopper or later, NVSwitch hosts (NVLink
inside), the same GPUs on every host, at least two; AllGather/ReduceScatter with NVLS on one node only
(across nodes NCCL needs a CollNet plugin's iallgather/ireducescatter). CollNet from two nodes
(NCCL_COLLNET_NODE_THRESHOLD), AllReduce only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.replay.nccl.options import IN_NETWORK

if TYPE_CHECKING:
    from tracekit.replay.layout import GroupLayout
    from tracekit.replay.nccl.comm import CommTopology
    from tracekit.replay.nccl.options import NcclOptions
    from tracekit.replay.placement import Placement

ALGORITHMS = IN_NETWORK  # the in-network reductions, as NcclOptions.in_network names them
# NCCL's per-channel search speeds inside one node, GB/s (search.cc), Hopper and Blackwell
SPEEDS_INTRA = {90: (60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3), 100: (90, 80, 70, 60, 50, 45, 40, 30, 24, 20, 19, 18)}
NVLS_EFFICIENCY = {90: 0.85, 100: 0.74}
NVLS_TREE_CAP = {90: (0.0, 57.7, 45.5), 100: (0.0, 96.0, 80.0)}  # perChMaxNVLSTreeBws [1, 2, more nodes]
NVLS_CHANNELS = {90: 16, 100: 32}  # nvlsChannels: the channels an NVLS collective runs on
NVLS_LATENCY_US = 25.0  # hwLat[NVLink][NVLS][Simple]
NVLS_TREE_NET_US = 20.9  # hwLat[NET][NVLSTree][Simple]
COLLNET_NVLINK_US, COLLNET_NET_US, TREE_NET_US = 3.7, 31.0, 14.0
MAX_DIRECT_HEADS = 8  # NCCL_MAX_DIRECT_ARITY + 1
NVLS_CHUNK = 128 * 1024  # NCCL_NVLS_CHUNKSIZE


def candidates(
    comm_type: str, layout: GroupLayout, topo: CommTopology, placement: Placement, options: NcclOptions
) -> tuple[str, ...]:
    """The in-network reductions switched on that NCCL would consider for this collective and group:
    the hardware they need (NVLS: Hopper or later, NVSwitch hosts), then the algorithm's own rule of
    which groups it serves (tracekit.replay.algorithms.nvls / collnet)."""
    from tracekit.replay import algorithms
    from tracekit.replay.algorithms import Request

    wanted = [
        a for a in options.in_network if a != "nvls" or (options.gpu_arch >= 90 and placement.intra_host == "nvlink")
    ]
    if not wanted:
        return ()
    req = Request(comm_type, layout, topo)
    registry = algorithms.algorithms()
    return tuple(a for a in ALGORITHMS if a in wanted and registry[a].serves(comm_type) and _applies(registry[a], req))


def _applies(algorithm: Any, req: Any) -> bool:
    return algorithm.applies is None or bool(algorithm.applies(req))


def _arch(options: NcclOptions) -> int:
    """The row of NCCL's NVLS tables: Blackwell or Hopper (NVLS needs Hopper or later)."""
    return 100 if options.gpu_arch >= 100 else 90


def nvls_graph(topo: CommTopology, placement: Placement, options: NcclOptions) -> tuple[int, float, float]:
    """(channels, bwIntra, bwInter) of NCCL's NVLS graph for this communicator."""
    from tracekit.replay.nccl.topology import SPEEDS_INTER, path_gbytes, snap

    arch = _arch(options)
    heads = max(topo.ranks_per_node, 1)
    speeds = SPEEDS_INTRA[arch] if topo.nodes <= 1 else SPEEDS_INTER[arch]
    intra = snap(placement.nvlink_gbytes / (heads + 1), speeds)
    # pass 2 raises bwInter one speed at a time while it is below 2 x bwIntra and the search still
    # succeeds: always inside a node, up to the NIC path's speed across nodes
    limit = path_gbytes(placement) if topo.nodes > 1 else float("inf")
    inter = intra
    for speed in sorted(s for s in speeds if intra < s <= limit):
        if inter >= 2 * intra:
            break
        inter = float(speed)
    return heads, intra, inter


def bandwidth(
    comm_type: str, algorithm: str, topo: CommTopology, placement: Placement, options: NcclOptions, ranks: int
) -> float:
    """NCCL's algorithm bandwidth in GB/s (Simple: the only protocol these run)."""
    arch = _arch(options)
    nodes, ppn = topo.nodes, ranks / max(topo.nodes, 1)
    nsteps = 2 * (ranks - 1) if comm_type == "ALL_REDUCE" else max(ranks - 1, 1)
    if algorithm == "nvls":
        channels, bw_intra, bw_inter = nvls_graph(topo, placement, options)
        if channels < 2:
            return 0.0
        intra = bw_intra * NVLS_EFFICIENCY[arch] * (channels - 1) / channels
        intra *= 2.0 if comm_type == "ALL_REDUCE" else (ppn - 1) / ppn
        tree = nodes > 1
        inter = bw_inter * (2 if tree and nodes <= 2 else 1)
        cap = NVLS_TREE_CAP[arch][0 if nodes <= 1 else 1 if nodes == 2 else 2] if tree else float("inf")
        bus = channels * min(intra, inter, cap)
        return bus * ranks / nsteps if comm_type == "ALL_REDUCE" else bus
    channels = min(max(topo.graph_channels, 1), MAX_DIRECT_HEADS)
    bus = channels * topo.bw_intra
    factor = ppn / channels
    bus /= factor - (factor - 1) / 2
    if options.gpu_arch >= 90:
        bus *= 0.85
    return bus * 0.5


def latency(algorithm: str, topo: CommTopology, ranks: int) -> float:
    """NCCL's modelled latency in µs."""
    nodes, ppn = topo.nodes, ranks // max(topo.nodes, 1)
    if algorithm == "nvls":
        levels = max(nodes, 1).bit_length() - 1
        return NVLS_LATENCY_US + (2 * levels * NVLS_TREE_NET_US if nodes > 1 else 0.0)
    inter = TREE_NET_US if ppn == 1 else COLLNET_NET_US
    return 2 * (min(1, ppn - 1) * COLLNET_NVLINK_US + (ppn - 1) * 0.4) + inter


def channels(algorithm: str, topo: CommTopology, options: NcclOptions) -> int:
    """Channels a collective of this algorithm runs on (NVLS: nvlsChannels; CollNet: the communicator's)."""
    if algorithm == "nvls":
        return min(NVLS_CHANNELS[_arch(options)], max(topo.channels, 1))
    return max(topo.channels, 1)


def hop_latencies_us(algorithm: str) -> tuple[float, float]:
    """Latency of one hop inside a host and across the network, in µs: NCCL's latency of the whole
    algorithm spread over the hops of its first piece (NVLS: pull, reduce, store, multicast over
    NVLink; CollNet: NIC to switch and back)."""
    if algorithm == "nvls":
        return NVLS_LATENCY_US / 4, NVLS_TREE_NET_US
    return COLLNET_NVLINK_US, COLLNET_NET_US / 2

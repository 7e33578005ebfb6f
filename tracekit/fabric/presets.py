"""Fabrics named after public designs. Every number says where it comes from; [est] marks our own
estimate where the sources give none. Research notes: ../shared/research/meta-workload-findings.md
(§1.9 routing, §1.12 topology) and peers-and-simulators.md.

* `meta-ai-zone`: Meta's RoCE AI Zone (Gangidi et al., "RDMA over Ethernet for Distributed AI
  Training at Meta Scale", SIGCOMM'24): a two-stage Clos of rack training switches (RTSW, leaf)
  and cluster training switches (CTSW, spine); 2 Grand Teton hosts (16 GPUs, one 400G NIC each)
  per RTSW, non-blocking inside the zone (meta-workload-findings.md §1.12, from [S1][S4][S6];
  sysdesign-wiki "AI Zone"). The rack is the placement's (`Endpoints.hosts_per_rack`, 2 by
  default). 16 CTSWs with one 400G link from each RTSW: [est] (the sources give the ratio, not
  the count). ECMP on the RoCE 5-tuple, as deployed first (§1.9). 1 us per link: [est].
* `meta-ai-zone-2x`: the same zone after the short-term fix for path pinning's congested RTSW
  uplinks, twice the RTSW uplink bandwidth (§1.9, [S1][S2]; Glenn Lockwood's notes on Meta's
  H100 clusters: T0-T1 "undersubscribed by 2:1"): two 400G links to each CTSW, ratio 1:2.
* `meta-24k`: the 24K-GPU building: AI Zones of 192 racks (3,072 GPUs, non-blocking) joined by
  aggregator training switches (ATSW) at about 7:1 oversubscription above the CTSWs (§1.12,
  [S1][S6]; Lockwood: "7:1 blocking"). As clos3: 192 racks per pod, 16 spines per pod [est],
  4 cores per spine plane [est], core tier 7:1.
* `dgx-h100-superpod`: NVIDIA DGX SuperPOD with DGX H100, reference architecture RA-11333-001
  (docs.nvidia.com/dgx-superpod/reference-architecture-scalable-infrastructure-h100, "Network
  Fabrics", Table 4): scalable units of 32 nodes (31 DGX + UFM), rail-aligned, 8 rails, one NDR
  400G leaf per rail per SU; a 4-SU pod has 32 leaves, 16 spines and 1,024 leaf-spine cables,
  so 32 uplinks per leaf (2 to each spine): non-blocking (the uplinks run at the NICs' NDR rate).
  InfiniBand adaptive routing modelled as spraying [est].
* `clos2-1to1`, `clos2-2to1`: a plain leaf-spine with 16 spines, non-blocking and 2:1 (the
  textbook shapes; any placement's racks).
* `clos3-fat-tree`: a non-blocking three-tier fat tree (Al-Fares et al., SIGCOMM'08): 16 racks
  per pod, 16 spines per pod, 16 cores per plane [est sizes].
* `rail-only`: Wang et al., "Rail-only: a low-cost high-performance network for training LLMs
  with trillion parameters" (arXiv 2307.12169): rail switches only; cross-rail traffic goes over
  NVLink inside the host first.
* `ideal`: the non-blocking fabric of the same NIC speed every slowdown is measured against.
"""

from __future__ import annotations

from tracekit.errors import InputError
from tracekit.fabric.topology import FabricSpec

PRESETS: dict[str, FabricSpec] = {
    "ideal": FabricSpec(kind="ideal", name="ideal"),
    "meta-ai-zone": FabricSpec(kind="clos2", name="meta-ai-zone", spines=16, oversubscription=1.0),
    "meta-ai-zone-2x": FabricSpec(
        kind="clos2", name="meta-ai-zone-2x", spines=16, links_per_spine=2, oversubscription=0.5
    ),
    "meta-24k": FabricSpec(
        kind="clos3",
        name="meta-24k",
        racks_per_pod=192,
        spines=16,
        cores=4,
        oversubscription=1.0,
        core_oversubscription=7.0,
    ),
    "dgx-h100-superpod": FabricSpec(
        kind="rail",
        name="dgx-h100-superpod",
        routing="spray",
        hosts_per_group=32,
        spines=16,
        links_per_spine=2,
        oversubscription=1.0,
    ),
    "clos2-1to1": FabricSpec(kind="clos2", name="clos2-1to1", spines=16, oversubscription=1.0),
    "clos2-2to1": FabricSpec(kind="clos2", name="clos2-2to1", spines=16, oversubscription=2.0),
    "clos3-fat-tree": FabricSpec(
        kind="clos3", name="clos3-fat-tree", racks_per_pod=16, spines=16, cores=16, core_oversubscription=1.0
    ),
    "rail-only": FabricSpec(kind="rail-only", name="rail-only"),
}


def preset(name: str) -> FabricSpec:
    """The preset fabric called `name` (see the module docstring for each one's sources)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise InputError(f"fabric: no preset {name!r}; presets are {', '.join(PRESETS)}") from None

"""The network a job's flows run on, and how long they take there: a headless numpy core.

    import numpy as np
    from tracekit.fabric import Endpoints, FlowEnds, load_fabric, preset, route, simulate

    ep = Endpoints(hosts=16, gpus_per_host=8, nics_per_host=8, nic_Bps=50e9, nvlink_Bps=450e9)
    net = preset("meta-ai-zone").build(ep)          # or load_fabric("fabric.toml").build(ep)
    inc = route(net, FlowEnds(src_nic, dst_nic, src_gpu, dst_gpu, qp, kind))   # net.routing
    r = simulate(inc, net.capacity_Bps, bytes, release_s, inc.path_latency_s + 2e-6, dep_ptr, dep_idx)
    r.end_s, r.link_utilisation, r.link_peak       # per flow, per link

Modules (one concern each): endpoints.py (what the fabric attaches to), topology.py (fabric kinds,
FabricSpec.build -> Network), presets.py (public designs, with sources), files.py (fabric
files), routing.py (ecmp / pinned / spray -> Incidence), fairshare.py (max-min fair rates),
fluid.py (the fluid model with dependencies), ecmp.py (ECMP collision statistics). Units: bytes,
bytes/s, seconds in the API; Gb/s and microseconds in files.

Fabric files (`--fabric FILE`): TOML, JSON, or YAML when PyYAML is installed. Either a `kind` or
a `preset` (which fixes the kind; other keys then override its values):

    kind = "rail"              # ideal | clos2 | clos3 | rail | rail-only
    hosts_per_group = 16       # rail: hosts per scalable unit (one leaf per rail per group)
    spines = 16                # clos2, rail: spine switches; clos3: spines per pod
    links_per_spine = 1        # parallel links from each leaf to each spine
    nic_gbps = 400             # optional: overrides the placement's NIC speed for this fabric
    leaf_spine_gbps = 400      # optional: uplink speed (else derived from the oversubscription)
    oversubscription = 1.0     # leaf downlink / uplink capacity (1.0 non-blocking, 2.0 is 2:1)
    link_latency_us = 1.0      # every network link (NIC-leaf, leaf-spine, spine-core)
    routing = "ecmp"           # ecmp | pinned | spray: the routing `route` uses by default
    name = "my-fabric"         # a label for outputs

    preset = "meta-ai-zone"    # meta-ai-zone, meta-ai-zone-2x, meta-24k, dgx-h100-superpod,
    oversubscription = 2.0     # clos2-1to1, clos2-2to1, clos3-fat-tree, rail-only, ideal

clos3 adds `racks_per_pod` (leaves per pod), `cores` (core switches per spine plane),
`spine_core_gbps` and `core_oversubscription`. clos2 and clos3 put the placement's racks
(`Endpoints.hosts_per_rack` hosts) under one leaf. `oversubscription` and the uplink speed may
both be given only when they agree. Unknown keys, keys the kind does not read, and bad values are
errors naming the file and the key. Every count is capped (4,096 switches; 131,072 links per
tier) before anything is allocated.
"""

from __future__ import annotations

from tracekit.fabric.ecmp import CollisionStats, collision_probability, collision_stats, expected_max_load
from tracekit.fabric.endpoints import Endpoints
from tracekit.fabric.files import fabric_from_dict, load_fabric
from tracekit.fabric.fluid import FluidEvent, FluidResult, UtilisationSeries, simulate
from tracekit.fabric.presets import PRESETS, preset
from tracekit.fabric.routing import FlowEnds, Incidence, link_loads, route
from tracekit.fabric.topology import KINDS, ROUTINGS, TIERS, FabricSpec, Network

__all__ = [
    "KINDS",
    "PRESETS",
    "ROUTINGS",
    "TIERS",
    "CollisionStats",
    "Endpoints",
    "FabricSpec",
    "FlowEnds",
    "FluidEvent",
    "FluidResult",
    "Incidence",
    "Network",
    "UtilisationSeries",
    "collision_probability",
    "collision_stats",
    "expected_max_load",
    "fabric_from_dict",
    "link_loads",
    "load_fabric",
    "preset",
    "route",
    "simulate",
]

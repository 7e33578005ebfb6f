"""Fabrics: a `FabricSpec` (kind and parameters) builds the `Network` a job's flows run on.

A `Network` is a set of directed links (full duplex = two links), each with a capacity (bytes/s),
a latency (seconds) and a tier, plus the tables the router needs. Every kind has, inside each
host, one NVSwitch with an up port (GPU -> NVSwitch) and a down port (NVSwitch -> GPU) per GPU at
`nvlink_Bps`, and, when `Endpoints.pcie_Bps` is finite, a PCIe link each way between every GPU
and its NIC. Network links (NIC <-> switch and between switches) all have `link_latency_s`;
NVLink and PCIe links have no latency of their own (the caller's per-message latency covers them).

Kinds:
* `ideal`: non-blocking: a NIC up link into one ideal core and a NIC down link out of it; the
  fabric every slowdown is measured against.
* `clos2`: leaf-spine. The hosts of a rack (`Endpoints.hosts_per_rack`) hang off one leaf; every
  leaf has `links_per_spine` links to each of `spines` spines.
* `clos3`: leaf, spine per pod, core. `racks_per_pod` leaves form a pod with `spines` spines of
  its own; spine s of every pod links to each of the `cores` cores of plane s (a fat tree's
  planes: once a core is chosen the way down is fixed).
* `rail`: rail-optimised: groups of `hosts_per_group` hosts (a DGX SuperPOD scalable unit); one
  leaf per (group, rail) holds that rail's NICs of the group's hosts; every leaf links to every
  spine. Traffic between rails or groups crosses a spine.
* `rail-only`: one rail switch per rail for all the job's hosts, no spines (Wang et al.,
  arXiv 2307.12169). A flow between NICs of different rails is detoured by the router: over
  NVLink to the GPU of the source host's NIC on the destination's rail, then along that rail.

Oversubscription of a tier is downlink over uplink capacity at its lower switch, counted for a
full switch (a full rack, group or pod). Give it, or the uplink speed, or both when they agree;
with neither the tier is non-blocking (1.0). An uplink's capacity is the switch's downlink
capacity / (oversubscription x its uplinks).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tracekit.errors import InputError
from tracekit.fabric.endpoints import Endpoints

KINDS = ("ideal", "clos2", "clos3", "rail", "rail-only")
ROUTINGS = ("ecmp", "pinned", "spray")
TIERS = ("nvlink", "pcie", "nic", "leaf-spine", "spine-core")
NVLINK, PCIE, NIC, LEAF_SPINE, SPINE_CORE = range(len(TIERS))
NODE_KINDS = ("gpu", "nvswitch", "nic", "leaf", "spine", "core", "fabric")
# A value read from a fabric file never sizes an allocation unchecked: switch counts are capped,
# and so is every tier's number of directed links (computed before anything is allocated).
MAX_SWITCHES = 1 << 12
MAX_LINKS_PER_TIER = 1 << 17
# The parameters each kind reads (the others must keep their defaults; files reject them).
KIND_KEYS: dict[str, frozenset[str]] = {
    "ideal": frozenset(),
    "clos2": frozenset({"spines", "links_per_spine", "leaf_spine_Bps", "oversubscription"}),
    "clos3": frozenset(
        {
            "spines",
            "links_per_spine",
            "leaf_spine_Bps",
            "oversubscription",
            "racks_per_pod",
            "cores",
            "spine_core_Bps",
            "core_oversubscription",
        }
    ),
    "rail": frozenset({"spines", "links_per_spine", "leaf_spine_Bps", "oversubscription", "hosts_per_group"}),
    "rail-only": frozenset(),
}
COMMON_KEYS = frozenset({"kind", "name", "routing", "nic_Bps", "link_latency_s"})

Int64s = NDArray[np.int64]
Floats = NDArray[np.float64]
_NONE = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class Network:
    """A built fabric: directed links 0..L-1 and the tables the router reads.

    Per link: `capacity_Bps`, `latency_s`, `tier` (index into TIERS), `up` (towards the core),
    `link_src`/`link_dst` (node ids; `node_kind` indexes NODE_KINDS, `node_index` numbers nodes
    of a kind) and `lane` (which of several parallel links between the same switches).
    Per GPU: NVLink `gpu_up`/`gpu_down` ports and `pcie_up`/`pcie_down` (-1: not modelled).
    Per NIC: `nic_up`/`nic_down`, `nic_switch` (its leaf or rail switch, -1 in `ideal`), `nic_port`
    (its index among that switch's NICs), `nic_rail` (dense rail index).
    Per leaf: `leaf_up[leaf, u]` / `leaf_down[leaf, u]`, uplink u to spine `u % spines` (of the
    leaf's pod in clos3) on lane `u // spines`, and the matching downlink; `leaf_pod`.
    Per pod (clos3): `spine_up[pod, s, c]` from spine s to core c of plane s, `spine_down` back.
    """

    name: str
    kind: str
    routing: str
    endpoints: Endpoints
    spines: int
    capacity_Bps: Floats
    latency_s: Floats
    tier: NDArray[np.int8]
    up: NDArray[np.bool_]
    link_src: Int64s
    link_dst: Int64s
    lane: Int64s
    node_kind: NDArray[np.int8]
    node_index: Int64s
    gpu_up: Int64s
    gpu_down: Int64s
    pcie_up: Int64s
    pcie_down: Int64s
    nic_up: Int64s
    nic_down: Int64s
    nic_switch: Int64s
    nic_port: Int64s
    nic_rail: Int64s
    leaf_up: Int64s
    leaf_down: Int64s
    leaf_pod: Int64s
    spine_up: Int64s
    spine_down: Int64s

    @property
    def links(self) -> int:
        return len(self.capacity_Bps)

    def link_name(self, link: int) -> str:
        """`tier:src->dst` (with `#lane` for a parallel link), e.g. `leaf-spine:leaf3->spine5#1`."""
        lane = int(self.lane[link])
        suffix = f"#{lane}" if lane else ""
        src, dst = self._node_name(int(self.link_src[link])), self._node_name(int(self.link_dst[link]))
        return f"{TIERS[self.tier[link]]}:{src}->{dst}{suffix}"

    def link_names(self) -> list[str]:
        return [self.link_name(i) for i in range(self.links)]

    def _node_name(self, node: int) -> str:
        return f"{NODE_KINDS[self.node_kind[node]]}{self.node_index[node]}"


@dataclass(frozen=True)
class FabricSpec:
    """A fabric kind and its parameters (rates in bytes/s, latencies in seconds); see the module
    docstring for the kinds. `nic_Bps` overrides the endpoints' NIC rate; `routing` is the routing
    this fabric is meant with (`route` takes it from `Network.routing` unless told otherwise)."""

    kind: str = "ideal"
    name: str = ""
    routing: str = "ecmp"
    nic_Bps: float | None = None
    link_latency_s: float = 1e-6
    spines: int = 16
    links_per_spine: int = 1
    leaf_spine_Bps: float | None = None
    oversubscription: float | None = None
    hosts_per_group: int = 32
    racks_per_pod: int = 8
    cores: int = 4
    spine_core_Bps: float | None = None
    core_oversubscription: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InputError(f"fabric: kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.routing not in ROUTINGS:
            raise InputError(f"fabric: routing must be one of {', '.join(ROUTINGS)}, not {self.routing!r}")
        if not isinstance(self.name, str):
            raise InputError(f"fabric: name must be a string, not {self.name!r}")
        for key in ("spines", "links_per_spine", "racks_per_pod", "cores"):
            _check_int(key, getattr(self, key), MAX_SWITCHES)
        _check_int("hosts_per_group", self.hosts_per_group, 1 << 20)
        for key in ("nic_Bps", "leaf_spine_Bps", "spine_core_Bps", "oversubscription", "core_oversubscription"):
            value = getattr(self, key)
            if value is not None:
                _check_positive(key, value)
        _check_positive("link_latency_s", self.link_latency_s, zero=True)
        if self.link_latency_s > 1.0:
            raise InputError(f"fabric: link_latency_s must be at most 1 s, not {self.link_latency_s!r}")

    @property
    def label(self) -> str:
        return self.name or self.kind

    def with_changes(self, **changes: Any) -> FabricSpec:
        """This fabric with some parameters changed (checked again)."""
        return replace(self, **changes)

    def describe(self) -> dict[str, Any]:
        """The kind and the parameters it reads, as plain values."""
        keys = COMMON_KEYS | KIND_KEYS[self.kind]
        return {k: v for k, v in asdict(self).items() if k in keys}

    def build(self, endpoints: Endpoints) -> Network:
        """The network of this fabric for the job's `endpoints`."""
        if self.nic_Bps is not None:
            endpoints = replace(endpoints, nic_Bps=self.nic_Bps)
        return _Builder(self, endpoints).build()


def _check_int(key: str, value: object, limit: int) -> None:
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or not 1 <= value <= limit:
        raise InputError(f"fabric: {key} must be an integer in 1..{limit}, not {value!r}")


def _check_positive(key: str, value: object, zero: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero):  # type: ignore[operator]
        raise InputError(f"fabric: {key} must be a {'non-negative' if zero else 'positive'} number, not {value!r}")


class _Graph:
    """Nodes and links appended block by block; ids are handed out in order."""

    def __init__(self) -> None:
        self.node_blocks: list[tuple[int, int]] = []
        self.nodes = 0
        self.blocks: list[tuple[Int64s, Int64s, Floats, float, int, bool, Int64s]] = []
        self.count = 0
        self.per_tier = [0] * len(TIERS)

    def add_nodes(self, kind: str, count: int) -> Int64s:
        self.node_blocks.append((NODE_KINDS.index(kind), count))
        ids = np.arange(self.nodes, self.nodes + count, dtype=np.int64)
        self.nodes += count
        return ids

    def add_links(
        self, src: Int64s, dst: Int64s, capacity: Floats | float, latency: float, tier: int, up: bool, lane: Any = 0
    ) -> Int64s:
        """Links src[i] -> dst[i] (arrays of one shape); their ids, in that shape."""
        src, dst = np.broadcast_arrays(np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64))
        n = src.size
        self.per_tier[tier] += n
        if self.per_tier[tier] > MAX_LINKS_PER_TIER:
            raise InputError(f"fabric: more than {MAX_LINKS_PER_TIER} {TIERS[tier]} links; use fewer switches or links")
        cap = np.broadcast_to(np.asarray(capacity, dtype=np.float64), src.shape).ravel()
        lanes = np.broadcast_to(np.asarray(lane, dtype=np.int64), src.shape).ravel()
        self.blocks.append((src.ravel(), dst.ravel(), cap, latency, tier, up, lanes))
        ids = np.arange(self.count, self.count + n, dtype=np.int64).reshape(src.shape)
        self.count += n
        return ids

    def arrays(self) -> dict[str, Any]:
        def cat(i: int, dtype: Any) -> Any:
            return np.concatenate([np.asarray(b[i], dtype=dtype) for b in self.blocks])

        sizes = [b[0].size for b in self.blocks]
        return {
            "link_src": cat(0, np.int64),
            "link_dst": cat(1, np.int64),
            "capacity_Bps": cat(2, np.float64),
            "latency_s": np.repeat([b[3] for b in self.blocks], sizes).astype(np.float64),
            "tier": np.repeat([b[4] for b in self.blocks], sizes).astype(np.int8),
            "up": np.repeat([b[5] for b in self.blocks], sizes).astype(np.bool_),
            "lane": cat(6, np.int64),
            "node_kind": np.repeat([k for k, _ in self.node_blocks], [c for _, c in self.node_blocks]).astype(np.int8),
            "node_index": np.concatenate([np.arange(c, dtype=np.int64) for _, c in self.node_blocks]),
        }


class _Builder:
    """Builds one Network: the hosts' insides, then the fabric of the spec's kind."""

    def __init__(self, spec: FabricSpec, ep: Endpoints) -> None:
        self.spec, self.ep, self.g = spec, ep, _Graph()
        self.tables: dict[str, Any] = {
            "nic_switch": np.full(ep.nics, -1, dtype=np.int64),
            "nic_port": np.zeros(ep.nics, dtype=np.int64),
            "leaf_up": np.zeros((0, 0), dtype=np.int64),
            "leaf_down": np.zeros((0, 0), dtype=np.int64),
            "leaf_pod": _NONE,
            "spine_up": np.zeros((0, 0, 0), dtype=np.int64),
            "spine_down": np.zeros((0, 0, 0), dtype=np.int64),
        }
        local_rail = np.asarray(ep.nic_rail, dtype=np.int64)
        _, dense = np.unique(local_rail, return_inverse=True)
        self.rails = int(dense.max()) + 1
        self.nic_host = np.repeat(np.arange(ep.hosts, dtype=np.int64), ep.nics_per_host)
        self.nic_rail = np.tile(dense.astype(np.int64), ep.hosts)

    def build(self) -> Network:
        self._hosts()
        getattr(self, "_" + self.spec.kind.replace("-", "_"))()
        spec = self.spec
        return Network(
            name=spec.label,
            kind=spec.kind,
            routing=spec.routing,
            endpoints=self.ep,
            spines=spec.spines if spec.kind in ("clos2", "clos3", "rail") else 0,
            nic_rail=self.nic_rail,
            **self.tables,
            **self.g.arrays(),
        )

    def _hosts(self) -> None:
        ep, g, lat = self.ep, self.g, self.spec.link_latency_s
        gpus = g.add_nodes("gpu", ep.gpus)
        nvswitch = g.add_nodes("nvswitch", ep.hosts)
        self.nics = g.add_nodes("nic", ep.nics)
        gpu_host = np.repeat(nvswitch, ep.gpus_per_host)
        self.tables["gpu_up"] = g.add_links(gpus, gpu_host, ep.nvlink_Bps, 0.0, NVLINK, True)
        self.tables["gpu_down"] = g.add_links(gpu_host, gpus, ep.nvlink_Bps, 0.0, NVLINK, False)
        if math.isfinite(ep.pcie_Bps):
            gpu_nic = self.nics[ep.nic_of_gpu(np.arange(ep.gpus, dtype=np.int64))]
            self.tables["pcie_up"] = g.add_links(gpus, gpu_nic, ep.pcie_Bps, 0.0, PCIE, True)
            self.tables["pcie_down"] = g.add_links(gpu_nic, gpus, ep.pcie_Bps, 0.0, PCIE, False)
        else:
            self.tables["pcie_up"] = self.tables["pcie_down"] = np.full(ep.gpus, -1, dtype=np.int64)
        self.latency = lat

    def _attach_nics(self, switch_of_nic: Int64s, switch_nodes: Int64s) -> None:
        """NIC <-> switch links; each NIC's port index among its switch's NICs."""
        g, ep = self.g, self.ep
        self.tables["nic_up"] = g.add_links(self.nics, switch_nodes[switch_of_nic], ep.nic_Bps, self.latency, NIC, True)
        self.tables["nic_down"] = g.add_links(
            switch_nodes[switch_of_nic], self.nics, ep.nic_Bps, self.latency, NIC, False
        )
        self.tables["nic_switch"] = switch_of_nic
        order = np.argsort(switch_of_nic, kind="stable")
        sorted_sw = switch_of_nic[order]
        first = np.searchsorted(sorted_sw, sorted_sw, side="left")
        port = np.empty_like(switch_of_nic)
        port[order] = np.arange(len(order), dtype=np.int64) - first
        self.tables["nic_port"] = port

    def _ideal(self) -> None:
        core = self.g.add_nodes("fabric", 1)
        self._attach_nics(np.zeros(self.ep.nics, dtype=np.int64), core)

    def _rail_only(self) -> None:
        switches = self.g.add_nodes("leaf", self.rails)
        self._attach_nics(self.nic_rail, switches)

    def _clos2(self) -> None:
        ep = self.ep
        leaves = -(-ep.hosts // ep.hosts_per_rack)
        down = np.full(leaves, ep.hosts_per_rack * ep.nics_per_host * ep.nic_Bps)
        self._leaf_spine(self.nic_host // ep.hosts_per_rack, down, np.zeros(leaves, dtype=np.int64), pods=1)

    def _rail(self) -> None:
        ep, spec = self.ep, self.spec
        groups = -(-ep.hosts // spec.hosts_per_group)
        leaf = (self.nic_host // spec.hosts_per_group) * self.rails + self.nic_rail
        nics_on_rail = np.bincount(self.nic_rail[: ep.nics_per_host], minlength=self.rails)
        down = np.tile(spec.hosts_per_group * nics_on_rail * ep.nic_Bps, groups).astype(np.float64)
        self._leaf_spine(leaf, down, np.zeros(groups * self.rails, dtype=np.int64), pods=1)

    def _clos3(self) -> None:
        ep, spec = self.ep, self.spec
        leaves = -(-ep.hosts // ep.hosts_per_rack)
        pods = -(-leaves // spec.racks_per_pod)
        down = np.full(leaves, ep.hosts_per_rack * ep.nics_per_host * ep.nic_Bps)
        pod_of_leaf = np.arange(leaves, dtype=np.int64) // spec.racks_per_pod
        uplink = self._leaf_spine(self.nic_host // ep.hosts_per_rack, down, pod_of_leaf, pods)
        self._spine_core(pods, spec.racks_per_pod * spec.links_per_spine * float(uplink.max()))

    def _leaf_spine(self, leaf_of_nic: Int64s, down_Bps: Floats, pod_of_leaf: Int64s, pods: int) -> Floats:
        """Leaves (one per value of leaf_of_nic), `spines` spines per pod, `links_per_spine` lanes;
        returns each leaf's uplink capacity."""
        spec, g = self.spec, self.g
        leaves, s, lanes = len(down_Bps), spec.spines, spec.links_per_spine
        uplinks = s * lanes
        if 2 * leaves * uplinks > MAX_LINKS_PER_TIER:
            raise InputError(f"fabric: more than {MAX_LINKS_PER_TIER} leaf-spine links; use fewer spines or lanes")
        leaf_nodes = g.add_nodes("leaf", leaves)
        spine_nodes = g.add_nodes("spine", pods * s)
        self._attach_nics(leaf_of_nic, leaf_nodes)
        cap = _uplink_capacity(down_Bps, uplinks, spec.leaf_spine_Bps, spec.oversubscription, "leaf")
        u = np.arange(uplinks, dtype=np.int64)
        spine = spine_nodes[pod_of_leaf[:, None] * s + (u % s)[None, :]]
        leaf = np.broadcast_to(leaf_nodes[:, None], spine.shape)
        lane = np.broadcast_to((u // s)[None, :], spine.shape)
        caps = np.broadcast_to(cap[:, None], spine.shape)
        self.tables["leaf_up"] = g.add_links(leaf, spine, caps, self.latency, LEAF_SPINE, True, lane)
        self.tables["leaf_down"] = g.add_links(spine, leaf, caps, self.latency, LEAF_SPINE, False, lane)
        self.tables["leaf_pod"] = pod_of_leaf
        self.spine_nodes = spine_nodes
        return cap

    def _spine_core(self, pods: int, spine_down_Bps: float) -> None:
        spec, g = self.spec, self.g
        s, c = spec.spines, spec.cores
        if 2 * pods * s * c > MAX_LINKS_PER_TIER:
            raise InputError(f"fabric: more than {MAX_LINKS_PER_TIER} spine-core links; use fewer spines or cores")
        core_nodes = g.add_nodes("core", s * c)
        cap = _uplink_capacity(np.array([spine_down_Bps]), c, spec.spine_core_Bps, spec.core_oversubscription, "core")[
            0
        ]
        spine = np.broadcast_to(self.spine_nodes.reshape(pods, s)[:, :, None], (pods, s, c))
        core = np.broadcast_to(core_nodes.reshape(s, c)[None, :, :], (pods, s, c))
        self.tables["spine_up"] = g.add_links(spine, core, cap, self.latency, SPINE_CORE, True)
        self.tables["spine_down"] = g.add_links(core, spine, cap, self.latency, SPINE_CORE, False)


def _uplink_capacity(down_Bps: Floats, uplinks: int, link_Bps: float | None, ratio: float | None, tier: str) -> Floats:
    """Each switch's uplink capacity from its full downlink capacity: given the ratio, the link
    speed, or both when they agree within 1%; non-blocking when neither is given."""
    prefix = "" if tier == "leaf" else "core_"
    speed_key = "leaf_spine_Bps" if tier == "leaf" else "spine_core_Bps"
    if link_Bps is None:
        return down_Bps / ((1.0 if ratio is None else ratio) * uplinks)
    if ratio is not None:
        derived = down_Bps / (uplinks * link_Bps)
        if np.any(np.abs(derived - ratio) > 0.01 * ratio):
            raise InputError(
                f"fabric: {prefix}oversubscription {ratio:g} disagrees with {speed_key}: {uplinks} uplinks of "
                f"{link_Bps * 8 / 1e9:g} Gb/s give {float(derived.min()):g}; give one of the two"
            )
    return np.full(len(down_Bps), float(link_Bps))

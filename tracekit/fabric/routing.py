"""Routing: which links each flow crosses, and with what share of its rate.

A flow is NVLink (`kind` 0: its source GPU's up port, then its destination GPU's down port) or
network (`kind` 1: source NIC up ... destination NIC down, through PCIe first and last when the
endpoints model it). One end may be a switch (-1) for in-network reductions: an NVLink flow into or
out of the host's NVSwitch crosses only its GPU's port, a network flow into or out of the switch a
NIC attaches to (SHARP) only that NIC's link (and PCIe). Where a switch has several equal-cost next
hops, the routing picks:

* `ecmp`: one, by a hash of the flow's RoCE 5-tuple (source NIC, destination NIC, UDP source port
  `ROCE_SPORT_BASE + qp`, destination port 4791, protocol 17) and the seed, per hop (splitmix64 in
  numpy uint64: deterministic for a seed, independent between hops and seeds).
* `pinned`: Meta's path pinning (Gangidi et al., SIGCOMM'24 §"ECMP and path pinning", via
  research/meta-workload-findings.md §1.9: packets are routed to paths by the destination
  "slice", the index of the RTSW downlink): the leaf uplink is the destination NIC's port index on
  its leaf modulo the uplinks, the way down from the spine keeps that uplink's lane, and a clos3
  core is (destination leaf port number // spines) modulo the cores. A function of the
  destination only.
* `spray`: packet spraying / adaptive routing as a fluid: the flow is split evenly over every
  equal-cost path (weight 1/k on each of the k uplinks of a stage).

A rail-only fabric cannot carry a flow between rails: such a flow is detoured over NVLink to the
GPU of the source host's NIC on the destination's rail and leaves from that NIC
(`Incidence.detoured` marks it). Path latency is the weighted sum of the latencies of the links
crossed: equal-cost paths have equal latencies in these fabrics, so this is every path's latency.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import NDArray

from tracekit.errors import InputError
from tracekit.fabric.topology import ROUTINGS, Network

ROCE_DPORT = 4791
ROCE_SPORT_BASE = 49152  # [est] the first dynamic port; the hash only needs distinct ports per QP
UDP = 17
MAX_QP = (1 << 16) - ROCE_SPORT_BASE
_MASK = 0xFFFFFFFFFFFFFFFF
MAX_ENTRIES = 1 << 26  # incidence entries per route() call (24 bytes each: 1.5 GiB)
NVLINK_FLOW, NETWORK_FLOW = 0, 1

Int64s = NDArray[np.int64]
Floats = NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class FlowEnds:
    """Per flow (numpy int arrays of one length): `src_nic`, `dst_nic` (global NIC ids; -1 for an
    NVLink flow), `src_gpu`, `dst_gpu` (global GPU ids; -1 where unknown for a network flow), `qp`
    (queue pair within the connection: varies the UDP source port) and `kind` (0 NVLink inside a
    host, 1 network; a PXN transfer is two flows, NVLink then network)."""

    src_nic: Int64s
    dst_nic: Int64s
    src_gpu: Int64s
    dst_gpu: Int64s
    qp: Int64s
    kind: Int64s

    def __post_init__(self) -> None:
        names = ("src_nic", "dst_nic", "src_gpu", "dst_gpu", "qp", "kind")
        arrays = [np.asarray(getattr(self, n)) for n in names]
        for name, a in zip(names, arrays, strict=True):
            if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
                raise InputError(f"flows: {name} must be a 1-D integer array")
            object.__setattr__(self, name, a.astype(np.int64, copy=False))
        if len({a.size for a in arrays}) > 1:
            raise InputError(f"flows: arrays of different lengths {[a.size for a in arrays]}")

    @property
    def size(self) -> int:
        return int(self.kind.size)

    def tiled(self, count: int) -> FlowEnds:
        """These flows `count` times over, one copy after another (to route many seeds in one call)."""
        return FlowEnds(*(np.tile(getattr(self, f.name), count) for f in fields(self)))


@dataclass(frozen=True, eq=False)
class Incidence:
    """Which links each flow crosses: COO entries sorted by flow (`flow`, `link`, `weight`: the
    share of the flow's rate on that link), `path_latency_s` per flow, `detoured` per flow (a
    rail-only cross-rail flow sent over NVLink first), `num_links` of the network."""

    flow: Int64s
    link: Int64s
    weight: Floats
    path_latency_s: Floats
    detoured: NDArray[np.bool_]
    num_links: int

    @property
    def num_flows(self) -> int:
        return int(self.path_latency_s.size)


def link_loads(incidence: Incidence, bytes: NDArray[np.floating] | NDArray[np.integer]) -> Floats:
    """Bytes crossing each link when every flow moves its `bytes` (float64[num_links])."""
    sizes = np.asarray(bytes, dtype=np.float64)
    if sizes.shape != (incidence.num_flows,):
        raise InputError(f"link_loads: {sizes.shape[0] if sizes.ndim else 0} sizes for {incidence.num_flows} flows")
    loads = np.bincount(incidence.link, incidence.weight * sizes[incidence.flow], minlength=incidence.num_links)
    return loads.astype(np.float64)


def route(
    network: Network, flows: FlowEnds, routing: str | None = None, seed: int | NDArray[np.integer] = 0
) -> Incidence:
    """The links each flow crosses on `network` under `routing` (default `network.routing`).

    `seed` is the ECMP hash seed of every flow, or one seed per flow (many draws routed at once)."""
    routing = network.routing if routing is None else routing
    if routing not in ROUTINGS:
        raise InputError(f"route: routing must be one of {', '.join(ROUTINGS)}, not {routing!r}")
    _check_flows(network, flows)
    if not isinstance(seed, int) and np.shape(seed) != (flows.size,):
        raise InputError(f"route: {np.size(seed)} seeds for {flows.size} flows")
    return _Router(network, flows, routing, seed).incidence()


def _check_flows(net: Network, f: FlowEnds) -> None:
    ep = net.endpoints
    bad_kind = (f.kind != NVLINK_FLOW) & (f.kind != NETWORK_FLOW)
    _refuse(bad_kind, "kind is not 0 (NVLink) or 1 (network)")
    nv, wire = f.kind == NVLINK_FLOW, f.kind == NETWORK_FLOW
    # one end may be a switch (-1): the host's NVSwitch for NVLink, the NIC's first switch for network
    src_gpu_ok, dst_gpu_ok = _within(f.src_gpu, ep.gpus), _within(f.dst_gpu, ep.gpus)
    gpus_ok = (src_gpu_ok | (f.src_gpu == -1)) & (dst_gpu_ok | (f.dst_gpu == -1)) & (src_gpu_ok | dst_gpu_ok)
    _refuse(nv & ~gpus_ok, "an NVLink flow's GPU is not in the job")
    _refuse(
        nv & src_gpu_ok & dst_gpu_ok & (f.src_gpu // ep.gpus_per_host != f.dst_gpu // ep.gpus_per_host),
        "an NVLink flow joins GPUs of different hosts",
    )
    src_nic_ok, dst_nic_ok = _within(f.src_nic, ep.nics), _within(f.dst_nic, ep.nics)
    nics_known = (src_nic_ok | (f.src_nic == -1)) & (dst_nic_ok | (f.dst_nic == -1)) & (src_nic_ok | dst_nic_ok)
    _refuse(wire & ~nics_known, "a network flow's NIC is not in the job")
    for gpu in (f.src_gpu, f.dst_gpu):
        _refuse(wire & (gpu != -1) & ~_within(gpu, ep.gpus), "a network flow's GPU is neither -1 nor in the job")
    _refuse(wire & ((f.qp < 0) | (f.qp >= MAX_QP)), f"qp is not in 0..{MAX_QP - 1}")


def _within(ids: Int64s, count: int) -> NDArray[np.bool_]:
    return (ids >= 0) & (ids < count)


def _refuse(bad: NDArray[np.bool_], why: str) -> None:
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise InputError(f"route: {int(bad.sum())} flow(s): {why} (first: flow {first})")


class _Segments:
    """A flow's path built as segments in path order: each gives, for the flows of a mask, k links
    and their weights; `assemble` lays them out sorted by flow without a sort."""

    def __init__(self, flows: int) -> None:
        self.flows = flows
        self.parts: list[tuple[Int64s, Int64s, Floats]] = []
        self.count = np.zeros(flows, dtype=np.int64)
        self.total = 0

    def reserve(self, entries: int) -> None:
        """Refuse before allocating when the incidence would pass MAX_ENTRIES."""
        if self.total + entries > MAX_ENTRIES:
            raise InputError(f"route: more than {MAX_ENTRIES} flow-link entries; route fewer flows at once or use ecmp")

    def add(self, ids: Int64s, links: Int64s, weight: float | Floats = 1.0) -> None:
        """Flows `ids` cross `links` (shape (len(ids),) or (len(ids), k)) with `weight` each."""
        if len(ids) == 0:
            return
        links = links.reshape(len(ids), -1)
        self.reserve(links.size)
        w = np.broadcast_to(np.asarray(weight, dtype=np.float64), links.shape)
        self.parts.append((ids, links, w))
        self.count[ids] += links.shape[1]
        self.total += links.size

    def assemble(self) -> tuple[Int64s, Int64s, Floats]:
        ptr = np.concatenate(([0], np.cumsum(self.count)))
        link = np.empty(ptr[-1], dtype=np.int64)
        weight = np.empty(ptr[-1], dtype=np.float64)
        cursor = ptr[:-1].copy()
        for ids, links, w in self.parts:
            at = cursor[ids][:, None] + np.arange(links.shape[1], dtype=np.int64)[None, :]
            link[at] = links
            weight[at] = w
            cursor[ids] += links.shape[1]
        flow = np.repeat(np.arange(self.flows, dtype=np.int64), self.count)
        return flow, link, weight


class _Router:
    """Routes one batch of flows: NVLink flows, then each network flow's path stage by stage."""

    def __init__(self, net: Network, flows: FlowEnds, routing: str, seed: int | NDArray[np.integer]) -> None:
        self.net, self.f, self.routing = net, flows, routing
        self.seed: int | NDArray[np.uint64] = (
            seed & _MASK if isinstance(seed, int) else np.asarray(seed).astype(np.int64).astype(np.uint64)
        )
        self.seg = _Segments(flows.size)
        self.detoured = np.zeros(flows.size, dtype=np.bool_)

    def incidence(self) -> Incidence:
        net, f = self.net, self.f
        nv = f.kind == NVLINK_FLOW
        up, down = np.flatnonzero(nv & (f.src_gpu >= 0)), np.flatnonzero(nv & (f.dst_gpu >= 0))
        self.seg.add(up, net.gpu_up[f.src_gpu[up]])
        self.seg.add(down, net.gpu_down[f.dst_gpu[down]])
        wire = f.kind == NETWORK_FLOW
        self._network(np.flatnonzero(wire & (f.src_nic >= 0) & (f.dst_nic >= 0)))
        self._switch_ends(np.flatnonzero(wire & ((f.src_nic < 0) | (f.dst_nic < 0))))
        flow, link, weight = self.seg.assemble()
        latency = np.bincount(flow, weight * net.latency_s[link], minlength=f.size).astype(np.float64)
        return Incidence(flow, link, weight, latency, self.detoured, net.links)

    def _network(self, ids: Int64s) -> None:
        net, f = self.net, self.f
        src, dst = f.src_nic[ids], f.dst_nic[ids]
        src_gpu = f.src_gpu[ids]
        if net.kind == "rail-only":
            src, src_gpu = self._detour(ids, src, dst, src_gpu)
        pcie = bool(len(net.pcie_up)) and net.pcie_up[0] >= 0
        if pcie:
            has = src_gpu >= 0
            self.seg.add(ids[has], net.pcie_up[src_gpu[has]])
        self.seg.add(ids, net.nic_up[src])
        self._switches(ids, src, dst)
        self.seg.add(ids, net.nic_down[dst])
        if pcie:
            dst_gpu = f.dst_gpu[ids]
            has = dst_gpu >= 0
            self.seg.add(ids[has], net.pcie_down[dst_gpu[has]])

    def _switch_ends(self, ids: Int64s) -> None:
        """Network flows into or out of the switch a NIC attaches to (SHARP): PCIe and the NIC's own link."""
        net, f = self.net, self.f
        pcie = bool(len(net.pcie_up)) and net.pcie_up[0] >= 0
        into = ids[f.src_nic[ids] >= 0]
        if pcie:
            has = into[f.src_gpu[into] >= 0]
            self.seg.add(has, net.pcie_up[f.src_gpu[has]])
        self.seg.add(into, net.nic_up[f.src_nic[into]])
        out = ids[f.dst_nic[ids] >= 0]
        self.seg.add(out, net.nic_down[f.dst_nic[out]])
        if pcie:
            has = out[f.dst_gpu[out] >= 0]
            self.seg.add(has, net.pcie_down[f.dst_gpu[has]])

    def _detour(self, ids: Int64s, src: Int64s, dst: Int64s, src_gpu: Int64s) -> tuple[Int64s, Int64s]:
        """Cross-rail flows of a rail-only fabric: NVLink to the GPU of the source host's NIC on the
        destination's rail; the new source NIC and source GPU of every flow."""
        net, ep = self.net, self.net.endpoints
        cross = net.nic_rail[src] != net.nic_rail[dst]
        if not cross.any():
            return src, src_gpu
        local_of_rail = np.full(int(net.nic_rail.max()) + 1, -1, dtype=np.int64)
        local_rails = net.nic_rail[: ep.nics_per_host]
        local_of_rail[local_rails[::-1]] = np.arange(ep.nics_per_host - 1, -1, -1, dtype=np.int64)
        relay = (src // ep.nics_per_host) * ep.nics_per_host + local_of_rail[net.nic_rail[dst]]
        relay_gpu = ep.gpu_of_nic(relay)
        from_gpu = np.where(src_gpu >= 0, src_gpu, ep.gpu_of_nic(src))
        hop = cross & (from_gpu != relay_gpu)
        self.seg.add(ids[hop], net.gpu_up[from_gpu[hop]])
        self.seg.add(ids[hop], net.gpu_down[relay_gpu[hop]])
        self.detoured[ids[cross]] = True
        return np.where(cross, relay, src), np.where(cross, relay_gpu, src_gpu)

    def _switches(self, ids: Int64s, src: Int64s, dst: Int64s) -> None:
        """Leaf -> spine (-> core -> spine) -> leaf for the flows whose NICs are on different leaves."""
        net = self.net
        if net.leaf_up.size == 0:
            return
        ls, ld = net.nic_switch[src], net.nic_switch[dst]
        away = ls != ld
        ids, src, dst, ls, ld = ids[away], src[away], dst[away], ls[away], ld[away]
        cross_pod = net.leaf_pod[ls] != net.leaf_pod[ld] if net.spine_up.size else np.zeros(len(ids), dtype=np.bool_)
        if self.routing == "spray":
            self._spray(ids, ls, ld, cross_pod)
            return
        uplinks, spines = net.leaf_up.shape[1], net.spines
        key = self._flow_key(ids, src, dst) if self.routing == "ecmp" else None
        up = self._choose(key, 1, uplinks, net.nic_port[dst])
        self.seg.add(ids, net.leaf_up[ls, up])
        if cross_pod.any():
            c = np.flatnonzero(cross_pod)
            cores = net.spine_up.shape[2]
            slot = net.nic_switch[dst[c]] * (int(net.nic_port.max()) + 1) + net.nic_port[dst[c]]
            core = self._choose(None if key is None else key[c], 2, cores, slot // spines)
            spine = up[c] % spines
            self.seg.add(ids[c], net.spine_up[net.leaf_pod[ls[c]], spine, core])
            self.seg.add(ids[c], net.spine_down[net.leaf_pod[ld[c]], spine, core])
        lanes = uplinks // spines
        lane = self._choose(key, 3, lanes, up // spines) if self.routing == "ecmp" else up // spines
        self.seg.add(ids, net.leaf_down[ld, up % spines + spines * lane])

    def _spray(self, ids: Int64s, ls: Int64s, ld: Int64s, cross_pod: NDArray[np.bool_]) -> None:
        """Every equal-cost path at once: 1/k of the flow on each of a stage's k links."""
        net = self.net
        uplinks = net.leaf_up.shape[1]
        c = np.flatnonzero(cross_pod)
        per_pod = net.spine_up.shape[1] * net.spine_up.shape[2] if net.spine_up.size else 0
        self.seg.reserve(2 * len(ids) * uplinks + 2 * len(c) * per_pod)
        self.seg.add(ids, net.leaf_up[ls], 1.0 / uplinks)
        if len(c):
            pods = net.spine_up.shape[0]
            self.seg.add(ids[c], net.spine_up.reshape(pods, -1)[net.leaf_pod[ls[c]]], 1.0 / per_pod)
            self.seg.add(ids[c], net.spine_down.reshape(pods, -1)[net.leaf_pod[ld[c]]], 1.0 / per_pod)
        self.seg.add(ids, net.leaf_down[ld], 1.0 / uplinks)

    def _flow_key(self, ids: Int64s, src: Int64s, dst: Int64s) -> NDArray[np.uint64]:
        seed = self.seed if isinstance(self.seed, int) else self.seed[ids]
        return flow_hash(src, dst, self.f.qp[ids], seed)

    def _choose(self, key: NDArray[np.uint64] | None, stage: int, n: int, pinned: Int64s) -> Int64s:
        """One of `n` next hops per flow: by the hash (ecmp) or the destination's index (pinned)."""
        if key is None:
            return (pinned % n).astype(np.int64)
        return ecmp_pick(key, stage, n)


def flow_hash(src: Int64s, dst: Int64s, qp: Int64s, seed: int | NDArray[np.uint64]) -> NDArray[np.uint64]:
    """The ECMP hash of each flow's RoCE 5-tuple (source NIC, destination NIC, UDP source port
    ROCE_SPORT_BASE + qp, destination port 4791, protocol 17) under `seed` (uint64)."""
    ports = (ROCE_SPORT_BASE + np.asarray(qp, dtype=np.int64)).astype(np.uint64) << np.uint64(24)
    ports |= np.uint64(ROCE_DPORT << 8 | UDP)
    seeds = np.asarray(seed, dtype=np.uint64) if not isinstance(seed, int) else np.uint64(seed & _MASK)
    key = _mix(np.broadcast_to(seeds, np.shape(src)) ^ np.uint64(0x5BD1E995))
    key = _mix(key ^ np.asarray(src).astype(np.uint64))
    key = _mix(key ^ np.asarray(dst).astype(np.uint64))
    return _mix(key ^ ports)


def ecmp_pick(key: NDArray[np.uint64], stage: int, n: int) -> Int64s:
    """The next hop, of `n`, that hop number `stage` of a path picks for flows hashed to `key`."""
    h = _mix(key ^ np.uint64(stage * 0x9E3779B97F4A7C15 & _MASK))
    return ((h >> np.uint64(33)) % np.uint64(n)).astype(np.int64)


def _mix(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """splitmix64's finaliser (Steele, Lea, Flood, OOPSLA 2014), on uint64 arrays (wrapping)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))

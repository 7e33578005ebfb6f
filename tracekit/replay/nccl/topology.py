"""The channels, rings and trees NCCL builds for a communicator, from its members' hosts, GPUs and NICs.

Written from reading NVIDIA/nccl 2.30.7 (src/graph/search.cc, connect.cc, trees.cc, paths.cc,
init.cc; notes with line references in the project's research notes), not copied. For an
NVSwitch host (GPUs numbered as NCCL's topology orders them: by local index), per communicator:

* **Channels.** Across hosts, NCCL's graph search finds one channel per NIC its GPUs use (a NIC
  takes one channel at the GPU→NIC path rate: min(NIC, PCIe) snapped to NCCL's speed table, 48 GB/s
  for 400 Gb/s NICs on PCIe Gen5); it doubles them when that rate is below 25 GB/s, or on Hopper and
  later below 50 GB/s with at most 4 channels (halving the per-channel rate); ncclTopoPostset
  doubles again, and once more on Hopper+ when the per-channel rate is above 45 GB/s and there are
  fewer than 16. An H100 host with 8 × 400 Gb/s NICs gets 16 channels, 4 NICs 16, 1 NIC 4; an A100
  host with 8 × 200 Gb/s NICs 16, 4 NICs 8; a communicator inside one NVSwitch host 24.
  Collective channel c runs graph channel c mod graph_channels; the first half of the doubled
  channels use the first tree of the double binary tree, the second half the second.
* **Rings.** Graph channel j enters each host at the GPU its j-th NIC serves (the NICs in GPU order)
  and visits the others descending (NCCL tries the previous GPU first on an NVSwitch). It leaves
  from the next GPU up: through the entry NIC when that GPU shares it, or when NCCL_CROSS_NIC=0
  (through PXN: over NVLink to the NIC's GPU); with NCCL_CROSS_NIC=2 (the default) channels come in
  pairs, the odd one entering where the even one left and running ascending, and odd-numbered hosts
  run each pair's other ring, so every hop between hosts joins the same rail; with
  NCCL_CROSS_NIC=1 a ring leaves on its last GPU's own NIC. Host x's last GPU sends to host x+1's
  first (hosts numbered by their lowest rank in the communicator).
* **Trees.** Graph channel j's tree on each host is a chain from the GPU of the j-th NIC ascending;
  across hosts, NCCL's double binary tree (tracekit.replay.nccl.trees) joins the hosts' heads. With
  one GPU per NIC every cross-host link is at the head (NCCL's TREE pattern); when the head shares
  its NIC with the next GPU (BALANCED_TREE) the link from the first child host lands on that next GPU.
  A tree leaves and enters each host through the channel's NIC.
* **p2p channels**: p2pnChannels = the collective channels rounded up to a power of two; per remote
  peer ceil(per-GPU network bandwidth / 14 GB/s), halved while it times ceil(ranks / 8) exceeds
  p2pnChannels (H100: 4 up to 32 ranks, 2 to 64, 1 beyond).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracekit.replay.nccl.comm import CommTopology
from tracekit.replay.nccl.trees import dtree

if TYPE_CHECKING:
    import numpy as np

    from tracekit.replay.layout import GroupLayout
    from tracekit.replay.nccl.options import NcclOptions
    from tracekit.replay.placement import Placement

MAXCHANNELS = 64
# NCCL's per-channel speeds across nodes, GB/s (search.cc): before Hopper, and Hopper+.
SPEEDS_INTER = {
    80: (48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12),
    90: (48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12),
    100: (96, 86, 80, 48, 45.1, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12),
}
P2P_PER_CHANNEL_NET_GBPS = 14.0  # NCCL_P2P_PER_CHANNEL_NET_BW
P2P_SCHEDULE_GROUP = 8  # NCCL_P2P_SCHEDULE_GROUP_SIZE


@dataclass(frozen=True)
class Node:
    """One host of the communicator: its members (positions, GPU order) and the NICs they use, in GPU order."""

    members: tuple[int, ...]
    nics: tuple[int, ...]  # distinct local NICs of the members, in GPU order (NCCL's NIC list)
    nic_of: tuple[int, ...]  # each member's own NIC

    def owner(self, nic: int) -> int:
        """Index (in members) of the first member the NIC serves."""
        return self.nic_of.index(nic)


def model(layout: GroupLayout, placement: Placement, options: NcclOptions) -> CommTopology:
    import numpy as np

    hosts = _hosts(layout)
    n = layout.n
    graph, per_channel, graph_bw_intra = _graph_channels(hosts, placement, options)
    coll = _coll_channels(graph, per_channel, hosts.count, placement, options)
    base = _base_channels(hosts)
    # Positions are below 2^20 (MAX_RANKS); local NICs below the host's NIC count, 8 on most hosts: at
    # the rank bound the five channels x ranks tables are 0.6 GB in int32, 0.45 GB with 16-bit NICs.
    nic_type = np.int16 if placement.nics <= np.iinfo(np.int16).max else np.int32
    rings = np.zeros((coll, n), dtype=np.int32)
    send = np.full((coll, n), -1, dtype=nic_type)
    recv = np.full((coll, n), -1, dtype=nic_type)
    parent = np.full((coll, n), -1, dtype=np.int32)
    tree_nic = np.full((coll, n), -1, dtype=nic_type)
    (first, first_types), (second, second_types) = dtree(hosts.count)
    swap = placement.cross_nic == 2 and base % 2 == 0 and hosts.count > 1 and not _same_nic_rings(hosts)
    # Every host's rings and chains depend only on its NIC pattern and the channel: worked out once per
    # (pattern, channel) on a host's members 0..k-1 and mapped to its own, so a communicator of a
    # million ranks costs seconds, not minutes.
    shapes = Shapes(hosts, placement.cross_nic)
    sizes, ends = hosts.sizes, np.cumsum(hosts.sizes)
    members = hosts.members
    offsets = np.repeat(ends - sizes, sizes)
    odd_hosts = np.arange(hosts.count) % 2 == 1
    any_tree_pattern = False
    for c in range(coll):
        source = c % (2 * graph)
        j = (source % graph) % base
        flip = odd_hosts if swap and (j ^ 1) < base else np.zeros(hosts.count, dtype=bool)
        rel, entry, exit_nic = shapes.rings(np.where(flip, j ^ 1, j))
        order = members[rel + offsets]
        rings[c] = order
        recv[c, order[ends - sizes]] = entry
        send[c, order[ends - 1]] = exit_nic
        parents, types = (first, first_types) if source < graph else (second, second_types)
        rel, balanced, nic = shapes.trees(np.full(hosts.count, j))
        any_tree_pattern = any_tree_pattern or not bool(balanced.all())
        chain = members[rel + offsets]
        inner = np.ones(n, dtype=bool)
        inner[ends - sizes] = False  # a chain's head has no parent on its own host
        parent[c, chain[inner]] = chain[np.flatnonzero(inner) - 1]
        tree_nic[c, chain] = np.repeat(nic, sizes)
        _link_heads(parent[c], chain, ends - sizes, sizes, balanced.astype(bool), parents, types)
    p2p, per_peer = _p2p_channels(coll, n, hosts.count, path_gbytes(placement))
    return CommTopology(
        channels=coll,
        ring=rings,
        ring_send_nic=send,
        ring_recv_nic=recv,
        tree_parent=parent,
        tree_nic=tree_nic,
        nodes=hosts.count,
        ranks_per_node=int(sizes.max()) if hosts.count else 1,
        graph_channels=graph,
        bw_intra=graph_bw_intra,
        bw_inter=per_channel,
        tree_pattern_tree=any_tree_pattern,
        p2p_channels=p2p,
        p2p_per_peer=per_peer,
    )


def _link_heads(
    parent: np.ndarray,
    chain: np.ndarray,
    heads_at: np.ndarray,
    sizes: np.ndarray,
    balanced: np.ndarray,
    parents: list[int],
    types: list[int],
) -> None:
    """Across hosts: each host's head under its parent host's head, or under the GPU after it when
    that host is BALANCED and this host its first child."""
    import numpy as np

    up = np.asarray(parents, dtype=np.int64)
    below = np.flatnonzero(up >= 0)
    if not len(below):
        return
    first_child = np.asarray(types, dtype=np.int64) == 0
    second_at = np.where(sizes > 1, heads_at + 1, heads_at)
    to_second = balanced[up[below]] & first_child[below] & (sizes[up[below]] > 1)
    lands = np.where(to_second, chain[second_at[up[below]]], chain[heads_at[up[below]]])
    parent[chain[heads_at[below]]] = lands


class Shapes:
    """Every host's ring or tree chain of a channel, worked out once per (NIC pattern, graph channel)
    on members 0..k-1: per host, its order (concatenated over the hosts) and two values per host."""

    def __init__(self, hosts: Hosts, cross_nic: int) -> None:
        self.examples = hosts.patterns  # one host per NIC pattern, on members 0..k-1
        self.pattern = hosts.pattern
        self.sizes = hosts.sizes
        self.uniform = hosts.count > 0 and int(self.sizes.min()) == int(self.sizes.max())
        self.cross_nic = cross_nic

    def rings(self, js: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(order, entry NIC, exit NIC) of graph channel js[x] on each host x."""
        return self._spread(js, lambda node, j: _ring(node, j, self.cross_nic))

    def trees(self, js: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(chain, whether BALANCED, NIC) of graph channel js[x] on each host x."""
        return self._spread(js, _tree)

    def _spread(self, js: np.ndarray, shape: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        import numpy as np

        if not len(js):
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        width = int(js.max()) + 1
        keys, inverse = np.unique(self.pattern * width + js, return_inverse=True)
        found = [shape(self.examples[int(key) // width], int(key) % width) for key in keys]
        first = np.array([int(f[1]) for f in found], dtype=np.int64)[inverse]
        second = np.array([int(f[2]) for f in found], dtype=np.int64)[inverse]
        orders = [np.asarray(f[0], dtype=np.int64) for f in found]
        if self.uniform:
            return np.stack(orders)[inverse].ravel(), first, second
        return np.concatenate([orders[i] for i in inverse]), first, second


@dataclass(frozen=True)
class Hosts:
    """A communicator's hosts in NCCL's node order (by lowest communicator rank): every member's
    position host by host in GPU order, each host's size, and its NIC pattern: an index into
    `patterns`, the distinct hosts written on members 0..k-1 (in order of first appearance)."""

    members: np.ndarray
    sizes: np.ndarray
    pattern: np.ndarray
    patterns: list[Node]

    @property
    def count(self) -> int:
        return len(self.sizes)


def _hosts(layout: GroupLayout) -> Hosts:
    import numpy as np

    if not layout.n:
        empty = np.zeros(0, dtype=np.int64)
        return Hosts(empty, empty, empty, [])
    node_of = layout.node_of()
    order = np.argsort(node_of, kind="stable")  # positions are host-sorted and GPU-sorted within a host
    sizes = np.bincount(node_of).astype(np.int64)
    nic_of = np.asarray(layout.nics)[order]
    k = int(sizes[0])
    if k and bool((sizes == k).all()):  # every host alike in size: its patterns found as array rows
        rows, first, pattern = np.unique(nic_of.reshape(-1, k), axis=0, return_index=True, return_inverse=True)
        by_appearance = np.argsort(first, kind="stable")
        renumber = np.empty_like(by_appearance)
        renumber[by_appearance] = np.arange(len(by_appearance))
        patterns = [_pattern(rows[i].tolist()) for i in by_appearance]
        return Hosts(order.astype(np.int64), sizes, renumber[pattern.reshape(-1)], patterns)
    ids: dict[tuple[int, ...], int] = {}
    host_pattern = [ids.setdefault(tuple(nics.tolist()), len(ids)) for nics in np.split(nic_of, np.cumsum(sizes)[:-1])]
    patterns = [_pattern(list(key)) for key in ids]
    return Hosts(order.astype(np.int64), sizes, np.asarray(host_pattern, dtype=np.int64), patterns)


def _pattern(nic_of: list[int]) -> Node:
    return Node(tuple(range(len(nic_of))), tuple(dict.fromkeys(nic_of)), tuple(nic_of))


def _graph_channels(hosts: Hosts, placement: Placement, options: NcclOptions) -> tuple[int, float, float]:
    """(graph channels, GB/s per channel across nodes, GB/s per channel inside a node) of NCCL's search."""
    arch = options.gpu_arch
    if hosts.count <= 1:
        if placement.intra_host != "nvlink":
            return 1, 0.0, snap(placement.pcie_gbytes, SPEEDS_INTER[80])
        # NVSwitch: 6 channels at 60 (Hopper) or 40 GB/s, duplicated to 12 (search.cc speeds; dup rule)
        return 12, 0.0, 30.0 if arch >= 90 else 20.0
    nics = min(len(node.nics) for node in hosts.patterns)
    speed = snap(path_gbytes(placement), SPEEDS_INTER[arch if arch in SPEEDS_INTER else 80])
    channels = min(nics, MAXCHANNELS // 2)
    if not (speed < 25 or (arch > 80 and speed < 50 and channels > 4)):
        channels, speed = min(2 * channels, MAXCHANNELS // 2), speed / 2
    return channels, speed, speed


def path_gbytes(placement: Placement) -> float:
    """GB/s of a GPU's path to its NIC as NCCL's topology sees it: min(NIC, PCIe)."""
    return min(placement.nic_gbps / 8, placement.pcie_gbytes)


def _coll_channels(graph: int, speed: float, nodes: int, placement: Placement, options: NcclOptions) -> int:
    if options.channels is not None:
        return options.channels
    coll = min(MAXCHANNELS, 2 * graph)
    if options.gpu_arch >= 90 and nodes > 1 and speed > 45 and coll < 16:
        coll *= 2
    return coll


def _base_channels(hosts: Hosts) -> int:
    """Distinct rings before NCCL's duplications: one per NIC across hosts (at least 1)."""
    if hosts.count <= 1:
        return max(1, int(hosts.sizes[0])) if hosts.count else 1
    return max(1, min(len(node.nics) for node in hosts.patterns))


def _same_nic_rings(hosts: Hosts) -> bool:
    """Whether every ring can leave on the NIC it entered by without PXN (the next GPU shares the NIC)."""
    for node in hosts.patterns:
        k = len(node.members)
        for nic in node.nics:
            e = node.owner(nic)
            if k > 1 and node.nic_of[(e + 1) % k] != nic:
                return False
    return True


def _ring(node: Node, j: int, cross_nic: int) -> tuple[list[int], int, int]:
    """Graph channel j's ring through `node`: its positions in order, the entry NIC and the exit NIC."""
    k = len(node.members)
    nic = node.nics[j % len(node.nics)]
    e = node.owner(nic)
    last = (e + 1) % k
    descending = [node.members[(e - s) % k] for s in range(k)]  # e, e-1, ..., e+1
    if k == 1 or node.nic_of[last] == nic or cross_nic == 0:
        return descending, nic, nic  # the last GPU leaves on the entry NIC (its own, or through PXN)
    if cross_nic == 1 or j % 2 == 0:
        return descending, nic, node.nic_of[last]
    # NCCL_CROSS_NIC=2, odd channel: enter where the even channel left, ascend, leave on its entry NIC
    even_nic = node.nics[(j - 1) % len(node.nics)]
    start = (node.owner(even_nic) + 1) % k
    ascending = [node.members[(start + s) % k] for s in range(k)]
    return ascending, node.nic_of[start], even_nic


def _tree(node: Node, j: int) -> tuple[list[int], bool, int]:
    """Graph channel j's tree chain on `node` (head first, ascending), whether it is BALANCED, its NIC."""
    k = len(node.members)
    nic = node.nics[j % len(node.nics)]
    head = node.owner(nic)
    chain = [node.members[(head + s) % k] for s in range(k)]
    balanced = k > 1 and node.nic_of[(head + 1) % k] == nic
    return chain, balanced, nic


def _p2p_channels(coll: int, ranks: int, nodes: int, path: float) -> tuple[int, int]:
    """(p2pnChannels, p2p channels per remote peer) as ncclTopoComputeP2pChannels sets them."""
    p2p = 1 << max(0, math.ceil(math.log2(max(1, min(coll, MAXCHANNELS)))))
    if nodes <= 1:
        return p2p, p2p
    # remote peers: ceil(path bandwidth / 14 GB/s) (a 48 GB/s path: 4), as a power of two
    per_peer = 1 << max(0, math.ceil(math.log2(max(1, math.ceil(path / P2P_PER_CHANNEL_NET_GBPS)))))
    groups = math.ceil(ranks / P2P_SCHEDULE_GROUP)
    while per_peer > 1 and per_peer * groups > p2p:
        per_peer //= 2
    return p2p, per_peer


def snap(value: float, speeds: tuple[float, ...]) -> float:
    """The highest of NCCL's channel speeds at most `value` (its lowest when none is)."""
    for speed in speeds:
        if speed <= value:
            return float(speed)
    return float(speeds[-1])

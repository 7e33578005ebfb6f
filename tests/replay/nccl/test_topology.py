"""The rings, trees and channel counts NCCL builds (tracekit.replay.nccl.topology), against real NCCL logs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tracekit.replay.layout import GroupLayout, group_layout
from tracekit.replay.nccl.options import NcclOptions
from tracekit.replay.nccl.topology import Node, model
from tracekit.replay.placement import Placement


def ring_from_rank_0(n: int, placement: Placement, channels: int, options: NcclOptions | None = None) -> list[str]:
    """The `Channel cc/CC :` lines NCCL's rank 0 prints: each ring from rank 0, following `next`."""
    layout = group_layout(list(range(n)), placement)
    topo = model(layout, placement, options or NcclOptions())
    lines = []
    for c in range(channels):
        ring = topo.ring[c]
        successor = {int(ring[i]): int(ring[(i + 1) % n]) for i in range(n)}
        order = [0]
        while len(order) < n:
            order.append(successor[order[-1]])
        lines.append(f"Channel {c:02d}/{topo.channels:02d} :" + "".join(f" {int(layout.ranks[p]):3d}" for p in order))
    return lines


def test_h100_rings_are_the_ones_nccl_printed() -> None:
    # NVIDIA/nccl#1538 (NCCL 2.22.3, 2 nodes x 8 GPUs, 8 NICs per node): rank 0's ring lines, verbatim
    # after the "NCCL INFO" prefix (channels 01-05; channel 00 was not in the thread's excerpt).
    printed = [
        "Channel 01/16 :    0   8  15  14  13  12  11  10   9   1   2   3   4   5   6   7",
        "Channel 02/16 :    0   7   6   5   4   3  11  12  13  14  15   8   9  10   2   1",
        "Channel 03/16 :    0   1   2  10   9   8  15  14  13  12  11   3   4   5   6   7",
        "Channel 04/16 :    0   7   6   5  13  14  15   8   9  10  11  12   4   3   2   1",
        "Channel 05/16 :    0   1   2   3   4  12  11  10   9   8  15  14  13   5   6   7",
    ]
    assert ring_from_rank_0(16, Placement(), 6)[1:] == [line.replace(":    ", ":   ") for line in printed]


def test_a100_rings_with_two_gpus_per_nic_leave_on_the_nic_they_entered() -> None:
    # NVIDIA/nccl#1412 (2 nodes x 8 A100, 4 NICs, each shared by two GPUs): 8 channels, each ring
    # enters a node at a NIC's first GPU, descends and leaves from its partner on the same NIC. (That
    # system's GPUs were ordered 0 1 2 3 6 7 4 5 in NCCL's topology; here they are in index order.)
    placement = Placement(nics_per_host=4, nic_gbps=200, pcie_gbytes=24)
    lines = ring_from_rank_0(16, placement, 2, NcclOptions(gpu_arch=80))
    assert lines == [
        "Channel 00/08 :   0   7   6   5   4   3   2   1   8  15  14  13  12  11  10   9",
        "Channel 01/08 :   0   7   6   5   4   3  10   9   8  15  14  13  12  11   2   1",
    ]


@pytest.mark.parametrize(
    "placement,arch,nodes,channels",
    [
        (Placement(), 90, 2, 16),  # H100, 8 x 400G: 8 graph channels, doubled
        (Placement(nics_per_host=4), 90, 2, 16),  # 4 NICs: 4 x 48 GB/s duplicated to 8 x 24, doubled
        (Placement(nics_per_host=1), 90, 2, 4),  # 1 NIC
        (Placement(nic_gbps=200, pcie_gbytes=24), 80, 2, 16),  # A100, 8 x 200G
        (Placement(nics_per_host=4, nic_gbps=200, pcie_gbytes=24), 80, 2, 8),  # A100, 4 NICs (nccl#1412)
        (Placement(), 90, 1, 24),  # one NVSwitch host
    ],
)
def test_channel_counts(placement: Placement, arch: int, nodes: int, channels: int) -> None:
    layout = group_layout(list(range(8 * nodes)), placement)
    assert model(layout, placement, NcclOptions(gpu_arch=arch)).channels == channels


def test_h100_trees_have_every_link_at_the_channels_gpu() -> None:
    # NCCL's TREE pattern (one GPU per NIC): channel c's chain on each node starts at GPU c, and the
    # heads of the nodes form the double binary tree: channels 0-7 the first tree, 8-15 the second.
    placement = Placement()
    layout = group_layout(list(range(32)), placement)
    topo = model(layout, placement, NcclOptions())
    for c in range(16):
        head = c % 8
        parents = topo.tree_parent[c]
        for node in range(4):
            chain = [node * 8 + (head + s) % 8 for s in range(8)]
            assert [int(parents[p]) for p in chain[1:]] == chain[:-1]
            assert (topo.tree_nic[c, chain] == head).all()
        heads = [node * 8 + head for node in range(4)]
        node_parent = [int(parents[h]) // 8 if parents[h] >= 0 else -1 for h in heads]
        assert node_parent == ([-1, 2, 0, 2] if c < 8 else [1, 3, 1, -1])  # 4 nodes: btree, then its mirror
        assert all(parents[h] < 0 or parents[h] % 8 == head for h in heads)


def test_balanced_trees_land_the_first_childs_link_on_the_second_gpu() -> None:
    # NCCL's BALANCED_TREE (two GPUs per NIC; nccl#1412 prints "Trees [1] 3/10/-1->2->-1" for rank 2):
    # channel 1's chain on node 0 is 2 3 4 ... 1; node 1's head (10) sends up to rank 2 (its child type 1).
    placement = Placement(nics_per_host=4, nic_gbps=200, pcie_gbytes=24)
    layout = group_layout(list(range(16)), placement)
    topo = model(layout, placement, NcclOptions(gpu_arch=80))
    parents = topo.tree_parent[1]
    assert parents[2] == -1 and parents[3] == 2 and parents[10] == 2
    children_of_2 = sorted(int(p) for p in np.flatnonzero(parents == 2))
    assert children_of_2 == [3, 10]


def test_the_p2p_channels_per_peer_shrink_with_the_job() -> None:
    placement = Placement()
    per_peer = {}
    for n in (16, 32, 64, 128):
        layout = group_layout(list(range(n)), placement)
        per_peer[n] = model(layout, placement, NcclOptions()).p2p_per_peer
    assert per_peer == {16: 4, 32: 4, 64: 2, 128: 1}


def _plain_nodes(layout: GroupLayout) -> list[Node]:
    """The hosts in NCCL's node order, each with its members (absolute positions) in GPU order."""
    node_of = layout.node_of()
    order = np.argsort(node_of, kind="stable")
    out = []
    for members in np.split(order, np.cumsum(np.bincount(node_of))[:-1]):
        nic_of = tuple(layout.nics[members].tolist())
        out.append(Node(tuple(members.tolist()), tuple(dict.fromkeys(nic_of)), nic_of))
    return out


def _per_host_reference(layout: GroupLayout, placement: Placement, options: NcclOptions) -> dict[str, np.ndarray]:
    """The rings and trees built host by host, channel by channel (the model's first, plain form)."""
    from tracekit.replay.nccl import topology as t
    from tracekit.replay.nccl.trees import dtree

    nodes = _plain_nodes(layout)
    n = layout.n
    hosts = t._hosts(layout)
    graph, speed, _ = t._graph_channels(hosts, placement, options)
    coll = t._coll_channels(graph, speed, len(nodes), placement, options)
    base = t._base_channels(hosts)
    out = {k: np.full((coll, n), -1, dtype=np.int64) for k in ("ring", "send", "recv", "parent", "nic")}
    (first, first_types), (second, second_types) = dtree(len(nodes))
    swap = placement.cross_nic == 2 and base % 2 == 0 and len(nodes) > 1 and not t._same_nic_rings(hosts)
    for c in range(coll):
        source = c % (2 * graph)
        j = (source % graph) % base
        order: list[int] = []
        for x, node in enumerate(nodes):
            ring_j = j ^ 1 if swap and x % 2 == 1 and (j ^ 1) < base else j
            intra, entry, exit_nic = t._ring(node, ring_j, placement.cross_nic)
            order.extend(intra)
            out["recv"][c, intra[0]], out["send"][c, intra[-1]] = entry, exit_nic
        out["ring"][c] = order
        parents, types = (first, first_types) if source < graph else (second, second_types)
        heads = [t._tree(node, j) for node in nodes]
        for x, (chain, _, nic) in enumerate(heads):
            for i in range(1, len(chain)):
                out["parent"][c, chain[i]] = chain[i - 1]
            if parents[x] >= 0:
                up_chain, up_balanced, _ = heads[parents[x]]
                to_second = up_balanced and types[x] == 0 and len(up_chain) > 1
                out["parent"][c, chain[0]] = up_chain[1] if to_second else up_chain[0]
            out["nic"][c, list(chain)] = nic
    return out


@settings(max_examples=examples(60), deadline=None)
@given(
    ranks=st.sets(st.integers(0, 63), min_size=1, max_size=40),
    nics=st.sampled_from([1, 2, 4, 8]),
    cross_nic=st.sampled_from([0, 1, 2]),
)
def test_the_model_builds_every_host_as_the_host_by_host_loop_does(ranks: set[int], nics: int, cross_nic: int) -> None:
    # Found by a report of a dataset with a group of 2^20 ranks: building hosts one by one took 50 s
    # per communicator (a scan of every position per host); the model now works each NIC pattern
    # out once per channel. Uneven hosts (ranks missing) and mixed patterns must come out the same.
    placement = Placement(nics_per_host=nics, cross_nic=cross_nic)
    layout = group_layout(sorted(ranks), placement)
    topo = model(layout, placement, NcclOptions())
    want = _per_host_reference(layout, placement, NcclOptions())
    assert np.array_equal(topo.ring, want["ring"])
    assert np.array_equal(topo.ring_send_nic, want["send"])
    assert np.array_equal(topo.ring_recv_nic, want["recv"])
    assert np.array_equal(topo.tree_parent, want["parent"])
    assert np.array_equal(topo.tree_nic, want["nic"])


def test_a_communicator_at_the_rank_bound_is_modelled_in_32_bit_positions() -> None:
    # Found by the dataset fuzzer (seed 2026, case 2292): a job whose world_size was 2^20 - 1 (the
    # bound) while four ranks called made the world group a 1M-rank communicator; its five channel x
    # rank tables in int64 took the replay to 1.5 GB (0.95 GB in int32, 0.78 GB with 16-bit NICs).
    # Positions are below 2^20; local NICs below the host's NIC count.
    placement = Placement(gpus_per_host=8)
    topo = model(group_layout(list(range(1 << 16)), placement), placement, NcclOptions())
    assert topo.ring.dtype == topo.tree_parent.dtype == np.int32
    assert topo.ring_send_nic.dtype == topo.ring_recv_nic.dtype == topo.tree_nic.dtype == np.int16
    assert int(topo.ring.max()) == (1 << 16) - 1 and int(topo.tree_parent.min()) == -1
    wide = Placement(gpus_per_host=1 << 16)  # one NIC per GPU by default: 65,536 NICs on one host
    topo = model(group_layout(list(range(1 << 16)), wide), wide, NcclOptions())
    assert topo.tree_nic.dtype == np.int32

"""Conservation of bytes and the shape of every algorithm's transfers (property-based, exact integers).

S is the ingest convention (in_bytes: the local shard for all-gather, the full input for
reduce-scatter, the whole send buffer for all-to-all). Delivered bytes (every transfer but the
NVLink hop that brings data to a PXN proxy) over n ranks: ring AllReduce 2(n-1)·S, ring AllGather
(n-1)·S per rank, ring ReduceScatter (n-1)·S, direct AllToAll (n-1)/n·S per rank, tree AllReduce
2(n-1)·S, halving-doubling AllReduce 2(p-1)·S + 2(n-p)·S (p the largest power of two <= n),
hierarchical AllReduce 2(n-1)·S; whatever the channels, QPs and PXN.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tracekit.replay.algorithms import NotApplicable, Request, template
from tracekit.replay.algorithms.base import INTRA, NET
from tracekit.replay.layout import GroupLayout, group_layout
from tracekit.replay.nccl.options import NcclOptions
from tracekit.replay.nccl.topology import model
from tracekit.replay.placement import Placement
from tracekit.replay.stamp import Stamped, part_bytes, stamp

SIZES = st.integers(min_value=0, max_value=1 << 40)
GROUPS = st.integers(min_value=2, max_value=128)
CHANNELS = st.sampled_from([1, 2, 3, 4, 16])
QPS = st.sampled_from([1, 2, 4])


def build(
    algorithm: str,
    comm_type: str,
    n: int,
    size: int,
    per_host: int = 8,
    channels: int | None = None,
    qps: int = 1,
    pxn: bool = True,
    cross_nic: int = 0,
    member_bytes: list[int] | None = None,
    root: int = 0,
    chunks: int = 1,
) -> tuple[Stamped, GroupLayout]:
    placement = Placement(gpus_per_host=per_host, cross_nic=cross_nic)
    layout = group_layout(list(range(n)), placement)
    options = NcclOptions(channels=channels)
    topo = model(layout, placement, options)
    used = min(channels or topo.channels, topo.channels)
    req = Request(comm_type, layout, topo.first(used), root=root, channels=used, chunks=chunks, pxn=pxn)
    t = template(algorithm, req, qps)
    own = np.array([member_bytes if member_bytes is not None else [size] * n], dtype=np.int64)
    return stamp(t, np.arange(1), np.array([size], dtype=np.int64), own, 0), layout


def delivered(s: Stamped) -> np.ndarray:
    """Mask of the transfers that deliver data (not the NVLink hop to a PXN proxy)."""
    return ~(s.pxn & (s.link == INTRA))


def check_structure(s: Stamped, layout: GroupLayout) -> None:
    n = layout.n
    assert (s.src != s.dst).all(), "a rank sends to itself"
    assert ((s.src >= 0) & (s.src < n) & (s.dst >= 0) & (s.dst < n)).all()
    assert (s.bytes > 0).all(), "a flow without bytes"
    cross = layout.hosts[s.src] != layout.hosts[s.dst]
    assert ((s.link == NET) == cross).all(), "a flow inside a host on the network, or across hosts on NVLink"
    assert ((s.src_nic >= 0) == cross).all() and ((s.dst_nic >= 0) == cross).all()
    owner = np.repeat(np.arange(len(s.src)), np.diff(s.dep_ptr))
    assert (s.dep_idx < owner).all(), "a dependency that does not point back"
    # every network send from a PXN proxy waits for the NVLink hop that brought it the data
    fed = _relay_of(s)
    from_proxy = s.pxn & (s.link == NET)
    assert (fed[from_proxy] >= 0).all()
    assert (s.dst[fed[from_proxy]] == s.src[from_proxy]).all()


def _relay_of(s: Stamped) -> np.ndarray:
    """For each transfer, the PXN relay (NVLink hop to a proxy) it waits for, else -1."""
    owner = np.repeat(np.arange(len(s.src)), np.diff(s.dep_ptr))
    relay = np.full(len(s.src), -1, dtype=np.int64)
    is_relay = (s.pxn & (s.link == INTRA))[s.dep_idx]
    relay[owner[is_relay]] = s.dep_idx[is_relay]
    return relay


@settings(max_examples=examples(25), deadline=None)
@given(n=GROUPS, size=SIZES, channels=CHANNELS, qps=QPS, pxn=st.booleans(), cross_nic=st.sampled_from([0, 1, 2]))
def test_ring_all_reduce_delivers_2_n_minus_1_times_s(
    n: int, size: int, channels: int, qps: int, pxn: bool, cross_nic: int
) -> None:
    s, layout = build("ring", "ALL_REDUCE", n, size, channels=channels, qps=qps, pxn=pxn, cross_nic=cross_nic)
    check_structure(s, layout)
    d = delivered(s)
    assert s.bytes[d].sum() == 2 * (n - 1) * size
    sent = np.bincount(_origin(s, layout), weights=s.bytes[d], minlength=n)
    # Each rank sends 2S minus two chunks of each channel: within 2 bytes per channel of 2(n-1)/n * S.
    assert (np.abs(sent * n - 2 * (n - 1) * size) <= 2 * n * channels * qps).all()


@settings(max_examples=examples(25), deadline=None)
@given(n=GROUPS, size=SIZES, channels=CHANNELS, qps=QPS, pxn=st.booleans())
def test_ring_reduce_scatter_and_all_gather_deliver_their_totals(
    n: int, size: int, channels: int, qps: int, pxn: bool
) -> None:
    s, layout = build("ring", "REDUCE_SCATTER", n, size, channels=channels, qps=qps, pxn=pxn)
    check_structure(s, layout)
    assert s.bytes[delivered(s)].sum() == (n - 1) * size
    s, layout = build("ring", "ALL_GATHER", n, size, channels=channels, qps=qps, pxn=pxn)
    check_structure(s, layout)
    d = delivered(s)
    received = np.bincount(s.dst[d], weights=s.bytes[d], minlength=n)
    assert (received == (n - 1) * size).all()


@settings(max_examples=examples(30), deadline=None)
@given(shards=st.lists(st.integers(min_value=0, max_value=1 << 30), min_size=2, max_size=24), channels=CHANNELS)
def test_ring_and_direct_all_gather_forward_each_members_own_shard(shards: list[int], channels: int) -> None:
    n = len(shards)
    for algorithm in ("ring", "direct"):
        s, layout = build(algorithm, "ALL_GATHER", n, max(shards), channels=channels, member_bytes=shards)
        d = delivered(s)
        received = np.bincount(s.dst[d], weights=s.bytes[d], minlength=n)
        assert (received == sum(shards) - np.array(shards)).all(), algorithm


@settings(max_examples=examples(25), deadline=None)
@given(n=GROUPS, size=SIZES, channels=CHANNELS, qps=QPS, pxn=st.booleans(), chunks=st.sampled_from([1, 3, 8]))
def test_tree_all_reduce_delivers_2_n_minus_1_times_s(
    n: int, size: int, channels: int, qps: int, pxn: bool, chunks: int
) -> None:
    s, layout = build("tree", "ALL_REDUCE", n, size, channels=channels, qps=qps, pxn=pxn, chunks=chunks)
    check_structure(s, layout)
    assert s.bytes[delivered(s)].sum() == 2 * (n - 1) * size


@settings(max_examples=examples(25), deadline=None)
@given(n=GROUPS, size=SIZES, p2p=st.sampled_from([1, 2, 4]), qps=QPS, pxn=st.booleans())
def test_direct_all_to_all_delivers_n_minus_1_over_n_of_s_per_rank(
    n: int, size: int, p2p: int, qps: int, pxn: bool
) -> None:
    s, layout = build("direct", "ALL_TO_ALL", n, size, channels=p2p, qps=qps, pxn=pxn)
    check_structure(s, layout)
    d = delivered(s)
    sent_by_origin = np.bincount(_origin(s, layout), weights=s.bytes[d], minlength=n)
    assert s.bytes[d].sum() == (n - 1) * size
    assert (np.abs(sent_by_origin * n - (n - 1) * size) <= n * p2p * qps).all()


def _origin(s: Stamped, layout: GroupLayout) -> np.ndarray:
    """The rank whose data each delivered transfer carries (a PXN send carries its relay's source's)."""
    d = delivered(s)
    relay = _relay_of(s)
    origin = np.where((relay >= 0) & (s.link == NET), s.src[np.maximum(relay, 0)], s.src)
    return origin[d]


@settings(max_examples=examples(20), deadline=None)
@given(n=st.integers(min_value=2, max_value=40), size=SIZES, per_host=st.integers(min_value=1, max_value=8))
def test_every_all_reduce_algorithm_moves_exactly_its_total(n: int, size: int, per_host: int) -> None:
    p = 1 << (n.bit_length() - 1)
    expected = {
        "ring": 2 * (n - 1) * size,
        "tree": 2 * (n - 1) * size,
        "direct": 2 * (n - 1) * size,
        "halving-doubling": 2 * (p - 1) * size + 2 * (n - p) * size,
    }
    for algorithm, total in expected.items():
        s, layout = build(algorithm, "ALL_REDUCE", n, size, per_host)
        check_structure(s, layout)
        assert s.bytes[delivered(s)].sum() == total, algorithm


@settings(max_examples=examples(20), deadline=None)
@given(hosts=st.integers(min_value=1, max_value=6), per_host=st.integers(min_value=1, max_value=8), size=SIZES)
def test_hierarchical_totals(hosts: int, per_host: int, size: int) -> None:
    n = hosts * per_host
    if n < 2:
        return
    s, layout = build("hierarchical", "ALL_REDUCE", n, size, per_host)
    check_structure(s, layout)
    assert s.bytes.sum() == 2 * hosts * (per_host - 1) * size + 2 * (hosts - 1) * size
    assert s.bytes[s.link == NET].sum() == 2 * (hosts - 1) * size  # 2(h-1)/h * S leave each host
    s, _ = build("hierarchical", "REDUCE_SCATTER", n, size, per_host)
    assert s.bytes.sum() == hosts * (per_host - 1) * size + (hosts - 1) * size
    s, _ = build("hierarchical", "ALL_GATHER", n, size, per_host)
    assert (np.bincount(s.src, weights=s.bytes, minlength=n) == (n - 1) * size).all()


@settings(max_examples=examples(25), deadline=None)
@given(n=GROUPS, size=SIZES, root=st.integers(min_value=0, max_value=127), chunks=st.sampled_from([1, 4]))
def test_rooted_collectives(n: int, size: int, root: int, chunks: int) -> None:
    root %= n
    for algorithm, comm_type, total in (
        ("ring", "BROADCAST", (n - 1) * size),
        ("ring", "REDUCE", (n - 1) * size),
        ("direct", "BROADCAST", (n - 1) * size),
        ("direct", "REDUCE", (n - 1) * size),
        ("direct", "GATHER", (n - 1) * size),
    ):
        s, layout = build(algorithm, comm_type, n, size, root=root, chunks=chunks, channels=4)
        check_structure(s, layout)
        assert s.bytes[delivered(s)].sum() == total, (algorithm, comm_type)
    s, layout = build("direct", "SCATTER", n, size, root=root, channels=2)
    own_part = part_bytes(np.array([size]), 2 * n, np.array([2 * root]), np.array([2 * root + 2]))[0]
    assert s.bytes[delivered(s)].sum() == size - own_part
    assert (_origin(s, layout) == root).all()


@pytest.mark.parametrize("cross_nic", [0, 2])
@pytest.mark.parametrize("algorithm,comm_type", [("ring", "ALL_REDUCE"), ("ring", "ALL_GATHER"),
                                                 ("ring", "REDUCE_SCATTER"), ("tree", "ALL_REDUCE")])  # fmt: skip
def test_rings_and_trees_stay_on_their_rail_and_spread_over_every_nic(
    cross_nic: int, algorithm: str, comm_type: str
) -> None:
    # 8 hosts of 8 GPUs, one NIC per GPU on its own rail: no byte changes rail between hosts, and
    # each host's network bytes split evenly over its 8 NICs (within one chunk).
    size = 64 << 20
    s, layout = build(algorithm, comm_type, 64, size, cross_nic=cross_nic, chunks=4)
    net = s.link == NET
    assert (s.src_nic[net] == s.dst_nic[net]).all()  # NIC i is on rail i
    egress = np.bincount(layout.hosts[s.src[net]] * 8 + s.src_nic[net], weights=s.bytes[net], minlength=64)
    chunk = size // 64 // 16 + 1
    if algorithm == "ring":
        assert egress.max() - egress.min() <= 2 * chunk
    else:  # a tree node's sends depend on its place in the two trees: within 1.2 of the mean
        assert egress.max() <= 1.2 * egress.mean()


def test_cross_nic_1_rings_change_rail_between_hosts() -> None:
    s, _ = build("ring", "ALL_REDUCE", 16, 1 << 20, cross_nic=1)
    net = s.link == NET
    assert (s.src_nic[net] != s.dst_nic[net]).any()


def test_pxn_all_to_all_opens_one_network_peer_per_gpu_and_remote_host() -> None:
    s, layout = build("direct", "ALL_TO_ALL", 64, 64 << 20, channels=2, pxn=True)
    net = s.link == NET
    pairs = np.unique(np.stack([s.src[net], layout.hosts[s.dst[net]], s.dst[net]], axis=1), axis=0)
    per_gpu_host = np.unique(pairs[:, :2], axis=0, return_counts=True)[1]
    assert per_gpu_host.max() == 1
    assert (s.src_nic[net] == s.dst_nic[net]).all()  # rail-aligned
    s, layout = build("direct", "ALL_TO_ALL", 64, 64 << 20, channels=2, pxn=False)
    net = s.link == NET
    pairs = np.unique(np.stack([s.src[net], layout.hosts[s.dst[net]], s.dst[net]], axis=1), axis=0)
    assert np.unique(pairs[:, :2], axis=0, return_counts=True)[1].max() == 8  # every GPU of each remote host


def test_qps_are_distinct_flows_of_one_connection() -> None:
    one, _ = build("ring", "ALL_REDUCE", 16, 1 << 24, channels=4, qps=1)
    four, _ = build("ring", "ALL_REDUCE", 16, 1 << 24, channels=4, qps=4)
    assert (four.link == NET).sum() == 4 * (one.link == NET).sum()
    assert (four.link == INTRA).sum() == (one.link == INTRA).sum()
    assert set(four.qp[four.link == NET].tolist()) == {0, 1, 2, 3}
    assert four.bytes.sum() == one.bytes.sum()


def test_small_messages_make_no_zero_byte_flows_and_keep_their_order() -> None:
    s, layout = build("ring", "ALL_REDUCE", 16, 5, channels=16, qps=2)
    check_structure(s, layout)
    assert s.bytes[delivered(s)].sum() == 2 * 15 * 5


def test_an_algorithm_that_does_not_serve_a_collective_says_so() -> None:
    with pytest.raises(NotApplicable):
        build("tree", "ALL_TO_ALL", 4, 8)
    with pytest.raises(NotApplicable):
        build("halving-doubling", "ALL_GATHER", 6, 8)
    placement = Placement(hosts=((0, 1, 2), (3,)))
    layout = group_layout([0, 1, 2, 3], placement)
    topo = model(layout, placement, NcclOptions())
    with pytest.raises(NotApplicable):  # 3 + 1 GPUs: unequal hosts
        template("hierarchical", Request("ALL_REDUCE", layout, topo), 1)


def test_a_placement_with_two_gpus_per_nic_shares_the_nic() -> None:
    placement = Placement(nics_per_host=4)
    layout = group_layout(list(range(16)), placement)
    topo = model(layout, placement, NcclOptions())
    req = Request("ALL_REDUCE", layout, topo, channels=topo.channels)
    s = stamp(template("ring", req), np.arange(1), np.array([1 << 20]), np.full((1, 16), 1 << 20), 0)
    net = s.link == NET
    assert set(s.src_nic[net].tolist()) == {0, 1, 2, 3} and not s.pxn.any()
    assert replace(placement, cross_nic=0).cross_nic == 0


def test_the_template_cache_key_is_a_digest_of_the_topology_not_a_copy() -> None:
    # Found by the dataset fuzzer (seed 2026, case 2292): the key held a bytes copy of all five
    # channel x rank tables, so a world of 2^20 - 1 ranks kept ~0.6 GB of keys in the template cache.
    placement = Placement(gpus_per_host=8)
    layout = group_layout(list(range(1 << 16)), placement)
    topo = model(layout, placement, NcclOptions())
    key = Request("ALL_REDUCE", layout, topo.first(4), channels=4).key()
    assert sum(len(part) for part in key if isinstance(part, bytes)) < 1024
    assert key == Request("ALL_REDUCE", layout, model(layout, placement, NcclOptions()).first(4), channels=4).key()
    moved = replace(topo.first(4), ring=topo.ring[:4].copy())
    moved.ring[0, [0, 1]] = moved.ring[0, [1, 0]]
    assert Request("ALL_REDUCE", layout, moved, channels=4).key() != key
    assert Request("ALL_REDUCE", layout, topo.first(2), channels=4).key() != key

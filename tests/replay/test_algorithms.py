"""Conservation of bytes for every algorithm and collective type (property-based, exact integers).

S is the ingest convention (in_bytes: the local shard for all-gather, the full input for
reduce-scatter, the whole send buffer for all-to-all). Expected totals over n ranks:
ring AllReduce 2(n-1)/n*S per rank, ring AllGather (n-1)*S, ring ReduceScatter (n-1)/n*S,
direct AllToAll (n-1)/n*S; tree AllReduce 2(n-1)*S in total; halving-doubling AllReduce
2(p-1)*S + 2(n-p)*S (p the largest power of two <= n); hierarchical AllReduce 2(n-1)*S.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.replay.algorithms import NotApplicable, template
from tracekit.replay.algorithms.tree import btree, dtree_parents
from tracekit.replay.stamp import Stamped, part_bytes, stamp

SIZES = st.integers(min_value=0, max_value=1 << 40)
GROUPS = st.integers(min_value=2, max_value=40)


def flows(
    algorithm: str, comm_type: str, n: int, size: int, per_host: int = 8, member_bytes: list[int] | None = None
) -> tuple[Stamped, np.ndarray, np.ndarray, np.ndarray]:
    hosts = np.arange(n) // per_host
    t = template(algorithm, comm_type, hosts)
    own = np.array([member_bytes if member_bytes is not None else [size] * n], dtype=np.int64)
    s = stamp(t, np.arange(1), np.array([size], dtype=np.int64), own, 0)
    sent = np.bincount(s.src, weights=s.bytes, minlength=n).astype(np.int64)
    received = np.bincount(s.dst, weights=s.bytes, minlength=n).astype(np.int64)
    return s, sent, received, hosts


def check_structure(s: Stamped, n: int) -> None:
    assert (s.src != s.dst).all(), "a rank sends to itself"
    assert ((s.src >= 0) & (s.src < n) & (s.dst >= 0) & (s.dst < n)).all()
    assert (s.bytes >= 0).all()
    for f in range(len(s.src)):  # dependencies point back, to the sender's incoming data, one step earlier
        for d in s.dep_idx[s.dep_ptr[f] : s.dep_ptr[f + 1]]:
            assert d < f and s.dst[d] == s.src[f] and s.step[d] < s.step[f]


@settings(max_examples=60, deadline=None)
@given(n=GROUPS, size=SIZES)
def test_ring_all_reduce_sends_2_n_minus_1_over_n_of_s_per_rank(n: int, size: int) -> None:
    s, sent, received, _ = flows("ring", "ALL_REDUCE", n, size)
    check_structure(s, n)
    assert sent.sum() == 2 * (n - 1) * size == received.sum()
    # Each rank sends 2S minus two of the n chunks: within 2 bytes of 2(n-1)/n * S, exact when n | S.
    assert (np.abs(sent * n - 2 * (n - 1) * size) <= 2 * n).all()
    if size % n == 0:
        assert (sent == 2 * (n - 1) * size // n).all() and (received == sent).all()
    assert s.step.max() == 2 * (n - 1) - 1


@settings(max_examples=60, deadline=None)
@given(n=GROUPS, size=SIZES)
def test_ring_reduce_scatter_sends_n_minus_1_over_n_of_s_per_rank(n: int, size: int) -> None:
    s, sent, received, _ = flows("ring", "REDUCE_SCATTER", n, size)
    check_structure(s, n)
    assert sent.sum() == (n - 1) * size == received.sum()
    assert (np.abs(sent * n - (n - 1) * size) <= n).all()
    if size % n == 0:
        assert (sent == (n - 1) * size // n).all() and (received == sent).all()


@settings(max_examples=60, deadline=None)
@given(n=GROUPS, size=SIZES)
def test_ring_all_gather_sends_n_minus_1_shards_per_rank(n: int, size: int) -> None:
    s, sent, received, _ = flows("ring", "ALL_GATHER", n, size)
    check_structure(s, n)
    assert (sent == (n - 1) * size).all() and (received == (n - 1) * size).all()


@settings(max_examples=40, deadline=None)
@given(shards=st.lists(st.integers(min_value=0, max_value=1 << 30), min_size=2, max_size=24))
def test_ring_and_direct_all_gather_forward_each_members_own_shard(shards: list[int]) -> None:
    n = len(shards)
    for algorithm in ("ring", "direct"):
        s, sent, received, _ = flows(algorithm, "ALL_GATHER", n, max(shards), member_bytes=shards)
        # Every rank receives every other rank's shard exactly once.
        assert (received == sum(shards) - np.array(shards)).all()
        assert sent.sum() == (n - 1) * sum(shards)


@settings(max_examples=60, deadline=None)
@given(n=GROUPS, size=SIZES)
def test_direct_all_to_all_sends_n_minus_1_over_n_of_s_per_rank(n: int, size: int) -> None:
    s, sent, received, _ = flows("direct", "ALL_TO_ALL", n, size)
    check_structure(s, n)
    assert sent.sum() == received.sum()
    assert (np.abs(sent * n - (n - 1) * size) <= n).all()
    if size % n == 0:
        assert (sent == (n - 1) * size // n).all() and (received == sent).all()
    pairs = set(zip(s.src.tolist(), s.dst.tolist(), strict=True))
    assert len(pairs) == n * (n - 1) == len(s.src)  # one flow per ordered pair


@settings(max_examples=40, deadline=None)
@given(n=GROUPS, size=SIZES, per_host=st.integers(min_value=1, max_value=8))
def test_every_all_reduce_algorithm_moves_exactly_its_total(n: int, size: int, per_host: int) -> None:
    p = 1 << (n.bit_length() - 1)
    expected = {
        "ring": 2 * (n - 1) * size,
        "tree": 2 * (n - 1) * size,
        "direct": 2 * (n - 1) * size,
        "halving-doubling": 2 * (p - 1) * size + 2 * (n - p) * size,
    }
    for algorithm, total in expected.items():
        s, sent, received, _ = flows(algorithm, "ALL_REDUCE", n, size, per_host)
        check_structure(s, n)
        assert sent.sum() == total == received.sum(), algorithm


@settings(max_examples=40, deadline=None)
@given(hosts=st.integers(min_value=1, max_value=6), per_host=st.integers(min_value=1, max_value=8), size=SIZES)
def test_hierarchical_totals(hosts: int, per_host: int, size: int) -> None:
    n = hosts * per_host
    if n < 2:
        return
    s, sent, _, where = flows("hierarchical", "ALL_REDUCE", n, size, per_host)
    check_structure(s, n)
    cross = s.bytes[where[s.src] != where[s.dst]].sum()
    assert sent.sum() == 2 * hosts * (per_host - 1) * size + 2 * (hosts - 1) * size
    assert cross == 2 * (hosts - 1) * size  # 2(h-1)/h * S leave each host
    s, sent, _, where = flows("hierarchical", "REDUCE_SCATTER", n, size, per_host)
    assert sent.sum() == hosts * (per_host - 1) * size + (hosts - 1) * size
    s, sent, received, _ = flows("hierarchical", "ALL_GATHER", n, size, per_host)
    assert (sent == (n - 1) * size).all() and (received == (n - 1) * size).all()


@settings(max_examples=40, deadline=None)
@given(k=st.integers(min_value=1, max_value=6), size=SIZES)
def test_halving_doubling_reduce_scatter_and_all_gather_on_powers_of_two(k: int, size: int) -> None:
    n = 1 << k
    s, sent, received, _ = flows("halving-doubling", "REDUCE_SCATTER", n, size)
    check_structure(s, n)
    assert sent.sum() == (n - 1) * size
    s, sent, received, _ = flows("halving-doubling", "ALL_GATHER", n, size)
    check_structure(s, n)
    assert (sent == (n - 1) * size).all() and (received == (n - 1) * size).all()


@settings(max_examples=40, deadline=None)
@given(n=GROUPS, size=SIZES, root=st.integers(min_value=0, max_value=39))
def test_rooted_collectives(n: int, size: int, root: int) -> None:
    root %= n
    hosts = np.arange(n) // 8
    for algorithm, comm_type, total in (
        ("ring", "BROADCAST", (n - 1) * size),
        ("ring", "REDUCE", (n - 1) * size),
        ("direct", "BROADCAST", (n - 1) * size),
        ("direct", "REDUCE", (n - 1) * size),
        ("direct", "GATHER", (n - 1) * size),
    ):
        t = template(algorithm, comm_type, hosts, root)
        s = stamp(t, np.arange(1), np.array([size]), np.full((1, n), size), 0)
        check_structure(s, n)
        assert s.bytes.sum() == total, (algorithm, comm_type)
    t = template("direct", "SCATTER", hosts, root)
    s = stamp(t, np.arange(1), np.array([size]), np.full((1, n), size), 0)
    assert s.bytes.sum() == size - part_bytes(np.array([size]), n, np.array([root]), np.array([root + 1]))[0]
    assert (s.src == root).all()
    ring_bcast = template("ring", "BROADCAST", hosts, root)
    assert ring_bcast.src[0] == root and set(ring_bcast.dst.tolist()) == set(range(n)) - {root}


def test_two_hosts_of_eight_gpus_move_the_textbook_bytes_across_hosts() -> None:
    size = 1 << 30  # 1 GiB
    expected = {  # research/peers-and-simulators.md §3.5 worked example
        ("ring", "ALL_REDUCE"): 2 * 2 * 15 * size // 16,  # each host sends 1.875 GiB
        ("tree", "ALL_REDUCE"): 2 * size,  # each host sends 1 GiB
        ("halving-doubling", "ALL_REDUCE"): 2 * size,
        ("hierarchical", "ALL_REDUCE"): 2 * size,
        ("ring", "REDUCE_SCATTER"): 2 * 15 * size // 16,
        ("direct", "ALL_TO_ALL"): 16 * 8 * size // 16,  # 512 MiB of each rank's 1 GiB leaves its host
    }
    for (algorithm, comm_type), cross in expected.items():
        s, _, _, hosts = flows(algorithm, comm_type, 16, size, 8)
        assert s.bytes[hosts[s.src] != hosts[s.dst]].sum() == cross, (algorithm, comm_type)
    # The ring crosses between hosts on exactly one edge per host per step.
    s, _, _, hosts = flows("ring", "ALL_REDUCE", 16, size, 8)
    across = hosts[s.src] != hosts[s.dst]
    crossing = set(zip(s.src[across].tolist(), s.dst[across].tolist(), strict=True))
    assert crossing == {(7, 8), (15, 0)}


@settings(max_examples=200, deadline=None)
@given(
    total=st.integers(min_value=0, max_value=1 << 62),
    den=st.integers(min_value=1, max_value=4096),
    cut=st.lists(st.integers(min_value=0, max_value=4096), min_size=1, max_size=6),
)
def test_parts_are_exact_integers_that_sum_to_the_total(total: int, den: int, cut: list[int]) -> None:
    bounds = sorted({0, den, *[c % (den + 1) for c in cut]})
    lo, hi = np.array(bounds[:-1], dtype=np.int64), np.array(bounds[1:], dtype=np.int64)
    pieces = part_bytes(np.full(len(lo), total, dtype=np.int64), den, lo, hi)
    assert int(pieces.sum()) == total
    single = part_bytes(np.full(den, total, dtype=np.int64), den, np.arange(den), np.arange(den) + 1)
    assert single.max() - single.min() <= 1


def test_nccl_binary_tree_matches_its_published_illustration() -> None:
    # NVIDIA/nccl src/graph/trees.cc: 14 ranks, root 0 -> 8 -> (4, 12), 4 -> (2, 6), 12 -> (10, 13), ...
    parents = {r: btree(14, r) for r in range(14)}
    assert parents[0] == -1 and parents[8] == 0 and parents[4] == 8 and parents[12] == 8
    assert parents[2] == 4 and parents[6] == 4 and parents[10] == 12 and parents[13] == 12
    assert parents[1] == 2 and parents[3] == 2 and parents[11] == 10
    first, second = dtree_parents(14)
    assert second[0] != -1 and second.count(-1) == 1  # the second tree is shifted (even count)
    first, second = dtree_parents(5)
    assert second == [-1 if p < 0 else 4 - p for p in reversed(first)]  # mirrored (odd count)


def test_an_algorithm_that_does_not_serve_a_collective_says_so() -> None:
    with pytest.raises(NotApplicable):
        template("tree", "ALL_TO_ALL", np.zeros(4, dtype=np.int64))
    with pytest.raises(NotApplicable):
        template("halving-doubling", "ALL_GATHER", np.zeros(6, dtype=np.int64))
    with pytest.raises(NotApplicable):
        template("hierarchical", "ALL_REDUCE", np.array([0, 0, 0, 1]))  # 3 + 1 GPUs: unequal hosts

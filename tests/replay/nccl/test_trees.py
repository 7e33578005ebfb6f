"""NCCL's binary and double binary trees (NVIDIA/nccl src/graph/trees.cc), for 1 to 64 nodes."""

from __future__ import annotations

import pytest

from tracekit.replay.nccl.trees import btree_parent, dtree, dtree_parents


def test_the_binary_tree_matches_nccls_published_illustration() -> None:
    # trees.cc: 14 ranks, root 0 -> 8 -> (4, 12), 4 -> (2, 6), 12 -> (10, 13), 2 -> (1, 3), ...
    parents = {r: btree_parent(14, r) for r in range(14)}
    assert parents[0] == -1 and parents[8] == 0 and parents[4] == 8 and parents[12] == 8
    assert parents[2] == 4 and parents[6] == 4 and parents[10] == 12 and parents[13] == 12
    assert parents[1] == 2 and parents[3] == 2 and parents[11] == 10


def test_the_second_tree_is_mirrored_for_an_even_count_and_shifted_for_an_odd_one() -> None:
    # 8 nodes: tree 0 is 0-4, 4-{2,6}, 2-{1,3}, 6-{5,7}; tree 1 its mirror: 7-3, 3-{5,1}, 5-{6,4}, 1-{2,0}
    first, second = dtree_parents(8)
    assert first == [-1, 2, 4, 2, 0, 6, 4, 6]
    assert second == [1, 3, 1, 7, 5, 3, 5, -1]
    # 5 nodes (odd): node x takes the place of x-1 in the first tree
    first, second = dtree_parents(5)
    assert second == [-1 if first[(x - 1) % 5] < 0 else (first[(x - 1) % 5] + 1) % 5 for x in range(5)]
    assert second.index(-1) == 1


@pytest.mark.parametrize("nodes", range(1, 65))
def test_both_trees_are_binary_trees_over_every_node(nodes: int) -> None:
    (first, first_types), (second, second_types) = dtree(nodes)
    for parents, types in ((first, first_types), (second, second_types)):
        assert parents.count(-1) == 1
        children = [sum(1 for p in parents if p == x) for x in range(nodes)]
        assert max(children) <= 2
        for x in range(nodes):  # every node reaches the root, and at most two children of each type pattern
            seen, y = set(), x
            while parents[y] >= 0:
                assert y not in seen
                seen.add(y)
                y = parents[y]
        for p in parents:
            if p >= 0:  # a parent has at most one child of each type
                siblings = [types[c] for c, q in enumerate(parents) if q == p]
                assert len(siblings) == len(set(siblings))
    assert first[0] == -1
    assert second.index(-1) == (nodes - 1 if nodes % 2 == 0 else 1 % nodes)

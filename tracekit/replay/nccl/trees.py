"""NCCL's binary and double binary trees over the nodes (hosts) of a communicator.

Read from NVIDIA/nccl src/graph/trees.cc (2.30.7, `ncclGetBtree` / `ncclGetDtree`), not copied:

* the binary tree over nodes 0..m-1 is rooted at 0; a node's parent is found from its lowest set
  bit b: (node XOR b) OR 2b, or node XOR b when that is out of range;
* the second tree of the double binary tree is the first one **shifted by one when m is odd**
  (node x takes the place of x-1) and **mirrored when m is even** (node x takes the place of
  m-1-x). The comments in trees.cc say the opposite; the code does this, and NCCL runs the code.

Every node but the roots is an inner node in one tree and a leaf in the other (for m > 2), which
is what lets each tree carry half the data at full bandwidth.
"""

from __future__ import annotations


def btree_parent(nodes: int, node: int) -> int:
    """Parent of `node` in NCCL's binary tree over `nodes` nodes (the root, 0, has parent -1)."""
    if node == 0:
        return -1
    bit = 1
    while bit < nodes and not bit & node:
        bit <<= 1
    up = (node ^ bit) | (bit << 1)
    return up if up < nodes else node ^ bit


def dtree(nodes: int) -> tuple[tuple[list[int], list[int]], tuple[list[int], list[int]]]:
    """The two trees of NCCL's double binary tree: for each, every node's parent (-1 for the root)
    and its child type (0: its parent's first child, 1: the second; NCCL's parentChildType, which
    says which of the parent's GPUs the link lands on), computed in the tree's own numbering."""
    first = [btree_parent(nodes, x) for x in range(nodes)]
    first_types = [_child_type(x, p) for x, p in enumerate(first)]
    second, second_types = [], []
    for x in range(nodes):
        # odd: the node takes the place of x-1 (shift); even: of m-1-x (mirror)
        moved = (x - 1) % nodes if nodes % 2 else nodes - 1 - x
        up = btree_parent(nodes, moved)
        second_types.append(_child_type(moved, up))
        if up < 0:
            second.append(-1)
        else:
            second.append((up + 1) % nodes if nodes % 2 else nodes - 1 - up)
    return (first, first_types), (second, second_types)


def dtree_parents(nodes: int) -> tuple[list[int], list[int]]:
    """Parents of every node in the two trees of NCCL's double binary tree (-1 for each root)."""
    (first, _), (second, _) = dtree(nodes)
    return first, second


def _child_type(node: int, parent: int) -> int:
    return 0 if parent < 0 or node < parent else 1

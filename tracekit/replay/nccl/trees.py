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

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


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
    says which of the parent's GPUs the link lands on), computed in the tree's own numbering.

    Vectorised (a communicator of a million ranks has 131,072 hosts); `btree_parent` is the rule
    one node at a time, which the tests hold this to."""
    import numpy as np

    x = np.arange(nodes, dtype=np.int64)
    first = _btree_parents(nodes, x)
    moved = (x - 1) % nodes if nodes % 2 else nodes - 1 - x  # odd: takes x-1's place (shift); even: m-1-x's
    up = _btree_parents(nodes, moved)
    second = np.where(up < 0, -1, (up + 1) % nodes if nodes % 2 else nodes - 1 - up)
    return (
        (first.tolist(), _child_types(x, first).tolist()),
        (second.tolist(), _child_types(moved, up).tolist()),
    )


def _btree_parents(nodes: int, x: np.ndarray) -> np.ndarray:
    """`btree_parent` of every node in `x`: from its lowest set bit b, (x ^ b) | 2b, or x ^ b past the end."""
    import numpy as np

    low = x & -x
    up = (x ^ low) | (low << 1)
    return np.where(x == 0, -1, np.where(up < nodes, up, x ^ low))


def _child_types(x: np.ndarray, parent: np.ndarray) -> np.ndarray:
    import numpy as np

    return np.where((parent < 0) | (x < parent), 0, 1)


def dtree_parents(nodes: int) -> tuple[list[int], list[int]]:
    """Parents of every node in the two trees of NCCL's double binary tree (-1 for each root)."""
    (first, _), (second, _) = dtree(nodes)
    return first, second


def _child_type(node: int, parent: int) -> int:
    return 0 if parent < 0 or node < parent else 1

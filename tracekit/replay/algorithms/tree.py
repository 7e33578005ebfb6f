"""NCCL's tree AllReduce: a chain inside each host, a double binary tree across hosts.

Hosts are numbered in placement order; the first member of each host is its leader and the host's
members form a chain (leader → 2nd → 3rd ...). Across hosts NCCL builds two binary trees
(NVIDIA/nccl src/graph/trees.cc `ncclGetBtree`/`ncclGetDtree`: the second tree is the first one
mirrored when the host count is odd, shifted by one when it is even), and each tree carries half
of S (parts 0 and 1 of S cut in two). In each tree the data is reduced up (chain toward the
leader, then leader to parent leader) and broadcast back down the same edges.

Bytes: every member except the root of a tree sends S/2 up and receives S/2 down in each tree,
so the trees move 2(n-1) * S over all ranks; across hosts, each of the m-1 tree edges of each tree
carries S/2 each way: 2(m-1) * S on the network (S per host for two hosts). A transfer up waits for
every transfer up into its sender; a transfer down waits for the transfer down into its sender (the
root waits for everything that came up). No chunk pipelining is modelled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.replay.algorithms.base import Builder, Template, empty

if TYPE_CHECKING:
    import numpy as np


def btree(nranks: int, rank: int) -> int:
    """Parent of `rank` in NCCL's binary tree over `nranks` (root 0 has parent -1)."""
    if rank == 0:
        return -1
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    up = (rank ^ bit) | (bit << 1)
    return up if up < nranks else rank ^ bit


def dtree_parents(nranks: int) -> tuple[list[int], list[int]]:
    """Parents of every rank in the two trees of NCCL's double binary tree."""
    first = [btree(nranks, r) for r in range(nranks)]
    second = []
    for r in range(nranks):
        if nranks % 2:  # odd: mirror
            up = btree(nranks, nranks - 1 - r)
            second.append(-1 if up < 0 else nranks - 1 - up)
        else:  # even: shift by one
            up = btree(nranks, (r - 1) % nranks)
            second.append(-1 if up < 0 else (up + 1) % nranks)
    return first, second


def all_reduce(hosts: np.ndarray) -> Template:
    """Tree AllReduce over positions whose host ids (in placement order) are `hosts`."""
    n = len(hosts)
    if n < 2:
        return empty(n)
    members: list[list[int]] = []
    for position, host in enumerate(hosts.tolist()):
        if not members or hosts[members[-1][0]] != host:
            members.append([])
        members[-1].append(position)
    b = Builder(n, 2)
    for part, parents in enumerate(dtree_parents(len(members))):
        _one_tree(b, members, parents, part)
    return b.build()


def _one_tree(b: Builder, members: list[list[int]], parents: list[int], part: int) -> None:
    m = len(members)
    children: list[list[int]] = [[] for _ in range(m)]
    for x, p in enumerate(parents):
        if p >= 0:
            children[p].append(x)
    up_into: dict[int, list[int]] = {}  # position -> transfers up into it

    def reduce_host(x: int) -> None:  # post-order: children hosts first
        for c in children[x]:
            reduce_host(c)
        chain = members[x]
        for k in range(len(chain) - 1, 0, -1):
            t = b.add(chain[k], chain[k - 1], part, part + 1, up_into.get(chain[k], []))
            up_into.setdefault(chain[k - 1], []).append(t)
        if parents[x] >= 0:
            leader, parent_leader = chain[0], members[parents[x]][0]
            t = b.add(leader, parent_leader, part, part + 1, up_into.get(leader, []))
            up_into.setdefault(parent_leader, []).append(t)

    def broadcast_host(x: int, waits: list[int]) -> None:
        chain = members[x]
        for c in children[x]:
            t = b.add(chain[0], members[c][0], part, part + 1, waits)
            broadcast_host(c, [t])
        previous = waits
        for k in range(len(chain) - 1):
            t = b.add(chain[k], chain[k + 1], part, part + 1, previous)
            previous = [t]

    root = parents.index(-1)
    reduce_host(root)
    broadcast_host(root, up_into.get(members[root][0], []))

"""NCCL's tree AllReduce: per channel, a tree over the group (double binary tree across hosts, a
chain inside each), pipelined.

The tree of each channel comes from the CommTopology (tracekit.replay.nccl.topology builds it as
NCCL's connectTrees does: half the channels on each of the two binary trees of NCCL's double binary
tree, a chain inside each host; or it is read from an NCCL log). Channel c carries the c-th slice
of S, cut into `chunks` pipeline pieces. For each piece, data is reduced up the tree (a member sends
to its parent once every child's piece has arrived) and broadcast back down the same edges (a
member forwards to its children once its parent's piece has arrived; the root once its own
reduction is complete); piece j of an edge also waits for piece j-1 of the same edge (NCCL's FIFO),
so the up and down phases and the tree levels overlap as in NCCL's pipelined tree.

Bytes: every member but a root sends its slice up and receives it down in each channel, so a
channel moves 2(n-1) · S/C, and the collective 2(n-1) · S in all, exactly. A link that crosses
hosts leaves and enters through the channel's tree NIC on each host (PXN first when that NIC is not
the sender's own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.replay.algorithms.base import INTRA, NET, Builder, Template, empty, post_order
from tracekit.replay.algorithms.registry import Algorithm

if TYPE_CHECKING:
    from tracekit.replay.algorithms.registry import Request


def all_reduce(req: Request) -> Template:
    import numpy as np

    from tracekit.replay.algorithms.ring import proxies

    layout, topo = req.layout, req.topology
    n, channels, pieces = layout.n, topo.channels, max(req.chunks, 1)
    if n < 2 or channels < 1:
        return empty(n)
    b = Builder(n, channels * pieces)
    for c in range(channels):
        parent = topo.tree_parent[c]
        children: list[list[int]] = [[] for _ in range(n)]
        for p in range(n):
            if parent[p] >= 0:
                children[int(parent[p])].append(p)
        roots = np.flatnonzero(parent < 0)
        nic = np.where(topo.tree_nic[c] >= 0, topo.tree_nic[c], layout.nics)
        via = proxies(req, np.arange(n), nic) if req.pxn else np.full(n, -1)
        edge = _Edges(b, layout.hosts, nic, via, c)
        for piece in range(pieces):
            lo = c * pieces + piece
            up_into: dict[int, list[int]] = {}
            for p in post_order(children, roots.tolist()):
                if parent[p] >= 0:
                    up_into.setdefault(int(parent[p]), []).append(edge.send(p, int(parent[p]), lo, up_into.get(p, [])))
            for root in roots.tolist():
                _broadcast(edge, children, root, lo, up_into.get(root, []))
    return b.build()


class _Edges:
    """Adds one tree edge's transfer(s) for a piece, chaining piece j after piece j-1 on the same edge."""

    def __init__(self, b: Builder, hosts: object, nic: object, via: object, channel: int) -> None:
        self.b, self.hosts, self.nic, self.via, self.channel = b, hosts, nic, via, channel
        self.last: dict[tuple[int, int, int], int] = {}

    def send(self, src: int, dst: int, lo: int, waits: list[int]) -> int:
        hosts, nic, via = self.hosts, self.nic, self.via  # numpy arrays
        cross = bool(hosts[src] != hosts[dst])  # type: ignore[index]
        proxy = int(via[src]) if cross else -1  # type: ignore[index]
        if proxy >= 0:
            waits = self._add(src, proxy, lo, waits, INTRA, -1, -1, True)
            start = proxy
        else:
            start = src
        if cross:
            t = self._add(start, dst, lo, waits, NET, int(nic[src]), int(nic[dst]), proxy >= 0)  # type: ignore[index]
        else:
            t = self._add(start, dst, lo, waits, INTRA, -1, -1, False)
        return t[0]

    def _add(
        self, src: int, dst: int, lo: int, waits: list[int], link: int, src_nic: int, dst_nic: int, pxn: bool
    ) -> list[int]:
        key = (src, dst, link)
        deps = list(waits) + ([self.last[key]] if key in self.last else [])
        t = self.b.add(
            src, dst, lo, lo + 1, deps, channel=self.channel, link=link, src_nic=src_nic, dst_nic=dst_nic, pxn=pxn
        )
        self.last[key] = t
        return [t]


def _broadcast(edge: _Edges, children: list[list[int]], root: int, lo: int, waits: list[int]) -> None:
    stack = [(root, waits)]
    while stack:
        node, ready = stack.pop()
        for child in children[node]:
            t = edge.send(node, child, lo, ready)
            stack.append((child, [t]))


ALGORITHM = Algorithm(
    name="tree",
    summary="NCCL's double binary tree across hosts, a chain inside each, per channel, pipelined (AllReduce)",
    builders={"ALL_REDUCE": all_reduce},
)

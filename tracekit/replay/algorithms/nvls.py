"""NVLS (NVLink SHARP): reductions inside the host's NVSwitch; across hosts, NCCL's NVLSTree.

Read from NVIDIA/nccl 2.30.7 (src/device/all_reduce.h `runRing`/`runNvls`/`runNvlsTree`,
src/transport/nvls.cc, src/graph/connect.cc), not copied. Every member of a host is the head of
one slice of each channel's buffer (NCCL's NVLS heads: one per GPU). Per channel and pipeline
piece, on each host:

* **reduce**: every GPU's buffer is read by the switch (one flow GPU → NVSwitch carrying the whole
  piece: the switch pulls slice h for head h), the switch adds the host's copies and returns slice
  h to head h (NVSwitch → head: piece / g);
* **across hosts** (NVLSTree, more than one host): head h of every host joins NCCL's double binary
  tree over the hosts (channel parity picks tree 0 or 1) on its slice: reduce up the tree, then
  broadcast down, NIC to NIC on head h's NIC, so every hop stays on one rail;
* **multicast**: head h stores the reduced slice into the switch (head → NVSwitch: piece / g) and
  the switch writes it to every GPU of the host (NVSwitch → GPU: the whole piece).

So each GPU's NVLink carries S + S/g up and S + S/g down per all-reduce of S, against 2(n−1)/n·S
each way for a ring; the network carries what NCCL's tree carries, but only between heads of one
rail. ReduceScatter and AllGather run NVLS on one host only (across hosts NCCL needs a CollNet
plugin): reduce-scatter is the reduce phase (head h keeps slice h), all-gather the multicast of
every member's shard. Pieces of one edge stay in order (NCCL's FIFO), so the phases pipeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.replay.algorithms.base import FROM_SWITCH, INTRA, NET, TO_SWITCH, Builder, Template, empty, post_order
from tracekit.replay.algorithms.registry import Algorithm

if TYPE_CHECKING:
    import numpy as np

    from tracekit.replay.algorithms.registry import Request


class _Ordered:
    """Adds transfers, each after the previous piece of the same lane and channel (a phase's edge: NCCL's FIFO)."""

    def __init__(self, b: Builder) -> None:
        self.b = b
        self.last: dict[tuple[int, int, str, int, int], int] = {}

    def add(self, lane: str, src: int, dst: int, lo: int, hi: int, deps: list[int], channel: int, **how: int) -> int:
        key = (src, dst, lane, how.get("basis", -1), channel)
        earlier = self.last.get(key)
        t = self.b.add(src, dst, lo, hi, deps + ([earlier] if earlier is not None else []), channel=channel, **how)
        self.last[key] = t
        return t


def host_members(req: Request) -> list[list[int]] | None:
    """Positions of each host in NCCL's node order, when every host holds the same number of members."""
    import numpy as np

    layout = req.layout
    nodes = layout.node_of()
    members: list[list[int]] = [[] for _ in range(layout.host_count)]
    for p in np.argsort(nodes, kind="stable").tolist():
        members[int(nodes[p])].append(p)
    return members if len({len(m) for m in members}) == 1 else None


def serves(req: Request) -> bool:
    """NVLS needs the same GPUs on every host, more than one per host, and one host for AG/RS."""
    hosts = host_members(req)
    if hosts is None or len(hosts[0]) < 2:
        return False
    return req.comm_type == "ALL_REDUCE" or len(hosts) == 1


def all_reduce(req: Request) -> Template:
    return _nvls(req, multicast=True)


def reduce_scatter(req: Request) -> Template:
    return _nvls(req, multicast=False)


def _nvls(req: Request, multicast: bool) -> Template:
    """The reduce phase on every host; with `multicast`, the tree across hosts and the multicast too."""
    from tracekit.replay.nccl.trees import dtree_parents

    hosts = host_members(req)
    n, channels, pieces = req.layout.n, req.topology.channels, max(req.chunks, 1)
    if hosts is None or n < 2 or channels < 1:
        return empty(n)
    g = len(hosts[0])
    trees = dtree_parents(len(hosts)) if len(hosts) > 1 and multicast else None
    b = _Ordered(Builder(n, channels * pieces * g))
    for c in range(channels):
        for piece in range(pieces):
            base = (c * pieces + piece) * g
            ready: dict[int, list[int]] = {}
            for members in hosts:
                pulled = [b.add("pull", p, p, base, base + g, [], c, link=INTRA, switch=TO_SWITCH) for p in members]
                for h, head in enumerate(members):
                    reduced = b.add("reduced", head, head, base + h, base + h + 1, pulled, c, link=INTRA,
                                    switch=FROM_SWITCH)  # fmt: skip
                    ready[head] = [reduced]
            if not multicast:
                continue
            if trees is not None:
                for h in range(g):
                    heads = [members[h] for members in hosts]
                    _tree(b, trees[c % 2], heads, req.layout.nics, base + h, c, ready)
            for members in hosts:
                stored = [
                    b.add("store", head, head, base + h, base + h + 1, ready[head], c, link=INTRA, switch=TO_SWITCH)
                    for h, head in enumerate(members)
                ]
                for p in members:
                    b.add("multicast", p, p, base, base + g, stored, c, link=INTRA, switch=FROM_SWITCH)
    return b.b.build()


def _tree(b: _Ordered, parent: list[int], heads: list[int], nics: np.ndarray, part: int, channel: int,
          ready: dict[int, list[int]]) -> None:  # fmt: skip
    """Reduce up NCCL's tree over the hosts' heads of one slice, then broadcast down; `ready[head]` ends as
    the transfers after which the head holds the fully reduced slice."""
    children: list[list[int]] = [[] for _ in heads]
    for node, up in enumerate(parent):
        if up >= 0:
            children[up].append(node)
    order = post_order(children, [node for node, up in enumerate(parent) if up < 0])

    def send(src: int, dst: int, deps: list[int]) -> int:
        s, d = heads[src], heads[dst]
        how = {"link": NET, "src_nic": int(nics[s]), "dst_nic": int(nics[d])}
        return b.add("tree", s, d, part, part + 1, deps, channel, **how)

    arrived: dict[int, list[int]] = {node: list(ready[heads[node]]) for node in range(len(heads))}
    for node in order:
        if parent[node] >= 0:
            arrived[parent[node]].append(send(node, parent[node], arrived[node]))
    for node in reversed(order):  # parents before children
        if parent[node] < 0:
            ready[heads[node]] = arrived[node]
        for child in children[node]:
            ready[heads[child]] = [send(node, child, ready[heads[node]])]


def all_gather(req: Request) -> Template:
    hosts = host_members(req)
    n, channels, pieces = req.layout.n, req.topology.channels, max(req.chunks, 1)
    if hosts is None or len(hosts) != 1 or n < 2 or channels < 1:
        return empty(n)
    b = _Ordered(Builder(n, channels * pieces))
    members = hosts[0]
    for c in range(channels):
        for piece in range(pieces):
            part = c * pieces + piece
            for p in members:  # p's shard piece into the switch, which writes it to every GPU
                stored = b.add("store", p, p, part, part + 1, [], c, link=INTRA, switch=TO_SWITCH, basis=p)
                for q in members:
                    b.add("multicast", q, q, part, part + 1, [stored], c, link=INTRA, switch=FROM_SWITCH, basis=p)
    return b.b.build()


ALGORITHM = Algorithm(
    name="nvls",
    summary="NVLink SHARP: reductions in the NVSwitch, NCCL's NVLSTree across hosts (AllReduce; AG/RS: one host)",
    builders={"ALL_REDUCE": all_reduce, "REDUCE_SCATTER": reduce_scatter, "ALL_GATHER": all_gather},
    applies=serves,
)

"""CollNet Direct: AllReduce reduced inside the network's switches (SHARP on InfiniBand).

Read from NVIDIA/nccl 2.30.7 (src/device/all_reduce.h `runCollNetDirect`, src/transport/coll_net.cc,
src/graph/connect.cc), not copied. A host's heads are its first GPU on each of its NICs (NCCL's
CollNet Direct heads: up to 8, one per NIC). Per channel and pipeline piece, every head owns one
slice:

* **scatter**: every GPU sends each head's slice of its buffer to that head over NVLink;
* **up**: the head sends its slice, reduced over the host, from its NIC into the switch the NIC
  attaches to (NIC → switch);
* **down**: once the slice has arrived from every host, the switches return the reduced slice to
  each host's head (switch → NIC);
* **gather**: the head sends the slice to every other GPU of its host over NVLink.

Each host sends and receives every byte once over the network (S up and S down per all-reduce of
S, split over its NICs), against 2(h−1)/h·S for a ring over h hosts. The reduction tree above the
first switch (leaf to spine and back) is not modelled: it carries each slice once per switch, not
once per host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.replay.algorithms.base import FROM_SWITCH, INTRA, NET, TO_SWITCH, Builder, Template, empty
from tracekit.replay.algorithms.registry import Algorithm

if TYPE_CHECKING:
    from tracekit.replay.algorithms.registry import Request


def heads(req: Request) -> list[list[int]] | None:
    """Per host (NCCL's node order), its heads: the first member on each local NIC; None when hosts differ."""
    from tracekit.replay.algorithms.nvls import host_members

    hosts = host_members(req)
    if hosts is None:
        return None
    out = []
    for members in hosts:
        first: dict[int, int] = {}
        for p in members:
            first.setdefault(int(req.layout.nics[p]), p)
        out.append(list(first.values()))
    return out if len({len(h) for h in out}) == 1 else None


def serves(req: Request) -> bool:
    """CollNet needs two hosts or more (NCCL_COLLNET_NODE_THRESHOLD) with the same GPUs and NICs each."""
    return req.layout.host_count >= 2 and heads(req) is not None


def all_reduce(req: Request) -> Template:
    from tracekit.replay.algorithms.nvls import host_members

    hosts, per_host = host_members(req), heads(req)
    n, channels, pieces = req.layout.n, req.topology.channels, max(req.chunks, 1)
    if hosts is None or per_host is None or n < 2 or channels < 1:
        return empty(n)
    k = len(per_host[0])
    nics = req.layout.nics
    b = Builder(n, channels * pieces * k)
    last: dict[tuple[int, int, str, int], int] = {}

    def add(lane: str, src: int, dst: int, part: int, deps: list[int], c: int, **how: int) -> int:
        """A transfer after the previous piece of its lane and channel (NCCL's FIFO per connection)."""
        earlier = last.get((src, dst, lane, c))
        t = b.add(src, dst, part, part + 1, deps + ([earlier] if earlier is not None else []), channel=c, **how)
        last[(src, dst, lane, c)] = t
        return t

    for c in range(channels):
        for piece in range(pieces):
            base = (c * pieces + piece) * k
            ups: list[list[int]] = [[] for _ in range(k)]
            for members, host_heads in zip(hosts, per_host, strict=True):
                for s, head in enumerate(host_heads):
                    scattered = [add("scatter", p, head, base + s, [], c, link=INTRA) for p in members if p != head]
                    ups[s].append(add("up", head, head, base + s, scattered, c, link=NET,
                                      src_nic=int(nics[head]), switch=TO_SWITCH))  # fmt: skip
            for members, host_heads in zip(hosts, per_host, strict=True):
                for s, head in enumerate(host_heads):
                    down = add("down", head, head, base + s, ups[s], c, link=NET, dst_nic=int(nics[head]),
                               switch=FROM_SWITCH)  # fmt: skip
                    for p in members:
                        if p != head:
                            add("gather", head, p, base + s, [down], c, link=INTRA)
    return b.build()


ALGORITHM = Algorithm(
    name="collnet",
    summary="CollNet Direct: AllReduce reduced in the network's switches (SHARP), each host's bytes sent once",
    builders={"ALL_REDUCE": all_reduce},
    applies=serves,
)

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

from typing import TYPE_CHECKING, Any

from tracekit.replay.algorithms.base import FROM_SWITCH, INTRA, NET, TO_SWITCH, Template, empty
from tracekit.replay.algorithms.registry import Algorithm

if TYPE_CHECKING:
    from tracekit.replay.algorithms.registry import Request


def heads(req: Request, hosts: list[list[int]] | None) -> list[list[int]] | None:
    """Per host of `hosts` (nvls.host_members), its heads: the first member on each local NIC; None
    when hosts differ."""
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
    from tracekit.replay.algorithms.nvls import host_members

    return req.layout.host_count >= 2 and heads(req, host_members(req)) is not None


def all_reduce(req: Request) -> Template:
    """The transfers of the module docstring, built as arrays (a down waits for its slice from every
    host: h dependencies each, so a Python list per transfer would not scale to many hosts)."""
    import numpy as np

    from tracekit.replay.algorithms.nvls import host_members

    hosts = host_members(req)
    per_host = heads(req, hosts)
    n, channels, pieces = req.layout.n, req.topology.channels, max(req.chunks, 1)
    if hosts is None or per_host is None or n < 2 or channels < 1:
        return empty(n)
    members, head = np.array(hosts, dtype=np.int64), np.array(per_host, dtype=np.int64)  # (h, g), (h, k)
    h, g = members.shape
    k = head.shape[1]
    # senders[x, s]: the members of host x but the head of slice s, in host order (g - 1 each)
    others = members[:, None, :] != head[:, :, None]
    senders = np.broadcast_to(members[:, None, :], (h, k, g))[others].reshape(h, k, g - 1)
    # One block per (channel, piece): part A holds, per (host, slice), g - 1 scatters then the up;
    # part B the down then g - 1 gathers. Transfer id = block * T + part * h*k*g + (x*k + s)*g + t.
    per_part = h * k * g
    T = 2 * per_part
    blocks = channels * pieces
    b, x, sl, t = (a.reshape(-1) for a in np.meshgrid(np.arange(blocks), np.arange(h), np.arange(k), np.arange(g),
                                                      indexing="ij"))  # fmt: skip
    base_a = b * T + (x * k + sl) * g  # the (host, slice) group in part A
    base_b = base_a + per_part
    c, piece = np.divmod(b, pieces)
    part = b * k + sl
    hd = head[x, sl]
    sender = np.where(t < g - 1, senders[x, sl, np.minimum(t, g - 2)] if g > 1 else hd, hd)
    nics = req.layout.nics.astype(np.int64)
    is_up = t == g - 1
    # part A: scatter (sender -> head, NVLink) or up (head -> switch); part B: down or gather
    src = np.concatenate([np.where(is_up, hd, sender), hd])
    gather_to = senders[x, sl, np.maximum(t - 1, 0)] if g > 1 else hd
    dst = np.concatenate([hd, np.where(t == 0, hd, gather_to)])
    link = np.concatenate([np.where(is_up, NET, INTRA), np.where(t == 0, NET, INTRA)]).astype(np.int8)
    switch = np.concatenate([np.where(is_up, TO_SWITCH, 0), np.where(t == 0, FROM_SWITCH, 0)]).astype(np.int8)
    src_nic = np.concatenate([np.where(is_up, nics[hd], -1), np.full(len(t), -1)])
    dst_nic = np.concatenate([np.full(len(t), -1), np.where(t == 0, nics[hd], -1)])
    up_phase = 1 if g > 1 else 0  # a step is the longest chain of waits before it: scatter, up, down, gather
    phase = np.concatenate([np.where(is_up, up_phase, 0), np.where(t == 0, up_phase + 1, up_phase + 2)])
    ids = np.concatenate([base_a + t, base_b + t])
    order = np.argsort(ids)  # lay the transfers out by id
    owners, deps = _dependencies(base_a, base_b, t, x, sl, piece, g, h, k, T, per_part)
    by_owner = np.lexsort((deps, owners))
    owners, deps = owners[by_owner], deps[by_owner]
    count = blocks * T
    ptr = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.bincount(owners, minlength=count), out=ptr[1:])
    lo = np.concatenate([part, part])
    return Template(
        n=n, den=blocks * k, step=(np.concatenate([piece, piece]) + phase)[order].astype(np.int32),
        src=src[order].astype(np.int32), dst=dst[order].astype(np.int32), lo=lo[order], hi=lo[order] + 1,
        basis=np.full(count, -1, dtype=np.int32), dep_ptr=ptr, dep_idx=deps,
        channel=np.concatenate([c, c])[order].astype(np.int16), link=link[order],
        src_nic=src_nic[order].astype(np.int16), dst_nic=dst_nic[order].astype(np.int16),
        qp=np.zeros(count, dtype=np.int16), pxn=np.zeros(count, dtype=bool), switch=switch[order],
    )  # fmt: skip


def _dependencies(
    base_a: Any, base_b: Any, t: Any, x: Any, sl: Any, piece: Any, g: int, h: int, k: int, T: int, per_part: int
) -> tuple[Any, Any]:
    """(waiting transfer, transfer waited for) pairs: each piece after the previous piece of its own
    edge (NCCL's FIFO); an up after the scatters into its head, a down after every host's up of its
    slice, a gather after its down."""
    import numpy as np

    pairs = []
    later = piece > 0
    for base in (base_a, base_b):  # the previous piece of the same edge: one block (T ids) back
        pairs.append((base[later] + t[later], base[later] + t[later] - T))
    up = t == g - 1
    if g > 1:
        scat = ~up
        pairs.append((base_a[scat] + g - 1, base_a[scat] + t[scat]))  # up waits for each scatter
        gath = t >= 1
        pairs.append((base_b[gath] + t[gath], base_b[gath]))  # gather waits for its down
    # down of (x, s) waits for the up of (x', s) for every host x' of the block
    down = t == 0
    first_of_block = base_b[down] - (x[down] * k + sl[down]) * g - per_part  # block * T
    owner = np.repeat(base_b[down], h)
    other = np.tile(np.arange(h), int(down.sum()))
    waited = np.repeat(first_of_block + sl[down] * g + g - 1, h) + other * k * g
    pairs.append((owner, waited))
    owners = np.concatenate([p[0] for p in pairs]).astype(np.int64)
    deps = np.concatenate([p[1] for p in pairs]).astype(np.int64)
    return owners, deps


ALGORITHM = Algorithm(
    name="collnet",
    summary="CollNet Direct: AllReduce reduced in the network's switches (SHARP), each host's bytes sent once",
    builders={"ALL_REDUCE": all_reduce},
    applies=serves,
)

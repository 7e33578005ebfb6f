"""NCCL's ring algorithms, one ring per channel (ASTRA-sim's Ring.cc uses the same step counts and sizes).

Channel c carries the c-th contiguous slice of the buffer (S cut into C slices, byte-exact) around
its own ring (CommTopology.ring[c]); a ring enters and leaves each host through the NICs the
topology gives for that channel, so the channels of a host spread over its NICs. Over n ranks:

* AllReduce: 2(n-1) steps; a channel's slice is cut into n chunks; at step k the member at ring
  index i sends chunk (i - k) mod n of its slice (reduce-scatter for k < n-1, then all-gather of
  the reduced chunks). 2(n-1)/n · S per rank, 2(n-1) · S over the ring, exactly.
* ReduceScatter (S = the full input): n-1 steps, chunk (i - k - 1) mod n: (n-1)/n · S per rank.
* AllGather (S = the local shard): n-1 steps; at step k ring index i forwards the slice of the
  shard of ring index (i - k) mod n, with that member's own size: (n-1) · S per rank.
* Broadcast / Reduce: a chain along the ring from the root (to the root), pipelined in `chunks`
  pieces per channel: piece j of an edge waits for piece j of the edge before it and for piece
  j-1 of its own edge (NCCL's FIFO), so the chain runs at the link rate once it is full.

Step k of ring index i waits for step k-1 of ring index i-1: the data it forwards. A hop to the next
host leaves through the channel's NIC on this host; when that NIC is not the sending GPU's own and
PXN is on, the data first crosses NVLink to the GPU the NIC serves (a PXN hop) and is sent from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracekit.replay.algorithms.base import INTRA, NET, Builder, Template, empty
from tracekit.replay.algorithms.registry import Algorithm

if TYPE_CHECKING:
    import numpy as np

    from tracekit.replay.algorithms.registry import Request


@dataclass
class _Hops:
    """One ring step's transfers for every (channel, ring index), PXN hops included, in a fixed order."""

    src: np.ndarray
    dst: np.ndarray
    channel: np.ndarray
    index: np.ndarray  # ring index i of the sender whose data this hop carries
    link: np.ndarray
    src_nic: np.ndarray
    dst_nic: np.ndarray
    pxn: np.ndarray
    main: np.ndarray  # [C, n] hop index of the transfer that delivers ring index i's data to i+1
    first: np.ndarray  # [C, n] hop index of the first hop ring index i makes (the PXN hop, else main)


def hops(req: Request) -> _Hops:
    """The transfers of one ring step on every channel (see the module docstring)."""
    import numpy as np

    topo, layout = req.topology, req.layout
    channels, n = topo.ring.shape
    src = topo.ring
    dst = np.roll(topo.ring, -1, axis=1)
    cross = layout.hosts[src] != layout.hosts[dst]
    send_nic = np.take_along_axis(topo.ring_send_nic, src, axis=1)
    send_nic = np.where(send_nic >= 0, send_nic, layout.nics[src])
    recv_nic = np.take_along_axis(topo.ring_recv_nic, dst, axis=1)
    recv_nic = np.where(recv_nic >= 0, recv_nic, layout.nics[dst])
    proxy = proxies(req, src, send_nic) if req.pxn else np.full(src.shape, -1)
    proxy = np.where(cross, proxy, -1)
    per = np.where(proxy >= 0, 2, 1)
    end = np.cumsum(per.reshape(-1)).reshape(channels, n)
    main = end - 1
    first = end - per
    total = int(end[-1, -1]) if end.size else 0
    out = {name: np.zeros(total, dtype=np.int64) for name in ("src", "dst", "channel", "index", "src_nic", "dst_nic")}
    link = np.zeros(total, dtype=np.int8)
    pxn = np.zeros(total, dtype=bool)
    c_idx, i_idx = np.divmod(np.arange(channels * n), n)
    m = main.reshape(-1)
    has = proxy.reshape(-1) >= 0
    out["src"][m] = np.where(has, proxy.reshape(-1), src.reshape(-1))
    out["dst"][m] = dst.reshape(-1)
    link[m] = np.where(cross.reshape(-1), NET, INTRA)
    out["src_nic"][m] = np.where(cross.reshape(-1), send_nic.reshape(-1), -1)
    out["dst_nic"][m] = np.where(cross.reshape(-1), recv_nic.reshape(-1), -1)
    pxn[m] = has
    pre = m[has] - 1
    out["src"][pre] = src.reshape(-1)[has]
    out["dst"][pre] = proxy.reshape(-1)[has]
    out["src_nic"][pre] = -1
    out["dst_nic"][pre] = -1
    link[pre] = INTRA
    pxn[pre] = True
    for name, values in (("channel", c_idx), ("index", i_idx)):
        out[name][m] = values
        out[name][pre] = values[has]
    return _Hops(
        out["src"], out["dst"], out["channel"], out["index"], link, out["src_nic"], out["dst_nic"], pxn, main, first
    )


def proxies(req: Request, senders: np.ndarray, nic: np.ndarray) -> np.ndarray:
    """For each sender position and the NIC it must send on: the position of the member on its host that
    the NIC serves (its PXN proxy), or -1 when the sender is that member or no member is."""
    import numpy as np

    layout = req.layout
    owner = layout.first_with(layout.nics)  # [host slot, nic] -> the member that NIC serves
    nic = np.asarray(nic, dtype=np.int64)
    inside = nic < owner.shape[1]
    found = np.full(np.shape(senders), -1, dtype=np.int64)
    slots = layout.host_slots()[senders]
    found[inside] = owner[slots[inside], nic[inside]]
    own = layout.nics[senders] == nic
    return np.where((found >= 0) & (found != senders) & ~own, found, -1)


def _ring(req: Request, steps: int, chunk_shift: int, all_gather: bool) -> Template:
    import numpy as np

    from tracekit.replay.algorithms.base import Template

    n, channels = req.layout.n, req.topology.channels
    if n < 2 or steps < 1 or channels < 1:
        return empty(n)
    h = hops(req)
    per_step = len(h.src)
    k = np.repeat(np.arange(steps, dtype=np.int64), per_step)
    tile = lambda a: np.tile(a, steps)  # noqa: E731
    index, channel = tile(h.index), tile(h.channel)
    if all_gather:
        basis = req.topology.ring[channel, (index - k) % n]
        lo = channel.copy()
        den = channels
    else:
        basis = np.full(len(k), -1, dtype=np.int64)
        lo = channel * n + (index - k - chunk_shift) % n
        den = channels * n
    # Dependencies: a PXN hop waits for nothing more than its main hop; the first hop of ring index i at
    # step k waits for the main hop that delivered ring index i-1's data at step k-1.
    hop_in_step = np.tile(np.arange(per_step), steps)
    is_first = np.zeros(per_step, dtype=bool)
    is_first[h.first.reshape(-1)] = True
    prev_main = h.main[h.channel, (h.index - 1) % n]  # per hop: main hop into its sender, previous step
    prev = np.where(
        is_first[hop_in_step] & (k > 0),
        (k - 1) * per_step + prev_main[hop_in_step],
        np.where(~is_first[hop_in_step], k * per_step + hop_in_step - 1, -1),
    )
    has = prev >= 0
    ptr = np.zeros(len(k) + 1, dtype=np.int64)
    np.cumsum(has, out=ptr[1:])
    return Template(
        n=n,
        den=den,
        step=k.astype(np.int32),
        src=tile(h.src).astype(np.int32),
        dst=tile(h.dst).astype(np.int32),
        lo=lo.astype(np.int64),
        hi=(lo + 1).astype(np.int64),
        basis=basis.astype(np.int32),
        dep_ptr=ptr,
        dep_idx=prev[has].astype(np.int64),
        channel=channel.astype(np.int16),
        link=tile(h.link),
        src_nic=tile(h.src_nic).astype(np.int16),
        dst_nic=tile(h.dst_nic).astype(np.int16),
        qp=np.zeros(len(k), dtype=np.int16),
        pxn=tile(h.pxn),
    )


def all_reduce(req: Request) -> Template:
    return _ring(req, 2 * (req.layout.n - 1), 0, all_gather=False)


def reduce_scatter(req: Request) -> Template:
    return _ring(req, req.layout.n - 1, 1, all_gather=False)


def all_gather(req: Request) -> Template:
    return _ring(req, req.layout.n - 1, 0, all_gather=True)


def broadcast(req: Request) -> Template:
    return _chain(req, outward=True)


def reduce(req: Request) -> Template:
    return _chain(req, outward=False)


def _chain(req: Request, outward: bool) -> Template:
    """Broadcast (from the root along each channel's ring) or Reduce (along the ring into the root), pipelined."""
    import numpy as np

    n, channels, pieces = req.layout.n, req.topology.channels, max(req.chunks, 1)
    if n < 2 or channels < 1:
        return empty(n)
    h = hops(req)
    b = Builder(n, channels * pieces)
    for c in range(channels):
        ring = req.topology.ring[c]
        start = int(np.flatnonzero(ring == req.root)[0])
        # ring indices of the n-1 edges, in chain order; a reduce runs the chain from the root's successor
        order = [(start + e) % n for e in range(n - 1)] if outward else [(start + 1 + e) % n for e in range(n - 1)]
        last_on_edge: dict[int, int] = {}
        for piece in range(pieces):
            upstream: list[int] = []
            for i in order:
                lo = c * pieces + piece
                for hop in range(int(h.first[c, i]), int(h.main[c, i]) + 1):
                    waits = list(upstream)
                    if hop in last_on_edge:
                        waits.append(last_on_edge[hop])
                    t = b.add(
                        int(h.src[hop]), int(h.dst[hop]), lo, lo + 1, waits, channel=c,
                        link=int(h.link[hop]), src_nic=int(h.src_nic[hop]), dst_nic=int(h.dst_nic[hop]),
                        pxn=bool(h.pxn[hop]),
                    )  # fmt: skip
                    last_on_edge[hop] = t
                    upstream = [t]
    return b.build()


ALGORITHM = Algorithm(
    name="ring",
    summary="NCCL's ring, one per channel, rail-aligned across hosts (AllReduce, ReduceScatter, AllGather; "
    "Broadcast and Reduce as pipelined chains)",
    builders={
        "ALL_REDUCE": all_reduce,
        "REDUCE_SCATTER": reduce_scatter,
        "ALL_GATHER": all_gather,
        "BROADCAST": broadcast,
        "REDUCE": reduce,
    },
)

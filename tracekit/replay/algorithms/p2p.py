"""The hops of point-to-point transfers between members of a communicator, as NCCL's p2p sends them.

A transfer from position i to position j on another host leaves i's host through a NIC and enters
j's through j's own NIC. With PXN (NCCL >= 2.12, on unless NCCL_PXN_DISABLE=1) the sending NIC is
the one on the rail of j's NIC: when that NIC is not i's own, the data first crosses NVLink to the
member of i's host that the NIC serves (the PXN proxy) and is sent from there, so traffic stays on
its rail and each GPU sends to one GPU per remote host. Without PXN, or when i's host has no member
on that rail, i sends through its own NIC. Each transfer is split over `channels` p2p channels
(contiguous sub-slices, byte-exact), NCCL's channels per peer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracekit.replay.algorithms.base import INTRA, NET, Template

if TYPE_CHECKING:
    import numpy as np

    from tracekit.replay.algorithms.registry import Request


@dataclass
class Pairs:
    """Transfers before their hops: sender and receiver positions, parts [lo, hi) of `den`, whose bytes."""

    src: np.ndarray
    dst: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    basis: np.ndarray
    den: int
    step: np.ndarray


def rail_proxies(req: Request, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """PXN proxy position of each (src, dst) transfer: the member of src's host on dst's rail, else -1."""
    import numpy as np

    layout = req.layout
    found = layout.first_with(layout.rails)[layout.host_slots()[src], layout.rails[dst]]
    cross = layout.hosts[src] != layout.hosts[dst]
    return np.where(cross & (found >= 0) & (found != src), found, -1)


def hops(req: Request, pairs: Pairs) -> Template:
    """The template of `pairs`: each split over req.channels, PXN hops where req.pxn (see the module docstring)."""
    import numpy as np

    layout = req.layout
    channels = max(req.channels, 1)
    # split every pair over the channels: parts refined by `channels`
    count = len(pairs.src)
    owner = np.repeat(np.arange(count, dtype=np.int64), channels)
    ch = np.tile(np.arange(channels, dtype=np.int64), count)
    width = pairs.hi[owner] - pairs.lo[owner]
    lo = pairs.lo[owner] * channels + ch * width
    src, dst = pairs.src[owner], pairs.dst[owner]
    proxy = rail_proxies(req, src, dst) if req.pxn else np.full(len(src), -1, dtype=np.int64)
    cross = layout.hosts[src] != layout.hosts[dst]
    two = proxy >= 0
    per = np.where(two, 2, 1)
    end = np.cumsum(per)
    main = end - 1
    total = int(end[-1]) if len(end) else 0
    arrays = {k: np.zeros(total, dtype=np.int64) for k in ("src", "dst", "lo", "basis", "step", "channel", "sn", "dn")}
    link = np.zeros(total, dtype=np.int8)
    pxn = np.zeros(total, dtype=bool)
    sender = np.where(two, proxy, src)
    arrays["src"][main], arrays["dst"][main] = sender, dst
    arrays["sn"][main] = np.where(cross, layout.nics[sender], -1)
    arrays["dn"][main] = np.where(cross, layout.nics[dst], -1)
    link[main] = np.where(cross, NET, INTRA)
    pxn[main] = two
    pre = main[two] - 1
    arrays["src"][pre], arrays["dst"][pre] = src[two], proxy[two]
    arrays["sn"][pre] = arrays["dn"][pre] = -1
    link[pre] = INTRA
    pxn[pre] = True
    for name, values in (("lo", lo), ("basis", pairs.basis[owner]), ("step", pairs.step[owner]), ("channel", ch)):
        arrays[name][main] = values
        arrays[name][pre] = values[two]
    # the network send from a proxy waits for the NVLink hop that brought it the data
    waits = np.zeros(total, dtype=bool)
    waits[main[two]] = True
    ptr = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(waits, out=ptr[1:])
    return Template(
        n=layout.n,
        den=pairs.den * channels,
        step=arrays["step"].astype(np.int32),
        src=arrays["src"].astype(np.int32),
        dst=arrays["dst"].astype(np.int32),
        lo=arrays["lo"],
        hi=arrays["lo"] + np.repeat(width, per),
        basis=arrays["basis"].astype(np.int32),
        dep_ptr=ptr,
        dep_idx=(np.flatnonzero(waits) - 1).astype(np.int64),
        channel=arrays["channel"].astype(np.int16),
        link=link,
        src_nic=arrays["sn"].astype(np.int16),
        dst_nic=arrays["dn"].astype(np.int16),
        qp=np.zeros(total, dtype=np.int16),
        pxn=pxn,
    )

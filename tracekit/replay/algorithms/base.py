"""Transfer templates: the flows of one collective over a group, before its sizes are known.

An algorithm builds a Template once per (group layout, collective type, channels, QPs, ...): for
every transfer the step, the sending and receiving position (positions 0..n-1 are the group's
members in placement order: pod, rack, host, GPU), which bytes it carries, which earlier transfers
it waits for, and how it travels: its channel, whether it stays inside a host (`link` INTRA: NVLink
or PCIe) or crosses the network (NET) and through which NIC of each host (local NIC indices), its
queue pair, and whether it is a hop of NCCL's PXN (to or from the GPU whose NIC is on the right rail).
An in-network reduction (NVLS, CollNet/SHARP) also sends to and receives from a switch: such a
transfer names its one GPU as both `src` and `dst`, and `switch` says which end is the switch
(TO_SWITCH: the GPU sends into it; FROM_SWITCH: it sends to the GPU). With `link` INTRA the
switch is the host's NVSwitch; with NET it is the switch the GPU's NIC attaches to (SHARP).
`stamp` then expands the template over every collective of that group at once (numpy), so no Python
code runs per flow.

Bytes are exact integers. A template cuts the collective's size S into `den` near-equal parts
(part p holds S // den bytes, plus one when p < S % den, so the parts sum to S exactly) and a
transfer carries parts [lo, hi). `basis` says whose size is cut: -1 for the collective's size S,
k >= 0 for the bytes member k passed in (all-gather shards, all-to-all send buffers).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

INTRA = 0  # inside a host: NVLink (or PCIe on a PCIe-only host)
NET = 1  # across the network, NIC to NIC
UNSET = -1  # the builder did not say: inside a host when both ends share one, else NET from own NICs
NO_SWITCH, TO_SWITCH, FROM_SWITCH = 0, 1, 2  # which end of a transfer is a switch (see the module docstring)


@dataclass
class Template:
    n: int
    den: int
    step: np.ndarray  # int32, per transfer
    src: np.ndarray  # int32 position
    dst: np.ndarray  # int32 position
    lo: np.ndarray  # int64 first part
    hi: np.ndarray  # int64 end part
    basis: np.ndarray  # int32: -1 = the collective's S, k = member k's own bytes
    dep_ptr: np.ndarray  # int64, len = transfers + 1 (CSR offsets into dep_idx)
    dep_idx: np.ndarray  # int64 transfer indices this transfer waits for
    channel: np.ndarray  # int16
    link: np.ndarray  # int8: INTRA, NET (UNSET only before `resolve_links`)
    src_nic: np.ndarray  # int16 local NIC index at the sender's host (-1 inside a host)
    dst_nic: np.ndarray  # int16 local NIC index at the receiver's host (-1 inside a host)
    qp: np.ndarray  # int16 queue pair of the connection (0 inside a host)
    pxn: np.ndarray  # bool: a PXN hop (NVLink to the rail's GPU, or the network send from it)
    switch: np.ndarray | None = None  # int8 NO_SWITCH / TO_SWITCH / FROM_SWITCH (None: no switch end)

    def __post_init__(self) -> None:
        import numpy as np

        if self.switch is None:
            self.switch = np.zeros(len(self.src), dtype=np.int8)

    @property
    def switches(self) -> np.ndarray:
        assert self.switch is not None
        return self.switch

    @property
    def size(self) -> int:
        return len(self.src)

    @property
    def dep_count(self) -> int:
        return len(self.dep_idx)


def single_deps(prev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR dependencies where transfer t waits for transfer prev[t] (or nothing when prev[t] < 0)."""
    import numpy as np

    has = prev >= 0
    ptr = np.zeros(len(prev) + 1, dtype=np.int64)
    np.cumsum(has, out=ptr[1:])
    return ptr, prev[has].astype(np.int64)


def plain(
    n: int,
    den: int,
    step: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    basis: np.ndarray,
    dep_ptr: np.ndarray,
    dep_idx: np.ndarray,
    channel: np.ndarray | None = None,
) -> Template:
    """A template whose links and NICs are left to `resolve_links` (own NICs, one QP, no PXN)."""
    import numpy as np

    count = len(src)
    return Template(
        n=n,
        den=den,
        step=step.astype(np.int32),
        src=src.astype(np.int32),
        dst=dst.astype(np.int32),
        lo=lo.astype(np.int64),
        hi=hi.astype(np.int64),
        basis=basis.astype(np.int32),
        dep_ptr=dep_ptr.astype(np.int64),
        dep_idx=dep_idx.astype(np.int64),
        channel=(np.zeros(count) if channel is None else channel).astype(np.int16),
        link=np.full(count, UNSET, dtype=np.int8),
        src_nic=np.full(count, -1, dtype=np.int16),
        dst_nic=np.full(count, -1, dtype=np.int16),
        qp=np.zeros(count, dtype=np.int16),
        pxn=np.zeros(count, dtype=bool),
    )


class Builder:
    """Collects transfers one by one (for small, irregular templates: trees, folds); deps point back."""

    def __init__(self, n: int, den: int) -> None:
        self.n = n
        self.den = den
        self.rows: list[tuple[int, int, int, int, int, int, int, int, int, int, int]] = []
        self.deps: list[list[int]] = []

    def add(
        self,
        src: int,
        dst: int,
        lo: int,
        hi: int,
        deps: list[int],
        basis: int = -1,
        channel: int = 0,
        link: int = UNSET,
        src_nic: int = -1,
        dst_nic: int = -1,
        pxn: bool | int = False,
        switch: int = NO_SWITCH,
    ) -> int:
        self.rows.append((src, dst, lo, hi, basis, channel, link, src_nic, dst_nic, int(pxn), switch))
        self.deps.append(deps)
        return len(self.rows) - 1

    def build(self) -> Template:
        import numpy as np

        rows = np.array(self.rows, dtype=np.int64).reshape(-1, 11)
        counts = np.array([len(d) for d in self.deps], dtype=np.int64)
        ptr = np.zeros(len(self.deps) + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        idx = np.array([d for deps in self.deps for d in deps], dtype=np.int64)
        step = np.zeros(len(self.deps), dtype=np.int32)
        for t, deps in enumerate(self.deps):  # deps always point to earlier transfers
            if deps:
                step[t] = 1 + max(int(step[d]) for d in deps)
        return Template(
            n=self.n,
            den=self.den,
            step=step,
            src=rows[:, 0].astype(np.int32),
            dst=rows[:, 1].astype(np.int32),
            lo=rows[:, 2],
            hi=rows[:, 3],
            basis=rows[:, 4].astype(np.int32),
            dep_ptr=ptr,
            dep_idx=idx,
            channel=rows[:, 5].astype(np.int16),
            link=rows[:, 6].astype(np.int8),
            src_nic=rows[:, 7].astype(np.int16),
            dst_nic=rows[:, 8].astype(np.int16),
            qp=np.zeros(len(rows), dtype=np.int16),
            pxn=rows[:, 9].astype(bool),
            switch=rows[:, 10].astype(np.int8),
        )


def empty(n: int) -> Template:
    """No transfers (a group of one, or a collective that moves no data)."""
    return Builder(n, 1).build()


def resolve_links(t: Template, hosts: np.ndarray, nics: np.ndarray) -> Template:
    """Transfers the builder left UNSET: INTRA when both ends share a host, else NET between their own NICs."""
    import numpy as np

    unset = t.link == UNSET
    if not unset.any():
        return t
    same = hosts[t.src] == hosts[t.dst]
    link = t.link.copy()
    link[unset & same] = INTRA
    network = unset & ~same
    link[network] = NET
    src_nic, dst_nic = t.src_nic.copy(), t.dst_nic.copy()
    src_nic[network] = nics[t.src[network]]
    dst_nic[network] = nics[t.dst[network]]
    src_nic[link == INTRA] = -1
    dst_nic[link == INTRA] = -1
    return replace(t, link=link.astype(np.int8), src_nic=src_nic, dst_nic=dst_nic)


def split_qps(t: Template, qps: int) -> Template:
    """Every network transfer as `qps` transfers (QPs 0..qps-1) carrying consecutive sub-ranges of its parts.

    Parts are refined by `qps` (den × qps) so every transfer keeps exactly its bytes; a transfer that
    waited for a split one waits for all its pieces.
    """
    import numpy as np

    if qps <= 1 or not t.size:
        return t
    pieces = np.where(t.link == NET, qps, 1).astype(np.int64)
    first = np.zeros(t.size + 1, dtype=np.int64)
    np.cumsum(pieces, out=first[1:])
    total = int(first[-1])
    owner = np.repeat(np.arange(t.size, dtype=np.int64), pieces)
    k = np.arange(total, dtype=np.int64) - first[owner]  # piece index within its transfer
    width = t.hi[owner] - t.lo[owner]
    split = pieces[owner] > 1
    lo = np.where(split, t.lo[owner] * qps + k * width, t.lo[owner] * qps)
    hi = np.where(split, lo + width, t.hi[owner] * qps)
    # Dependencies: piece of transfer f waits for every piece of each transfer f waited for.
    per_dep = pieces[t.dep_idx]  # pieces each dependency expands to
    running = np.zeros(len(per_dep) + 1, dtype=np.int64)
    np.cumsum(per_dep, out=running[1:])
    expanded_per_transfer = running[t.dep_ptr[1:]] - running[t.dep_ptr[:-1]]
    dep_lists = np.repeat(first[t.dep_idx], per_dep) + _ramp(per_dep)  # every piece of every dependency
    per_piece = expanded_per_transfer[owner]
    ptr = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(per_piece, out=ptr[1:])
    start_of_transfer = np.zeros(t.size + 1, dtype=np.int64)
    np.cumsum(expanded_per_transfer, out=start_of_transfer[1:])
    idx = np.repeat(start_of_transfer[owner], per_piece) + _ramp(per_piece)
    return Template(
        n=t.n,
        den=t.den * qps,
        step=t.step[owner],
        src=t.src[owner],
        dst=t.dst[owner],
        lo=lo,
        hi=hi,
        basis=t.basis[owner],
        dep_ptr=ptr,
        dep_idx=dep_lists[idx],
        channel=t.channel[owner],
        link=t.link[owner],
        src_nic=t.src_nic[owner],
        dst_nic=t.dst_nic[owner],
        qp=np.where(split, k, 0).astype(np.int16),
        pxn=t.pxn[owner],
        switch=t.switches[owner],
    )


def post_order(children: list[list[int]], roots: list[int]) -> list[int]:
    """Every node of the trees under `roots`, children before their parents (iterative: trees can be deep chains)."""
    out: list[int] = []
    for root in roots:
        stack = [(int(root), False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                out.append(node)
                continue
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(children[node]))
    return out


def _ramp(counts: np.ndarray) -> np.ndarray:
    """0..c-1 for each c in counts, concatenated."""
    import numpy as np

    counts = counts.astype(np.int64)
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total, dtype=np.int64) - starts

"""Stamp a transfer template over many collectives of one group at once (numpy, no per-flow Python).

A transfer that carries no byte (a part of a size smaller than the template's parts) is not a flow:
it is left out, and whoever waited for it waits for what it waited for, so every count a simulator
or an indicator sees is the same count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from tracekit.replay.algorithms.base import Template


@dataclass
class Stamped:
    """Flows of C collectives × T template transfers, collective-major; flow ids are consecutive."""

    collective: np.ndarray  # int64 index into the caller's collectives
    step: np.ndarray  # int32
    src: np.ndarray  # int32 position
    dst: np.ndarray  # int32 position
    bytes: np.ndarray  # int64
    dep_ptr: np.ndarray  # int64, len flows + 1
    dep_idx: np.ndarray  # int64 flow ids
    channel: np.ndarray  # int16
    link: np.ndarray  # int8 (base.INTRA / base.NET)
    src_nic: np.ndarray  # int16 local NIC at the sender's host, -1 inside a host
    dst_nic: np.ndarray  # int16
    qp: np.ndarray  # int16
    pxn: np.ndarray  # bool
    switch: np.ndarray  # int8 base.NO_SWITCH / TO_SWITCH / FROM_SWITCH


def part_bytes(total: np.ndarray, den: int | np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Bytes in parts [lo, hi) of `total` cut into `den` parts (part p: total // den, +1 when p < total % den)."""
    import numpy as np

    q, r = np.divmod(total, den)
    width = hi - lo
    return width * q + np.clip(r - lo, 0, width)


def stamp(
    template: Template,
    collectives: np.ndarray,
    sizes: np.ndarray,
    member_bytes: np.ndarray,
    first_flow_id: int,
) -> Stamped:
    """Flows of `template` for each collective, without the ones that carry no byte.

    collectives: (C,) caller's indices; sizes: (C,) the collective's S; member_bytes: (C, n) bytes
    each position passed in (S where unknown); flow ids start at first_flow_id.
    """
    import numpy as np

    c_count, t_count = len(collectives), template.size
    basis = template.basis
    own = basis >= 0
    base = np.repeat(sizes[:, None], t_count, axis=1)
    if own.any():
        base[:, own] = member_bytes[:, basis[own]]
    flow_bytes = part_bytes(base, template.den, template.lo[None, :], template.hi[None, :]).reshape(-1)
    offsets = np.arange(c_count, dtype=np.int64) * t_count
    d_count = template.dep_count
    dep_idx = (template.dep_idx[None, :] + offsets[:, None]).reshape(-1)
    dep_ptr = np.empty(c_count * t_count + 1, dtype=np.int64)
    dep_ptr[0] = 0
    if t_count:
        dep_ptr[1:] = (template.dep_ptr[1:][None, :] + (np.arange(c_count, dtype=np.int64) * d_count)[:, None]).reshape(
            -1
        )
    keep = flow_bytes > 0
    if not keep.all():
        dep_ptr, dep_idx = _bypass(keep, dep_ptr, dep_idx)
    renumber = np.cumsum(keep) - 1 + first_flow_id
    return Stamped(
        collective=np.repeat(collectives.astype(np.int64), t_count)[keep],
        step=np.tile(template.step, c_count)[keep],
        src=np.tile(template.src, c_count)[keep],
        dst=np.tile(template.dst, c_count)[keep],
        bytes=flow_bytes.astype(np.int64)[keep],
        dep_ptr=dep_ptr,
        dep_idx=renumber[dep_idx].astype(np.int64),
        channel=np.tile(template.channel, c_count)[keep],
        link=np.tile(template.link, c_count)[keep],
        src_nic=np.tile(template.src_nic, c_count)[keep],
        dst_nic=np.tile(template.dst_nic, c_count)[keep],
        qp=np.tile(template.qp, c_count)[keep],
        pxn=np.tile(template.pxn, c_count)[keep],
        switch=np.tile(template.switches, c_count)[keep],
    )


def _bypass(keep: np.ndarray, dep_ptr: np.ndarray, dep_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR dependencies of the kept flows only, a dropped flow replaced by what it waited for (transitively).

    Indices stay in the numbering before dropping; dependencies always point to earlier flows, so
    the chain through dropped flows ends after at most as many rounds as the longest such chain.
    """
    import numpy as np

    owner = np.repeat(np.arange(len(keep), dtype=np.int64), np.diff(dep_ptr))
    target = dep_idx
    kept_owner = keep[owner]  # only the kept flows' dependencies are needed
    owner, target = owner[kept_owner], target[kept_owner]
    done_owner, done_target = [], []
    while len(target):
        ok = keep[target]
        done_owner.append(owner[ok])
        done_target.append(target[ok])
        owner, through = owner[~ok], target[~ok]
        if len(owner):  # several pieces of one flow lead to the same predecessors: merge before expanding
            pairs = np.unique(owner * len(keep) + through)
            owner, through = pairs // len(keep), pairs % len(keep)
        counts = dep_ptr[through + 1] - dep_ptr[through]
        owner = np.repeat(owner, counts)
        starts = np.repeat(dep_ptr[through], counts)
        ramp = np.arange(len(owner), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        target = dep_idx[starts + ramp]
    owners = np.concatenate(done_owner) if done_owner else np.zeros(0, dtype=np.int64)
    targets = np.concatenate(done_target) if done_target else np.zeros(0, dtype=np.int64)
    pairs = np.unique(owners * len(keep) + targets)  # sorted by owner, then target; duplicates merged
    owners, targets = pairs // len(keep), pairs % len(keep)
    new_index = np.cumsum(keep) - 1
    counts = np.bincount(new_index[owners], minlength=int(keep.sum()))
    ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, targets

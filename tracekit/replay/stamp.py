"""Stamp a transfer template over many collectives of one group at once (numpy, no per-flow Python)."""

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


def part_bytes(total: np.ndarray, den: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
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
    """Flows of `template` for each collective.

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
    offsets = first_flow_id + np.arange(c_count, dtype=np.int64) * t_count
    d_count = template.dep_count
    dep_idx = (template.dep_idx[None, :] + offsets[:, None]).reshape(-1)
    dep_ptr = np.empty(c_count * t_count + 1, dtype=np.int64)
    dep_ptr[0] = 0
    if t_count:
        dep_ptr[1:] = (template.dep_ptr[1:][None, :] + (np.arange(c_count, dtype=np.int64) * d_count)[:, None]).reshape(
            -1
        )
    return Stamped(
        collective=np.repeat(collectives.astype(np.int64), t_count),
        step=np.tile(template.step, c_count),
        src=np.tile(template.src, c_count),
        dst=np.tile(template.dst, c_count),
        bytes=flow_bytes.astype(np.int64),
        dep_ptr=dep_ptr,
        dep_idx=dep_idx,
    )

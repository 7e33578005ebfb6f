"""Transfer templates: the flows of one collective of n ranks, before its sizes are known.

An algorithm builds a Template once per (process group, collective type): for every transfer the
step, the sending and receiving position (positions 0..n-1 are the group's members in placement
order: pod, rack, host, GPU), which bytes it carries and which earlier transfers it waits for.
`expand` then stamps the template over every collective of that group at once (numpy), so no Python
code runs per flow.

Bytes are exact integers. A template cuts the collective's size S into `den` near-equal parts
(part p holds S // den bytes, plus one when p < S % den, so the parts sum to S exactly) and a
transfer carries parts [lo, hi). `basis` says whose size is cut: -1 for the collective's size S,
k >= 0 for the bytes member k passed in (all-gather shards, all-to-all send buffers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


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


class Builder:
    """Collects transfers one by one (for small, irregular templates: trees, folds); deps point back."""

    def __init__(self, n: int, den: int) -> None:
        self.n = n
        self.den = den
        self.rows: list[tuple[int, int, int, int, int]] = []
        self.deps: list[list[int]] = []

    def add(self, src: int, dst: int, lo: int, hi: int, deps: list[int], basis: int = -1) -> int:
        self.rows.append((src, dst, lo, hi, basis))
        self.deps.append(deps)
        return len(self.rows) - 1

    def build(self) -> Template:
        import numpy as np

        rows = np.array(self.rows, dtype=np.int64).reshape(-1, 5)
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
        )


def empty(n: int) -> Template:
    """No transfers (a group of one, or a collective that moves no data)."""
    return Builder(n, 1).build()

"""Direct (pairwise) algorithms: every rank talks to every peer in one step.

* AllToAll (S = the rank's whole send buffer): position i sends part j of its own buffer (cut into n
  parts) to every j != i: (n-1)/n * S per rank. All-to-allv does not use a template: its flows are
  the recorded split matrix (see tracekit.replay.decompose).
* AllReduce (the "direct" algorithm of ASTRA-sim/TACOS): reduce-scatter by direct exchange (part j
  of S to j), then all-gather of each rank's reduced part to every peer; a rank's all-gather waits
  for every reduce-scatter transfer into it. 2(n-1)/n * S per rank.
* ReduceScatter: part j of S to each j; AllGather: the rank's shard to each peer ((n-1) * S).
* Broadcast: the root sends S to each peer; Reduce: each peer sends S to the root;
  Gather: each peer sends its own buffer to the root; Scatter: the root sends part j of S to j.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.replay.algorithms.base import Template, empty

if TYPE_CHECKING:
    import numpy as np


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    src = np.repeat(np.arange(n, dtype=np.int64), n)
    dst = np.tile(np.arange(n, dtype=np.int64), n)
    keep = src != dst
    return src[keep], dst[keep]


def _template(
    n: int, den: int, src: np.ndarray, dst: np.ndarray, part: np.ndarray | None, basis: np.ndarray | None
) -> Template:
    import numpy as np

    count = len(src)
    lo = part if part is not None else np.zeros(count, dtype=np.int64)
    return Template(
        n=n,
        den=den,
        step=np.zeros(count, dtype=np.int32),
        src=src.astype(np.int32),
        dst=dst.astype(np.int32),
        lo=lo.astype(np.int64),
        hi=(lo + 1).astype(np.int64),
        basis=(basis if basis is not None else np.full(count, -1)).astype(np.int32),
        dep_ptr=np.zeros(count + 1, dtype=np.int64),
        dep_idx=np.zeros(0, dtype=np.int64),
    )


def all_to_all(n: int) -> Template:
    if n < 2:
        return empty(n)
    src, dst = _pairs(n)
    return _template(n, n, src, dst, part=dst, basis=src)


def reduce_scatter(n: int) -> Template:
    if n < 2:
        return empty(n)
    src, dst = _pairs(n)
    return _template(n, n, src, dst, part=dst, basis=None)


def all_gather(n: int) -> Template:
    if n < 2:
        return empty(n)
    src, dst = _pairs(n)
    return _template(n, 1, src, dst, part=None, basis=src)


def all_reduce(n: int) -> Template:
    import numpy as np

    if n < 2:
        return empty(n)
    rs = reduce_scatter(n)
    ag = _template(n, n, rs.src, rs.dst, part=rs.src.astype(np.int64), basis=None)
    m = rs.size  # n(n-1) transfers per phase; RS transfer index of (i -> j) is i*(n-1) + (j - (j > i))
    ag.step[:] = 1
    # AG transfer from i waits for the n-1 RS transfers into i: those from every k != i.
    senders = np.repeat(np.arange(n, dtype=np.int64), n - 1)  # AG transfers are ordered by sender
    k = np.tile(np.arange(n, dtype=np.int64), n)
    i = np.repeat(np.arange(n, dtype=np.int64), n)
    into = k != i
    rs_into = (k * (n - 1) + (i - (i > k)))[into].reshape(n, n - 1)  # row i: RS transfers into i
    dep_idx = rs_into[senders].reshape(-1)
    dep_ptr = np.arange(m + 1, dtype=np.int64) * (n - 1)
    return Template(
        n=n,
        den=n,
        step=np.concatenate([rs.step, ag.step]),
        src=np.concatenate([rs.src, ag.src]),
        dst=np.concatenate([rs.dst, ag.dst]),
        lo=np.concatenate([rs.lo, ag.lo]),
        hi=np.concatenate([rs.hi, ag.hi]),
        basis=np.concatenate([rs.basis, ag.basis]),
        dep_ptr=np.concatenate([rs.dep_ptr, dep_ptr[1:]]),
        dep_idx=dep_idx,
    )


def _root_fan(n: int, root: int, outward: bool, den: int, part: bool, own: bool) -> Template:
    import numpy as np

    if n < 2:
        return empty(n)
    peers = np.array([j for j in range(n) if j != root], dtype=np.int64)
    roots = np.full(len(peers), root, dtype=np.int64)
    src, dst = (roots, peers) if outward else (peers, roots)
    return _template(n, den, src, dst, part=peers if part else None, basis=src if own else None)


def broadcast(n: int, root: int = 0) -> Template:
    return _root_fan(n, root, outward=True, den=1, part=False, own=False)


def reduce(n: int, root: int = 0) -> Template:
    return _root_fan(n, root, outward=False, den=1, part=False, own=False)


def gather(n: int, root: int = 0) -> Template:
    return _root_fan(n, root, outward=False, den=1, part=False, own=True)


def scatter(n: int, root: int = 0) -> Template:
    return _root_fan(n, root, outward=True, den=n, part=True, own=False)

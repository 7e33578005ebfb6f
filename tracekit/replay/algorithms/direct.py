"""Direct (pairwise) algorithms: every rank talks to every peer in one step.

* AllToAll (S = the rank's whole send buffer): position i sends part j of its own buffer (cut into n
  parts) to every j != i: (n-1)/n * S per rank, as NCCL's grouped send/recv do, each peer's part
  split over `channels` p2p channels. With PXN (NCCL >= 2.12, on by default), a part for a GPU on
  another host whose NIC is on another rail first crosses NVLink to the sender host's GPU on that
  rail, which sends it on the rail (tracekit.replay.algorithms.p2p); so each GPU has at most one
  network peer per remote host. All-to-allv uses the same hops with the recorded split matrix (see
  tracekit.replay.decompose).
* AllReduce (the "direct" algorithm of ASTRA-sim/TACOS): reduce-scatter by direct exchange (part j
  of S to j), then all-gather of each rank's reduced part to every peer; a rank's all-gather waits
  for every reduce-scatter transfer into it. 2(n-1)/n * S per rank.
* ReduceScatter: part j of S to each j; AllGather: the rank's shard to each peer ((n-1) * S).
* Broadcast: the root sends S to each peer; Reduce: each peer sends S to the root;
  Gather: each peer sends its own buffer to the root; Scatter: the root sends part j of S to j
  (Gather and Scatter as NCCL's p2p sends, with PXN and p2p channels like AllToAll).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.replay.algorithms.base import Template, empty, plain
from tracekit.replay.algorithms.p2p import Pairs, hops
from tracekit.replay.algorithms.registry import Algorithm

if TYPE_CHECKING:
    import numpy as np

    from tracekit.replay.algorithms.registry import Request


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    src = np.repeat(np.arange(n, dtype=np.int64), n)
    dst = np.tile(np.arange(n, dtype=np.int64), n)
    keep = src != dst
    return src[keep], dst[keep]


def _plain(
    n: int, den: int, src: np.ndarray, dst: np.ndarray, part: np.ndarray | None, basis: np.ndarray | None
) -> Template:
    import numpy as np

    count = len(src)
    lo = part if part is not None else np.zeros(count, dtype=np.int64)
    return plain(
        n,
        den,
        step=np.zeros(count, dtype=np.int32),
        src=src,
        dst=dst,
        lo=lo,
        hi=lo + 1,
        basis=basis if basis is not None else np.full(count, -1),
        dep_ptr=np.zeros(count + 1, dtype=np.int64),
        dep_idx=np.zeros(0, dtype=np.int64),
    )


def _p2p(req: Request, den: int, src: np.ndarray, dst: np.ndarray, part: np.ndarray | None, own: bool) -> Template:
    import numpy as np

    count = len(src)
    lo = part if part is not None else np.zeros(count, dtype=np.int64)
    basis = src if own else np.full(count, -1, dtype=np.int64)
    pairs = Pairs(src=src, dst=dst, lo=lo, hi=lo + 1, basis=basis, den=den, step=np.zeros(count, dtype=np.int64))
    return hops(req, pairs)


def all_to_all(req: Request) -> Template:
    n = req.layout.n
    if n < 2:
        return empty(n)
    src, dst = _pairs(n)
    return _p2p(req, n, src, dst, part=dst, own=True)


def reduce_scatter(req: Request) -> Template:
    n = req.layout.n
    if n < 2:
        return empty(n)
    src, dst = _pairs(n)
    return _plain(n, n, src, dst, part=dst, basis=None)


def all_gather(req: Request) -> Template:
    n = req.layout.n
    if n < 2:
        return empty(n)
    src, dst = _pairs(n)
    return _plain(n, 1, src, dst, part=None, basis=src)


def all_reduce(req: Request) -> Template:
    import numpy as np

    n = req.layout.n
    if n < 2:
        return empty(n)
    rs = reduce_scatter(req)
    m = rs.size  # n(n-1) transfers per phase; RS transfer index of (i -> j) is i*(n-1) + (j - (j > i))
    # AG transfer from i waits for the n-1 RS transfers into i: those from every k != i.
    senders = np.repeat(np.arange(n, dtype=np.int64), n - 1)  # AG transfers are ordered by sender
    k = np.tile(np.arange(n, dtype=np.int64), n)
    i = np.repeat(np.arange(n, dtype=np.int64), n)
    into = k != i
    rs_into = (k * (n - 1) + (i - (i > k)))[into].reshape(n, n - 1)  # row i: RS transfers into i
    dep_idx = rs_into[senders].reshape(-1)
    dep_ptr = np.arange(m + 1, dtype=np.int64) * (n - 1)
    cat = np.concatenate
    return plain(
        n,
        n,
        step=cat([rs.step, np.ones(m, dtype=np.int32)]),
        src=cat([rs.src, rs.src]),
        dst=cat([rs.dst, rs.dst]),
        lo=cat([rs.lo, rs.src.astype(np.int64)]),
        hi=cat([rs.hi, rs.src.astype(np.int64) + 1]),
        basis=cat([rs.basis, rs.basis]),
        dep_ptr=cat([rs.dep_ptr, dep_ptr[1:]]),
        dep_idx=dep_idx,
    )


def _root_peers(n: int, root: int) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    peers = np.array([j for j in range(n) if j != root], dtype=np.int64)
    return peers, np.full(len(peers), root, dtype=np.int64)


def broadcast(req: Request) -> Template:
    n = req.layout.n
    if n < 2:
        return empty(n)
    peers, roots = _root_peers(n, req.root)
    return _plain(n, 1, roots, peers, part=None, basis=None)


def reduce(req: Request) -> Template:
    n = req.layout.n
    if n < 2:
        return empty(n)
    peers, roots = _root_peers(n, req.root)
    return _plain(n, 1, peers, roots, part=None, basis=None)


def gather(req: Request) -> Template:
    n = req.layout.n
    if n < 2:
        return empty(n)
    peers, roots = _root_peers(n, req.root)
    return _p2p(req, 1, peers, roots, part=None, own=True)


def scatter(req: Request) -> Template:
    n = req.layout.n
    if n < 2:
        return empty(n)
    peers, roots = _root_peers(n, req.root)
    return _p2p(req, n, roots, peers, part=peers, own=False)


ALGORITHM = Algorithm(
    name="direct",
    summary="every rank to every peer in one step (AllToAll, Gather and Scatter as NCCL's p2p with PXN; "
    "the others as ASTRA-sim's direct algorithms)",
    builders={
        "ALL_REDUCE": all_reduce,
        "REDUCE_SCATTER": reduce_scatter,
        "ALL_GATHER": all_gather,
        "ALL_TO_ALL": all_to_all,
        "BROADCAST": broadcast,
        "REDUCE": reduce,
        "GATHER": gather,
        "SCATTER": scatter,
    },
)

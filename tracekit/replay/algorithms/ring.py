"""Ring algorithms (NCCL's ring; ASTRA-sim's Ring.cc uses the same step counts and sizes).

Position i sends only to position i+1 (mod n); positions follow the placement, so the ring visits
the GPUs of a host in order and crosses to the next host once, as NCCL's rings do.

* AllReduce: 2(n-1) steps; S is cut into n chunks; at step k position i sends chunk (i - k) mod n
  (reduce-scatter for k < n-1, then all-gather of the reduced chunks). Each rank sends 2S minus two
  chunks: 2(n-1)/n * S when n divides S, and 2(n-1) * S over the ring, exactly.
* ReduceScatter (S = the full input): n-1 steps, chunk (i - k - 1) mod n: (n-1)/n * S per rank.
* AllGather (S = the local shard): n-1 steps; at step k position i forwards the shard of position
  (i - k) mod n, with that member's own size: (n-1) * S per rank.
* Broadcast / Reduce: a chain of n-1 edges from the root (to the root), each carrying S, each edge
  waiting for the previous one (no chunk pipelining is modelled).

Step k of position i waits for step k-1 of position i-1: the data it forwards.
"""

from __future__ import annotations

from tracekit.replay.algorithms.base import Template, empty, single_deps


def _ring(n: int, steps: int, chunk_shift: int, den: int) -> Template:
    import numpy as np

    if n < 2 or steps < 1:
        return empty(n)
    k = np.repeat(np.arange(steps, dtype=np.int64), n)
    i = np.tile(np.arange(n, dtype=np.int64), steps)
    prev = np.where(k > 0, (k - 1) * n + (i - 1) % n, -1)
    ptr, idx = single_deps(prev)
    chunk = (i - k - chunk_shift) % n
    return Template(
        n=n,
        den=den,
        step=k.astype(np.int32),
        src=i.astype(np.int32),
        dst=((i + 1) % n).astype(np.int32),
        lo=chunk if den > 1 else np.zeros_like(chunk),
        hi=chunk + 1 if den > 1 else np.ones_like(chunk),
        basis=np.full(len(k), -1, dtype=np.int32),
        dep_ptr=ptr,
        dep_idx=idx,
    )


def all_reduce(n: int) -> Template:
    return _ring(n, 2 * (n - 1), 0, n)


def reduce_scatter(n: int) -> Template:
    return _ring(n, n - 1, 1, n)


def all_gather(n: int) -> Template:
    template = _ring(n, n - 1, 0, 1)
    if template.size:
        # Position i forwards at step k the shard that originated at position (i - k) mod n.
        template.basis = ((template.src.astype("int64") - template.step) % n).astype("int32")
    return template


def _chain(n: int, first_src: int) -> Template:
    import numpy as np

    if n < 2:
        return empty(n)
    e = np.arange(n - 1, dtype=np.int64)
    src = (first_src + e) % n
    ptr, idx = single_deps(np.where(e > 0, e - 1, -1))
    return Template(
        n=n,
        den=1,
        step=e.astype(np.int32),
        src=src.astype(np.int32),
        dst=((src + 1) % n).astype(np.int32),
        lo=np.zeros(n - 1, dtype=np.int64),
        hi=np.ones(n - 1, dtype=np.int64),
        basis=np.full(n - 1, -1, dtype=np.int32),
        dep_ptr=ptr,
        dep_idx=idx,
    )


def broadcast(n: int, root: int = 0) -> Template:
    return _chain(n, root)


def reduce(n: int, root: int = 0) -> Template:
    return _chain(n, root + 1)

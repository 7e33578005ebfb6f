"""Hierarchical collectives: inside each host first, then across hosts (rings in every phase).

Needs the same number g of members on each of the h hosts (callers fall back to the ring
otherwise). S is cut into g*h units; local index l (the l-th member of its host) owns units
[l*h, (l+1)*h).

* AllReduce: ring reduce-scatter inside each host (member l ends with its h units reduced over
  the host), ring all-reduce across hosts among the members with the same local index (on those
  h units), ring all-gather inside each host. Network bytes: 2(h-1)/h * S leave each host
  (2(h-1) * S in total); NVLink bytes: 2(g-1) * S per host.
* ReduceScatter (S = full input): the same two first phases with a ring reduce-scatter across hosts.
* AllGather (S = the local shard): ring all-gather across hosts among equal local indices, then a
  ring all-gather inside each host of the h shards each member holds. (n-1) * S per rank.
Each phase's first step waits for the previous phase's last transfer into the sender.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.replay.algorithms.base import Builder, Template, empty
from tracekit.replay.algorithms.registry import Algorithm

if TYPE_CHECKING:
    import numpy as np


def layout(hosts: np.ndarray) -> tuple[int, int] | None:
    """(h hosts, g members per host) when every host holds the same number of members, else None."""
    counts: dict[int, int] = {}
    for host in hosts.tolist():
        counts[host] = counts.get(host, 0) + 1
    sizes = set(counts.values())
    if len(sizes) != 1:
        return None
    return len(counts), sizes.pop()


def _ring_phase(
    b: Builder, rings: list[list[int]], steps: int, units: list[tuple[int, int]], into: dict[int, int]
) -> None:
    """One ring per entry of `rings`; at step k member i of a ring sends units[(i - k) mod m] (shifted)."""
    for ring in rings:
        m = len(ring)
        if m < 2:
            continue
        for k in range(steps):
            sent = {}
            for i, position in enumerate(ring):
                lo, hi = units[(i - k) % m]
                deps = [into[position]] if position in into else []
                sent[ring[(i + 1) % m]] = b.add(position, ring[(i + 1) % m], lo, hi, deps)
            into.update(sent)


def _groups(hosts: np.ndarray, h: int, g: int) -> tuple[list[list[int]], list[list[int]]]:
    """Positions of each host (intra rings) and of each local index across hosts (inter rings)."""
    by_host = [list(range(x * g, (x + 1) * g)) for x in range(h)]
    by_local = [[x * g + local for x in range(h)] for local in range(g)]
    return by_host, by_local


def all_reduce(hosts: np.ndarray) -> Template:
    return _reduce(hosts, all_reduce=True)


def reduce_scatter(hosts: np.ndarray) -> Template:
    return _reduce(hosts, all_reduce=False)


def _reduce(hosts: np.ndarray, all_reduce: bool) -> Template:
    n = len(hosts)
    shape = layout(hosts)
    if shape is None:
        raise ValueError("hierarchical algorithms need the same number of members on every host")
    h, g = shape
    if n < 2:
        return empty(n)
    b = Builder(n, g * h)
    by_host, by_local = _groups(hosts, h, g)
    into: dict[int, int] = {}
    # A ring step k sends units[(i - k) mod m]; reduce-scatter sends block (i - k - 1), so that
    # member i keeps block i: rotate by one.
    blocks = [(c * h, (c + 1) * h) for c in range(g)]
    _ring_phase(b, by_host, g - 1, _right(blocks), into)
    for local, ring in enumerate(by_local):
        units = [(local * h + u, local * h + u + 1) for u in range(h)]
        if all_reduce:
            _ring_phase(b, [ring], 2 * (h - 1), units, into)
        else:
            _ring_phase(b, [ring], h - 1, _right(units), into)
    if all_reduce:
        _ring_phase(b, by_host, g - 1, blocks, into)
    return b.build()


def _right(items: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """items rotated right by one: result[j] = items[j - 1]."""
    return items[-1:] + items[:-1]


def all_gather(hosts: np.ndarray) -> Template:
    n = len(hosts)
    shape = layout(hosts)
    if shape is None:
        raise ValueError("hierarchical algorithms need the same number of members on every host")
    h, g = shape
    if n < 2:
        return empty(n)
    b = Builder(n, 1)
    by_host, by_local = _groups(hosts, h, g)
    into: dict[int, int] = {}
    for ring in by_local:  # each member forwards whole shards: one unit of S each
        for k in range(h - 1):
            sent = {}
            for i, position in enumerate(ring):
                deps = [into[position]] if position in into else []
                sent[ring[(i + 1) % h]] = b.add(position, ring[(i + 1) % h], 0, 1, deps, basis=ring[(i - k) % h])
            into.update(sent)
    # Then inside each host every member holds h shards (one block) and forwards blocks: h units of S.
    _ring_phase(b, by_host, g - 1, [(0, h)] * g, into)
    return b.build()


ALGORITHM = Algorithm(
    name="hierarchical",
    summary="rings inside each host, then across hosts among equal local indices (AllReduce, ReduceScatter, "
    "AllGather; equal GPUs per host)",
    builders={
        "ALL_REDUCE": lambda req: all_reduce(req.layout.hosts),
        "REDUCE_SCATTER": lambda req: reduce_scatter(req.layout.hosts),
        "ALL_GATHER": lambda req: all_gather(req.layout.hosts),
    },
    applies=lambda req: layout(req.layout.hosts) is not None,
    channels=False,
)

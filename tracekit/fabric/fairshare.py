"""Max-min fair rates over a weighted incidence, and the independent parts of an incidence.

Rates in bytes/s. A flow f with weight w on link l puts `w * rate[f]` on l; a link's load never
exceeds its capacity; the allocation is max-min fair: no flow's rate can rise without lowering
the rate of a flow whose rate is smaller or equal.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

Int64s = NDArray[np.int64]
Floats = NDArray[np.float64]


def ranges(starts: Int64s, lens: Int64s) -> Int64s:
    """The concatenated ranges starts[i] .. starts[i] + lens[i] - 1."""
    offsets = np.cumsum(lens) - lens
    return np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(starts - offsets, lens)


def unique(values: Int64s) -> Int64s:
    """The distinct values, sorted (np.unique without its hashing, faster on small arrays)."""
    if not len(values):
        return values
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def max_min_rates(ef: Int64s, el: Int64s, ew: Floats, flows: int, capacity: Floats, rtol: float = 1e-9) -> Floats:
    """Max-min fair rates of flows 0..flows-1 given entries (flow `ef`, sorted; link `el`; weight
    `ew`) and link capacities. Flows without entries get rate 0 (the caller treats them apart).

    Progressive filling, many bottlenecks per round. A link's level is (capacity - load of its
    frozen flows) / (unfrozen weight on it); unfrozen flows sit at a common level that rises to the
    lowest link level, freezing the flows there. A link whose level is the lowest among the links
    of every flow crossing it reaches that level before anything can change it (a flow freezing
    elsewhere, at a lower level, only raises the levels of its other links), so every such link
    freezes its flows in the same round. Rounds: the depth of the bottleneck order (one for a
    fabric where each flow is limited by its own NIC), each O(unfrozen entries).
    """
    rates = np.zeros(flows)
    if not len(ef):
        return rates
    mark = np.zeros(len(capacity), dtype=np.bool_)
    mark[el] = True
    used = np.flatnonzero(mark)
    remap = np.empty(len(capacity), dtype=np.int64)
    remap[used] = np.arange(len(used), dtype=np.int64)
    local = remap[el]
    k = len(used)
    room = capacity[used].astype(np.float64)
    weight_sum = np.bincount(local, ew, minlength=k)
    flow = np.cumsum(np.concatenate(([False], ef[1:] != ef[:-1])))  # 0..n-1: which flow of the call
    owner = ef[np.concatenate(([True], ef[1:] != ef[:-1]))]
    while len(local):
        with np.errstate(divide="ignore", invalid="ignore"):
            level = np.maximum(room, 0.0) / weight_sum
        entry_level = level[local]
        flow_level = np.full(len(owner), np.inf)
        np.minimum.at(flow_level, flow, entry_level)
        entry_flow_level = flow_level[flow]
        link_floor = np.full(k, np.inf)
        np.minimum.at(link_floor, local, entry_flow_level)
        tight = entry_level <= link_floor[local] * (1 + rtol)
        frozen = np.zeros(len(owner), dtype=np.bool_)
        frozen[flow[tight]] = True
        rates[owner[frozen]] = flow_level[frozen]
        leaving = frozen[flow]
        weights = ew[leaving]
        weight_sum -= np.bincount(local[leaving], weights, minlength=k)
        room -= np.bincount(local[leaving], weights * entry_flow_level[leaving], minlength=k)
        staying = ~leaving
        flow, local, ew = flow[staying], local[staying], ew[staying]
    return rates


def components(ef: Int64s, el: Int64s, flows: int, links: int) -> tuple[Int64s, Int64s]:
    """Connected parts of the flow-link graph: a label per flow and per link (flows sharing a link,
    directly or through others, share a label; labels are 0..parts-1). Max-min fair rates of one
    part do not depend on any other part, so a solver may recompute only the parts that changed.

    Union by hooking roots to the smaller label, then pointer jumping: O(log) rounds of
    O(entries) in practice.
    """
    parent = np.arange(flows + links, dtype=np.int64)
    a, b = ef, flows + el
    while True:
        ra, rb = parent[a], parent[b]
        if np.array_equal(ra, rb):
            break
        low = np.minimum(ra, rb)
        np.minimum.at(parent, ra, low)
        np.minimum.at(parent, rb, low)
        while True:
            jumped = parent[parent]
            if np.array_equal(jumped, parent):
                break
            parent = jumped
    _, label = np.unique(parent, return_inverse=True)
    label = label.ravel().astype(np.int64)
    return label[:flows], label[flows:]

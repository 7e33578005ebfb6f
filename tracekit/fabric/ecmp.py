"""How unevenly ECMP spreads a few large flows over a switch's uplinks.

`collision_stats` hashes k flows (distinct 5-tuples, the router's own hash: `routing.flow_hash`,
`routing.ecmp_pick`) onto m uplinks under many seeds and reports the distribution of the most
loaded uplink; spraying spreads every flow evenly (max/mean = 1). The closed forms it converges
to, for k flows thrown uniformly on m uplinks:

* P(some uplink carries >= 2 flows) = 1 - m! / ((m - k)! m^k) for k <= m, else 1 (the birthday
  problem);
* E[max flows on one uplink], exactly, from the multinomial (`expected_max_load`).

Meta reports the max/mean ratio of flows per link already above 1.2 for 1,000 flows on 16 links
(SIGCOMM'24 via research/meta-workload-findings.md §1.7): E[max]/mean = 1.22 here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tracekit.errors import InputError
from tracekit.fabric.routing import ecmp_pick, flow_hash

MAX_FLOWS = 1 << 12
MAX_LINKS = 1 << 12
MAX_SEEDS = 1 << 16


@dataclass(frozen=True, eq=False)
class CollisionStats:
    """`max_load[s]`: flows on the busiest of `links` uplinks under seed s (fractional for spray)."""

    flows: int
    links: int
    max_load: NDArray[np.float64]

    @property
    def mean_load(self) -> float:
        return self.flows / self.links

    @property
    def collision_probability(self) -> float:
        """Share of seeds where some uplink carries two flows or more."""
        return float(np.mean(self.max_load >= 2))

    @property
    def mean_max(self) -> float:
        return float(self.max_load.mean())

    @property
    def max_mean_ratio(self) -> float:
        """Mean over seeds of (busiest uplink / mean uplink)."""
        return self.mean_max / self.mean_load


def collision_stats(flows: int, links: int, seeds: int = 1000, routing: str = "ecmp") -> CollisionStats:
    """The busiest uplink's load when `flows` flows leave a switch over `links` equal-cost uplinks,
    under seeds 0..seeds-1 (`routing` ecmp: the router's hash; spray: an even split)."""
    _check("flows", flows, MAX_FLOWS)
    _check("links", links, MAX_LINKS)
    _check("seeds", seeds, MAX_SEEDS)
    if routing == "spray":
        return CollisionStats(flows, links, np.full(seeds, flows / links))
    if routing != "ecmp":
        raise InputError(f"collision_stats: routing must be ecmp or spray, not {routing!r}")
    src = np.tile(np.arange(flows, dtype=np.int64), seeds)
    seed = np.repeat(np.arange(seeds, dtype=np.uint64), flows)
    pick = ecmp_pick(flow_hash(src, src + flows, np.zeros_like(src), seed), 1, links)
    counts = np.bincount(np.repeat(np.arange(seeds), flows) * links + pick, minlength=seeds * links)
    return CollisionStats(flows, links, counts.reshape(seeds, links).max(axis=1).astype(np.float64))


def collision_probability(flows: int, links: int) -> float:
    """P(some uplink carries >= 2 of `flows` flows thrown uniformly on `links` uplinks)."""
    if flows > links:
        return 1.0
    return 1.0 - math.prod((links - i) / links for i in range(flows))


def expected_max_load(flows: int, links: int) -> float:
    """E[flows on the busiest uplink] for `flows` flows thrown uniformly on `links` uplinks.

    E[max] = sum over c >= 0 of P(max > c); P(max <= c) by Poissonisation: with independent
    Poisson(k/m) loads, P(all <= c and total = k) / P(total = k), the numerator the m-fold
    convolution of the Poisson pmf cut at c, evaluated at k (exact, not an approximation).
    """
    _check("flows", flows, MAX_FLOWS)
    _check("links", links, MAX_LINKS)
    k, m = flows, links
    lam = k / m
    counts = np.arange(k + 1)
    log_pmf = counts * math.log(lam) - lam - np.array([math.lgamma(c + 1) for c in counts])
    pmf = np.exp(log_pmf)
    total = math.exp(k * math.log(k) - k - math.lgamma(k + 1))  # P(Poisson(k) = k)
    expected = float(math.ceil(lam))  # P(max > c) = 1 below the mean
    for c in range(math.ceil(lam), k):
        below = _power_at(pmf[: c + 1], m, k) / total
        expected += max(0.0, 1.0 - below)
        if 1.0 - below < 1e-13:
            break
    return expected


def _power_at(pmf: NDArray[np.float64], times: int, at: int) -> float:
    """The `at`-th coefficient of pmf convolved with itself `times` times (by squaring)."""
    result = np.zeros(at + 1)
    result[0] = 1.0
    base = pmf[: at + 1]
    while times:
        if times & 1:
            result = np.convolve(result, base)[: at + 1]
        times >>= 1
        if times:
            base = np.convolve(base, base)[: at + 1]
    return float(result[at])


def _check(name: str, value: object, limit: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit:
        raise InputError(f"collision_stats: {name} must be an integer in 1..{limit}, not {value!r}")

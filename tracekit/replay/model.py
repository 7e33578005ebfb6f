"""The α–β network model used to time flows and to pick algorithms the way NCCL's tuner does.

A transfer of b bytes takes α + b / β on its link class: NVLink inside a host, the NIC across
hosts. Defaults (overridable): inside a host α = 1 µs, β = 150 GB/s (NVLink, per direction); across
hosts α = 5 µs, β = 50 GB/s (one 400 Gb/s NIC per GPU, Meta's Grand Teton, research/
meta-workload-findings.md §1.12). NCCL's own tuner uses the same form, latency × steps + bytes /
bandwidth, with a 0.92 bandwidth derating for trees (NVIDIA/nccl src/graph/tuning.cc).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

TREE_BANDWIDTH_FACTOR = 0.92


@dataclass(frozen=True)
class NetworkModel:
    alpha_intra_s: float = 1e-6
    beta_intra_Bps: float = 150e9
    alpha_inter_s: float = 5e-6
    beta_inter_Bps: float = 50e9

    def describe(self) -> dict[str, Any]:
        return asdict(self)

    def ring_time(self, n: int, hosts: int, size: int, all_reduce: bool = True) -> float:
        """NCCL-style estimate of a ring (all-reduce: 2(n-1) steps of S/n) on the slowest link."""
        alpha, beta = (
            (self.alpha_inter_s, self.beta_inter_Bps) if hosts > 1 else (self.alpha_intra_s, self.beta_intra_Bps)
        )
        steps = 2 * (n - 1) if all_reduce else n - 1
        return steps * alpha + steps * size / n / beta

    def tree_time(self, per_host: int, hosts: int, size: int) -> float:
        """NCCL-style estimate of the tree all-reduce: chain inside hosts, log2 depth across, up and down."""
        latency = 2 * ((per_host - 1) * self.alpha_intra_s + math.ceil(math.log2(max(hosts, 1))) * self.alpha_inter_s)
        beta = (self.beta_inter_Bps if hosts > 1 else self.beta_intra_Bps) * TREE_BANDWIDTH_FACTOR
        return latency + 2 * size / beta

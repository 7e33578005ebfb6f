"""The two-tier Clos the network outputs assume: one leaf switch per rack, every leaf linked to every spine.

One NIC per GPU (rank), attached to its rack's leaf. Defaults: 16 spines with one link from each
leaf to each spine (non-blocking for the default 16 GPUs per rack at equal link rates), 100 Gb/s
links with 1 µs latency — the rate the HPCC example config maps in KMAX_MAP/KMIN_MAP/PMAX_MAP
(research/simulators-run.md §2.2); other rates need matching entries there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tracekit.errors import InputError

MAX_SWITCHES = 1 << 12


@dataclass(frozen=True)
class Clos:
    spines: int = 16
    links_per_spine: int = 1
    link_gbps: int = 100
    link_delay_ms: float = 0.001

    def __post_init__(self) -> None:
        for name in ("spines", "links_per_spine", "link_gbps"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 1 <= value <= MAX_SWITCHES * 100:
                raise InputError(f"clos: {name} must be a positive integer, not {value!r}")
        if self.spines > MAX_SWITCHES:
            raise InputError(f"clos: at most {MAX_SWITCHES} spines")

    @property
    def uplinks(self) -> int:
        """Uplinks of each leaf (= ECMP paths out of a rack)."""
        return self.spines * self.links_per_spine

    def describe(self) -> dict[str, Any]:
        return asdict(self)

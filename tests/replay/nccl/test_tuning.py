"""NCCL's cost model (tracekit.replay.nccl.tuning) against the worked numbers of tuning.cc's formulas."""

from __future__ import annotations

import pytest

from tracekit.replay.layout import group_layout
from tracekit.replay.nccl import tuning
from tracekit.replay.nccl.options import NcclOptions
from tracekit.replay.nccl.topology import model
from tracekit.replay.placement import Placement

# AllReduce over 8 nodes x 8 H100 (8 x 400G, Intel CPUs): latency µs and algorithm bandwidth GB/s of
# every (algorithm, protocol), worked by hand from NCCL 2.30.7's tuning.cc tables and formulas.
EXPECTED = {
    ("tree", "LL"): (45.2, 8.67),
    ("tree", "LL128"): (82.5, 98.6),
    ("tree", "Simple"): (148.4, 122.4),
    ("ring", "LL"): (156.4, 10.4),
    ("ring", "LL128"): (282.8, 149.1),
    ("ring", "Simple"): (585.2, 195.0),
}


def test_latency_and_bandwidth_of_every_algorithm_and_protocol() -> None:
    placement, options = Placement(), NcclOptions()
    layout = group_layout(list(range(64)), placement)
    topo = model(layout, placement, options)
    for (algorithm, protocol), (lat, bw) in EXPECTED.items():
        assert tuning.latency("ALL_REDUCE", algorithm, protocol, topo, placement, 64) == pytest.approx(lat, abs=0.05)
        got = tuning.bandwidth("ALL_REDUCE", algorithm, protocol, topo, placement, options, 64)
        assert got == pytest.approx(bw, abs=0.05)


@pytest.mark.parametrize(
    "size,algorithm,protocol,micros",
    [(1 << 20, "tree", "LL128", 100.2), (64 << 20, "ring", "LL128", 732.8), (1 << 30, "ring", "Simple", 6324.3)],
)
def test_auto_picks_what_nccl_picks(size: int, algorithm: str, protocol: str, micros: float) -> None:
    placement, options = Placement(), NcclOptions()
    layout = group_layout(list(range(64)), placement)
    topo = model(layout, placement, options)
    choice = tuning.choose("ALL_REDUCE", layout, topo, placement, options, size)
    assert (choice.algorithm, choice.protocol) == (algorithm, protocol)
    assert choice.estimate_us == pytest.approx(micros, abs=0.1)
    assert choice.channels == 16


def test_small_collectives_use_fewer_channels() -> None:
    placement, options = Placement(), NcclOptions()
    layout = group_layout(list(range(16)), placement)
    topo = model(layout, placement, options)
    # Simple needs 512 threads x 64 B per channel: 16 channels from 512 KiB
    assert tuning.channels_for("ring", "Simple", topo, 512 * 1024, 16) == 16
    assert tuning.channels_for("ring", "Simple", topo, 64 * 1024, 16) == 2
    assert tuning.channels_for("ring", "Simple", topo, 100, 16) == 1

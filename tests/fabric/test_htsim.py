"""The fluid model against the real packet simulator htsim (ultraethernet/uet-htsim htsim_uec, in
../shared/sims/bin; research/simulators-run.md §1) on tiny cases: n flows into one receiver, and n
flows on distinct paths. Skipped where ../shared is absent (TRACEKIT_SHARED points elsewhere).

htsim_uec runs its built-in 3-tier fat tree of 16 hosts (K = 4) at 400 Gb/s. The fluid model runs
the same flows on the ideal fabric at 50 GB/s; each flow's fixed latency is taken from htsim's own
time for one flow alone on the same kind of path (headers, slow start, hops), so what is compared
is how the flows share the bottleneck.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tracekit.fabric import Endpoints, FlowEnds, preset, route, simulate

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("TRACEKIT_SHARED", ROOT.parent / "shared"))
HTSIM = SHARED / "sims" / "bin" / "htsim_uec"
CHECKER = SHARED / "simcheck" / "htsim_cm.py"
HOSTS, SIZE, RATE = 16, 4 << 20, 50e9
FINISHED = re.compile(r"flowId (\d+) .*?finished at ([0-9.]+)")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not HTSIM.is_file(), reason=f"htsim_uec not present at {HTSIM} (../shared is absent)"),
]


def connection_matrix(pairs: list[tuple[int, int]]) -> str:
    lines = [f"Nodes {HOSTS}", f"Connections {len(pairs)}"]
    lines += [f"{s}->{d} id {i + 1} start 0 size {SIZE}" for i, (s, d) in enumerate(pairs)]
    return "\n".join(lines) + "\n"


def _checker() -> ModuleType:
    """../shared/simcheck/htsim_cm.py, imported from where it lives."""
    sys.path.insert(0, str(CHECKER.parent))
    try:
        return importlib.import_module("htsim_cm")
    finally:
        sys.path.remove(str(CHECKER.parent))


def htsim_finish_us(pairs: list[tuple[int, int]], folder: Path) -> np.ndarray:
    """htsim_uec's finish time of each flow (all start at 0), in microseconds."""
    text = connection_matrix(pairs)
    if CHECKER.is_file():  # the shared rules for .cm files
        assert _checker().check_text(text, binary="uec", tiers=3).ok
    (folder / "flows.cm").write_text(text)
    done = subprocess.run(
        [str(HTSIM), "-tm", "flows.cm", "-end", "10000", "-linkspeed", "400000"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    finish = dict((int(i), float(t)) for i, t in FINISHED.findall(done.stdout))
    assert sorted(finish) == list(range(1, len(pairs) + 1)), "htsim left flows unfinished"
    return np.array([finish[i + 1] for i in range(len(pairs))])


def fluid_finish_us(pairs: list[tuple[int, int]], latency_us: float) -> np.ndarray:
    ep = Endpoints(hosts=HOSTS, gpus_per_host=1, nics_per_host=1, nic_Bps=RATE, nvlink_Bps=1e12)
    net = preset("ideal").with_changes(link_latency_s=0.0).build(ep)
    src, dst = (np.array(a) for a in zip(*pairs, strict=True))
    inc = route(net, FlowEnds(src, dst, src, dst, np.zeros(len(src), int), np.ones(len(src), int)))
    n = len(pairs)
    r = simulate(inc, net.capacity_Bps, np.full(n, float(SIZE)), np.zeros(n), np.full(n, latency_us * 1e-6))
    return r.end_s * 1e6


def lone_latency_us(src: int, dst: int, folder: Path) -> float:
    """htsim's time for one flow alone, minus its bytes at line rate: the fixed part."""
    return float(htsim_finish_us([(src, dst)], folder)[0]) - SIZE / RATE * 1e6


@pytest.mark.parametrize("n", [2, 4, 8])
def test_an_incast_of_n_flows_into_one_receiver(n: int, tmp_path: Path) -> None:
    pairs = [(i, 0) for i in range(1, n + 1)]
    packet = htsim_finish_us(pairs, tmp_path)
    fluid = fluid_finish_us(pairs, lone_latency_us(1, 0, tmp_path))
    last, mean = packet.max() / fluid.max(), packet.mean() / fluid.mean()
    print(f"incast {n}: htsim last {packet.max():.1f} us, fluid {fluid.max():.1f} us: last {last:.3f}, mean {mean:.3f}")
    assert np.allclose(fluid, fluid[0])  # the fluid shares the receiver's link evenly
    assert 0.97 <= last <= 1.10
    assert 0.80 <= mean <= 1.05


def test_n_flows_on_distinct_paths(tmp_path: Path) -> None:
    pairs = [(i, i + 8) for i in range(8)]  # pod to pod, every flow its own NICs
    packet = htsim_finish_us(pairs, tmp_path)
    fluid = fluid_finish_us(pairs, lone_latency_us(0, 8, tmp_path))
    last, mean = packet.max() / fluid.max(), packet.mean() / fluid.mean()
    span = f"htsim {packet.min():.1f}-{packet.max():.1f} us, fluid {fluid.max():.1f} us"
    print(f"distinct paths 8: {span}: last {last:.3f}, mean {mean:.3f}")
    assert 0.97 <= last <= 1.15
    assert 0.97 <= mean <= 1.10

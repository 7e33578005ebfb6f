"""Replay a job's collectives as point-to-point flows, traffic matrices and network-simulator inputs.

    import tracekit
    from tracekit.replay import replay, write_outputs

    with tracekit.open("sample.dataset") as ds:
        r = replay(ds, "captured/fsdp_mlp", algorithm="auto")  # r.flows: a polars DataFrame, one row per flow
        write_outputs(r, "out/", formats=["flows", "hpcc", "htsim", "chakra"])

Pipeline (one module per concern; job_replay.py runs it, result.py holds what it gives):
collectives.py matches the per-rank rows into logical collectives; placement.py puts ranks on GPUs,
hosts, racks and NICs; nccl/ builds what NCCL builds for each process group (channels, rings, trees,
NICs; or reads them from an NCCL log) and picks each collective's algorithm, protocol and channels
with NCCL's cost model; algorithms/ builds transfer templates (a registry: one module per algorithm)
that decompose.py stamps over all collectives of a group at once; timing.py times them on the fabric
(tracekit.fabric's fluid model, the waves of waves.py) and starts.py gives collective start times
(trace timestamps or a dependency replay); matrices.py and indicators.py summarise; outputs.py and
emitters/ (a registry: one module per simulator format) write the outputs (the report draws
host_matrix as a heatmap).

Simulator versions targeted (each rule checked by ../shared/simcheck, evidence in
research/simulators-run.md): HPCC ns-3 (alibaba-edu/High-Precision-Congestion-Control 9f4be2a,
scratch/third), htsim (Broadcom/csg-htsim 841d9e7, htsim_eqds/htsim_ndp; ultraethernet/uet-htsim
40ccb05 htsim_uec), ASTRA-sim 2.x (astra-sim/astra-sim 518bd51, Chakra feeder_v3).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.replay.assemble import FLOW_COLUMNS as _FLOW_COLUMNS
from tracekit.replay.fabric_whatif import whatif
from tracekit.replay.job_replay import replay
from tracekit.replay.nccl.options import NcclOptions
from tracekit.replay.placement import Placement, load_placement
from tracekit.replay.result import Replay

if TYPE_CHECKING:
    import polars as pl

    from tracekit.api import TraceDataset
    from tracekit.fabric.topology import FabricSpec

__all__ = [
    "NcclOptions",
    "Placement",
    "Replay",
    "fleet_locality",
    "host_matrix",
    "load_placement",
    "replay",
    "whatif",
    "write_outputs",
]

FLOW_COLUMNS = ", ".join(_FLOW_COLUMNS)


def write_outputs(
    result: Replay,
    out: str | Path,
    formats: list[str] | None = None,
    csv: bool = False,
    fabric: FabricSpec | None = None,
    htsim_binary: str = "uec",
    include_intra_host: bool = False,
    ecmp_trials: int = 64,
) -> list[Path]:
    """Write OUT/flows.parquet (or flows.csv), the matrices, indicators and replay.duckdb, plus each
    simulator format; `fabric` is the network of the ECMP indicator and of the HPCC/htsim topology."""
    from tracekit.replay.outputs import write_all

    chosen = formats or ["flows"]
    return write_all(result, Path(out), chosen, csv, fabric, htsim_binary, include_intra_host, ecmp_trials)


def host_matrix(result: Replay) -> pl.DataFrame:
    """The host × host traffic matrix of a replay (src_host, dst_host, bytes, share), for the report."""
    from tracekit.replay.matrices import host_matrix as build

    return build(result.flows)


def fleet_locality(
    dataset: TraceDataset | str | Path,
    algorithm: str = "auto",
    placement: Placement | None = None,
    progress: Callable[[int], None] | None = None,
) -> pl.DataFrame:
    """Per parallelism class, the share of replayed bytes that stays inside a host (every job replayed)."""
    from tracekit.replay.fleet import fleet_locality as build

    return build(dataset, algorithm, placement, progress)

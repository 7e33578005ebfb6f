"""Replay a job's collectives as point-to-point flows, traffic matrices and network-simulator inputs.

    import tracekit
    from tracekit.replay import replay, write_outputs

    with tracekit.open("sample.dataset") as ds:
        r = replay(ds, "captured/fsdp_mlp", algorithm="auto")  # r.flows: a polars DataFrame, one row per flow
        write_outputs(r, "out/", formats=["flows", "hpcc", "htsim", "chakra"])

Pipeline (one module per concern): collectives.py matches the per-rank rows into logical
collectives; placement.py puts ranks on GPUs, hosts, racks and NICs; nccl/ builds what NCCL builds
for each process group (channels, rings, trees, NICs; or reads them from an NCCL log) and picks each
collective's algorithm, protocol and channels with NCCL's cost model; algorithms/ builds transfer
templates (a registry: one module per algorithm) that decompose.py stamps over all collectives of
a group at once; timing.py times them on the fabric (tracekit.fabric's fluid model, the waves
of waves.py) and starts.py gives collective start times (trace timestamps or a dependency
replay); matrices.py and indicators.py
summarise; outputs.py, hpcc.py, htsim.py and astra.py write the outputs (the report draws
host_matrix as a heatmap).

Simulator versions targeted (each rule checked by ../shared/simcheck, evidence in
research/simulators-run.md): HPCC ns-3 (alibaba-edu/High-Precision-Congestion-Control 9f4be2a,
scratch/third), htsim (Broadcom/csg-htsim 841d9e7, htsim_eqds/htsim_ndp; ultraethernet/uet-htsim
40ccb05 htsim_uec), ASTRA-sim 2.x (astra-sim/astra-sim 518bd51, Chakra feeder_v3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.replay.assemble import FLOW_COLUMNS as _FLOW_COLUMNS
from tracekit.replay.decompose import DEFAULT_MAX_FLOWS
from tracekit.replay.fabric_whatif import DEFAULT_SEEDS as _WHATIF_SEEDS
from tracekit.replay.nccl.options import NcclOptions
from tracekit.replay.placement import Placement, load_placement

if TYPE_CHECKING:
    import polars as pl

    from tracekit.api import TraceDataset
    from tracekit.fabric.topology import FabricSpec
    from tracekit.replay.fabric_whatif import WhatIf

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


@dataclass
class Replay:
    """The flows of one job and what they came from."""

    job: str
    world_size: int
    flows: pl.DataFrame  # FLOW_COLUMNS, one row per transfer
    collectives: pl.DataFrame  # one row per logical collective
    placement: Placement
    options: NcclOptions
    algorithm: str
    timing: str  # 'trace timestamps' or 'dependency replay'
    groups: list[tuple[int, ...]] = field(default_factory=list)
    group_names: list[str | None] = field(default_factory=list)
    label: str | None = None
    job_class: str = "other"  # the dataset's job_class view: inferred from the collectives, or the label's
    iterations: int = 1
    notes: list[str] = field(default_factory=list)
    topologies: list[Any] = field(default_factory=list)  # per group: its NCCL CommTopology
    shapes: Any = None  # tracekit.replay.shapes.JobShapes: the job's distinct collectives and their flows


def replay(
    dataset: TraceDataset | str | Path,
    job: str | None = None,
    algorithm: str = "auto",
    placement: Placement | str | Path | None = None,
    options: NcclOptions | None = None,
    max_flows: int = DEFAULT_MAX_FLOWS,
    progress: Callable[[int], None] | None = None,
) -> Replay:
    """Decompose every collective of `job` into flows (see the module docstring).

    `job` may be omitted when the dataset holds one job. `placement` is a Placement or a placement
    file; `algorithm` is auto (NCCL's cost model) or one of the registry's algorithms
    (tracekit.replay.algorithms.names()); `options` the NCCL settings (channels, QPs, PXN, protocol,
    in-network reduction, an NCCL log); `progress` is called with the number of collectives done
    after each bucket.
    """
    from tracekit.api import TraceDataset

    if isinstance(dataset, TraceDataset):
        return _replay(dataset, job, algorithm, placement, options, max_flows, progress)
    with TraceDataset(dataset) as ds:
        return _replay(ds, job, algorithm, placement, options, max_flows, progress)


def _replay(
    ds: TraceDataset,
    job: str | None,
    algorithm: str,
    placement: Placement | str | Path | None,
    options: NcclOptions | None,
    max_flows: int,
    progress: Callable[[int], None] | None,
) -> Replay:
    from tracekit.replay.assemble import assemble
    from tracekit.replay.collectives import load_job
    from tracekit.replay.decompose import decompose
    from tracekit.replay.indicators import class_of, iterations_of, job_label

    job = job if job is not None else _only_job(ds)
    if placement is None:
        placement = Placement()
    elif not isinstance(placement, Placement):
        placement = load_placement(placement)
    options = options or NcclOptions()
    matched = load_job(ds, job)
    parts = decompose(matched, placement, options, algorithm, max_flows, progress)
    notes = matched.notes + parts.notes
    flows, collectives, timing, shapes = assemble(ds, matched, parts, placement, notes)
    if flows.height and not flows.filter(flows["src_host"] != flows["dst_host"]).height:
        notes.append(
            f"job {job}: its {matched.world_size} ranks share one host ({placement.gpus_per_host} GPUs per host), "
            "so no flow crosses the network: the hpcc and htsim inputs hold only NVLink flows given --intra-host; "
            "--gpus-per-host or --placement spreads the ranks over hosts"
        )
    return Replay(
        job=job,
        world_size=matched.world_size,
        flows=flows,
        collectives=collectives,
        placement=placement,
        options=options,
        algorithm=algorithm,
        timing=timing,
        groups=matched.groups,
        group_names=matched.group_names,
        label=job_label(ds, job),
        job_class=class_of(ds, job),
        iterations=iterations_of(ds, job),
        notes=notes,
        topologies=parts.topologies,
        shapes=shapes,
    )


def _only_job(ds: TraceDataset) -> str:
    from tracekit.errors import InputError

    count = ds.sql("select count(*) from jobs").fetchall()[0][0]
    jobs = [r[0] for r in ds.sql("select job_id from jobs order by 1 limit 20").fetchall()]
    if count != 1:
        shown = ", ".join(jobs) + (", ..." if count > len(jobs) else "")
        raise InputError(f"the dataset holds {count:,} jobs: name one with --job ({shown})")
    return str(jobs[0])


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
    from tracekit.replay.indicators import fleet_locality as build

    return build(dataset, algorithm, placement, progress)


def whatif(
    dataset: TraceDataset | str | Path,
    job: str | None,
    fabrics: list[FabricSpec],
    routings: list[str] | None = None,
    placement: Placement | None = None,
    options: NcclOptions | None = None,
    algorithm: str = "auto",
    seeds: int = _WHATIF_SEEDS,
    progress: Callable[[int], None] | None = None,
) -> WhatIf:
    """A job's collectives timed on candidate fabrics and routings (see tracekit.replay.fabric_whatif)."""
    from tracekit.replay.fabric_whatif import whatif as run

    return run(dataset, job, fabrics, routings, placement, options, algorithm, seeds, progress)

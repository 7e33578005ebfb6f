"""One job replayed: its collectives matched across ranks, decomposed into flows and timed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.replay.decompose import DEFAULT_MAX_FLOWS
from tracekit.replay.nccl.options import NcclOptions
from tracekit.replay.placement import Placement, load_placement
from tracekit.replay.result import Replay

if TYPE_CHECKING:
    from tracekit.api import TraceDataset


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
    file; `algorithm` is auto (NCCL's cost model), observed (the algorithm and protocol NCCL Inspector
    recorded running each collective, else auto) or one of the registry's algorithms
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
    from tracekit.replay.observed import load_observed

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
    observed = load_observed(ds, job, matched.groups, matched.group_names, notes)
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
        observed=observed,
    )


def _only_job(ds: TraceDataset) -> str:
    from tracekit.errors import InputError

    count = ds.sql("select count(*) from jobs").fetchall()[0][0]
    jobs = [r[0] for r in ds.sql("select job_id from jobs order by 1 limit 20").fetchall()]
    if count != 1:
        shown = ", ".join(jobs) + (", ..." if count > len(jobs) else "")
        raise InputError(f"the dataset holds {count:,} jobs: name one with --job ({shown})")
    return str(jobs[0])

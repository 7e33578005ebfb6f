"""Fabric what-if: a job's collectives timed on candidate fabrics, routings and link speeds.

The job is replayed once (its flows: channels, NICs, QPs, PXN, as NCCL sends them); then every
collective runs on each fabric under each routing, in the same fair-share model the replay's own
timing uses (tracekit.replay.timing), and once on the ideal non-blocking fabric of the same NIC
speed, which every slowdown is measured against. ECMP is a draw of hash seeds: each seed routes
every QP flow anew, and the table gives the median and the 95th percentile over the seeds.

The job's communication time is the sum of its collectives' times, each timed alone (the job's
collectives run one after another on each process group's stream; overlap between groups is not
counted), so it is the same whether one job or a fleet is timed. Per (fabric, routing, collective
type): collectives, bytes on the network, time (median over seeds, and p95), the ideal fabric's
time, the slowdown (time / ideal), and the busiest network link's utilisation over the job's
communication time (its bytes over capacity × time).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from tracekit.api import TraceDataset
    from tracekit.fabric.topology import FabricSpec
    from tracekit.replay.nccl.options import NcclOptions
    from tracekit.replay.placement import Placement
    from tracekit.replay.result import Replay
    from tracekit.replay.shapes import JobShapes

DEFAULT_SEEDS = 8
MAX_SEEDS = 1024


@dataclass
class WhatIf:
    job: str
    table: pl.DataFrame  # fabric, routing, comm_type, ... (see the module docstring); comm_type "all" per job
    per_collective: pl.DataFrame  # fabric, routing, seed, collective_id, comm_type, time_s
    fabrics: list[dict[str, Any]] = field(default_factory=list)  # each fabric's description
    notes: list[str] = field(default_factory=list)


def whatif(
    dataset: TraceDataset | str | Path,
    job: str | None,
    fabrics: list[FabricSpec],
    routings: list[str] | None = None,
    placement: Placement | None = None,
    options: NcclOptions | None = None,
    algorithm: str = "auto",
    seeds: int = DEFAULT_SEEDS,
    progress: Callable[[int], None] | None = None,
    result: Replay | None = None,
) -> WhatIf:
    """Time `job` on each of `fabrics` under each of `routings` (default: each fabric's own routing)."""
    from tracekit.errors import InputError
    from tracekit.replay.job_replay import replay

    if not 1 <= seeds <= MAX_SEEDS:
        raise InputError(f"seeds must be in 1..{MAX_SEEDS}, not {seeds}")
    if not fabrics:
        raise InputError("name at least one fabric (--fabric FILE or a preset)")
    result = result or replay(dataset, job, algorithm=algorithm, placement=placement, options=options)
    return time_on_fabrics(result, fabrics, routings, seeds, progress)


def plan(fabrics: list[FabricSpec], routings: list[str] | None, seeds: int) -> list[tuple[FabricSpec, str, int]]:
    """Every (fabric, routing, seed) to run: ECMP over `seeds` seeds, pinning and spraying once."""
    runs = []
    for fabric in fabrics:
        for routing in routings or [fabric.routing]:
            for seed in range(seeds if routing == "ecmp" else 1):
                runs.append((fabric, routing, seed))
    return runs


def time_on_fabrics(
    result: Replay,
    fabrics: list[FabricSpec],
    routings: list[str] | None = None,
    seeds: int = DEFAULT_SEEDS,
    progress: Callable[[int], None] | None = None,
) -> WhatIf:
    """The what-if table of an already replayed job (see the module docstring)."""
    table, per = time_shapes(result.shapes, fabrics, routings, seeds, progress)
    return WhatIf(result.job, table, per, [{"label": f.label, **f.describe()} for f in fabrics], list(result.notes))


def time_shapes(
    shapes: JobShapes,
    fabrics: list[FabricSpec],
    routings: list[str] | None = None,
    seeds: int = DEFAULT_SEEDS,
    progress: Callable[[int], None] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The what-if table of a job's distinct collectives, and each collective's time per run."""
    import numpy as np
    import polars as pl

    from tracekit.fabric.topology import NIC, FabricSpec
    from tracekit.replay.timing import Timer

    timer = Timer(shapes)
    where = shapes.network()
    ideal = timer.run(FabricSpec("ideal").build(where))
    ideal_s = ideal.durations(shapes)
    # per collective, in shape order: the shape it belongs to (a run's rows repeat its shape's time)
    owner = np.repeat(np.arange(len(shapes.shapes)), [shape.count for shape in shapes.shapes])
    ids = np.array([cid for shape in shapes.shapes for cid in shape.collective_ids], dtype=np.int64)
    kinds = [shapes.shapes[k].comm_type for k in owner.tolist()]
    moved = np.array([network_bytes(shape) for shape in shapes.shapes], dtype=np.int64)[owner]
    ideal_per = np.asarray(ideal_s, dtype=np.float64)[owner]
    schema = {"fabric": pl.String, "routing": pl.String, "seed": pl.Int64, "collective_id": pl.Int64,
              "comm_type": pl.String, "time_s": pl.Float64, "ideal_s": pl.Float64, "busiest_link_s": pl.Float64,
              "network_bytes": pl.Int64}  # fmt: skip
    parts: list[pl.DataFrame] = []
    jobs: list[dict[str, Any]] = []
    built: dict[int, tuple[Any, Any]] = {}  # per fabric: its network, and its one run when routing changes nothing
    for fabric, routing, seed in plan(fabrics, routings, seeds):
        if id(fabric) not in built:
            network = fabric.build(where)
            built[id(fabric)] = (network, None if timer.has_choices(network) else timer.run(network))
        network, alike = built[id(fabric)]
        run = alike if alike is not None else timer.run(network, routing, seed)
        network_links = network.tier >= NIC
        parts.append(pl.DataFrame({
            "fabric": [fabric.label] * len(ids), "routing": [routing] * len(ids), "seed": [seed] * len(ids),
            "collective_id": ids, "comm_type": kinds,
            "time_s": np.asarray(run.durations(shapes), dtype=np.float64)[owner], "ideal_s": ideal_per,
            "busiest_link_s": np.full(len(ids), np.nan), "network_bytes": moved,
        }, schema=schema))  # fmt: skip
        total = run.communication_s(shapes)
        busiest = run.link_bytes[network_links] / network.capacity_Bps[network_links]
        jobs.append({"fabric": fabric.label, "routing": routing, "seed": seed, "collective_id": -1,
                     "comm_type": None, "time_s": total, "ideal_s": ideal.communication_s(shapes),
                     "busiest_link_s": float(busiest.max(initial=0.0)), "network_bytes": None})  # fmt: skip
        if progress:
            progress(1)
    per = pl.concat([*parts, pl.DataFrame(jobs, schema=schema)], rechunk=True).with_columns(
        pl.col("busiest_link_s").fill_nan(None)
    )
    return _table(per), per.filter(pl.col("collective_id") >= 0).drop("busiest_link_s", "network_bytes")


def network_bytes(shape: Any) -> int:
    """Bytes one collective of the shape moves across the network."""
    from tracekit.replay.algorithms.base import NET

    return int(shape.flows["bytes"][shape.flows["link"] == NET].sum())


def _table(per: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    colls = per.filter(pl.col("collective_id") >= 0)
    by_seed = colls.group_by("fabric", "routing", "comm_type", "seed").agg(
        pl.len().alias("collectives"), pl.col("network_bytes").sum(), pl.col("time_s").sum(), pl.col("ideal_s").sum()
    )
    whole = per.filter(pl.col("collective_id") < 0).with_columns(comm_type=pl.lit("all")).drop("network_bytes")
    jobs = whole.join(
        by_seed.group_by("fabric", "routing", "seed").agg(pl.col("collectives").sum(), pl.col("network_bytes").sum()),
        on=["fabric", "routing", "seed"],
    ).select("fabric", "routing", "comm_type", "seed", "collectives", "network_bytes", "time_s", "ideal_s",
             "busiest_link_s")  # fmt: skip
    joined = pl.concat([by_seed.with_columns(busiest_link_s=pl.lit(None, dtype=pl.Float64)), jobs], how="vertical")
    return (
        joined.group_by("fabric", "routing", "comm_type", maintain_order=True)
        .agg(
            pl.col("collectives").first(),
            pl.col("network_bytes").first().fill_null(0),
            pl.len().alias("seeds"),
            pl.col("time_s").median().alias("time_s"),
            pl.col("time_s").quantile(0.95, interpolation="linear").alias("time_p95_s"),
            pl.col("ideal_s").first().alias("ideal_s"),
            (pl.col("busiest_link_s").median() / pl.col("time_s").median()).alias("busiest_link_utilisation"),
        )
        .with_columns(
            slowdown=pl.col("time_s") / pl.col("ideal_s"), slowdown_p95=pl.col("time_p95_s") / pl.col("ideal_s")
        )
        .sort("fabric", "routing", pl.col("comm_type") != "all", "comm_type")
    )

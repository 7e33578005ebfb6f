"""The replay of one job: its flows and what they came from (what every output is written from)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from tracekit.replay.nccl.options import NcclOptions
    from tracekit.replay.placement import Placement


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
    # The job's observed transfers (NCCL Inspector proxy records), peers global: tracekit.replay.observed
    observed: Any = None

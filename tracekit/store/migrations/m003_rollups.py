"""Format 3: the rollup tables collective_sizes, collective_ranks and job_classes, kept in step per
job by every ingest (queries/rollups/*.sql)."""

from __future__ import annotations

from tracekit.store.migrations.context import Presentation, Upgrade

FORMAT = 3
_ROLLUPS = ("collective_sizes", "collective_ranks", "job_classes")


def upgrade(step: Upgrade) -> None:
    step.rebuild_rollups(*_ROLLUPS)


def present(view: Presentation) -> None:
    view.compute(*_ROLLUPS)

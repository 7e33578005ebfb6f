"""Format 7: sums of byte counts never overflow (collective_ops.in_bytes an int128), and the
structural class rule: rollups collective_groups and collective_peers, job_classes with the columns
of the new rule. Every rollup of this step is computed again for every job."""

from __future__ import annotations

from tracekit.store.migrations.context import Presentation, Upgrade

FORMAT = 7
_ROLLUPS = ("collective_ops", "collective_groups", "collective_peers", "job_classes")


def upgrade(step: Upgrade) -> None:
    step.rebuild_rollups(*_ROLLUPS)


def present(view: Presentation) -> None:
    view.compute(*_ROLLUPS)

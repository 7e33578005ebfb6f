"""Format 5: the rollup collective_ops (per job, op name and comm_type: calls, group sizes, bytes)."""

from __future__ import annotations

from tracekit.store.migrations.context import Presentation, Upgrade

FORMAT = 5


def upgrade(step: Upgrade) -> None:
    step.rebuild_rollups("collective_ops")


def present(view: Presentation) -> None:
    view.compute("collective_ops")

"""Format 9: replay_jobs.switch_bytes (bytes into and out of a reducing switch: NVLS, CollNet); the
format number stamped in the file (tracekit.store.dataset_format)."""

from __future__ import annotations

from tracekit.store.migrations.context import Presentation, Upgrade

FORMAT = 9


def upgrade(step: Upgrade) -> None:
    step.add_columns("replay_jobs", ("switch_bytes",))


def present(view: Presentation) -> None:
    view.add_columns("replay_jobs", ("switch_bytes",))

"""Format 11: table observed_transfers, the network transfers NCCL Inspector's proxy records observed.
Created empty: the runs before it read no Inspector files, so they hold none."""

from __future__ import annotations

from tracekit.store.migrations.context import Presentation, Upgrade

FORMAT = 11
TABLE = "observed_transfers"


def upgrade(step: Upgrade) -> None:
    step.create_missing(TABLE)


def present(view: Presentation) -> None:
    view.empty_missing(TABLE)

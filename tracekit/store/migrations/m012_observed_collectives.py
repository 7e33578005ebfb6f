"""Format 12: table observed_collectives, NCCL Inspector's per-operation algorithm, protocol, timing
and bandwidths. Created empty: the runs before it kept none of them."""

from __future__ import annotations

from tracekit.store.migrations.context import Presentation, Upgrade

FORMAT = 12
TABLE = "observed_collectives"


def upgrade(step: Upgrade) -> None:
    step.create_missing(TABLE)


def present(view: Presentation) -> None:
    view.empty_missing(TABLE)

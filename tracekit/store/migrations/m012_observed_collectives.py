"""Format 12: table observed_collectives, NCCL Inspector's per-operation algorithm, protocol, timing
and bandwidths. Created empty: the runs before it kept none of them."""

from __future__ import annotations

from tracekit.store import connect
from tracekit.store.migrations.context import DB, Presentation, Upgrade

FORMAT = 12
TABLE = "observed_collectives"


def upgrade(step: Upgrade) -> None:
    if TABLE not in connect.objects(step.con, DB):
        step.create(TABLE)


def present(view: Presentation) -> None:
    if TABLE not in connect.objects(view.con, view.catalog):
        view.empty_tables(TABLE)

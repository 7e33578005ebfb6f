"""Format 11: table observed_transfers, the network transfers NCCL Inspector's proxy records observed.
Created empty: the runs before it read no Inspector files, so they hold none."""

from __future__ import annotations

from tracekit.store import connect
from tracekit.store.migrations.context import DB, Presentation, Upgrade

FORMAT = 11
TABLE = "observed_transfers"


def upgrade(step: Upgrade) -> None:
    if TABLE not in connect.objects(step.con, DB):
        step.create(TABLE)


def present(view: Presentation) -> None:
    if TABLE not in connect.objects(view.con, view.catalog):
        view.empty_tables(TABLE)

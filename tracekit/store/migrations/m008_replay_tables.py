"""Format 8: the tables a fleet replay writes (replay_jobs, replay_fabrics), empty until one runs.

A fleet replay writes them into a dataset of any format (tracekit.replay.fleet, in the columns of
the tracekit that ran it), so only the ones the file lacks are created or shown empty."""

from __future__ import annotations

from tracekit.store import connect
from tracekit.store.migrations.context import DB, Presentation, Upgrade

FORMAT = 8
TABLES = ("replay_jobs", "replay_fabrics")
# The replay_jobs column format 9 added (m009_switch_bytes adds it).
_LATER = {"replay_jobs": ("switch_bytes",)}


def upgrade(step: Upgrade) -> None:
    held = connect.objects(step.con, DB)
    for table in TABLES:
        if table not in held:
            step.create(table, without=_LATER.get(table, ()))


def present(view: Presentation) -> None:
    held = connect.objects(view.con, view.catalog)
    view.empty_tables(*(t for t in TABLES if t not in held))

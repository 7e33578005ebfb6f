"""Format 10: table written_files, what each run wrote (tracekit.store.written_files). Created empty:
the runs before it recorded no file checksums, and `tracekit verify` says so rather than failing."""

from __future__ import annotations

from tracekit.store import connect
from tracekit.store.migrations.context import DB, Presentation, Upgrade
from tracekit.store.written_files import TABLE

FORMAT = 10


def upgrade(step: Upgrade) -> None:
    if TABLE not in connect.objects(step.con, DB):
        step.create(TABLE)


def present(view: Presentation) -> None:
    if TABLE not in connect.objects(view.con, view.catalog):
        view.empty_tables(TABLE)

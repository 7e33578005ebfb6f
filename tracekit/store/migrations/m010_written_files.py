"""Format 10: table written_files, what each run wrote (tracekit.store.written_files). Created empty:
the runs before it recorded no file checksums, and `tracekit verify` says so rather than failing."""

from __future__ import annotations

from tracekit.store.migrations.context import Presentation, Upgrade
from tracekit.store.written_files import TABLE

FORMAT = 10


def upgrade(step: Upgrade) -> None:
    step.create_missing(TABLE)


def present(view: Presentation) -> None:
    view.empty_missing(TABLE)

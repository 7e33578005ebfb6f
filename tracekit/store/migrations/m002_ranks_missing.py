"""Format 2: a job counts the ranks it lacks a readable trace of (jobs.ranks_missing, jobs.missing_ranks)
instead of an error row per rank. Jobs of an earlier format have them null."""

from __future__ import annotations

from tracekit.store.migrations.context import Presentation, Upgrade

FORMAT = 2
_COLUMNS = ("ranks_missing", "missing_ranks")


def upgrade(step: Upgrade) -> None:
    step.add_columns("jobs", _COLUMNS)


def present(view: Presentation) -> None:
    view.add_columns("jobs", _COLUMNS)

"""Format 6: the traces rows are appended per run as DATASET/traces/*.parquet, like collectives and ops,
instead of one traces.parquet rewritten whole by every run: the upgrading run writes every traces
row into traces/ and removes traces.parquet once it has committed."""

from __future__ import annotations

from tracekit.store.migrations.context import Presentation, Upgrade

FORMAT = 6


def upgrade(step: Upgrade) -> None:
    step.rewrite.add("traces")
    step.removals.append(str(step.root / "traces.parquet"))


def present(view: Presentation) -> None:
    """Readers read the DuckDB file's table, which is the same in both."""

"""What an ingest run reports: where it is while it runs (`Progress`) and what it did (`IngestReport`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracekit.store.summary import DatasetSummary


@dataclass(frozen=True)
class Progress:
    """Where a run is: stage 'parse' (`done` of `total` files, `name` the last one) then 'write'."""

    stage: str
    done: int = 0
    total: int = 0
    name: str = ""


ProgressCallback = Callable[[Progress], None]


@dataclass
class IngestReport:
    """What a run did, and what the dataset holds after it."""

    dataset: Path
    run_id: str
    files_seen: int = 0
    files_added: int = 0
    files_skipped: int = 0
    files_duplicate: int = 0
    # Files the dataset held with other content at the same path: their earlier rows are replaced.
    files_replaced: list[str] = field(default_factory=list)
    # Inputs not read: paths that do not exist, then files with error rows (by job, rank, path).
    errors: list[str] = field(default_factory=list)
    # Notes that did not stop the run: jobs kept apart or joined, duplicates, manifest rows that
    # match nothing, files read with notes (also in traces.warnings).
    warnings: list[str] = field(default_factory=list)
    # One line per job of the run that lacks ranks: `job J: ranks 1–7 of 8 missing`.
    missing: list[str] = field(default_factory=list)
    jobs_touched: int = 0
    written: bool = False
    totals: DatasetSummary | None = None
    # What the parsing cost, in the workers (wherever they ran): CPU seconds, the largest peak RSS.
    parse_cpu_seconds: float = 0.0
    parse_peak_rss: int = 0

    @property
    def ok(self) -> bool:
        """Every input was read."""
        return not self.errors

    @property
    def complete(self) -> bool:
        """No job of the run lacks ranks."""
        return not self.missing

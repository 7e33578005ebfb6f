"""Which jobs of a dataset a command looks at: `tracekit.open(DATASET, scope=Scope(...))`.

The report's --job/--label/--since/--until, `tracekit query`'s and `replay --fleet`'s are this one
selection, applied where the dataset is opened (tracekit.api.ScopedDataset), so every table, view
and query sees only the selected jobs' rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date


@dataclass(frozen=True)
class Scope:
    """Which jobs a command covers: all of them, or those matching every filter given.

    `jobs`: job ids; `labels`: a job's label, or the class part of a 'class:model' label; `since`
    and `until`: jobs.started_at on or after, and before (a job without a start time is left out
    when either is given)."""

    jobs: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    since: date | None = None
    until: date | None = None

    def is_everything(self) -> bool:
        return not (self.jobs or self.labels or self.since or self.until)

    def describe(self) -> str:
        parts = []
        if self.jobs:
            parts.append(f"jobs {', '.join(self.jobs)}")
        if self.labels:
            parts.append(f"labels {', '.join(self.labels)}")
        if self.since:
            parts.append(f"started on or after {self.since.isoformat()}")
        if self.until:
            parts.append(f"started before {self.until.isoformat()}")
        return "; ".join(parts) if parts else "all jobs"

    def parameters(self) -> dict[str, object]:
        """The bound parameters of the selection (tracekit.api.ScopedDataset's query)."""
        return {
            "jobs": list(self.jobs),
            "labels": list(self.labels),
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
        }

"""tracekit report: the fleet's workload story as one self-contained HTML page.

    from tracekit.report import build_report, Scope
    build_report("fleet.dataset", "report.html", Scope(labels=("fsdp",)))

The numbers come from the shipped queries (report.data), the sentences from report.headlines, the
figures from report.charts (one module per chart), the page from report.page; report.compare puts
two fleets side by side.
The report reads datasets through tracekit.api and knows nothing of trace formats.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tracekit.report.data import ReportStep, Steps
from tracekit.report.page import Section
from tracekit.scope import Scope

__all__ = ["ReportResult", "ReportStep", "Scope", "build_report", "render_report"]

Progress = Callable[[ReportStep], None]


@dataclass
class ReportResult:
    """What `build_report` wrote: the file, its size, how long it took and how much of it the queries took."""

    path: Path
    bytes: int
    jobs: int
    figures: int
    seconds: float
    query_seconds: float
    missing_jobs: list[str] = field(default_factory=list)


def render_report(
    dataset: str | Path,
    scope: Scope | None = None,
    compare: str | Path | None = None,
    dataset_arg: str | None = None,
    progress: Progress | None = None,
) -> tuple[str, ReportResult]:
    """The report's HTML and a summary (its `path` is empty until written).

    `compare` is another dataset, or a period of this one written `SINCE..UNTIL` (either side may be
    empty: `..2024-01-01`, `2024-01-01..`); the page then puts the two fleets side by side.
    `dataset_arg` is how the captions' `tracekit query` commands name the dataset (default: its path).
    `progress` is called with each step done (a `ReportStep`: stage, done, total).
    """
    from tracekit._version import __version__
    from tracekit.api import open as open_dataset
    from tracekit.report import page, sections
    from tracekit.report.data import load_fleet, load_report

    began = time.perf_counter()
    scope = scope or Scope()
    name = Path(dataset).resolve().name
    arg = str(dataset) if dataset_arg is None else dataset_arg
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    with open_dataset(dataset, scope) as ds:
        if compare is None:
            data = load_report(ds, scope, progress)
        else:
            from tracekit.report.data import ReportData

            data = ReportData(load_fleet(ds, progress))
    query_seconds = data.fleet.query_seconds + sum(j.query_seconds for j in data.job_sections)
    if compare is not None:
        from tracekit.report.compare import compare_sections, resolve_other

        other_path, other_scope, other_name = resolve_other(dataset, scope, compare)
        with open_dataset(other_path, other_scope) as other_ds:
            other = load_fleet(other_ds, progress, stage=f"queries of {other_name}")
        query_seconds += other.query_seconds
        title = f"tracekit report: {name} ({scope.describe()}) against {other_name}"
        steps = Steps(progress, "page", 2)  # the figures, then the page
        body = compare_sections(data.fleet, other, _side_name(name, scope), other_name)
    else:
        title = f"tracekit report: {name}"
        steps = Steps(progress, "page", 2)
        body = sections.report_sections(data) if not data.fleet.empty else [_empty(scope)]
    steps.tick()
    from tracekit.report import headlines

    lead = (
        [headlines.fleet_summary(data.fleet.overview), sections.coverage(data.fleet.overview)]
        if not data.fleet.empty
        else []
    )
    doc = page.Document(
        title=title,
        subtitle=[
            f"{scope.describe()} · dataset {Path(dataset).resolve()}",
            f"generated {now} by tracekit {__version__}",
        ],
        lead=lead,
        sections=body,
        dataset_arg=arg,
        caption_note=""
        if scope.is_everything() and compare is None
        else " (over the whole dataset, not the selection)",
        footer=f"tracekit {__version__} · {now} · every figure's numbers: tracekit query NAME {arg}",
    )
    html = page.render(doc)
    steps.tick()
    figures = sum(len(s.figures) for s in body)
    result = ReportResult(
        path=Path(),
        bytes=len(html.encode()),
        jobs=int(data.fleet.overview.get("jobs") or 0),
        figures=figures,
        seconds=time.perf_counter() - began,
        query_seconds=query_seconds,
        missing_jobs=data.missing_jobs,
    )
    return html, result


def build_report(
    dataset: str | Path,
    out: str | Path,
    scope: Scope | None = None,
    compare: str | Path | None = None,
    dataset_arg: str | None = None,
    progress: Progress | None = None,
) -> ReportResult:
    """Write the report on `dataset` (the jobs `scope` selects) to `out`, replacing it at once when it is
    complete; `progress` as for `render_report`."""
    from tracekit.errors import OutputError

    out = Path(out)
    if out.is_dir():  # checked first: the page is not made for nothing
        raise OutputError(f"{out}: cannot write (Is a directory: name the file, e.g. {out / 'report.html'})")
    html, result = render_report(dataset, scope, compare, dataset_arg, progress)
    temporary = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(html, encoding="utf-8")
        os.replace(temporary, out)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise OutputError(f"{out}: cannot write ({exc.strerror or exc})") from exc
    result.path = out
    return result


def _side_name(name: str, scope: Scope) -> str:
    return name if scope.is_everything() else f"{name} ({scope.describe()})"


def _empty(scope: Scope) -> Section:
    from tracekit.report.sections import no_data_section

    if scope.is_everything():
        return no_data_section("the dataset holds no jobs.")
    return no_data_section(f"no job matches the filters ({scope.describe()}).")

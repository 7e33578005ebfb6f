"""The report's figures: one module per chart, each defining `CHART`, read as a registry.

A chart module builds its Vega-Lite spec (with Altair, from the small frames of report.data, its
data inline) and says how it stands in the page: its figure's key, title, headline, the note shown
when there is nothing to draw, and the queries behind it. A `FleetChart` is a figure of the fleet
section, a `JobChart` one of every job's section, each at its `position` in it; a chart may return
no figure where it does not apply (elements where no trace records them, a job without all-to-alls).
Adding a chart is one new module of this package; report.sections reads the registry. What the
charts share (width, font, colours, axis labels, `finish`) is in charts.style.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import FleetData, JobData
    from tracekit.report.page import Figure


@dataclass(frozen=True)
class Chart:
    name: str  # the module's name, `_` written `-`
    position: int  # where its figure stands in its section, smallest first


@dataclass(frozen=True)
class FleetChart(Chart):
    figure: Callable[[FleetData], Figure | None]
    summary: str = ""  # one line for `tracekit plugins`: its module's docstring


@dataclass(frozen=True)
class JobChart(Chart):
    figure: Callable[[JobData], Figure | None]
    summary: str = ""  # one line for `tracekit plugins`: its module's docstring


@cache
def charts() -> dict[str, Chart]:
    """Every CHART defined by a module of this package, by name."""
    from tracekit.registry import discover
    from tracekit.report import charts as package

    return discover(package, "CHART", Chart)


def fleet_charts() -> list[FleetChart]:
    """The fleet section's charts, in their order on the page."""
    return sorted((c for c in charts().values() if isinstance(c, FleetChart)), key=lambda c: c.position)


def job_charts() -> list[JobChart]:
    """A job section's charts, in their order on the page."""
    return sorted((c for c in charts().values() if isinstance(c, JobChart)), key=lambda c: c.position)


def positive(frame: pl.DataFrame, column: str) -> bool:
    """Whether the frame has rows and `column` sums to more than nothing (a chart of it shows something)."""
    return frame.height > 0 and bool(frame[column].sum())

"""The charts registry (tracekit.report.charts): one module per chart, each defining CHART, read in page order."""

from __future__ import annotations

import importlib
import pkgutil

from tracekit.report import charts
from tracekit.report.charts import FleetChart, JobChart

# What the charts share is not a chart.
NOT_CHARTS = {"style"}


def test_every_chart_module_defines_one_chart_named_after_it() -> None:
    modules = {m.name for m in pkgutil.iter_modules(charts.__path__)} - NOT_CHARTS
    assert set(charts.charts()) == modules
    for name in modules:
        chart = importlib.import_module(f"tracekit.report.charts.{name}").CHART
        assert chart.name == name and isinstance(chart, FleetChart | JobChart)


def test_the_charts_of_a_section_stand_at_distinct_positions() -> None:
    for section in (charts.fleet_charts(), charts.job_charts()):
        positions = [c.position for c in section]
        assert positions == sorted(set(positions))

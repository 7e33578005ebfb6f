"""The charts registry (tracekit.report.charts): one module per chart, each defining CHART, read in page order."""

from __future__ import annotations

from tracekit.report import charts

# That each chart is one module named for it is tests/test_registry.py's (every registry's) test.


def test_the_charts_of_a_section_stand_at_distinct_positions() -> None:
    for section in (charts.fleet_charts(), charts.job_charts()):
        positions = [c.position for c in section]
        assert positions == sorted(set(positions))

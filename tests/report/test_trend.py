"""The trend headline compares only periods that hold enough jobs to say something, names the jobs at
each end, and says which periods it left out; the compare pages state no difference for a side of
too few jobs."""

from __future__ import annotations

from datetime import date

import polars as pl

from tests.conftest import SampleRun
from tracekit.report import render_report
from tracekit.report.data import TREND_MIN_JOBS, Period
from tracekit.report.format import Num
from tracekit.report.headlines import trend


def _frame(jobs: list[int], medians: list[int]) -> pl.DataFrame:
    starts = [date(2023, 1, 1), date(2023, 4, 1), date(2023, 7, 1), date(2026, 10, 1)][: len(jobs)]
    return pl.DataFrame(
        {
            "period": [0, 1, 2, 15][: len(jobs)],
            "period_start": starts,
            "jobs": jobs,
            "median_job_gpus": medians,
            "calls": [100] * len(jobs),
            "mean_group_size": [float(m) for m in medians],
            "max_group_size": medians,
        }
    )


def _numbers(sentence: list[str | Num]) -> dict[str, object]:
    return {part.key: part.value for part in sentence if isinstance(part, Num)}


def _text(sentence: list[str | Num]) -> str:
    return "".join(part.text if isinstance(part, Num) else part for part in sentence)


def test_a_period_of_few_jobs_is_left_out_of_the_trend() -> None:
    line = trend(_frame([24, 25, 26, 4], [8, 16, 32, 4]), Period(date(2023, 1, 1), 3))
    numbers = _numbers(line)
    assert numbers["trend_median_job_first"] == 8 and numbers["trend_median_job_last"] == 32
    assert numbers["trend_jobs_first"] == 24 and numbers["trend_jobs_last"] == 26
    text = _text(line)
    assert "2023 Q1 (24 jobs) to 2023 Q3 (26 jobs)" in text
    assert f"at least {TREND_MIN_JOBS} jobs" in text and "2026 Q4 (4 jobs)" in text


def test_no_trend_is_stated_from_fewer_than_two_periods_of_enough_jobs() -> None:
    text = _text(trend(_frame([24, 4], [8, 4]), Period(date(2023, 1, 1), 3)))
    assert "no trend" in text and "median job went" not in text


def test_the_samples_trend_runs_over_the_fleet(samples: SampleRun) -> None:
    html, _ = render_report(samples.dataset)
    assert "the median job went from" in html
    assert "to 2026" not in html  # the seven captured CPU jobs of 2026 are too few to be a period of the trend


def test_a_side_of_too_few_jobs_is_not_compared(samples: SampleRun) -> None:
    html, _ = render_report(samples.dataset, compare="2025-01-01..")
    assert "median job size" not in html
    assert f"fewer than {TREND_MIN_JOBS} jobs" in html

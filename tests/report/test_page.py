"""The page without a browser: what it inlines, what it escapes, how much data it carries."""

from __future__ import annotations

import json
import re
from datetime import date
from pathlib import Path

import altair as alt
import pytest

from tests.conftest import SampleRun, run_tracekit
from tracekit.report import render_report
from tracekit.report.data import choose_period
from tracekit.report.format import human_bytes, percent, ratio
from tracekit.report.page import VENDOR, script_json
from tracekit.scope import Scope

SPECS = re.compile(r'<script type="application/json" id="tracekit-specs">(.*?)</script>', re.S)


def test_the_vendored_libraries_are_the_versions_written_down() -> None:
    versions = dict(line.split("=") for line in (VENDOR / "VERSIONS").read_text().split())
    assert f'var n="{versions["vega-lite"]}"' in (VENDOR / "vega-lite.min.js").read_text()[:400]
    assert versions["vega"] in (VENDOR / "vega.min.js").read_text()
    assert versions["vega-embed"] in (VENDOR / "vega-embed.min.js").read_text()
    for name in ("vega", "vega-lite", "vega-embed"):
        assert (VENDOR / f"LICENSE.{name}").read_text().startswith("Copyright")


def test_the_vendored_vega_lite_reads_what_altair_writes() -> None:
    ours = tuple(
        int(x)
        for x in dict(line.split("=") for line in (VENDOR / "VERSIONS").read_text().split())["vega-lite"].split(".")
    )
    altairs = tuple(int(x) for x in alt.SCHEMA_VERSION.lstrip("v").split("."))
    assert ours[0] == altairs[0] and ours[:2] >= altairs[:2]


def test_script_json_cannot_close_its_script_element() -> None:
    text = script_json({"job": "</script><script>alert(1)</script>", "x": "<!-- & -->"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"job": "</script><script>alert(1)</script>", "x": "<!-- & -->"}


def test_numbers_read_as_a_paper_writes_them() -> None:
    assert human_bytes(26214400) == "25 MiB"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(3) == "3 B"
    assert percent(0.973) == "97%" and percent(0.9996) == "99.96%" and percent(0.004) == "0.4%"
    assert ratio(2.0) == "×2.0" and ratio(0.0939) == "×0.094"


def test_periods_cut_the_span_into_at_most_twelve() -> None:
    assert choose_period(date(2023, 2, 5), date(2024, 12, 1)).months == 3  # type: ignore[union-attr]
    assert choose_period(date(2023, 2, 5), date(2024, 12, 1)).start == date(2023, 1, 1)  # type: ignore[union-attr]
    assert choose_period(date(2024, 1, 1), date(2024, 3, 1)).months == 1  # type: ignore[union-attr]
    assert choose_period(date(2015, 1, 1), date(2024, 3, 1)).months == 12  # type: ignore[union-attr]
    assert choose_period(None, None) is None


def test_the_page_carries_aggregates_not_collectives(samples: SampleRun) -> None:
    html, result = render_report(samples.dataset)
    specs = json.loads(SPECS.search(html).group(1))  # type: ignore[union-attr]
    rows = sum(len(values) for spec in specs.values() for values in spec.get("datasets", {}).values())
    assert result.jobs == 211
    # The samples have 214,512 collective rows; the page's largest table is a 64-GPU job's all-to-allv
    # volume matrix (64 x 64 cells, since generated all-to-allv carry their splits).
    assert rows < 6000
    assert result.bytes < 2_000_000
    assert 'src="http' not in html and 'href="http' not in html


def test_a_page_for_the_same_data_is_the_same_page(samples: SampleRun) -> None:
    first, _ = render_report(samples.dataset, Scope(labels=("fsdp",)))
    second, _ = render_report(samples.dataset, Scope(labels=("fsdp",)))
    strip = re.compile(r"generated [^<·]*|\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC")
    assert strip.sub("", first) == strip.sub("", second)


@pytest.mark.parametrize("compare", ["..2024-01-01", "2024-01-01.."])
def test_a_period_compared_with_the_whole_dataset(samples: SampleRun, compare: str, tmp_path: Path) -> None:
    html, result = render_report(samples.dataset, compare=compare)
    assert "Two fleets side by side" in html
    assert result.figures == 4


def test_progress_counts_the_steps_of_each_stage_to_its_total(one_job_dataset: Path, tmp_path: Path) -> None:
    from tracekit.report import ReportStep, build_report

    events: list[ReportStep] = []
    build_report(one_job_dataset, tmp_path / "r.html", progress=events.append)
    stages = list(dict.fromkeys(e.stage for e in events))
    assert stages == ["fleet queries", "job sections", "page"]
    for stage in stages:
        counts = [(e.done, e.total) for e in events if e.stage == stage]
        total = counts[0][1]
        assert total > 0 and counts == [(n, total) for n in range(total + 1)], (stage, counts)


def test_report_shows_progress_on_a_terminal_only(one_job_dataset: Path, tmp_path: Path) -> None:
    import os
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "report", str(one_job_dataset), "-o", str(tmp_path / "t.html")],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env={**os.environ, "TERM": "xterm", "COLUMNS": "120"},
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other side closed: the command is over
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert proc.wait(timeout=120) == 0, shown
    text = shown.decode(errors="replace")
    assert re.search(r"fleet queries.*\b\d+/11\b", text), text
    assert "job sections" in text and "report: 1 job" in text
    piped = run_tracekit("report", one_job_dataset, "-o", tmp_path / "p.html")
    assert piped.returncode == 0 and piped.stderr.splitlines() == [piped.stderr.strip()], piped.stderr

"""The report as a reader sees it: loaded in headless Chromium with the network off.

Every page must load with no console error or warning, no request beyond the page itself, and every
chart drawn (an SVG with marks); its headline numbers must be the ones the queries give.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tracekit
from tests.conftest import SAMPLE_TRACES, SampleRun, run_tracekit
from tests.report.cdp import Browser, Tab
from tracekit.ingest import ingest

pytestmark = pytest.mark.browser

READY = "document.body && document.body.getAttribute('data-charts-done') !== null"
CHARTS = """Array.from(document.querySelectorAll('.chart')).map(node => ({
  key: node.getAttribute('data-spec'),
  rendered: node.getAttribute('data-rendered'),
  marks: node.querySelectorAll('svg g.role-mark > path, svg g.role-mark > line, svg g.role-mark > text').length,
  drawn: Array.from(node.querySelectorAll('svg g.role-mark > path'))
    .filter(p => (p.getAttribute('d') || '').length > 2).length,
}))"""
NUMBERS = """Object.fromEntries(Array.from(document.querySelectorAll('.num')).map(
  n => [n.getAttribute('data-key'), [JSON.parse(n.getAttribute('data-value')), n.innerText]]))"""


def open_clean(browser: Browser, page: Path) -> Tab:
    """Load the page and check it loaded as it must: no error, no warning, no request, no dialog, all charts drawn."""
    tab = browser.open(page.resolve().as_uri(), ready=READY)
    assert tab.load.errors == []
    assert tab.load.warnings == []
    assert tab.load.outside_requests == []
    assert tab.load.dialogs == []
    for chart in tab.evaluate(CHARTS):
        assert chart["rendered"] == "true", chart
        assert chart["marks"] > 0 and chart["drawn"] + chart["marks"] > 0, f"chart {chart['key']} drew no marks"
    return tab


def numbers(tab: Tab) -> dict[str, Any]:
    return {key: value for key, (value, _text) in tab.evaluate(NUMBERS).items()}


def test_the_samples_report_renders_offline_with_every_chart_drawn(samples: SampleRun, browser: Browser) -> None:
    tab = open_clean(browser, samples.page)
    charts = tab.evaluate(CHARTS)
    keys = {c["key"] for c in charts}
    for figure in ("fig-sizes", "fig-classes", "fig-mix", "fig-messages", "fig-groups", "fig-trend"):
        assert figure in keys
    assert sum(1 for k in keys if k.startswith("fig-job-")) >= 8  # per-job sections
    assert tab.evaluate("document.querySelectorAll('table.data tbody tr').length") > 10  # jobs table
    assert "traceback" not in tab.evaluate("document.body.innerText").lower()


def test_the_headline_numbers_are_the_queries_numbers(samples: SampleRun, browser: Browser) -> None:
    tab = open_clean(browser, samples.page)
    shown = numbers(tab)
    with tracekit.open(samples.dataset) as ds:
        # Straight from the tables, not through the report's own queries.
        jobs, multiple_of_8 = ds.sql(
            "select count(*), avg(case when world_size % 8 = 0 then 1.0 else 0 end) from jobs"
        ).fetchall()[0]
        le_128, max_group = ds.sql(
            "select avg(case when group_size <= 128 then 1.0 else 0 end), max(group_size) from collectives "
            "where group_size is not null and comm_type not in ('SEND', 'RECV')"
        ).fetchall()[0]
        calls = ds.sql("select count(*) from collectives").fetchall()[0][0]
        classes = dict(ds.sql("select class, count(*) / sum(count(*)) over () from job_class group by 1").fetchall())
        overview = ds.query("dataset_overview").pl().row(0, named=True)
    assert shown["jobs"] == jobs
    assert shown["calls"] == calls
    assert shown["wire_bytes"] == pytest.approx(overview["wire_bytes"])
    assert shown["jobs_multiple_of_8_share"] == pytest.approx(multiple_of_8)
    assert shown["calls_le_128_share"] == pytest.approx(le_128)
    assert shown["max_group_size"] == max_group
    for cls, share in classes.items():
        assert shown[f"class_share:{cls}"] == pytest.approx(share)
    # The texts say the same as the values.
    texts = {key: text for key, (_value, text) in tab.evaluate(NUMBERS).items()}
    assert texts["jobs"] == f"{jobs:,}"
    assert texts["calls_le_128_share"] == f"{le_128 * 100:.0f}%"


def test_a_job_named_like_a_script_stays_text(tmp_path: Path, browser: Browser) -> None:
    name = "<script>alert(1)</script>"
    label = "<img src=x onerror=alert(2)>:m</script><b>"
    assert ingest([SAMPLE_TRACES / "captured" / "ddp_mlp"], tmp_path / "ds", job=name, label=label).ok
    page = tmp_path / "r.html"
    result = run_tracekit("report", tmp_path / "ds", "-o", page, "--job", name)
    assert result.returncode == 0, result.stderr
    tab = open_clean(browser, page)
    assert tab.evaluate("document.querySelectorAll('img, b').length") == 0
    assert tab.evaluate("document.querySelectorAll('script').length") == 5  # the specs, three libraries, the boot
    text = tab.evaluate("document.body.innerText")
    assert name in text and label in text
    assert tab.evaluate(f"document.querySelector('#jobs table.data td').innerText === {json.dumps(name)}")


def test_a_single_job_dataset(one_job_dataset: Path, tmp_path: Path, browser: Browser) -> None:
    result = run_tracekit("report", one_job_dataset, "-o", tmp_path / "r.html")
    assert result.returncode == 0, result.stderr
    tab = open_clean(browser, tmp_path / "r.html")
    keys = {c["key"] for c in tab.evaluate(CHARTS)}
    assert any(k.endswith("-matrix") for k in keys)  # its all-to-allv splits are recorded
    assert numbers(tab)["jobs"] == 1


def test_a_dataset_without_collectives_says_no_data(tmp_path: Path, browser: Browser) -> None:
    (tmp_path / "in" / "broken").mkdir(parents=True)
    (tmp_path / "in" / "broken" / "trace.0.et").write_bytes(b"garbage")
    assert not ingest([tmp_path / "in"], tmp_path / "ds").ok
    result = run_tracekit("report", tmp_path / "ds", "-o", tmp_path / "r.html")
    assert result.returncode == 0, result.stderr
    tab = open_clean(browser, tmp_path / "r.html")
    text = tab.evaluate("document.body.innerText")
    assert "No data: the jobs issued no collectives." in text
    assert "No data: no collective records its group size." in text


def test_filters_that_match_nothing_say_no_data(samples: SampleRun, tmp_path: Path, browser: Browser) -> None:
    result = run_tracekit("report", samples.dataset, "-o", tmp_path / "r.html", "--label", "no-such-label")
    assert result.returncode == 0, result.stderr
    tab = open_clean(browser, tmp_path / "r.html")
    assert "No data: no job matches the filters (labels no-such-label)." in tab.evaluate("document.body.innerText")


def test_two_periods_side_by_side(samples: SampleRun, tmp_path: Path, browser: Browser) -> None:
    result = run_tracekit(
        "report", samples.dataset, "-o", tmp_path / "r.html", "--until", "2024-01-01", "--compare", "2024-01-01.."
    )
    assert result.returncode == 0, result.stderr
    tab = open_clean(browser, tmp_path / "r.html")
    keys = {c["key"] for c in tab.evaluate(CHARTS)}
    assert {"fig-compare-sizes", "fig-compare-classes", "fig-compare-messages", "fig-compare-groups"} <= keys
    shown = numbers(tab)
    with tracekit.open(samples.dataset) as ds:
        before, after = ds.sql(
            "select count(*) filter (where started_at < '2024-01-01'), "
            "count(*) filter (where started_at >= '2024-01-01') from jobs"
        ).fetchall()[0]
    assert (shown["compare_jobs:a"], shown["compare_jobs:b"]) == (before, after)


@pytest.mark.shared
def test_the_public_traces_report(public_traces: Path, tmp_path: Path, browser: Browser) -> None:
    jobs = {
        "dlrm": public_traces / "param-dlrm-8rank",
        "resnet": public_traces / "param-resnet-2gpu",
        "hta-resnet": public_traces / "hta-nccl-2gpu",
        **{f"astra-{d.name}": d for d in sorted((public_traces / "astra-sim-microbenchmarks").iterdir()) if d.is_dir()},
    }
    for job, path in jobs.items():
        # Not `.ok`: the two ResNet traces are one rank of a 2-rank job each, and ingest may flag the missing rank.
        assert ingest([path], tmp_path / "ds", job=job).files_added > 0, job
    result = run_tracekit("report", tmp_path / "ds", "-o", tmp_path / "r.html")
    assert result.returncode == 0, result.stderr
    tab = open_clean(browser, tmp_path / "r.html")
    assert numbers(tab)["jobs"] == len(jobs)
    with tracekit.open(tmp_path / "ds") as ds:
        inferred = dict(ds.sql("select job_id, inferred_class from job_class").fetchall())
    # The public README: an 8-rank DLRM (all-to-allv + all-reduce) and a 2-GPU ResNet-50 DDP job.
    assert inferred["dlrm"] == "ranking-ddp"
    assert inferred["resnet"] == inferred["hta-resnet"] == "ddp"


def test_each_job_section_shows_its_traffic_between_hosts_as_replayed(samples: SampleRun, browser: Browser) -> None:
    import polars as pl

    from tracekit.replay import host_matrix, replay

    tab = open_clean(browser, samples.page)
    shown = numbers(tab)
    jobs = [key.split(":", 1)[1] for key in shown if key.startswith("job_intra_host_share:")]
    assert len(jobs) >= 3, "every job section has a host-traffic figure"
    crossing = 0
    with tracekit.open(samples.dataset) as ds:
        for job in jobs:
            flows = replay(ds, job).flows  # the default placement, 8 GPUs per host, as the report's
            inside = int(flows.filter(pl.col("src_host") == pl.col("dst_host"))["bytes"].sum())
            assert shown[f"job_intra_host_share:{job}"] == pytest.approx(inside / int(flows["bytes"].sum()))
            matrix = host_matrix(replay(ds, job))
            if matrix.height:
                crossing += 1
                assert shown[f"job_host_pairs:{job}"] == matrix.height
    assert crossing >= 1, "some sample job spans several hosts, so its heatmap is drawn"


def test_the_trend_a_reader_sees_compares_periods_of_enough_jobs(samples: SampleRun, browser: Browser) -> None:
    """The samples' first page once said the median job went from 16 to 4 GPUs: its last period held
    only the four captured CPU jobs of 2026. As drawn in the browser: periods of enough jobs only."""
    from tracekit.report.data import TREND_MIN_JOBS, choose_period

    tab = open_clean(browser, samples.page)
    shown = numbers(tab)
    with tracekit.open(samples.dataset) as ds:
        overview = ds.query("dataset_overview").pl().row(0, named=True)
        period = choose_period(overview["first_started_at"], overview["last_started_at"])
        assert period is not None
        trend = ds.query("group_size_trend", period.params()).pl()
    counted = trend.filter((trend["calls"] > 0) & (trend["jobs"] >= TREND_MIN_JOBS))
    first, last = counted.row(0, named=True), counted.row(-1, named=True)
    assert (shown["trend_jobs_first"], shown["trend_jobs_last"]) == (first["jobs"], last["jobs"])
    assert (shown["trend_median_job_first"], shown["trend_median_job_last"]) == (
        first["median_job_gpus"],
        last["median_job_gpus"],
    )
    assert shown["trend_median_job_last"] > shown["trend_median_job_first"]  # the sample fleet's jobs grow
    text = tab.evaluate("document.querySelector('#fig-trend').innerText")
    left_out = trend.filter((trend["calls"] > 0) & (trend["jobs"] < TREND_MIN_JOBS))["jobs"].to_list()
    assert left_out and f"at least {TREND_MIN_JOBS} jobs" in text, text
    assert all(f"({jobs} jobs)" in text for jobs in left_out), (left_out, text)


@pytest.mark.slow
def test_the_fabric_figure_shows_each_class_per_fabric_and_routing(
    timed_fleet: Path, browser: Browser, tmp_path: Path
) -> None:
    page = tmp_path / "fleet.html"
    done = run_tracekit("report", timed_fleet, "-o", page)
    assert done.returncode == 0, done.stderr
    tab = open_clean(browser, page)
    assert "fig-fabrics" in {c["key"] for c in tab.evaluate(CHARTS)}
    shown = numbers(tab)
    with tracekit.open(timed_fleet) as ds:
        medians = {
            (fabric, cls, routing): value
            for cls, fabric, routing, value in ds.sql(
                "select j.class, f.fabric, f.routing, median(f.slowdown) from replay_fabrics f join replay_jobs j "
                "using (job_id) where f.comm_type = 'all' and f.network_bytes > 0 group by all"
            ).fetchall()
        }
    for fabric in ("clos2-1to1", "dgx-h100-superpod"):
        [key] = [k for k in shown if k.startswith(f"fabric_ecmp_median:{fabric}:")]
        cls = key.rsplit(":", 1)[1]
        assert shown[key] == pytest.approx(medians[(fabric, cls, "ecmp")])
        assert shown[f"fabric_spray_median:{fabric}:{cls}"] == pytest.approx(medians[(fabric, cls, "spray")])
    # ECMP collides on the two-tier Clos, spraying does not: the busiest class's median shows it.
    clos = [k for k in shown if k.startswith("fabric_ecmp_median:clos2-1to1:")][0]
    assert shown[clos] > shown[clos.replace("ecmp", "spray")]


def test_without_a_fleet_replay_the_fabric_figure_says_how_to_get_one(samples: SampleRun, browser: Browser) -> None:
    tab = open_clean(browser, samples.page)
    assert "tracekit replay DATASET --fleet" in tab.evaluate("document.body.innerText")

"""Benchmark of `tracekit report` on a generated fleet, and the class rule's agreement per profile.

Report: the whole report (queries, headlines, Altair specs, HTML) against its baseline, the same
queries run alone in the same run. ratio = report time / query time (1.0 = everything but the SQL is
free); the page's size is printed too (the bar: under 2 MB and 15 s for 1,000 jobs).

Agreement: for each built-in profile, a fleet generated and ingested, and the share of jobs whose
class inferred from the collectives (queries/job_class.sql) equals the generator's label.

Fleets are generated and ingested once into --workdir and reused on later runs (1,000 jobs take
about 2 minutes on 2 cores).

    python bench/bench_report.py                                # 1,000-job default fleet, agreement on 300 jobs
    python bench/bench_report.py --jobs 1000 --agreement-jobs 1000 --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import tracekit
from tracekit.generate import generate_fleet
from tracekit.ingest import ingest
from tracekit.report import render_report
from tracekit.report.data import Runner, load_fleet, load_job, pick_jobs


def fleet(workdir: Path, profile: str, jobs: int, seed: int) -> Path:
    folder = workdir / f"{profile}-{jobs}-{seed}"
    dataset = folder.with_suffix(".dataset")
    if not (dataset / "tracekit.duckdb").is_file():
        if not (folder / "tracekit_manifest.csv").is_file():
            generate_fleet(folder, jobs, seed, profile)
        report = ingest([folder], dataset)
        assert report.ok, report.errors[:3]
    return dataset


def queries_alone(dataset: Path) -> float:
    """The report's queries, run as the report runs them, and nothing else."""
    with tracekit.open(dataset) as ds:
        began = time.perf_counter()
        data = load_fleet(ds)
        for job in pick_jobs(data.jobs, ())[0]:
            load_job(ds, job)
        return time.perf_counter() - began


def agreement(dataset: Path) -> tuple[int, int, dict[str, float]]:
    with tracekit.open(dataset) as ds:
        rows = ds.query("class_agreement").fetchall()
    total = sum(r[2] for r in rows)
    same = sum(r[2] for r in rows if r[3])
    per_class: dict[str, list[int]] = {}
    for label_class, _inferred, jobs, agrees, _share in rows:
        counts = per_class.setdefault(label_class, [0, 0])
        counts[0] += jobs if agrees else 0
        counts[1] += jobs
    return same, total, {k: v[0] / v[1] for k, v in per_class.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--agreement-jobs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/tracekit-bench-report"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)

    for profile in ("default", "sample", "meta-llm-tail"):
        dataset = fleet(args.workdir, profile, args.agreement_jobs, args.seed)
        same, total, per_class = agreement(dataset)
        classes = ", ".join(f"{k} {v:.1%}" for k, v in sorted(per_class.items()))
        print(f"class agreement, {profile:13s}: {same}/{total} jobs = {same / total:.1%}  ({classes})")

    dataset = fleet(args.workdir, "default", args.jobs, args.seed)
    with tracekit.open(dataset) as ds:
        rows = ds.sql("select count(*) from collectives").fetchall()[0][0]
        Runner(ds).frame("dataset_overview")  # warm the file cache for both sides alike
    base, full, size = [], [], 0
    for _ in range(args.repeat):
        base.append(queries_alone(dataset))
        began = time.perf_counter()
        html, _result = render_report(dataset)
        full.append(time.perf_counter() - began)
        size = len(html.encode())
    q, r = statistics.median(base), statistics.median(full)
    print(f"report, default fleet: {args.jobs} jobs, {rows:,} collective rows")
    print(f"queries alone (baseline): {q:6.2f} s   (median of {args.repeat})")
    print(f"whole report            : {r:6.2f} s   ratio {r / q:.2f}   page {size / 1e6:.2f} MB")
    print(f"bar: page < 2 MB: {'yes' if size < 2e6 else 'NO'}; report < 15 s: {'yes' if r < 15 else 'NO'}")


if __name__ == "__main__":
    main()

"""Stages folding in the older single-purpose scripts (each still runs alone: `python bench/bench_*.py`):
the fleet generator against writing the same bytes, the replay decomposition against writing its
flows, timed in this process (their baselines are too); and the CLI's start-up, timed as whole
processes."""

from __future__ import annotations

import resource
import shutil
import statistics
import subprocess
import sys
import time

from bench.suite import Context, Measure, Row, ratio_row, stage


def _measure(seconds: float, cpu: float) -> Measure:
    return Measure(seconds, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


@stage("generate", "`tracekit generate` (1 worker) against writing the same files from one repeated record")
def generate_stage(ctx: Context) -> list[Row]:
    from bench.bench_generate import baseline
    from tracekit.generate import generate_fleet

    jobs = 20 if ctx.quick else 400
    out, base_out = ctx.fresh("generate"), ctx.fresh("generate-baseline")
    cpu = time.process_time()
    summary = generate_fleet(out, jobs, 1, "default", workers=1)
    generated = _measure(summary.seconds, time.process_time() - cpu)
    cpu = time.process_time()
    seconds, files, _ = baseline(out, base_out)
    written = _measure(seconds, time.process_time() - cpu)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(base_out, ignore_errors=True)
    return [
        ratio_row(
            "generate",
            f"generate {jobs} jobs, 1 worker",
            generated,
            written,
            "writing the same files",
            amount=files,
            unit="files",
            of="wall",
        )
    ]


@stage("replay", "the replay decomposition of one synthetic job against writing its flows to Parquet")
def replay_stage(ctx: Context) -> list[Row]:
    from bench.bench_replay import decomposition, synthetic_job, write_baseline

    ranks, count = (16, 40) if ctx.quick else (128, 400)
    job = synthetic_job(ranks, count)
    cpu = time.process_time()
    seconds, flows = decomposition(job)
    decomposed = _measure(seconds, time.process_time() - cpu)
    cpu = time.process_time()
    write = write_baseline(flows)
    written = _measure(write, time.process_time() - cpu)
    return [
        ratio_row(
            "replay",
            f"decompose {count} collectives, {ranks} ranks",
            decomposed,
            written,
            "writing the flows to Parquet",
            amount=flows.height,
            unit="flows",
            of="wall",
        )
    ]


@stage("startup", "`tracekit --help` against starting the interpreter alone (median of several runs)")
def startup_stage(ctx: Context) -> list[Row]:
    runs = 3 if ctx.quick else 9
    helped = _median_run([sys.executable, "-m", "tracekit", "--help"], runs)
    bare = _median_run([sys.executable, "-c", "pass"], runs)
    row = ratio_row("startup", "tracekit --help", helped, bare, "python -c pass", of="wall")
    row.target, row.met = "< 0.3 s", helped.wall < 0.3
    return [row]


def _median_run(command: list[str], runs: int) -> Measure:
    """The median wall and CPU seconds of `command` run `runs` times, and its peak memory (from one
    more run in a process of its own: this one's children include earlier stages' probes)."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    peak = subprocess.run(
        [sys.executable, "-c", _PEAK_OF_CHILD, *command], check=True, capture_output=True, text=True
    ).stdout.split()[-1]
    return Measure(statistics.median(walls), statistics.median(cpus), int(peak) / 1024)


_PEAK_OF_CHILD = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)

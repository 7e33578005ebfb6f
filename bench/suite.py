"""The benchmark suite: stages registered by name, each measuring against a baseline taken in the
same run (the machines are shared and noisy: a ratio to a baseline measured minutes apart on the
same machine means something, an absolute time alone much less).

A stage is a function taking the `Context` and returning `Row`s; `@stage(...)` registers it. Stages
build their inputs through the context (`ctx.fleet(jobs)`, `ctx.dataset(jobs)`), which generates
and ingests them once per work folder and reuses them, so stages can share a fleet. To add one (the
200 MB Kineto trace and the 1 M-node .et stages belong to the parsers), write the function in a
module of bench/ and import it in `bench/__main__.py`; nothing else changes.

Every row prints the measured action's wall and CPU seconds (CPU includes the parse workers), its
peak resident memory, its throughput, its baseline's wall and CPU seconds, the ratio of the two
(CPU seconds: steadier than wall time on a shared machine; wall where the point is the wall time)
and the target, when the issue sets one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Measure:
    """One action, measured in a fresh process (bench.probe)."""

    wall: float
    cpu: float
    peak_mib: float
    counts: dict[str, Any] = field(default_factory=dict)


@dataclass
class Row:
    stage: str
    name: str
    measure: Measure
    amount: float | None = None  # what the action processed, in `unit`, for the throughput
    unit: str = ""
    baseline: Measure | None = None
    baseline_name: str = ""
    ratio: float | None = None  # measured / baseline (CPU seconds unless the stage says otherwise)
    ratio_of: str = "cpu"
    target: str = ""
    met: bool | None = None


@dataclass
class Stage:
    name: str
    run: Callable[[Context], list[Row]]
    help: str
    default: bool


STAGES: dict[str, Stage] = {}


def stage(name: str, help: str, default: bool = True) -> Callable[[Callable[[Context], list[Row]]], Callable]:  # type: ignore[type-arg]
    """Register a stage; `default=False` stages run only when named (they take long)."""

    def register(run: Callable[[Context], list[Row]]) -> Callable[[Context], list[Row]]:
        STAGES[name] = Stage(name, run, help, default)
        return run

    return register


class Context:
    """What stages share: the work folder, the size of the run, and inputs built once."""

    def __init__(self, workdir: Path, quick: bool, fleet_jobs: int) -> None:
        self.workdir = workdir
        self.quick = quick
        self.fleet_jobs = fleet_jobs
        workdir.mkdir(parents=True, exist_ok=True)

    def fleet(self, jobs: int, seed: int = 5, name: str = "") -> Path:
        """A generated fleet (default profile) of `jobs` jobs, folders of .et files; built once."""
        folder = self.workdir / (name or f"fleet-{jobs}-{seed}")
        if not (folder / "tracekit_manifest.csv").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            from tracekit.generate import generate_fleet

            generate_fleet(folder, jobs, seed, "default")
        return folder

    def dataset(self, jobs: int) -> Path:
        """The fleet of `jobs` jobs, ingested; built once."""
        out = self.workdir / f"dataset-{jobs}"
        if not (out / "tracekit.duckdb").is_file():
            shutil.rmtree(out, ignore_errors=True)
            probe("ingest", {"paths": [str(self.fleet(jobs))], "out": str(out)})
        return out

    def fresh(self, name: str) -> Path:
        """An empty path in the work folder for an output (removed first)."""
        path = self.workdir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        return path


def probe(action: str, args: dict[str, Any]) -> Measure:
    """Run one action of bench.probe in a fresh process and read its figures."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.probe", action, json.dumps(args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench.probe {action} failed:\n{done.stderr[-3000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return Measure(figures.pop("wall"), figures.pop("cpu"), figures.pop("peak"), figures)


def ratio_row(
    stage_name: str,
    name: str,
    measure: Measure,
    baseline: Measure | None,
    baseline_name: str,
    *,
    amount: float | None = None,
    unit: str = "",
    of: str = "cpu",
    target: str = "",
    limit: float | None = None,
) -> Row:
    """A row with its ratio to the baseline; `limit` (for the ratio) says whether the target is met."""
    ratio = None
    if baseline is not None:
        top, bottom = (measure.wall, baseline.wall) if of == "wall" else (measure.cpu, baseline.cpu)
        ratio = top / bottom if bottom > 0 else None
    met = None if limit is None or ratio is None else ratio <= limit
    return Row(stage_name, name, measure, amount, unit, baseline, baseline_name, ratio, of, target, met)


def print_header() -> None:
    header = (
        f"{'stage':14s} {'measure':34s} {'wall s':>8s} {'cpu s':>8s} {'peak MiB':>9s} {'throughput':>18s}  "
        f"{'baseline (same run)':30s} {'base cpu s':>10s} {'ratio':>13s}  target"
    )
    print(header)
    print("-" * len(header), flush=True)


def print_rows(rows: list[Row]) -> None:
    for r in rows:
        m = r.measure
        cpu = f"{m.cpu:8.2f}" if m.cpu else f"{'':8s}"
        rate = f"{r.amount / m.wall:,.0f} {r.unit}/s" if r.amount and m.wall > 0 else ""
        base = f"{r.baseline.cpu:10.2f}" if r.baseline else f"{'':10s}"
        ratio = f"{r.ratio:6.2f}x {r.ratio_of:4s}" if r.ratio is not None else ""
        verdict = "" if r.met is None else (" (met)" if r.met else " (NOT met)")
        print(
            f"{r.stage:14s} {r.name:34s} {m.wall:8.2f} {cpu} {m.peak_mib:9.0f} {rate:>18s}  "
            f"{r.baseline_name:30s} {base} {ratio:>13s}  {r.target}{verdict}",
            flush=True,
        )

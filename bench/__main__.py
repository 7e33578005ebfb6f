"""`python -m bench [--quick] [--jobs N] [--workdir DIR] [stage ...]`: the benchmark suite.

Runs the named stages (default: every stage marked default), each printing its measures against a
baseline taken in the same run; `--quick` is a seconds-long smoke of the same code on a tiny fleet
(what `make check` runs, so the suite never rots). Inputs are generated into the work folder once
and reused by later runs (`--fresh` rebuilds them). `python -m bench --list` names the stages.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import bench.fabric  # noqa: F401 - registers its stages
import bench.fleet  # noqa: F401 - registers its stages
import bench.parsers  # noqa: F401 - registers its stages
import bench.replay_stages  # noqa: F401 - registers its stages
import bench.tools  # noqa: F401 - registers its stages
from bench.suite import STAGES, Context, print_header, print_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("stages", nargs="*", help="stages to run (default: every default stage)")
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke on a tiny fleet")
    parser.add_argument("--jobs", type=int, help="jobs in the generated fleet (default 1,000; 10 with --quick)")
    parser.add_argument("--workdir", type=Path, help="where inputs are built and kept (default: a folder in /tmp)")
    parser.add_argument("--fresh", action="store_true", help="rebuild the inputs in the work folder")
    parser.add_argument("--list", action="store_true", help="list the stages and exit")
    args = parser.parse_args(argv)
    if args.list:
        for s in STAGES.values():
            print(f"{s.name:12s} {'' if s.default else '(only when named) '}{s.help}")
        return 0
    unknown = [name for name in args.stages if name not in STAGES]
    if unknown:
        parser.error(f"no stage {', '.join(unknown)}; stages are {', '.join(STAGES)}")
    chosen = args.stages or [s.name for s in STAGES.values() if s.default]
    temporary = args.workdir is None and args.quick
    workdir = args.workdir or (
        Path(tempfile.mkdtemp(prefix="tracekit-bench-")) if args.quick else Path("/tmp/tracekit-bench")
    )
    if args.fresh:
        shutil.rmtree(workdir, ignore_errors=True)
    ctx = Context(workdir, args.quick, args.jobs or (10 if args.quick else 1000))
    print(f"tracekit bench: {platform.machine()}, {_cores()} cores, {_memory()}; work folder {workdir}")
    try:
        print_header()
        for name in chosen:
            print_rows(STAGES[name].run(ctx))  # stage by stage: a long run shows what it has measured
    finally:
        if temporary:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


def _memory() -> str:
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
        return f"{kib / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        return "memory unknown"


if __name__ == "__main__":
    sys.exit(main())

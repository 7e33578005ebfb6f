"""Benchmark of `tracekit generate`: jobs/s, and the ratio to a baseline measured in the same run.

Baseline: write the same files (same folders, names, sizes, record count) from one pre-serialized
Chakra Node repeated, through the same EtWriter: the cost of the file system and framing alone,
without drawing jobs or building nodes. ratio = generator time / baseline time (1.0 = the generator
costs nothing beyond writing its bytes).

    python bench/bench_generate.py                   # 400 jobs, default profile, 1 worker and all CPUs
    python bench/bench_generate.py --jobs 3000 --profile sample
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from tracekit.generate import generate_fleet
from tracekit.parsers import et_def_pb2
from tracekit.writers.chakra_et import EtWriter, comm_node


def baseline(src: Path, dst: Path) -> tuple[float, int, int]:
    """Write files shaped like those under `src` into `dst`; (seconds, files, bytes)."""
    shapes = [(p.relative_to(src), p.stat().st_size) for p in sorted(src.rglob("*.et"))]
    record = comm_node(1, "ddp_bucket_allreduce", "ALL_REDUCE", 26214400, "0", ctrl_deps=[0]).SerializeToString()
    header = et_def_pb2.GlobalMetadata(version="0.0.4").SerializeToString()
    framed = len(record) + 1
    started = time.perf_counter()
    total = 0
    for rel, size in shapes:
        path = dst / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with EtWriter(path) as writer:
            writer.write_raw(header)
            for _ in range(max(0, size - len(header) - 1) // framed):
                writer.write_raw(record)
        total += path.stat().st_size
    return time.perf_counter() - started, len(shapes), total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--profile", default="default")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench_generate_"))
    try:
        one = generate_fleet(root / "gen1", args.jobs, args.seed, args.profile, workers=1)
        base_s, base_files, base_bytes = baseline(root / "gen1", root / "base")
        many = generate_fleet(root / "genN", args.jobs, args.seed, args.profile, workers=args.workers)
        print(f"profile {args.profile}: {one.jobs} jobs, {one.files:,} rank files, {one.bytes / 2**20:,.1f} MiB")
        print(
            f"generator, 1 worker : {one.seconds:7.2f} s  {one.jobs_per_second:8.1f} jobs/s  "
            f"{one.files / one.seconds:9.0f} files/s"
        )
        print(
            f"baseline,  1 process: {base_s:7.2f} s  {base_files / base_s:9.0f} files/s  "
            f"({base_bytes / 2**20:,.1f} MiB of repeated records, same files)"
        )
        print(f"ratio generator/baseline (1 worker): {one.seconds / base_s:.2f}")
        print(f"generator, {args.workers} workers: {many.seconds:7.2f} s  {many.jobs_per_second:8.1f} jobs/s")
        print(f"30,000 jobs at this rate: ~{30_000 / many.jobs_per_second / 60:.1f} min (extrapolated)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Ingest throughput against baselines measured in the same run (the machines are shared and noisy).

    python bench/bench_ingest.py [--jobs 40] [--ranks 8] [--nodes 20000]

Writes a synthetic fleet of Chakra .et files, then times:
  baseline_read   reading and hashing every file (the floor: I/O + SHA-256),
  baseline_decode decoding every record with plain protobuf (what any ET reader must do),
  ingest_serial   `tracekit.ingest(..., workers=1)`,
  ingest_pool     `tracekit.ingest(...)` with the default process pool,
and prints MB/s, nodes/s and each ingest's ratio to the decode baseline.
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import shutil
import tempfile
import time
from pathlib import Path

from tracekit.ingest import ingest
from tracekit.parsers import et_def_pb2
from tracekit.parsers.chakra_et import decode_varint
from tracekit.writers.chakra_et import EtWriter, comm_node, comp_node


def write_fleet(root: Path, jobs: int, ranks: int, nodes: int) -> tuple[int, int]:
    total_nodes = 0
    for j in range(jobs):
        for r in range(ranks):
            path = root / f"job{j:04d}" / f"job{j:04d}.{r}.et"
            path.parent.mkdir(parents=True, exist_ok=True)
            with EtWriter(path) as w:
                w.write_metadata()
                for i in range(nodes):
                    if i % 10 == 9:
                        w.write_node(comm_node(i, f"allreduce_{i}", "ALL_REDUCE", 1 << 20, "0", ctrl_deps=[i - 1]))
                    else:
                        w.write_node(comp_node(i, f"gemm_{i}", 100, ctrl_deps=[i - 1] if i else []))
            total_nodes += nodes
    size = sum(p.stat().st_size for p in root.rglob("*.et"))
    return size, total_nodes


def baseline_read(root: Path) -> None:
    for path in root.rglob("*.et"):
        hashlib.sha256(path.read_bytes()).hexdigest()


def baseline_decode(root: Path) -> None:
    for path in root.rglob("*.et"):
        data = path.read_bytes()
        pos, first = 0, True
        while pos < len(data):
            length, pos = decode_varint(data, pos)
            message = et_def_pb2.GlobalMetadata() if first else et_def_pb2.Node()
            message.ParseFromString(data[pos : pos + length])
            pos += length
            first = False


def timed(label: str, fn, size: int, nodes: int) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    print(f"{label:16s} {seconds:7.2f} s  {size / seconds / 1e6:7.1f} MB/s  {nodes / seconds / 1e3:8.1f} k nodes/s")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--nodes", type=int, default=20_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tracekit-bench-"))
    try:
        size, nodes = write_fleet(work / "fleet", args.jobs, args.ranks, args.nodes)
        print(f"fleet: {args.jobs} jobs x {args.ranks} ranks, {nodes:,} nodes, {size / 1e6:.1f} MB")
        timed("baseline_read", lambda: baseline_read(work / "fleet"), size, nodes)
        decode = timed("baseline_decode", lambda: baseline_decode(work / "fleet"), size, nodes)
        serial = timed("ingest_serial", lambda: ingest([work / "fleet"], work / "serial", workers=1), size, nodes)
        pool = timed("ingest_pool", lambda: ingest([work / "fleet"], work / "pool"), size, nodes)
        print(f"ratio ingest_serial / baseline_decode: {serial / decode:.2f}x the time")
        print(f"ratio ingest_pool   / baseline_decode: {pool / decode:.2f}x the time")
        print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Write a synthetic fleet: per-rank Chakra .et files per job plus `tracekit_manifest.csv`.

Layout of OUT:

    tracekit_manifest.csv            job_id, path, label, started_at (+ class, model, world_size)
    (with archive=True: job-000000.tgz per job, members job-000000/job-000000.<rank>.et)
    profile.toml                     the profile the fleet was drawn from (exactly as used)
    job-000000/job-000000.0.et ...   one file per rank, `<job>.<rank>.et`
    (with trace_format="pytorch-et": job-000000/job-000000.0.json.gz ..., PyTorch Execution Trace
    JSON of the same nodes, gzip-compressed; see EtJsonRankTrace in traces.py)

`tracekit ingest OUT` picks the manifest up by itself, so each job keeps its name, label
('class:model') and start date. Jobs are written by a process pool; a job's content depends only
on (seed, job index, profile), so the output is identical for any number of workers. The manifest
is written as jobs finish, in job order, and nothing else is kept: memory does not grow with N.
"""

from __future__ import annotations

import csv
import os
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit import interrupts
from tracekit.errors import InputError, OutputError
from tracekit.generate.jobs import JobSpec, draw_job
from tracekit.generate.profile import Profile, load_profile, write_profile
from tracekit.generate.rank_trace import ET_VERSION
from tracekit.generate.traces import rank_documents, rank_records
from tracekit.ingest.discover import MANIFEST_NAME

MANIFEST_COLUMNS = ["job_id", "path", "label", "started_at", "class", "model", "world_size"]
# Per-rank file formats: Chakra .et (default) or PyTorch Execution Trace JSON (.json.gz).
TRACE_FORMATS = ("chakra", "pytorch-et")


@dataclass
class FleetSummary:
    out: Path
    jobs: int = 0
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    classes: Counter[str] = field(default_factory=Counter)
    world_sizes: Counter[int] = field(default_factory=Counter)

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / self.seconds if self.seconds else 0.0


_PROFILE: Profile | None = None


def _init(profile: Profile) -> None:
    global _PROFILE
    _PROFILE = profile


def write_job(
    profile: Profile,
    seed: int,
    index: int,
    jobs: int,
    out: Path,
    archive: bool = False,
    trace_format: str = "chakra",
) -> tuple[dict[str, Any], int, int]:
    """Write job `index` of a `jobs`-job fleet under `out`; (manifest row, files, bytes written).

    `archive`: one `<job>.tgz` holding the rank files instead of a folder (ingest reads archives
    in memory; gzip and tar timestamps are fixed, so the bytes are deterministic).
    `trace_format`: "chakra" (`<job>.<rank>.et`) or "pytorch-et" (`<job>.<rank>.json.gz`).
    """
    if trace_format not in TRACE_FORMATS:
        raise InputError(f"unknown trace format {trace_format!r}; choose one of {', '.join(TRACE_FORMATS)}")
    import gzip
    import io
    import tarfile

    from tracekit.parsers import et_def_pb2
    from tracekit.writers.chakra_et import EtWriter

    spec: JobSpec = draw_job(profile, seed, index, jobs)
    cache: dict[tuple[Any, ...], bytes] = {}
    header = et_def_pb2.GlobalMetadata(version=ET_VERSION).SerializeToString()
    total = 0
    files = 0
    tar_buffer = io.BytesIO()
    tar = tarfile.open(fileobj=tar_buffer, mode="w", format=tarfile.USTAR_FORMAT) if archive else None
    folder = out / spec.job_id
    if not archive:
        folder.mkdir(parents=True, exist_ok=True)
    if trace_format == "pytorch-et":
        from tracekit.writers import pytorch_et

        for rank, doc in rank_documents(spec, profile):
            data = pytorch_et.compress(pytorch_et.dumps(doc), compresslevel=3)  # level 6: 2x time, -25% size
            name = f"{spec.job_id}.{rank}.json.gz"
            if tar is not None:
                info = tarfile.TarInfo(f"{spec.job_id}/{name}")
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
            else:
                (folder / name).write_bytes(data)
            total += len(data)
            files += 1
    else:
        for rank, records in rank_records(spec, profile, cache):
            name = f"{spec.job_id}.{rank}.et"
            if tar is not None:
                buffer = io.BytesIO()
                with EtWriter(buffer) as writer:
                    _write_records(writer, header, records)
                data = buffer.getvalue()
                info = tarfile.TarInfo(f"{spec.job_id}/{name}")
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
                total += len(data)
            else:
                with EtWriter(folder / name) as writer:
                    _write_records(writer, header, records)
                total += _framed_size(header) + sum(_framed_size(r) for r in records)
            files += 1
    path = spec.job_id
    if tar is not None:
        tar.close()
        path = f"{spec.job_id}.tgz"
        packed = gzip.compress(tar_buffer.getvalue(), compresslevel=9, mtime=0)
        (out / path).write_bytes(packed)
        total = len(packed)
    row = {
        "job_id": spec.job_id,
        "path": path,
        "label": spec.label,
        "started_at": spec.started_at.isoformat(),
        "class": spec.cls,
        "model": spec.model,
        "world_size": spec.world_size,
    }
    return row, files, total


def _write_records(writer: Any, header: bytes, records: list[bytes]) -> None:
    writer.write_raw(header)
    for payload in records:
        writer.write_raw(payload)


def _framed_size(payload: bytes) -> int:
    n = len(payload)
    prefix = 1
    while n >= 0x80:
        n >>= 7
        prefix += 1
    return prefix + len(payload)


def _work(args: tuple[int, int, int, str, bool, str]) -> tuple[dict[str, Any], int, int]:
    seed, index, jobs, out, archive, trace_format = args
    assert _PROFILE is not None
    return write_job(_PROFILE, seed, index, jobs, Path(out), archive, trace_format)


def generate_fleet(
    out: str | Path,
    jobs: int,
    seed: int = 0,
    profile: str | Path | Profile = "default",
    *,
    workers: int | None = None,
    archive: bool = False,
    trace_format: str = "chakra",
    progress: Callable[[int], None] | None = None,
) -> FleetSummary:
    """Write `jobs` jobs drawn from `profile` (a name, a TOML path or a loaded profile) into `out`.

    `workers`: processes (default: CPU count); the output does not depend on it. `archive`: one
    .tgz per job instead of a folder of rank files (small, few files: used for sample_traces/).
    `trace_format`: "chakra" writes `<job>.<rank>.et`; "pytorch-et" writes, instead, PyTorch
    Execution Trace JSON `<job>.<rank>.json.gz` of the same nodes (ingest gives the same collectives).
    """
    if jobs <= 0:
        raise InputError("jobs must be positive")
    if trace_format not in TRACE_FORMATS:
        raise InputError(f"unknown trace format {trace_format!r}; choose one of {', '.join(TRACE_FORMATS)}")
    prof = profile if isinstance(profile, dict) else load_profile(profile)
    out = Path(out)
    try:
        return _write_fleet(out, jobs, seed, prof, workers, archive, trace_format, progress)
    except OSError as exc:  # in this process or a writer's
        raise OutputError.of(exc, out) from exc


def _write_fleet(
    out: Path,
    jobs: int,
    seed: int,
    prof: Profile,
    workers: int | None,
    archive: bool,
    trace_format: str,
    progress: Callable[[int], None] | None,
) -> FleetSummary:
    out.mkdir(parents=True, exist_ok=True)
    if (out / MANIFEST_NAME).exists():
        raise InputError(f"{out} already holds a fleet ({MANIFEST_NAME}); choose an empty folder")
    write_profile(prof, out / "profile.toml")
    summary = FleetSummary(out)
    started = time.perf_counter()
    workers = workers if workers is not None else min(os.cpu_count() or 1, 8)
    tasks = ((seed, i, jobs, str(out), archive, trace_format) for i in range(jobs))
    with open(out / MANIFEST_NAME, "w", newline="") as f:
        manifest = csv.DictWriter(f, MANIFEST_COLUMNS)
        manifest.writeheader()
        if workers <= 1 or jobs < 4:
            _init(prof)
            results: Any = map(_work, tasks)
            _consume(results, manifest, summary, progress)
        else:
            from tracekit.executors import worker_context

            with ExitStack() as stack:
                # A Ctrl-C while the pool starts its writers waits until the pool is whole and stopping
                # it is this block's business (a writer left starting would print a traceback).
                with interrupts.blocked():
                    pool = stack.enter_context(worker_context().Pool(workers, initializer=_init, initargs=(prof,)))
                _consume(pool.imap(_work, tasks, chunksize=4), manifest, summary, progress)
    summary.seconds = time.perf_counter() - started
    return summary


def _consume(results: Any, manifest: csv.DictWriter, summary: FleetSummary, progress: Any) -> None:
    for row, files, size in results:
        manifest.writerow(row)
        summary.jobs += 1
        summary.files += files
        summary.bytes += size
        summary.classes[row["class"]] += 1
        summary.world_sizes[row["world_size"]] += 1
        if progress:
            progress(summary.jobs)

"""Find trace files under the paths given to `ingest` and assign each to a job.

Rules, in order:
- `--job NAME` puts every file of the invocation in job NAME.
- A manifest (`--manifest FILE`, or a `tracekit_manifest.csv` found in a folder being ingested, which
  applies to the files below it) maps files, folders and archives (paths relative to the manifest)
  to jobs, labels and start times.
- Otherwise a folder is a job: files are grouped by the folder that holds them, named by its path
  relative to the folder given (the given folder's own name for files directly in it); an archive
  (tar, tgz) is one job named after the archive.
Archives are read in memory and never extracted; members with absolute or `..` paths, links and
devices are refused, not written anywhere.
"""

from __future__ import annotations

import csv
import io
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from tracekit.errors import InputError
from tracekit.parsers.base import TraceError
from tracekit.sources import BoundedReader, inflate_limit

MANIFEST_NAME = "tracekit_manifest.csv"
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
TRACE_SUFFIXES = (".et", ".et.gz", ".json", ".json.gz", ".pb", ".pb.gz", ".gz") + ARCHIVE_SUFFIXES


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    source: str
    label: str | None = None
    started_at: datetime | None = None


@dataclass
class InputFile:
    """One trace file to ingest: on disk (`path`) or an archive member held in memory (`data`)."""

    job: JobInfo
    display: str
    name: str
    path: Path | None = None
    data: bytes | None = None
    error: str | None = None  # set when the file was refused before parsing


@dataclass
class ManifestEntry:
    job: JobInfo
    target: Path


@dataclass
class Manifest:
    path: Path
    entries: list[ManifestEntry] = field(default_factory=list)
    _by_target: dict[Path, JobInfo] = field(default_factory=dict, repr=False)

    def add(self, entry: ManifestEntry) -> None:
        self.entries.append(entry)
        self._by_target[entry.target] = entry.job

    def job_for(self, file: Path) -> JobInfo | None:
        """The job of the most specific entry naming `file` or a folder above it.

        A walk up the file's own path, so a fleet manifest of many jobs costs the same per file.
        """
        for candidate in (file, *file.parents):
            job = self._by_target.get(candidate)
            if job is not None:
                return job
        return None


def is_archive(name: str) -> bool:
    return name.endswith(ARCHIVE_SUFFIXES)


def looks_like_trace(name: str) -> bool:
    """Files picked up when walking folders; files named on the command line are always tried."""
    return not name.startswith(".") and name != MANIFEST_NAME and name.endswith(TRACE_SUFFIXES)


def archive_stem(name: str) -> str:
    for suffix in (".tar.gz", ".tgz", ".tar"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _parse_time(text: str, where: str) -> datetime | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InputError(f"{where}: started_at {text!r} is not an ISO date/time") from exc
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def read_manifest(path: Path) -> Manifest:
    """Read a manifest CSV: columns job_id and path required; label, started_at optional."""
    manifest = Manifest(path)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = {"job_id", "path"} - set(reader.fieldnames or [])
        if missing:
            raise InputError(f"{path}: manifest lacks column(s) {', '.join(sorted(missing))}")
        for line, row in enumerate(reader, start=2):
            where = f"{path} line {line}"
            job_id = (row.get("job_id") or "").strip()
            target = (row.get("path") or "").strip()
            if not job_id or not target:
                raise InputError(f"{where}: job_id and path must not be empty")
            job = JobInfo(
                job_id=job_id,
                source=str(path),
                label=(row.get("label") or "").strip() or None,
                started_at=_parse_time(row.get("started_at") or "", where),
            )
            manifest.add(ManifestEntry(job, (path.parent / target).resolve()))
    return manifest


def discover(
    paths: list[Path], job: str | None = None, label: str | None = None, manifest: Path | None = None
) -> Iterator[InputFile]:
    """Every input file under `paths`, with its job. Archive members come with their bytes."""
    explicit = read_manifest(manifest) if manifest else None
    for root in paths:
        if not root.exists():
            info = JobInfo(job or root.name, str(root), label)
            yield InputFile(info, str(root), root.name, error=f"{root}: no such file or folder")
            continue
        if root.is_dir():
            files = sorted(p for p in root.rglob("*") if p.is_file())
            manifests = {p.parent: read_manifest(p) for p in files if p.name == MANIFEST_NAME}
            for file in files:
                if not looks_like_trace(file.name):
                    continue
                local = explicit or _nearest(manifests, file, root)
                folder = file.parent.relative_to(root).parts
                yield from _expand(file, _job_for(file, folder, root.resolve().name, job, label, local))
        else:
            yield from _expand(root, _job_for(root, (), root.resolve().parent.name, job, label, explicit))


def _nearest(manifests: dict[Path, Manifest], file: Path, root: Path) -> Manifest | None:
    """The manifest in the closest folder above `file`, up to `root`."""
    for folder in file.parents:
        if folder in manifests:
            return manifests[folder]
        if folder == root:
            break
    return None


def _job_for(
    file: Path,
    folder: tuple[str, ...],
    top: str,
    job: str | None,
    label: str | None,
    manifest: Manifest | None,
) -> JobInfo:
    """The job of `file`: `folder` is its folder below the path given, `top` that path's name."""
    if job:
        return JobInfo(job, str(file.parent), label)
    if manifest:
        found = manifest.job_for(file.resolve())
        if found:
            return found if label is None else JobInfo(found.job_id, found.source, label, found.started_at)
    if is_archive(file.name):
        # An archive is a job of its own, named within the folder that holds it.
        return JobInfo(str(PurePosixPath(*folder, archive_stem(file.name))), str(file), label)
    return JobInfo(str(PurePosixPath(*folder)) if folder else top, str(file.parent), label)


def _expand(path: Path, job: JobInfo) -> Iterator[InputFile]:
    display = str(path)
    if is_archive(path.name):
        yield from read_archive(path, display, job)
    else:
        yield InputFile(job, display, path.name, path=path)


def read_archive(path: Path, display: str, job: JobInfo) -> Iterator[InputFile]:
    """Members of a tar/tgz archive, read in memory in one pass, inflation bounded."""
    try:
        raw = open(path, "rb")
    except OSError as exc:
        yield InputFile(job, display, path.name, error=f"{display}: cannot open ({exc.strerror})")
        return
    with raw:
        stream = io.BufferedReader(BoundedReader(raw, inflate_limit(path.stat().st_size)))
        try:
            with tarfile.open(fileobj=stream, mode="r|*") as tar:
                for member in tar:
                    yield from _member(tar, member, display, job)
        except TraceError as exc:
            yield InputFile(job, display, path.name, error=exc.describe(display))
        except (tarfile.TarError, EOFError, OSError) as exc:
            yield InputFile(job, display, path.name, error=f"{display}: corrupt or truncated archive ({exc})")


def _member(tar: tarfile.TarFile, member: tarfile.TarInfo, display: str, job: JobInfo) -> Iterator[InputFile]:
    name = member.name
    member_display = f"{display}!{name}"
    base = PurePosixPath(name).name
    if member.isdir():
        return
    if name.startswith("/") or ".." in PurePosixPath(name).parts:
        yield InputFile(
            job,
            member_display,
            base,
            error=f"{member_display}: archive member has an absolute or '..' path; refused",
        )
        return
    if not member.isfile():
        return  # links, devices, fifos: never followed
    if not looks_like_trace(base):
        return
    extracted = tar.extractfile(member)
    data = extracted.read() if extracted else b""
    yield InputFile(job, member_display, base, data=data)

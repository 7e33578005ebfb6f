"""Find trace files under the paths given to `ingest` and assign each to a job.

Rules, in order:
- `--job NAME` puts every file of the invocation in job NAME.
- A manifest (`--manifest FILE`, or a `tracekit_manifest.csv` found in a folder being ingested, which
  applies to the files below it) maps files, folders and archives (paths relative to the manifest)
  to jobs, labels and start times.
- Otherwise a folder is a job: files are grouped by the folder that holds them, named by its path
  relative to the folder given (the given folder's own name for files directly in it); an archive
  (tar, tgz) is one job named after the archive.
The id a job finally gets in the dataset is decided later, against the jobs the dataset holds
(tracekit.ingest.identity); discovery only says where each file comes from.

Discovery comes first and yields small records (the progress bar then knows the total): files on
disk are not opened, and archive members are listed without keeping their bytes, which
`with_data` reads again, one archive at a time, as the files are handed to the parsers.
Archives are read in memory and never extracted; members with absolute or `..` paths, links and
devices are refused, not written anywhere.
"""

from __future__ import annotations

import csv
import io
import os
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from tracekit.errors import InputError
from tracekit.parsers.base import TraceError
from tracekit.parsers.formats import named_by_pattern, suffixes
from tracekit.sources import BoundedReader, inflate_limit

MANIFEST_NAME = "tracekit_manifest.csv"
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
# Besides the endings every parser declares (tracekit.parsers.formats): protobuf and gzip files of any
# name, and archives.
TRACE_SUFFIXES = (".et", ".et.gz", ".json", ".json.gz", ".pb", ".pb.gz", ".gz") + ARCHIVE_SUFFIXES

# How a job was named: by --job, by a manifest, by the folder holding its files, by its archive.
EXPLICIT, MANIFEST, FOLDER, ARCHIVE = "job", "manifest", "folder", "archive"


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    source: str  # the folder, archive or manifest the job comes from (resolved path)
    label: str | None = None
    started_at: datetime | None = None
    kind: str = FOLDER
    # For an archive job: the job its folder would be, and that folder (to join the host and device
    # archives of one run: see tracekit.ingest.identity).
    parent_id: str | None = None
    parent_source: str | None = None


@dataclass(slots=True)
class InputFile:
    """One trace file to ingest: a file on disk, or a member of the archive at `path`."""

    job: JobInfo
    display: str
    name: str
    path: str | None = None  # the file, or the archive holding it (a string: a million Paths cost ~0.5 GB)
    member: str | None = None  # set for archive members; their bytes are read by `with_data`
    size: int | None = None  # in bytes, when discovery learned it (None: ask the file system)
    data: bytes | None = None
    error: str | None = None  # set when the file was refused before parsing
    seq: int = 0  # position in discovery order


@dataclass
class ManifestEntry:
    job: JobInfo
    target: Path
    line: int
    matched: bool = False


@dataclass
class Manifest:
    path: Path
    entries: list[ManifestEntry] = field(default_factory=list)
    _by_target: dict[str, ManifestEntry] = field(default_factory=dict, repr=False)
    # The entry each folder's files fall under (None: none), found once per folder.
    _by_folder: dict[str, ManifestEntry | None] = field(default_factory=dict, repr=False)

    def add(self, entry: ManifestEntry) -> None:
        self.entries.append(entry)
        self._by_target[str(entry.target)] = entry

    def job_for(self, file: Path | str) -> JobInfo | None:
        """The job of the most specific entry naming `file` (a resolved path) or a folder above it.

        A walk up the file's own path, done once per folder, so a fleet manifest of many jobs costs
        the same per file.
        """
        path = str(file)
        entry = self._by_target.get(path)
        if entry is None:
            entry = self._folder_entry(os.path.dirname(path))
        if entry is None:
            return None
        entry.matched = True
        return entry.job

    def _folder_entry(self, folder: str) -> ManifestEntry | None:
        if folder not in self._by_folder:
            entry = self._by_target.get(folder)
            parent = os.path.dirname(folder)
            if entry is None and parent != folder:
                entry = self._folder_entry(parent)
            self._by_folder[folder] = entry
        return self._by_folder[folder]


@dataclass
class Discovery:
    """What `discover` found: the files, the paths that do not exist, manifest rows matching nothing."""

    files: list[InputFile] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def is_archive(name: str) -> bool:
    return name.endswith(ARCHIVE_SUFFIXES)


def looks_like_trace(name: str) -> bool:
    """Files picked up when walking folders; files named on the command line are always tried."""
    if name.startswith(".") or name == MANIFEST_NAME:
        return False
    return name.endswith(TRACE_SUFFIXES + suffixes()) or named_by_pattern(name)


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
    source = str(path.resolve())
    try:
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
                    source=source,
                    label=(row.get("label") or "").strip() or None,
                    started_at=_parse_time(row.get("started_at") or "", where),
                    kind=MANIFEST,
                )
                manifest.add(ManifestEntry(job, (path.parent / target).resolve(), line))
    except FileNotFoundError as exc:
        raise InputError(f"{path}: no such manifest file") from exc
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(f"{path}: cannot read the manifest ({reason})") from exc
    return manifest


def discover(
    paths: Iterable[Path], job: str | None = None, label: str | None = None, manifest: Path | None = None
) -> Discovery:
    """Every input file under `paths`, with the job it comes from. Archive members are listed, not read.

    A path given twice (or a file inside a folder also given) is read once. Raises InputError for a
    manifest that cannot be read.
    """
    found = Discovery()
    explicit = read_manifest(manifest) if manifest else None
    manifests = [explicit] if explicit else []
    seen: set[tuple[str, str | None]] = set()
    roots = list(paths)
    for root in roots:
        if not root.exists():
            found.errors.append(f"{root}: no such file or folder")
            continue
        resolved = root.resolve()
        if root.is_dir():
            walk = _FolderWalk(root, resolved, job, label, explicit, found, seen if len(roots) > 1 else None)
            walk.folder(str(resolved), (), explicit)
            manifests += [m for _, m in sorted(walk.manifests, key=lambda km: km[0])]
        else:
            where = Where(root, resolved, (), resolved.parent.name)
            _add(found, seen, where, _job_for(where, job, label, explicit))
    found.warnings += _unmatched(manifests, [r.resolve() for r in roots if r.exists()])
    return found


@dataclass(frozen=True)
class Where:
    """A file found: as given, resolved, its folder below the path given, and that path's name."""

    given: Path
    resolved: Path
    folder: tuple[str, ...]
    top: str


class _FolderWalk:
    """The files under one folder given to `discover`, in the order of their sorted paths.

    A depth-first walk with each folder's entries sorted by name gives the files in the order that
    sorting their paths would (component by component), without sorting them all at the end; the
    job of a folder's files is worked out once per folder. Symbolic links to files are followed,
    links to folders are not (as `Path.rglob` does).
    """

    def __init__(
        self,
        root: Path,
        resolved: Path,
        job: str | None,
        label: str | None,
        explicit: Manifest | None,
        found: Discovery,
        seen: set[tuple[str, str | None]] | None,
    ) -> None:
        self.root = root
        # Paths below the root are shown as `root / parts` shows them ("a/b.et" under ".").
        self.prefix = "" if str(root) == "." else os.path.join(str(root), "")
        self.top = resolved.name
        self.job = job
        self.label = label
        self.explicit = explicit
        self.found = found
        # The files found so far, to read a file once when paths overlap; None for the only path
        # given (one walk lists each file once): a fleet's million paths are not kept twice.
        self.seen = seen
        # Manifests found below the root, each with its file's path parts (the order they sort in).
        self.manifests: list[tuple[tuple[str, ...], Manifest]] = []
        self.labelled: dict[JobInfo, JobInfo] = {}  # a manifest's job -> the same with --label

    def folder(self, resolved: str, parts: tuple[str, ...], manifest: Manifest | None) -> None:
        given = self.prefix + "/".join(parts) if parts else str(self.root)
        try:
            with os.scandir(given) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            return  # unreadable folders are skipped, as Path.rglob skips them
        if any(e.name == MANIFEST_NAME and e.is_file() for e in entries):
            local = read_manifest(Path(given) / MANIFEST_NAME)  # read (and checked) even under --manifest
            if self.explicit is None:
                manifest = local
                self.manifests.append(((*parts, MANIFEST_NAME), local))
        folder_job: JobInfo | None = None
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                self.folder(os.path.join(resolved, entry.name), (*parts, entry.name), manifest)
            elif looks_like_trace(entry.name) and entry.is_file():
                display = self.prefix + "/".join((*parts, entry.name))
                file = os.path.join(resolved, entry.name)
                if is_archive(entry.name):
                    where = Where(Path(display), Path(file), parts, self.top)
                    _add(self.found, self.seen, where, _job_for(where, self.job, self.label, manifest))
                    continue
                # A fleet's folders hold many files: one Where per folder, not per file.
                job = self._listed(manifest, file) if manifest is not None and not self.job else None
                if job is None:
                    if folder_job is None:
                        where = Where(Path(display), Path(file), parts, self.top)
                        folder_job = _job_for(where, self.job, self.label, None)
                    job = folder_job
                if self.seen is None or (file, None) not in self.seen:
                    if self.seen is not None:
                        self.seen.add((file, None))
                    self.found.files.append(InputFile(job, display, entry.name, display, size=_size(entry)))

    def _listed(self, manifest: Manifest, file: str) -> JobInfo | None:
        """The job the manifest gives `file`, with the run's --label if one was given."""
        job = manifest.job_for(file)
        if job is None or self.label is None:
            return job
        if job not in self.labelled:
            self.labelled[job] = JobInfo(job.job_id, job.source, self.label, job.started_at, MANIFEST)
        return self.labelled[job]


def _size(entry: os.DirEntry[str]) -> int | None:
    try:
        return entry.stat().st_size
    except OSError:
        return None


def _add(found: Discovery, seen: set[tuple[str, str | None]] | None, where: Where, job: JobInfo) -> None:
    seen = set() if seen is None else seen  # an archive may name a member twice
    for item in _expand(where.given, job):
        key = (str(where.resolved), item.member)
        if key not in seen:
            seen.add(key)
            found.files.append(item)


def _unmatched(manifests: list[Manifest], roots: list[Path]) -> list[str]:
    """One warning per manifest row that matched no file: its path is missing or holds no trace.

    Rows of an explicit manifest naming places outside the paths given are not part of the run.
    """
    warnings = []
    for manifest in manifests:
        for entry in manifest.entries:
            if entry.matched:
                continue
            where = f"{manifest.path} line {entry.line}"
            if not entry.target.exists():
                warnings.append(f"{where}: {entry.target} does not exist; job {entry.job.job_id} gets no files from it")
            elif any(entry.target == r or r in entry.target.parents or entry.target in r.parents for r in roots):
                warnings.append(f"{where}: {entry.target} holds no trace file; job {entry.job.job_id} gets none")
    return warnings


def _job_for(where: Where, job: str | None, label: str | None, manifest: Manifest | None) -> JobInfo:
    """The job of a file found at `where`."""
    folder_source = str(where.resolved.parent)
    if job:
        return JobInfo(job, folder_source, label, kind=EXPLICIT)
    if manifest:
        found = manifest.job_for(where.resolved)
        if found:
            return found if label is None else JobInfo(found.job_id, found.source, label, found.started_at, MANIFEST)
    if is_archive(where.given.name):
        # An archive is a job of its own, named within the folder that holds it.
        return JobInfo(
            str(PurePosixPath(*where.folder, archive_stem(where.given.name))),
            str(where.resolved),
            label,
            kind=ARCHIVE,
            parent_id=str(PurePosixPath(*where.folder)) if where.folder else where.top,
            parent_source=folder_source,
        )
    return JobInfo(str(PurePosixPath(*where.folder)) if where.folder else where.top, folder_source, label)


def _expand(path: Path, job: JobInfo) -> Iterator[InputFile]:
    display = str(path)
    if is_archive(path.name):
        yield from list_archive(display, display, job)
    else:
        yield InputFile(job, display, path.name, path=display)


class _Archive:
    """A tar/tgz archive opened for one streaming pass, inflation bounded; closes its file too."""

    def __init__(self, path: str) -> None:
        raw = open(path, "rb")
        self.stream = io.BufferedReader(BoundedReader(raw, inflate_limit(os.fstat(raw.fileno()).st_size)))
        try:
            self.tar = tarfile.open(fileobj=self.stream, mode="r|*")
        except BaseException:
            self.stream.close()
            raise

    def close(self) -> None:
        try:
            self.tar.close()
        finally:
            self.stream.close()


def list_archive(path: str, display: str, job: JobInfo) -> Iterator[InputFile]:
    """The trace members of a tar/tgz archive, in one streaming pass, without their bytes."""
    name = os.path.basename(path)
    try:
        archive = _Archive(path)
    except (TraceError, tarfile.TarError, EOFError) as exc:
        yield InputFile(job, display, name, path=path, error=_archive_error(display, exc))
        return
    except OSError as exc:
        yield InputFile(job, display, name, path=path, error=f"{display}: cannot open ({exc.strerror or exc})")
        return
    try:
        for member in archive.tar:
            item = _member(member, path, display, job)
            if item is not None:
                yield item
    except (TraceError, tarfile.TarError, EOFError, OSError) as exc:
        yield InputFile(job, display, name, path=path, error=_archive_error(display, exc))
    finally:
        archive.close()


def _archive_error(display: str, exc: BaseException) -> str:
    if isinstance(exc, TraceError):
        return exc.describe(display)
    return f"{display}: corrupt or truncated archive ({exc})"


def _member(member: tarfile.TarInfo, path: str, display: str, job: JobInfo) -> InputFile | None:
    name = member.name
    member_display = f"{display}!{name}"
    base = PurePosixPath(name).name
    if member.isdir():
        return None
    if name.startswith("/") or ".." in PurePosixPath(name).parts:
        return InputFile(
            job,
            member_display,
            base,
            path=path,
            member=name,
            error=f"{member_display}: archive member has an absolute or '..' path; refused",
        )
    if not member.isfile() or not looks_like_trace(base):
        return None  # links, devices, fifos: never followed
    return InputFile(job, member_display, base, path=path, member=name, size=member.size)


def with_data(items: Iterable[InputFile]) -> Iterator[InputFile]:
    """The same records, archive members now holding their bytes: each archive is streamed once
    more, in order, and only the member being handed over is in memory."""
    reader: _ArchiveReader | None = None
    try:
        for item in items:
            if item.member is None or item.error is not None or item.path is None:
                yield item
                continue
            if reader is None or reader.path != item.path:
                if reader is not None:
                    reader.close()
                reader = _ArchiveReader(item.path)
            try:
                item.data = reader.read(item.member)
            except (TraceError, tarfile.TarError, EOFError, OSError) as exc:
                item.error = _archive_error(item.display, exc)
            yield item
            item.data = None  # handed over: do not keep it alive in the discovery list
    finally:
        if reader is not None:
            reader.close()


class _ArchiveReader:
    """Reads members of one archive in the order they were listed, re-opening it if asked to go back."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.archive: _Archive | None = None
        self.members: Iterator[tarfile.TarInfo] = iter(())

    def read(self, name: str) -> bytes:
        for attempt in range(2):
            if self.archive is None or attempt:
                self.close()
                self.archive = _Archive(self.path)
                self.members = iter(self.archive.tar)
            for member in self.members:
                if member.name == name and member.isfile():
                    extracted = self.archive.tar.extractfile(member)
                    return extracted.read() if extracted else b""
        raise tarfile.TarError(f"member {name} is gone: the archive changed while being read")

    def close(self) -> None:
        if self.archive is not None:
            self.archive.close()
            self.archive = None

"""Interleaved NCCL INFO logs split into one file per process (`tracekit split-log`).

`mpirun ... 2>&1 | tee run.log` writes every rank's NCCL lines into one file. The dataset holds one
rank per file, so the ingest reads such a log's lowest rank and says how many lines of the others it
left. Split by the process that printed each line (the `host:pid` of NCCL's prefix, by the reader's
own rule: tracekit.parsers.nccl_collectives.process_of), the log becomes the files NCCL writes with
NCCL_DEBUG_FILE=%h.%p, one per process, which `tracekit ingest` reads as one job.

Streamed in one pass and bounded: a line is read MAX_LINE bytes at a time and written whole to the
process its start names; at most MAX_PROCESSES processes get a file (the lines of more are counted,
not written) and at most MAX_OPEN files are open at once. Lines no NCCL process printed (a
launcher's, Python's) are counted, not written. The files are written into a folder beside OUT and
moved into OUT when every log is read, so an interrupted or failed split leaves OUT as it was.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tracekit.errors import InputError, OutputError, TraceError
from tracekit.parsers.nccl_collectives import MAX_LINE, process_of
from tracekit.sources import source_for

MAX_PROCESSES = 1 << 16  # a 65,536-GPU job, one process per GPU
MAX_OPEN = 128  # output files open at once; others are closed and reopened to append
_CHUNK = 1 << 20
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass
class Split:
    """What `split_log` wrote: a file per process, and the lines it did not write."""

    out: Path
    lines: dict[str, int] = field(default_factory=dict)  # file name in `out` -> lines written
    other_lines: int = 0  # lines no NCCL process printed
    over_lines: int = 0  # lines of processes beyond MAX_PROCESSES
    logs: int = 0  # logs split
    errors: list[str] = field(default_factory=list)  # one line per log not split


def file_name(host: str, pid: str) -> str:
    """`host-pid123.nccl.log`: a name the ingest picks up as an NCCL log, safe whatever the host says."""
    return f"{_UNSAFE.sub('_', host)[:64] or '_'}-pid{pid}.nccl.log"


class _Files:
    """The output files, appended to, at most MAX_OPEN of them open."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.open: OrderedDict[str, IO[bytes]] = OrderedDict()

    def write(self, name: str, data: bytes) -> None:
        f = self.open.get(name)
        if f is None:
            if len(self.open) >= MAX_OPEN:
                self.open.popitem(last=False)[1].close()
            f = self.open[name] = open(self.folder / name, "ab")  # noqa: SIM115 - closed by close()
        else:
            self.open.move_to_end(name)
        f.write(data)

    def close(self) -> None:
        while self.open:
            self.open.popitem()[1].close()


def split_log(logs: list[Path], out: Path) -> Split:
    """Split the NCCL INFO logs `logs` into OUT/<host>-pid<pid>.nccl.log, one per process (module
    docstring). OUT must not exist or be empty. A log that cannot be read or holds no NCCL line is
    one line of `errors`, and the others are split; InputError for a missing log, an OUT that holds
    files, or no log split at all; OutputError when OUT cannot be written."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"{out}: exists and is not an empty folder: name a new one")
    for log in logs:
        if Path(log).is_dir():
            raise InputError(f"{log}: is a folder: name its log files")
        if not Path(log).is_file():
            raise InputError(f"{log}: no such file")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.split-", dir=out.parent))
    except OSError as exc:
        raise OutputError(f"{out}: cannot write ({exc.strerror})") from exc
    try:
        split = Split(out)
        files = _Files(work)
        try:
            for log in logs:
                _split_one(Path(log), files, split)
        finally:
            files.close()
        if not split.logs:
            raise InputError(
                "; ".join(split.errors[:3])
                + (f" (and {len(split.errors) - 3:,} more)" if len(split.errors) > 3 else "")
            )
        _publish(work, out)
        return split
    except OSError as exc:
        raise OutputError(f"{out}: cannot write ({exc.strerror})") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _split_one(log: Path, files: _Files, split: Split) -> None:
    """One log's lines into the files of their processes; a log that cannot be read, or holds no
    NCCL line, is an error of its own (split.errors), and the others go on."""
    try:
        stream = source_for(log).open()
    except OSError as exc:
        split.errors.append(f"{log}: cannot read ({exc.strerror})")
        return
    except TraceError as exc:
        split.errors.append(f"{log}: {exc}")
        return
    names: dict[tuple[str, str], str | None] = {}
    written = 0
    try:
        with stream:
            while raw := stream.readline(MAX_LINE):
                process = process_of(raw.decode("utf-8", errors="replace"))
                name = None if process is None else _name(names, process, split)
                if name is not None:
                    files.write(name, raw)
                    split.lines[name] = split.lines.get(name, 0) + 1
                    written += 1
                elif process is None:
                    split.other_lines += 1
                else:
                    split.over_lines += 1
                whole = raw.endswith(b"\n")
                while not whole and (rest := stream.readline(_CHUNK)):  # the rest of a long line, where it began
                    whole = rest.endswith(b"\n")
                    if name is not None:
                        files.write(name, rest)
    except TraceError as exc:  # a gzip log cut short or inflating past its bound
        split.errors.append(f"{log}: {exc}")
        return
    if not written:
        split.errors.append(f"{log}: no NCCL line (`host:pid:tid [dev] NCCL INFO ...`) in it: not an NCCL log")
        return
    split.logs += 1


def _name(names: dict[tuple[str, str], str | None], process: tuple[str, str], split: Split) -> str | None:
    """The output file of `process`; None past MAX_PROCESSES."""
    if process in names:
        return names[process]
    name: str | None = file_name(*process)
    if name not in split.lines and len(split.lines) >= MAX_PROCESSES:
        name = None
    names[process] = name
    return name


def _publish(work: Path, out: Path) -> None:
    """The split's files into OUT: the folder renamed when OUT is new, else its files moved in."""
    if not out.exists():
        os.replace(work, out)
        return
    for path in sorted(work.iterdir()):
        os.replace(path, out / path.name)

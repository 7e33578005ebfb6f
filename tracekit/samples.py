"""The bundled sample traces as a ready dataset: what `tracekit report` and `tracekit query` use when
no DATASET is given.

The samples (sample_traces/ in the repository, tracekit/_data/sample_traces/ in a wheel) are ingested
once into the user's cache folder ($XDG_CACHE_HOME/tracekit, else ~/.cache/tracekit), in a folder
named by the tracekit version and a hash of the samples' content, so an upgrade or a changed sample
gets a fresh dataset and nothing is ever written into the installed package.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from tracekit.errors import DatasetError
from tracekit.resources import resource_dir


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tracekit"


def samples_dir() -> Path:
    try:
        return resource_dir("sample_traces")
    except FileNotFoundError as exc:
        raise DatasetError("this tracekit installation has no bundled sample traces; give a DATASET") from exc


def content_hash(root: Path) -> str:
    """SHA-256 over every file's path (relative to root) and bytes, in path order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def sample_dataset(say: Callable[[str], None] = lambda _: None) -> Path:
    """The dataset of the bundled samples, ingested on first use (`say` reports what is done)."""
    from tracekit._version import __version__
    from tracekit.ingest import ingest

    source = samples_dir()
    target = cache_root() / f"samples-{__version__}-{content_hash(source)[:16]}"
    if (target / "tracekit.duckdb").is_file():
        return target
    say(f"no DATASET given: ingesting the bundled samples ({source}) into {target} (first use only, about 30 s)")
    staging = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        report = ingest([source], staging)
        if not report.ok:
            raise DatasetError(f"the bundled samples did not ingest cleanly: {report.errors[0]}")
        try:
            os.replace(staging, target)
        except OSError:
            if not (target / "tracekit.duckdb").is_file():  # not another process that got there first
                raise
    except OSError as exc:
        raise DatasetError(f"{target}: cannot write the samples' dataset ({exc.strerror})") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target

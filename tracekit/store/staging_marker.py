"""A run's commit marker (DATASET/.staging/RUN/COMMIT.json) read back as untrusted input.

The marker says which staged files a committed run moves into the dataset and which files it
removes (tracekit.store.commit writes it; tracekit.store.dataset's `recover` follows it). The
dataset folder may be written by others (on shared storage every worker can), so a marker is only
followed when it is whole, of the expected shape, and names nothing but the run's own staged files
(as sources) and the dataset's Parquet files (as destinations and removals), after resolving every
symlink: anything else is a `MarkerError`, and the marker is not followed at all.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.errors import MAX_MESSAGE_CHARS, one_line
from tracekit.store.parquet_files import REWRITTEN_TABLES, STAGED_TABLES, Plan

# The folders of the appended tables, and the files a run may write or remove at the top level
# (the rewritten tables, and the one traces.parquet of a format-5 dataset: migration m006).
APPENDED_FOLDERS = frozenset(("traces", *STAGED_TABLES))
TOP_LEVEL_FILES = frozenset(f"{table}.parquet" for table in (*REWRITTEN_TABLES, "traces"))
# A marker is a few hundred bytes per file moved; more than this is not one tracekit wrote.
MAX_MARKER_BYTES = 64 << 20


class MarkerError(ValueError):
    """A commit marker that is torn, of another shape, or names a path it may not."""


@dataclass(frozen=True)
class Marker:
    run_id: str
    plan: Plan
    db_inode: int | None


def read(path: Path, root: Path, staging: Path) -> Marker:
    """The marker at `path` of the run staged in `staging` of the dataset at `root`, checked."""
    try:
        if path.stat().st_size > MAX_MARKER_BYTES:
            raise MarkerError("larger than any commit marker")
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise MarkerError(f"not a whole commit marker ({one_line(str(exc), MAX_MESSAGE_CHARS)})") from exc
    if not isinstance(data, dict):
        raise MarkerError("not a commit marker (no JSON object)")
    run_id, moves, removals = data.get("run_id"), data.get("moves"), data.get("removals", [])
    db_inode = data.get("db_inode")
    if run_id != staging.name:
        raise MarkerError("its run_id is not its staging folder's name")
    if db_inode is not None and (isinstance(db_inode, bool) or not isinstance(db_inode, int)):
        raise MarkerError("db_inode is not an integer")
    if not isinstance(moves, list) or not all(_is_pair(m) for m in moves):
        raise MarkerError("moves is not a list of [source, destination] paths")
    if not isinstance(removals, list) or not all(isinstance(r, str) for r in removals):
        raise MarkerError("removals is not a list of paths")
    moves = [[_in(root, src), _in(root, dst)] for src, dst in moves]
    removals = [_in(root, r) for r in removals]
    base, own = _real(root), _real(staging)
    for src, dst in moves:
        if not _inside(_real(src), own):
            raise MarkerError(f"moves a file from outside its staging folder: {_quoted(src)}")
        if not _dataset_file(_real(dst), base):
            raise MarkerError(f"moves a file to a path that is not a dataset file: {_quoted(dst)}")
    for removal in removals:
        if not _dataset_file(_real(removal), base):
            raise MarkerError(f"removes a path that is not a dataset file: {_quoted(removal)}")
    return Marker(run_id, Plan([(src, dst) for src, dst in moves], list(removals)), db_inode)


def text(run_id: str, plan: Plan, db_inode: int | None, root: Path) -> str:
    """The marker of a run, its paths relative to the dataset's folder: a dataset moved between a
    kill and the next run is still finished (absolute paths, as earlier markers have, are read too)."""
    moves = [[os.path.relpath(src, root), os.path.relpath(dst, root)] for src, dst in plan.moves]
    removals = [os.path.relpath(path, root) for path in plan.removals]
    return json.dumps({"run_id": run_id, "moves": moves, "removals": removals, "db_inode": db_inode})


def _in(root: Path, path: str) -> str:
    return path if os.path.isabs(path) else str(root / path)


def _is_pair(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)


def _real(path: Path | str) -> Path:
    """The path with every symlink resolved (those that exist: a file not yet moved may not)."""
    return Path(os.path.realpath(path))


def _inside(path: Path, folder: Path) -> bool:
    return path != folder and path.is_relative_to(folder)


def _dataset_file(path: Path, root: Path) -> bool:
    """`path` is one of the dataset's Parquet files: a rewritten table's, or in an appended table's folder."""
    if not _inside(path, root):
        return False
    parts = path.relative_to(root).parts
    if len(parts) == 1:
        return parts[0] in TOP_LEVEL_FILES
    return len(parts) == 2 and parts[0] in APPENDED_FOLDERS and parts[1].endswith(".parquet")


def _quoted(path: str) -> str:
    return one_line(path, MAX_MESSAGE_CHARS // 2)

"""Numbered migrations: the step from each dataset format to the next, one module per step.

`mNNN_<what>.py` takes a dataset of format NNN - 1 to format NNN (tracekit.store.dataset_format lists the
formats): `upgrade` changes the DuckDB file inside the commit's transaction, `present` shows a reader
the same change in memory. `upgrade` runs the steps from a dataset's format to `FORMAT` in order and
stamps the number; `present` does the same for a reader without writing anything.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from tracekit.schema import TABLES
from tracekit.store import dataset_format
from tracekit.store.connect import ident
from tracekit.store.migrations import (
    m002_ranks_missing,
    m003_rollups,
    m004_ops_table,
    m005_collective_ops,
    m006_traces_appended,
    m007_class_rule,
    m008_replay_tables,
    m009_switch_bytes,
    m010_written_files,
    m011_observed_transfers,
    m012_observed_collectives,
)
from tracekit.store.migrations.context import DB, Presentation, Upgrade

if TYPE_CHECKING:
    import duckdb

STEPS: tuple[ModuleType, ...] = (
    m002_ranks_missing,
    m003_rollups,
    m004_ops_table,
    m005_collective_ops,
    m006_traces_appended,
    m007_class_rule,
    m008_replay_tables,
    m009_switch_bytes,
    m010_written_files,
    m011_observed_transfers,
    m012_observed_collectives,
)
assert [s.FORMAT for s in STEPS] == list(range(2, dataset_format.FORMAT + 1)), "one step per format, in order"

__all__ = ["STEPS", "Presentation", "Upgrade", "present", "upgrade"]


def upgrade(con: duckdb.DuckDBPyConnection, root: Path, found: int) -> Upgrade:
    """Take the dataset attached as `d` (folder `root`) from format `found` to `dataset_format.FORMAT`, inside
    the caller's transaction, and stamp the number. What the commit must still do is in the result."""
    step = Upgrade(con, root)
    for module in STEPS:
        if module.FORMAT > found:
            module.upgrade(step)
    dataset_format.stamp(con, DB)
    return step


def present(con: duckdb.DuckDBPyConnection, catalog: str, root: Path, found: int, prefix: str = "") -> dict[str, str]:
    """Show a reader the dataset attached as `catalog`, of format `found`, as this format: temporary
    stand-ins (named `prefix` + table) for what it lacks. Returns where to read each table from."""
    view = Presentation(con, catalog, root, prefix)
    for module in STEPS:
        if module.FORMAT > found:
            module.present(view)
    view.apply()
    shown = view.shown()
    return {t: f"temp.main.{prefix}{t}" if t in shown else f"{ident(catalog)}.main.{t}" for t in TABLES}

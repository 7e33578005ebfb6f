"""Format 4: ops is a table of the DuckDB file again. Issue 9's builds (format 3) kept ops in Parquet
only, behind a view whose relative path the DuckDB shell resolved against its own working folder;
datasets of format 2 that step through format 3 have the table, so this step asks which it finds."""

from __future__ import annotations

from tracekit.store import connect
from tracekit.store.migrations.context import DB, Presentation, Upgrade

FORMAT = 4


def upgrade(step: Upgrade) -> None:
    con = step.con
    if connect.kind(con, "ops", DB) != connect.VIEW:
        return
    con.execute(f"DROP VIEW {DB}.ops")
    step.create("ops")
    files = sorted(str(p) for p in (step.root / "ops").glob("*.parquet"))
    if files:
        con.execute(f"INSERT INTO {DB}.ops BY NAME SELECT * FROM read_parquet(?)", [files])


def present(view: Presentation) -> None:
    """Readers read the view's files by their place (the view names them relative to the folder)."""
    if connect.kind(view.con, "ops", view.catalog) == connect.VIEW:
        view.from_files("ops", view.root / "ops" / "*.parquet")

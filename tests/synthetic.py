"""A dataset written straight from rows, for tests that need values no trace builder makes easily
(byte counts at the documented bound 2^62, a million ranks, many calls of one kind).

The DuckDB file holds what an ingest leaves there: every table of the data model (empty where no
rows are given), every query stored by name, and the rollups computed by queries/rollups/*.sql, so
`tracekit.open`, `tracekit query` and `tracekit report` read it as they read an ingested dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from tracekit.schema import ROLLUPS, TABLES, arrow_schema, table_from_rows
from tracekit.store.queries import catalog_statements, rollup_query


def write_dataset(root: Path, tables: dict[str, list[dict[str, Any]]]) -> Path:
    """A dataset at `root` whose tables hold `tables` (name -> row dicts; missing columns null)."""
    root.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(root / "tracekit.duckdb"))
    try:
        for table in TABLES:
            data = table_from_rows(table, tables.get(table, [])) if table not in ROLLUPS else None
            con.register("rows", data if data is not None else arrow_schema(table).empty_table())
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM rows")
            con.unregister("rows")
        for statement in catalog_statements():
            con.execute(statement)
        for rollup in ROLLUPS:
            con.execute(f"INSERT INTO {rollup} BY NAME SELECT * FROM ({rollup_query(rollup)})")
    finally:
        con.close()
    return root

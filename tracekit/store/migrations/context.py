"""What a migration step works on: the dataset being upgraded on disk (`Upgrade`), or its tables as
a reader is shown them in memory (`Presentation`).

A step upgrades the database attached as `d` inside the commit's transaction, so an upgrade is
committed with the run that made it, or not at all. Steps do only what is cheap to say in SQL; what
the commit does anyway they ask of it: rollups computed for every job (`rebuild`), a table's Parquet
files written whole (`rewrite`), files removed once the run has committed (`removals`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.schema import arrow_schema
from tracekit.store import connect
from tracekit.store.connect import ident, sql_path

if TYPE_CHECKING:
    import duckdb

DB = "d"


def duck_types(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    """The DuckDB type of each column of `table` as the data model declares it, in order."""
    con.register("declared_table", arrow_schema(table).empty_table())
    try:
        return {row[0]: row[1] for row in con.execute("DESCRIBE declared_table").fetchall()}
    finally:
        con.unregister("declared_table")


def _select_list(declared: dict[str, str], stored: list[str], added: list[str]) -> str:
    """The columns of a table with `added` (null) joined to the `stored` ones, in the declared order."""
    names = [name for name in declared if name in stored or name in added]
    names += [name for name in stored if name not in declared]
    return ", ".join(f"NULL::{declared[n]} AS {ident(n)}" if n in added else ident(n) for n in names)


@dataclass
class Upgrade:
    """A dataset being upgraded by the commit of a run: its DuckDB file attached as `d`, its folder `root`."""

    con: duckdb.DuckDBPyConnection
    root: Path
    rebuild: list[str] = field(default_factory=list)
    rewrite: set[str] = field(default_factory=set)
    removals: list[str] = field(default_factory=list)

    def create(self, table: str, without: tuple[str, ...] = ()) -> None:
        """Table `table`, empty, in its declared columns (less `without`)."""
        columns = ", ".join(f"{ident(n)} {t}" for n, t in duck_types(self.con, table).items() if n not in without)
        self.con.execute(f"CREATE TABLE {DB}.{table} ({columns})")

    def create_missing(self, table: str) -> None:
        """A table the format adds, empty, unless the file has it already (a step runs once per file,
        but a file written by newer code than its stamp says may hold it)."""
        if table not in connect.objects(self.con, DB):
            self.create(table)

    def rebuild_rollups(self, *names: str) -> None:
        """Rollups whose rule or columns changed (or that are new): whatever the file holds of them
        is dropped, and the commit computes them for every job."""
        for name in names:
            self.con.execute(f"DROP TABLE IF EXISTS {DB}.{name}")
            self.create(name)
            if name not in self.rebuild:
                self.rebuild.append(name)

    def add_columns(self, table: str, names: tuple[str, ...]) -> None:
        """Columns the data model gained (null in the rows held), the table rewritten in the declared
        column order (ALTER TABLE would put them last, and Parquet files written from it likewise).
        Columns the table has already are left as they are (a fleet replay rewrites its tables whole)."""
        stored = list(connect.columns(self.con, table, DB))
        names = tuple(n for n in names if n not in stored)
        if not names:
            return
        select = _select_list(duck_types(self.con, table), stored, list(names))
        self.con.execute(f"CREATE TABLE {DB}.{table}__upgraded AS SELECT {select} FROM {DB}.{table}")
        self.con.execute(f"DROP TABLE {DB}.{table}")
        self.con.execute(f"ALTER TABLE {DB}.{table}__upgraded RENAME TO {table}")


@dataclass
class Presentation:
    """An older dataset's tables as a reader is shown them, upgraded in memory: temporary tables and
    views named `prefix` + table that stand in for the tables of the database attached to `con` as
    `catalog` (the dataset in folder `root`)."""

    con: duckdb.DuckDBPyConnection
    catalog: str
    root: Path
    prefix: str = ""
    files: dict[str, Path] = field(default_factory=dict)
    computed: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    added: dict[str, list[str]] = field(default_factory=dict)

    def compute(self, *rollups: str) -> None:
        """Rollups the file lacks, or holds by an earlier rule: computed by their queries when read."""
        self.computed += [r for r in rollups if r not in self.computed]

    def empty_tables(self, *tables: str) -> None:
        """Tables the file lacks that only other commands fill: empty."""
        self.empty += [t for t in tables if t not in self.empty]

    def empty_missing(self, table: str) -> None:
        """A table the format adds, shown empty where the file lacks it."""
        if table not in connect.objects(self.con, self.catalog):
            self.empty_tables(table)

    def add_columns(self, table: str, names: tuple[str, ...]) -> None:
        """Columns the file's table lacks: null (nothing to do where the table is shown empty already)."""
        if table not in self.empty and table not in self.computed:
            self.added.setdefault(table, []).extend(names)

    def from_files(self, table: str, pattern: Path) -> None:
        """A table the file keeps only as Parquet files (`pattern`): read from them."""
        self.files[table] = pattern

    def shown(self) -> set[str]:
        return {*self.computed, *self.empty, *self.added, *self.files}

    def apply(self) -> None:
        """Create the stand-ins, as temporary objects (they shadow the file's own)."""
        from tracekit.schema import ROLLUPS
        from tracekit.store.queries import catalog_statement, rollup_query

        con = self.con
        for table, pattern in self.files.items():
            con.execute(
                f"CREATE OR REPLACE TEMP VIEW {self.prefix}{table} AS SELECT * FROM read_parquet('{sql_path(pattern)}')"
            )

        for table, names in list(self.added.items()):
            stored = list(connect.columns(con, table, self.catalog))
            missing = [n for n in names if n not in stored]
            if not missing:  # the file holds them (a stamp older than its tables): no stand-in
                del self.added[table]
                continue
            select = _select_list(duck_types(con, table), stored, missing)
            con.execute(
                f"CREATE OR REPLACE TEMP VIEW {self.prefix}{table} AS SELECT {select} "
                f"FROM {ident(self.catalog)}.main.{table}"
            )
        for table in self.empty:
            con.register("empty_table", arrow_schema(table).empty_table())
            con.execute(f"CREATE OR REPLACE TEMP TABLE {self.prefix}{table} AS SELECT * FROM empty_table")
            con.unregister("empty_table")
        if not self.computed:
            return
        prior = connect.current(con)
        con.execute(f"USE {ident(self.catalog)}")  # the rollup queries name the tables they read
        try:
            con.execute(catalog_statement("collective_wire_bytes", temp=True))
            for rollup in (r for r in ROLLUPS if r in self.computed):
                con.execute(f"CREATE OR REPLACE TEMP VIEW {self.prefix}{rollup} AS {rollup_query(rollup)}")
        finally:
            con.execute(f"USE {ident(prior)}")

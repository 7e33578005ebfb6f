"""The one module that opens DuckDB: quoting, attaching, and what a database holds."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tracekit.store import connect


def test_paths_and_names_with_quotes_survive_the_sql_text(tmp_path: Path) -> None:
    path = tmp_path / "it's here.duckdb"
    alias, table = 'odd "alias"', 'a "b"'
    con = connect.memory()
    connect.attach(con, path, alias)
    con.execute(f"CREATE TABLE {connect.ident(alias)}.main.{connect.ident(table)} (x INTEGER)")
    assert connect.objects(con, alias) == {table: connect.BASE_TABLE}
    assert con.execute(f"SELECT {connect.sql_list([str(path)])}").fetchall() == [([str(path)],)]


def test_probes_name_tables_views_and_columns_of_one_database(tmp_path: Path) -> None:
    con = connect.memory()
    connect.attach(con, tmp_path / "a.duckdb", "a")
    con.execute("CREATE TABLE a.t (x INTEGER, y VARCHAR)")
    con.execute("CREATE VIEW a.v AS SELECT x FROM a.t")
    con.execute("CREATE TABLE memory.main.elsewhere (z INTEGER)")
    assert connect.objects(con, "a") == {"t": connect.BASE_TABLE, "v": connect.VIEW}
    assert connect.kind(con, "v", "a") == connect.VIEW and connect.kind(con, "elsewhere", "a") is None
    assert connect.has_table(con, "elsewhere") and not connect.has_table(con, "t")  # the current database
    assert connect.columns(con, "t", "a") == {"x": "INTEGER", "y": "VARCHAR"}
    assert connect.columns(con, "nope", "a") == {}


def test_a_read_only_attach_refuses_writes_and_a_new_file_takes_the_storage_version(tmp_path: Path) -> None:
    con = connect.memory()
    connect.attach(con, tmp_path / "new.duckdb", "n", storage_version=connect.STORAGE_VERSION)
    con.execute("CREATE TABLE n.t AS SELECT 1 AS x")
    con.execute("DETACH n")
    connect.attach(con, tmp_path / "new.duckdb", "r", read_only=True)
    with pytest.raises(duckdb.Error):
        con.execute("INSERT INTO r.t VALUES (2)")
    assert con.execute("SELECT x FROM r.t").fetchall() == [(1,)]


def test_who_holds_a_file_is_read_from_duckdbs_error() -> None:
    error = duckdb.IOException('Could not set lock on file "x": Conflicting lock is held in /usr/bin/duckdb (PID 42)')
    assert connect.holder(error) == "duckdb, PID 42"
    assert connect.held_elsewhere(error)
    assert connect.holder(duckdb.IOException("disk full")) is None
    assert connect.first_line(ValueError("one\ntwo")) == "one" and connect.first_line(ValueError()) == "ValueError"

"""The SQL questions in queries/*.sql: one question per file, a header saying what it answers.

Queries read the dataset's tables by name, never file paths; user values are bound parameters
(`$start`, `?`), never formatted into the text. queries/*.sql read the dataset and are stored in
it; a sub-folder holds the questions of another table set (queries/replay/*.sql read the `flows`
table that `tracekit replay` writes to OUT/replay.duckdb): pass `folder="replay"`.
"""

from __future__ import annotations

import re
from pathlib import Path

from tracekit.resources import resource_dir

_PARAM = re.compile(r"\$(\w+)")


def _folder(folder: str) -> Path:
    return resource_dir("queries") / folder if folder else resource_dir("queries")


def query_names(folder: str = "") -> list[str]:
    """Names of the shipped queries (file names without .sql) of queries/ or queries/<folder>/."""
    return sorted(p.stem for p in _folder(folder).glob("*.sql"))


def load_query(name: str, folder: str = "") -> str:
    """The text of queries/[<folder>/]<name>.sql."""
    path = _folder(folder) / f"{name}.sql"
    if not path.is_file():
        raise KeyError(f"no query {name!r}; queries are {', '.join(query_names(folder))}")
    return path.read_text()


def query_header(name: str, folder: str = "") -> dict[str, str]:
    """The `-- key: value` header of a query (name, answers, params, returns), continuation lines joined."""
    header: dict[str, str] = {}
    key = None
    for line in load_query(name, folder).splitlines():
        if not line.startswith("--"):
            break
        text = line[2:].strip()
        if ":" in text and not line.startswith("--  "):
            key, value = text.split(":", 1)
            header[key.strip()] = value.strip()
        elif key:
            header[key] += " " + text
    return header


def query_params(name: str, folder: str = "") -> list[str]:
    """The query's parameters, in the order its header declares them."""
    return list(dict.fromkeys(_PARAM.findall(query_header(name, folder).get("params", ""))))


def catalog_statement(name: str, folder: str = "") -> str:
    """SQL that stores the query in a DuckDB database, for the DuckDB shell.

    A query without parameters becomes a view (`select * from name`); one with parameters a table
    macro taking them in header order (`select * from name('2024-01-01', 3)`).
    """
    body = "\n".join(line for line in load_query(name, folder).splitlines() if not line.startswith("--"))
    body = body.strip().rstrip(";")
    params = query_params(name, folder)
    if not params:
        return f"CREATE OR REPLACE VIEW {name} AS\n{body}"
    # Prefixed so that a parameter never shadows a column of the same name (rank, start, ...).
    body = _PARAM.sub(lambda m: f"param_{m.group(1)}", body)
    return f"CREATE OR REPLACE MACRO {name}({', '.join(f'param_{p}' for p in params)}) AS TABLE\n{body}"

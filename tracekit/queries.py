"""The SQL questions in queries/*.sql: one question per file, a header saying what it answers.

Queries read the dataset's tables by name, never file paths; user values are bound parameters
(`$start`, `?`), never formatted into the text.
"""

from __future__ import annotations

import re

from tracekit.resources import resource_dir

_PARAM = re.compile(r"\$(\w+)")


def query_names() -> list[str]:
    """Names of the shipped queries (file names without .sql)."""
    return sorted(p.stem for p in resource_dir("queries").glob("*.sql"))


def load_query(name: str) -> str:
    """The text of queries/<name>.sql."""
    path = resource_dir("queries") / f"{name}.sql"
    if not path.is_file():
        raise KeyError(f"no query {name!r}; queries are {', '.join(query_names())}")
    return path.read_text()


def query_header(name: str) -> dict[str, str]:
    """The `-- key: value` header of a query (name, answers, params, returns), continuation lines joined."""
    header: dict[str, str] = {}
    key = None
    for line in load_query(name).splitlines():
        if not line.startswith("--"):
            break
        text = line[2:].strip()
        if ":" in text and not line.startswith("--  "):
            key, value = text.split(":", 1)
            header[key.strip()] = value.strip()
        elif key:
            header[key] += " " + text
    return header


def query_params(name: str) -> list[str]:
    """The query's parameters, in the order its header declares them."""
    return list(dict.fromkeys(_PARAM.findall(query_header(name).get("params", ""))))


def catalog_statement(name: str) -> str:
    """SQL that stores the query in a DuckDB database, for the DuckDB shell.

    A query without parameters becomes a view (`select * from name`); one with parameters a table
    macro taking them in header order (`select * from name('2024-01-01', 3)`).
    """
    body = "\n".join(line for line in load_query(name).splitlines() if not line.startswith("--"))
    body = body.strip().rstrip(";")
    params = query_params(name)
    if not params:
        return f"CREATE OR REPLACE VIEW {name} AS\n{body}"
    # Prefixed so that a parameter never shadows a column of the same name (rank, start, ...).
    body = _PARAM.sub(lambda m: f"param_{m.group(1)}", body)
    return f"CREATE OR REPLACE MACRO {name}({', '.join(f'param_{p}' for p in params)}) AS TABLE\n{body}"

"""The SQL questions in queries/*.sql: one question per file, a header saying what it answers.

Queries read the dataset's tables by name, never file paths; user values are bound parameters
(`$start`, `?`), never formatted into the text. A query may read another query by name (most read
`collective_wire_bytes` and `job_class`): `catalog_statements` creates them in an order where every
query comes after those it reads. queries/*.sql read the dataset and are stored in it; a sub-folder
holds the questions of another table set (queries/replay/*.sql read the `flows` table that
`tracekit replay` writes to OUT/replay.duckdb): pass `folder="replay"`.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from tracekit.errors import InputError
from tracekit.resources import resource_dir

_PARAM = re.compile(r"\$(\w+)")
_WORD = re.compile(r"\b\w+\b")


def _folder(folder: str) -> Path:
    return resource_dir("queries") / folder if folder else resource_dir("queries")


def query_names(folder: str = "") -> list[str]:
    """Names of the shipped queries (file names without .sql) of queries/ or queries/<folder>/."""
    return sorted(p.stem for p in _folder(folder).glob("*.sql"))


def load_query(name: str, folder: str = "") -> str:
    """The text of queries/[<folder>/]<name>.sql."""
    path = _folder(folder) / f"{name}.sql"
    if not path.is_file():
        raise InputError(f"no query {name!r}; queries are {', '.join(query_names(folder))}")
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


def query_comment(name: str) -> str:
    """The query's header comment as written (without the leading `-- `), lines and indents kept."""
    lines = []
    for line in load_query(name).splitlines():
        if not line.startswith("--"):
            break
        lines.append(line[3:] if line.startswith("-- ") else line[2:])
    return "\n".join(lines)


def query_summary(name: str) -> str:
    """The first sentence of the query's `answers` header: what `tracekit queries` lists."""
    answers = query_header(name).get("answers", "")
    match = re.match(r"(.+?[?.])(\s|$)", answers)
    return match.group(1) if match else answers


def query_params(name: str, folder: str = "") -> list[str]:
    """The query's parameters, in the order its header declares them."""
    return list(dict.fromkeys(_PARAM.findall(query_header(name, folder).get("params", ""))))


def _body(name: str, folder: str = "") -> str:
    body = "\n".join(line for line in load_query(name, folder).splitlines() if not line.startswith("--"))
    return body.strip().rstrip(";")


def query_dependencies(name: str) -> list[str]:
    """The other queries that `name` reads by name."""
    words = set(_WORD.findall(_body(name)))
    return [other for other in query_names() if other != name and other in words]


@cache
def catalog_order() -> tuple[str, ...]:
    """Every query, each after the queries it reads."""
    ordered: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in ordered:
            return
        if name in visiting:
            raise ValueError(f"queries read each other in a cycle through {name!r}")
        visiting.add(name)
        for dependency in query_dependencies(name):
            visit(dependency)
        visiting.discard(name)
        ordered.append(name)

    for name in query_names():
        visit(name)
    return tuple(ordered)


def catalog_statement(name: str, temp: bool = False, folder: str = "") -> str:
    """SQL that stores the query in a DuckDB database, for the DuckDB shell.

    A query without parameters becomes a view (`select * from name`); one with parameters a table
    macro taking them in header order (`select * from name('2024-01-01', 3)`). `temp` makes it a
    temporary object of the connection (which shadows one stored in the file).
    """
    body = _body(name, folder)
    params = query_params(name, folder)
    kind = "TEMP " if temp else ""
    if not params:
        return f"CREATE OR REPLACE {kind}VIEW {name} AS\n{body}"
    # Prefixed so that a parameter never shadows a column of the same name (rank, start, ...).
    body = _PARAM.sub(lambda m: f"param_{m.group(1)}", body)
    return f"CREATE OR REPLACE {kind}MACRO {name}({', '.join(f'param_{p}' for p in params)}) AS TABLE\n{body}"


def catalog_statements(temp: bool = False) -> list[str]:
    """The statements that create every query, in dependency order (stored ones first drop a copy of the
    other kind that an earlier version stored: a view that became a macro, or the reverse)."""
    statements = []
    for name in catalog_order():
        if not temp:
            statements.append(f"DROP {'VIEW' if query_params(name) else 'MACRO TABLE'} IF EXISTS {name}")
        statements.append(catalog_statement(name, temp))
    return statements


def rollup_query(name: str) -> str:
    """The SELECT of queries/rollups/<name>.sql, which computes the rollup table `name` from collectives."""
    return _body(name, "rollups")


def query_call(name: str, params: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """SQL selecting from the stored query `name`, and its bound parameters (checked against the header)."""
    if name not in query_names():
        raise InputError(f"no query {name!r}; `tracekit queries` lists them")
    declared = query_params(name)
    given = dict(params or {})
    unknown = sorted(set(given) - set(declared))
    missing = [p for p in declared if p not in given]
    takes = f"{name} takes {', '.join(declared)}" if declared else f"{name} takes no parameters"
    if unknown:
        raise InputError(f"{takes}; not {', '.join(unknown)}")
    if missing:
        raise InputError(f"{takes}; missing {', '.join(missing)}")
    if not declared:
        return f"select * from {name}", {}
    return f"select * from {name}({', '.join(f'${p}' for p in declared)})", {p: given[p] for p in declared}

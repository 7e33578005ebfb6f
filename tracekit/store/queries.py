"""The SQL questions in queries/*.sql: one question per file, a header saying what it answers.

Queries read the dataset's tables by name, never file paths; user values are bound parameters
(`$start`, `?`), never formatted into the text, and each is checked against the type and range its
header declares (`$period_months (integer 1..: months per period)`) before DuckDB sees it. A query
may read another query by name (most read `collective_wire_bytes` and `job_class`):
`catalog_statements` creates them in an order where every query comes after those it reads.
queries/*.sql read the dataset and are stored in it; a sub-folder holds the questions of another
table set (queries/replay/*.sql read the `flows` table that
`tracekit replay` writes to OUT/replay.duckdb): pass `folder="replay"`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from functools import cache
from pathlib import Path
from typing import Any

from tracekit.errors import InputError, one_line
from tracekit.resources import resource_dir

_PARAM = re.compile(r"\$(\w+)")
_WORD = re.compile(r"\b\w+\b")
# A parameter as a header declares it: `$name (type[ min..max][ or NULL]: what it is)`.
_DECLARED = re.compile(r"\$(\w+) \((\w+)(?: (-?\d+)?\.\.(-?\d+)?)?( or NULL)?: ([^)]*)\)")
_INTEGER = re.compile(r"[+-]?\d{1,20}")
# What DuckDB binds a Python int to without overflowing (BIGINT).
_INT64 = (-(1 << 63), (1 << 63) - 1)


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


@dataclass(frozen=True)
class Param:
    """A query parameter as its header declares it: a type (string, integer or timestamp), for
    integers the range allowed, and whether NULL is a value it takes."""

    name: str
    type: str
    minimum: int | None
    maximum: int | None
    nullable: bool
    description: str

    def expected(self) -> str:
        if self.type == "integer":
            low, high = self.minimum, self.maximum
            if low is not None and high is not None:
                return f"an integer from {low} to {high}"
            if low is not None:
                return f"an integer of at least {low}"
            return "an integer" if high is None else f"an integer of at most {high}"
        if self.type == "timestamp":
            return "a date or time (YYYY-MM-DD or YYYY-MM-DD HH:MM:SS)"
        return "a string"

    def bind(self, value: Any) -> Any:
        """`value` (text from the command line, or a Python value) as this parameter's type; ValueError
        where it is not one of its type and range."""
        if value is None and self.nullable:
            return None
        if self.type == "integer":
            number = _integer(value)
            low = _INT64[0] if self.minimum is None else self.minimum
            high = _INT64[1] if self.maximum is None else self.maximum
            if number is not None and low <= number <= high:
                return number
        elif self.type == "timestamp":
            moment = _timestamp(value)
            if moment is not None:
                return moment.isoformat(sep=" ")  # DuckDB casts it as the SQL says: cast($start as timestamptz)
        elif isinstance(value, str):
            return value
        raise ValueError(f"expected {self.expected()}")


def _integer(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    return None


def _timestamp(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


def query_param_specs(name: str, folder: str = "") -> list[Param]:
    """The query's parameters with their declared types and ranges, in header order."""
    declared = query_header(name, folder).get("params", "")
    specs: dict[str, Param] = {}
    for match in _DECLARED.finditer(declared):
        param, kind, low, high, nullable, description = match.groups()
        specs.setdefault(
            param,
            Param(
                param,
                kind,
                None if low is None else int(low),
                None if high is None else int(high),
                bool(nullable),
                description.strip(),
            ),
        )
    missing = [p for p in query_params(name, folder) if p not in specs]
    if missing:
        raise ValueError(f"query {name}: parameter {missing[0]} has no declared type: `${missing[0]} (type: what)`")
    return list(specs.values())


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
    bound = {spec.name: _bound(name, spec, given[spec.name]) for spec in query_param_specs(name)}
    return f"select * from {name}({', '.join(f'${p}' for p in declared)})", bound


def _bound(query: str, spec: Param, value: Any) -> Any:
    try:
        return spec.bind(value)
    except ValueError as exc:
        shown = one_line(str(value), 80)
        raise InputError(f"{query}: {spec.name}={shown}: {exc} ({spec.description})") from None

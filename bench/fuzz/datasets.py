"""Dataset-level fuzzing: `python -m bench.fuzz --datasets --inputs 10000 [--seed S]`.

The sample traces are ingested once into a base dataset (the captured and Chakra jobs, and the
smallest generated jobs of each class), and a fleet replay is stored in it. Each case copies its
DuckDB file (the readers need nothing else of it), changes values in it with one to three SQL
statements (UPDATE to extremes: 0, -1, 2^31, 2^62, INT64 max and min, NaN and infinities, empty,
huge and control-character strings, Rich markup `[/]`, NULLs, values of other rows and jobs;
DELETE and duplicated rows), and hands it to one command: shipped queries through the Python API or
`tracekit query`, `tracekit replay` of one job or `--fleet`, `tracekit report` (sampled by cost: a
report takes seconds, a query tens of milliseconds). Commands run in-process (typer's runner) in
worker processes killed past the time or memory bound, as the parse fuzzer's are (runner._Pool).

A finding: an exception other than TracekitError (a traceback), an exit code the command does not
document, a negative byte count printed or returned when the case wrote no negative number (a sum
that wrapped), or a case over its time or memory bound. Case i of seed S is made the same way in
any process: `python -m bench.fuzz --datasets --seed S --case I` runs it alone and prints all of it.
"""

from __future__ import annotations

import io
import json
import math
import random
import re
import shutil
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.fuzz.runner import (
    _READY,
    _STARTED,
    Result,
    _Pool,
    _reset_peak,
    _Slot,
    _status_mb,
    drive,
)

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
# Generated jobs of the sample fleet taken into the base dataset: the smallest of each class.
FLEET_JOBS_PER_CLASS = 3
# Commands by share of cases: a query costs tens of milliseconds, a replay about half a second, a
# fleet replay (fabric timings) one or two, a report two to six.
KINDS = {"query": 0.67, "query-cli": 0.2, "replay": 0.08, "fleet": 0.035, "report": 0.015}
KIND_BLOCK = 200  # every block of this many cases holds each kind its share exactly (`kind_of`)
QUERIES_PER_CASE = 3
# What each command documents: query and report 0, 2, 3; replay 0, 2, 3, and 1 with --fleet (jobs skipped).
EXIT_CODES = {"query-cli": {0, 2, 3}, "replay": {0, 2, 3}, "fleet": {0, 1, 2, 3}, "report": {0, 2, 3}}
OUTCOMES = (
    "ok",
    "refused",
    "exception",
    "exit_code",
    "negative",
    "timeout",
    "over_memory",
    "worker_died",
    "fuzzer_error",
)
FINDINGS = frozenset(OUTCOMES[2:])
# Findings after which a worker is replaced (the pool replaces it itself past a bound, or dead).
_RECYCLE = frozenset(("exception", "exit_code", "fuzzer_error"))
# A case whose values are this long (a string, a list) changes one row only: a whole table of them is
# gigabytes, not a hostile value.
HUGE_CHARS = 1 << 20
# A byte count printed with a minus sign ("-1.5 GiB", "-12 B", "−3 bytes").
_NEGATIVE_BYTES = re.compile(r"(?<![\w.])[-−]\s?\d[\d,]*(?:\.\d+)?\s?(?:(?:[KMGTPE]i?)?B|bytes)\b")
_BYTE_COLUMN = re.compile(r"bytes")


# ------------------------------------------------------------------------------- the base dataset


@dataclass(frozen=True)
class Column:
    table: str
    name: str
    type: str


@dataclass
class Base:
    """The ingested dataset and what mutations choose from: its tables' columns, row counts, the
    values each column holds (up to 24), and its jobs."""

    root: Path
    columns: list[Column]
    rows: dict[str, int]
    values: dict[tuple[str, str], list[Any]]
    jobs: list[str]
    job_rows: dict[tuple[str, str], int]  # (table, job) -> rows


def build_base(workdir: Path) -> Path:
    """Ingest the sample traces (captured, Chakra, the smallest generated jobs of each class) into
    `workdir/base.dataset` and store a fleet replay in it."""
    import csv

    from tracekit.ingest import ingest
    from tracekit.replay.fleet import replay_fleet, store

    out = workdir / "base.dataset"
    shutil.rmtree(out, ignore_errors=True)
    fleet = workdir / "fleet"
    shutil.rmtree(fleet, ignore_errors=True)
    fleet.mkdir(parents=True)
    with open(SAMPLES / "fleet" / "tracekit_manifest.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    chosen: list[dict[str, str]] = []
    for job_class in sorted({r["class"] for r in rows}):
        members = sorted(
            (r for r in rows if r["class"] == job_class), key=lambda r: (int(r["world_size"]), r["job_id"])
        )
        chosen += members[:FLEET_JOBS_PER_CLASS]
    with open(fleet / "tracekit_manifest.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["job_id", "path", "label", "started_at"])
        for row in chosen:
            shutil.copy(SAMPLES / "fleet" / row["path"], fleet / row["path"])
            writer.writerow([row["job_id"], row["path"], row["label"], row["started_at"]])
    for paths in ([SAMPLES / "captured", SAMPLES / "chakra"], [fleet]):
        if not ingest(paths, out, workers=1).ok:
            raise RuntimeError(f"the base dataset's ingest of {paths} failed")
    store(replay_fleet(out, workers=1), out)
    return out


def describe(root: Path) -> Base:
    import duckdb

    con = duckdb.connect(str(root / "tracekit.duckdb"), read_only=True)
    try:
        found = con.sql(
            "select c.table_name, c.column_name, c.data_type from information_schema.columns c "
            "join information_schema.tables t using (table_catalog, table_schema, table_name) "
            "where t.table_type = 'BASE TABLE' order by c.table_name, c.ordinal_position"
        ).fetchall()
        columns = [Column(*row) for row in found]
        rows = {t: con.sql(f'select count(*) from "{t}"').fetchall()[0][0] for t in {c.table for c in columns}}
        values: dict[tuple[str, str], list[Any]] = {}
        for column in columns:
            if column.type.endswith("[]"):
                continue
            picked = con.sql(f'select distinct "{column.name}" from "{column.table}" order by 1 limit 24').fetchall()
            values[(column.table, column.name)] = [v[0] for v in picked if v[0] is not None]
        jobs = [r[0] for r in con.sql("select job_id from jobs order by 1").fetchall()]
        job_rows = {}
        for table in sorted({c.table for c in columns if c.name == "job_id"}):
            for job, n in con.sql(f'select job_id, count(*) from "{table}" group by 1').fetchall():
                job_rows[(table, job)] = n
    finally:
        con.close()
    return Base(root, columns, rows, values, jobs, job_rows)


# --------------------------------------------------------------------------------------- values


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


_INT64 = ["0", "-1", "1", "2147483647", "2147483648", "4294967296", "1048575", "1048576", "1048577",
          "4611686018427387904", "4611686018427387905", "9223372036854775807", "-9223372036854775808"]  # fmt: skip
_INT32 = ["0", "-1", "1", "2", "2147483647", "-2147483648", "1048575", "1048576", "1048577", "65536"]
_HUGEINT = [*_INT64, "18446744073709551616", "99999999999999999999999999999999999999",
            "-99999999999999999999999999999999999999"]  # fmt: skip
_DOUBLE = ["0", "-1", "1", "1e300", "-1e300", "'inf'", "'-inf'", "'nan'", "1e-300", "-0.0", "1e13",
           "9007199254740993", "4611686018427387904"]  # fmt: skip
_TIMESTAMP = ["'0001-01-01 00:00:00+00'", "'9999-12-31 23:59:59+00'", "'1970-01-01 00:00:00+00'",
              "'infinity'", "'-infinity'", "'2024-02-29 12:00:00+00'"]  # fmt: skip
_STRINGS = ["''", "'x'", "'[/]'", "'[bold red]x[/]'", "'[red'", "'[link=file:///etc/passwd]x[/link]'",
            "chr(0)", "'a' || chr(10) || 'b' || chr(13)", "chr(27) || '[31mred' || chr(27) || '[0m'",
            "'é中' || chr(8238) || 'x'", "'''; drop table jobs; --'", "'BOGUS'", "'all'", "'NULL'",
            "' '", "'../../x'", "'a/b'", "'0'", "'-1'", "'Float'", "'nccl:all_reduce'", "'ProfilerStep#1'",
            "'ALL_REDUCE'", "'SEND'", "'RECV'", "'BARRIER'", "repeat('[/]', 200)", "repeat('x', 5000)"]  # fmt: skip
_HUGE_STRINGS = [f"repeat('x', {HUGE_CHARS})", f"repeat('[/]', {HUGE_CHARS // 3})", f"repeat(chr(10), {HUGE_CHARS})"]
_INT_LISTS = ["[]", "[NULL]", "[-1]", "[0]", "[0, 0]", "[1, 2, 3, 4]", "[1048575]", "[2147483647]",
              "[4611686018427387904, 4611686018427387904, 4611686018427387904]"]  # fmt: skip
_BIGINT_LISTS = [*_INT_LISTS, "[9223372036854775807, 1]", "[-9223372036854775808]"]
_HUGE_LISTS = ["range(0, 1048576)", "list_transform(range(0, 200000), x -> 4611686018427387904)"]
_STRING_LISTS = ["[]", "[NULL]", "['[/]']", "['x', 'y']", "['group_size', 'pg_name']", "[repeat('x', 5000)]"]
_BOOLEANS = ["true", "false"]
# Derived values: an expression of the column itself (may overflow: then the statement is refused).
_DERIVED_NUMBERS = ["{c} * 1000003", "-{c}", "{c} + 1", "{c} - 1", "{c} * 4611686018427387904"]
_DERIVED_STRINGS = ["{c} || '[/]'", "upper({c})", "{c} || chr(0)", "repeat({c}, 50)"]


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return _sql_string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"'{value!r}'" if not math.isfinite(value) else repr(value)
    if hasattr(value, "isoformat"):
        return _sql_string(value.isoformat())
    return str(value)


def _values_for(column: Column, base: Base, huge: bool) -> tuple[list[str], list[str]]:
    """SQL expressions a column may be set to: (hostile, derived)."""
    kind = column.type
    if kind == "INTEGER":
        hostile, derived = list(_INT32), _DERIVED_NUMBERS
    elif kind == "BIGINT":
        hostile, derived = list(_INT64), _DERIVED_NUMBERS
    elif kind.startswith(("DECIMAL", "HUGEINT")):
        hostile, derived = list(_HUGEINT), _DERIVED_NUMBERS
    elif kind == "DOUBLE":
        hostile, derived = list(_DOUBLE), _DERIVED_NUMBERS
    elif kind.startswith("TIMESTAMP"):
        hostile, derived = list(_TIMESTAMP), []
    elif kind == "VARCHAR":
        hostile, derived = [*_STRINGS, *(_HUGE_STRINGS if huge else [])], _DERIVED_STRINGS
    elif kind == "BOOLEAN":
        hostile, derived = list(_BOOLEANS), []
    elif kind == "INTEGER[]":
        hostile, derived = [*_INT_LISTS, *(["range(0, 65536)"] if huge else [])], []
    elif kind == "BIGINT[]":
        hostile, derived = [*_BIGINT_LISTS, *(_HUGE_LISTS if huge else [])], []
    elif kind == "VARCHAR[]":
        hostile, derived = list(_STRING_LISTS), []
    else:
        hostile, derived = [], []
    hostile.append("NULL")
    # Values of the same column in other rows and jobs: consistent alone, inconsistent where they land.
    hostile += [_literal(v) for v in base.values.get((column.table, column.name), [])]
    return hostile, derived


_NEGATIVE_VALUE = re.compile(r"(?<![\w'])-(?:\d|'inf|9)|'-inf'|-infinity|^-")


# ---------------------------------------------------------------------------------------- cases


@dataclass
class Case:
    """One mutated dataset and the command run on it; `negative`: a statement may have written a
    negative number (a negative total printed then is garbage in, not a wrap)."""

    index: int
    statements: list[str]
    kind: str
    command: list[str]  # CLI arguments with DATASET and OUT placeholders, or query names (kind "query")
    params: list[dict[str, Any]] = field(default_factory=list)  # per query, for kind "query"
    scope: dict[str, Any] = field(default_factory=dict)  # for kind "query"
    negative: bool = False

    def describe(self) -> str:
        lines = [f"  {s};" for s in self.statements]
        if self.kind == "query":
            calls = ", ".join(
                f"{q}({json.dumps(p, default=str)})" for q, p in zip(self.command, self.params, strict=True)
            )
            lines.append(f"  then tracekit.open(DATASET, Scope(**{self.scope})) and fetch {calls}")
        else:
            lines.append("  then tracekit " + " ".join(_shell(a) for a in self.command))
        return "\n".join(lines)


def _shell(arg: str) -> str:
    import shlex

    return shlex.quote(arg) if len(arg) < 200 else shlex.quote(arg[:60] + f"…({len(arg):,} chars)")


# Which tables a case's statements change, by what its command reads: the replay reads a job's
# collectives, groups, world size and steps (ops); queries and the report read the rollups too.
_REPLAY_TABLES = {"collectives": 8, "process_groups": 3, "jobs": 3, "ops": 1, "job_classes": 1}
_READ_TABLES = {"collectives": 4, "jobs": 3, "collective_sizes": 2, "collective_ops": 2, "job_classes": 2,
                "collective_groups": 1.5, "process_groups": 1.5, "replay_jobs": 1.5, "replay_fabrics": 1.5,
                "collective_peers": 1, "collective_ranks": 1, "traces": 1, "ops": 1}  # fmt: skip
_OTHER_TABLES = 0.2  # runs, dataset_format: a changed format number refuses the whole dataset


def _selection(table: str, base: Base, rng: random.Random, job: str) -> tuple[str, bool]:
    """A WHERE clause and whether it selects one row at most: mostly the rows of the case's job."""
    rows = base.rows.get(table, 0)
    mine = base.job_rows.get((table, job), 0)
    choice = rng.random()
    if choice < 0.35 and mine:
        return f"job_id = {_sql_string(job)}", False
    if choice < 0.7 and mine:
        return (
            f'rowid = (SELECT rowid FROM "{table}" WHERE job_id = {_sql_string(job)} '
            f"ORDER BY rowid LIMIT 1 OFFSET {rng.randrange(mine)})",
            True,
        )
    if choice < 0.75 and rows:
        return f"rowid = {rng.randrange(rows)}", True
    if choice < 0.9:
        return f"rowid % {rng.choice([2, 3, 7, 31])} = 0", False
    return "true", rows <= 1


def _statement(base: Base, rng: random.Random, job: str, kind: str) -> tuple[str, bool]:
    """One mutation: SQL and whether it may write a negative number."""
    tables = sorted(base.rows)
    read = _REPLAY_TABLES if kind in ("replay", "fleet") else _READ_TABLES
    table = rng.choices(tables, [read.get(t, _OTHER_TABLES) for t in tables])[0]
    where, one_row = _selection(table, base, rng, job)
    roll = rng.random()
    if roll < 0.08:
        return f'DELETE FROM "{table}" WHERE {where}', False
    if roll < 0.13:
        return f'INSERT INTO "{table}" SELECT * FROM "{table}" WHERE {where}', False
    columns = [c for c in base.columns if c.table == table]
    column = rng.choice(columns)
    hostile, derived = _values_for(column, base, huge=one_row or base.rows.get(table, 0) <= 1)
    quoted = f'"{column.name}"'
    if derived and rng.random() < 0.15:
        value = rng.choice(derived).format(c=quoted)
        negative = value.startswith("-") or "- 1" in value or "*" in value
    else:
        value = rng.choice(hostile)
        negative = bool(_NEGATIVE_VALUE.search(value))
    sql = f'UPDATE "{table}" SET {quoted} = CAST({value} AS {column.type}) WHERE {where}'
    return sql, negative


def kind_of(seed: int, index: int) -> str:
    """The command of case `index`: each block of KIND_BLOCK cases holds each kind its share of KINDS."""
    block = [kind for kind, share in KINDS.items() for _ in range(round(share * KIND_BLOCK))]
    random.Random(f"datasets-kinds:{seed}:{index // KIND_BLOCK}").shuffle(block)
    return block[index % KIND_BLOCK]


def _param_value(spec: Any, job: str, rng: random.Random) -> Any:
    if spec.name == "job_id":
        return rng.choice([job] * 6 + ([None] if spec.nullable else []) + ["[/]", "", "nosuch"])
    if spec.type == "timestamp":
        return rng.choice(["2023-01-01", "2024-06-01 12:00:00", "0001-01-01", "9999-12-31", "1970-01-01"])
    if spec.type == "integer":
        low = spec.minimum if spec.minimum is not None else -(1 << 63)
        high = spec.maximum if spec.maximum is not None else (1 << 63) - 1
        return rng.choice(
            [low, min(low + 1, high), min(low + 3, high), high, min(max(low, 12), high), min(max(low, 7), high)]
        )
    return rng.choice([job, "x", "[/]"])


def make_case(base: Base, seed: int, index: int) -> Case:
    from tracekit.store.queries import query_names, query_param_specs

    rng = random.Random(f"datasets:{seed}:{index}")
    job = rng.choice(base.jobs)
    kind = kind_of(seed, index)
    statements, negative = [], False
    for _ in range(rng.choice([1, 1, 2, 2, 3])):
        sql, neg = _statement(base, rng, job, kind)
        statements.append(sql)
        negative = negative or neg
    names = query_names()
    case = Case(index, statements, kind, [], negative=negative)
    if kind == "query":
        case.command = rng.sample(names, QUERIES_PER_CASE)
        case.params = [{p.name: _param_value(p, job, rng) for p in query_param_specs(q)} for q in case.command]
        if rng.random() < 0.2:
            case.scope = rng.choice(
                [{"jobs": (job,)}, {"labels": ("fsdp",)}, {"since": "2023-06-01"}, {"until": "2024-01-01"}]
            )
    elif kind == "query-cli":
        name = rng.choice(names)
        case.command = ["query", name, "DATASET", "-f", rng.choice(["table", "table", "csv", "json"])]
        for p in query_param_specs(name):
            value = _param_value(p, job, rng)
            case.command += ["-p", f"{p.name}={'' if value is None else value}"]
        if rng.random() < 0.15:
            case.command += rng.choice([["--job", job], ["--label", "fsdp"], ["--since", "2023-06-01"]])
    elif kind == "replay":
        case.command = ["replay", "DATASET", "--job", job, "-o", "OUT"]
        case.command += rng.choice(
            [[], [], ["--gpus-per-host", "2"], ["--gpus-per-host", "1"], ["--gpus-per-host", "4"]]
        )
        case.command += rng.choice([[], [], [], ["--algorithm", "ring"], ["--algorithm", "direct"], ["--csv"]])
        if rng.random() < 0.1:
            case.command += ["--format", "all"]
        if rng.random() < 0.5:
            case.command.append("-q")
    elif kind == "fleet":
        chosen = [job] + ([rng.choice(base.jobs)] if rng.random() < 0.3 else [])
        case.command = ["replay", "DATASET", "--fleet", "-o", "OUT", "--workers", "1"]
        for name in dict.fromkeys(chosen):
            case.command += ["--job", name]
        case.command += rng.choice([[], ["--gpus-per-host", "2"]])
        if rng.random() < 0.5:
            case.command.append("-q")
    else:
        case.command = ["report", "DATASET", "-o", "OUT.html"]
        if rng.random() < 0.75:  # the whole fleet's report takes seconds: mostly one job's
            case.command += ["--job", job]
    return case


# ------------------------------------------------------------------------------------- running


@dataclass
class Ran:
    outcome: str
    detail: str = ""
    output: str = ""  # what the command printed (for --case)


def prepare(case: Case, base: Base, scratch: Path) -> tuple[Path, list[str]]:
    """The case's dataset in `scratch` (a copy of the base's DuckDB file, mutated); the statements
    DuckDB refused (a value its column cannot take, an overflow) are listed and skipped."""
    import duckdb

    shutil.rmtree(scratch, ignore_errors=True)
    dataset = scratch / f"case-{case.index}"  # a path of its own: one a failed case left open is not in the way
    dataset.mkdir(parents=True)
    shutil.copyfile(base.root / "tracekit.duckdb", dataset / "tracekit.duckdb")
    refused = []
    con = _mutator()
    path = str(dataset / "tracekit.duckdb").replace("'", "''")
    con.execute(f"ATTACH '{path}' AS mutated")  # cheaper than an instance of its own per case
    try:
        con.execute("USE mutated")
        for sql in case.statements:
            try:
                con.execute(sql)
            except duckdb.Error as exc:
                refused.append(f"{sql}: {str(exc).splitlines()[0]}")
    finally:
        con.execute("USE memory")
        con.execute("DETACH mutated")  # checkpoints: the file holds the changes, no log beside it
    return dataset, refused


_MUTATOR: list[Any] = []


def _mutator() -> Any:
    """The worker's DuckDB instance that mutates the cases' files (attached one at a time)."""
    import duckdb

    if not _MUTATOR:
        _MUTATOR.append(duckdb.connect())
    return _MUTATOR[0]


def _last_frames(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if "/tracekit/" in f.filename] or frames
    where = ", ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in mine[-3:])
    first = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {first!r} at {where}"


def _negative_in(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool) and value < 0


def run_case(case: Case, dataset: Path, scratch: Path) -> Ran:
    """Run the case's command on its dataset and judge it (see the module docstring)."""
    if case.kind == "query":
        return _run_queries(case, dataset)
    return _run_cli(case, dataset, scratch)


def _run_queries(case: Case, dataset: Path) -> Ran:
    import duckdb

    import tracekit
    from tracekit.errors import TracekitError
    from tracekit.scope import Scope

    scope = dict(case.scope)
    for key in ("since", "until"):
        if key in scope:
            from datetime import date

            scope[key] = date.fromisoformat(scope[key])
    refused = []
    try:
        with tracekit.open(dataset, Scope(**scope) if scope else None) as ds:
            for name, params in zip(case.command, case.params, strict=True):
                try:
                    relation = ds.query(name, params)
                    rows = relation.fetchall()
                    columns = relation.columns
                except TracekitError as exc:
                    refused.append(f"{name}: {exc}")
                    continue
                except (duckdb.ConversionException, duckdb.OutOfRangeException) as exc:
                    if "out of range" not in str(exc).lower():
                        raise
                    # A sum past 64 bits stopped by the query's checked cast: refused, not wrapped.
                    refused.append(f"{name}: {str(exc).splitlines()[0]}")
                    continue
                if not case.negative:
                    for i, column in enumerate(columns):
                        if _BYTE_COLUMN.search(column) and any(_negative_in(row[i]) for row in rows):
                            bad = next(row[i] for row in rows if _negative_in(row[i]))
                            return Ran("negative", f"query {name}: column {column} holds {bad}")
    except TracekitError as exc:
        return Ran("refused", str(exc))
    except Exception as exc:  # the findings this mode exists for
        return Ran("exception", _last_frames(exc))
    return Ran("refused" if refused else "ok", "; ".join(refused)[:300])


def _run_cli(case: Case, dataset: Path, scratch: Path) -> Ran:
    from typer.testing import CliRunner

    from tracekit.cli import app

    args = [str(dataset) if a == "DATASET" else str(scratch / "out") if a == "OUT" else a for a in case.command]
    args = [str(scratch / "report.html") if a == "OUT.html" else a for a in args]
    result = CliRunner().invoke(app, args)
    output = result.output
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        return Ran("exception", _last_frames(exc), output)
    if "Traceback (most recent call last)" in output:
        return Ran("exception", "a traceback printed: " + output[output.index("Traceback") :][:300], output)
    if result.exit_code not in EXIT_CODES[case.kind]:
        return Ran("exit_code", f"exit code {result.exit_code}: {output[-300:]!r}", output)
    printed = output
    if case.kind == "report" and result.exit_code == 0 and (scratch / "report.html").is_file():
        printed += _page_text((scratch / "report.html").read_text(errors="replace"))
    negative = _NEGATIVE_BYTES.search(printed) if not case.negative else None
    if negative:
        start = max(0, negative.start() - 80)
        return Ran("negative", f"printed {printed[start : negative.end() + 20]!r}", output)
    return Ran("ok" if result.exit_code == 0 else "refused", output.strip()[-300:], output)


def _page_text(html: str) -> str:
    """The report's visible text (its tables, captions and headlines), not its scripts and specs."""
    html = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", html)
    return re.sub(r"<[^>]+>", " ", html)


# ------------------------------------------------------------------------------------- workers


def _worker(conn: Any, seed: int, base_root: str, scratch_root: str) -> None:
    import os
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import tracekit.cli  # noqa: F401 - imported once, before the first timed case
    import tracekit.replay.fleet  # noqa: F401

    base = describe(Path(base_root))
    scratch = Path(scratch_root) / f"worker-{os.getpid()}"
    conn.send(_READY)
    while True:
        try:
            index = conn.recv()
        except EOFError:
            return
        if index is None:
            shutil.rmtree(scratch, ignore_errors=True)
            return
        try:
            case = make_case(base, seed, index)
            dataset, _refused = prepare(case, base, scratch)
        except Exception as exc:  # the fuzzer's bug: reported, never silent
            conn.send(Result(index, "fuzzer_error", f"making the case: {type(exc).__name__}: {exc}"[:300]))
            continue
        _reset_peak()
        conn.send(_STARTED)
        start, cpu = time.perf_counter(), time.process_time()
        ran = run_case(case, dataset, scratch)
        seconds, wall = time.process_time() - cpu, time.perf_counter() - start
        conn.send(Result(index, ran.outcome, ran.detail[:600], seconds, _status_mb("self", "VmHWM"), wall))


@dataclass
class DatasetCampaign:
    """What a dataset campaign found, per command."""

    seed: int
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    slowest: dict[str, float] = field(default_factory=dict)
    cpu: Counter[str] = field(default_factory=Counter)  # CPU seconds of the commands, summed
    peak_mb: dict[str, float] = field(default_factory=dict)
    findings: list[tuple[Case, Result]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def cases(self) -> int:
        return sum(self.counts.values())

    def add(self, case: Case, result: Result) -> None:
        self.counts[(case.kind, result.outcome)] += 1
        self.cpu[case.kind] += result.seconds
        self.slowest[case.kind] = max(self.slowest.get(case.kind, 0.0), result.seconds)
        self.peak_mb[case.kind] = max(self.peak_mb.get(case.kind, 0.0), result.peak_mb)
        if result.outcome in FINDINGS:
            self.findings.append((case, result))

    def table(self) -> str:
        kinds = [k for k in KINDS if any(kind == k for kind, _ in self.counts)]
        head = f"{'command':<11}{'cases':>8}" + "".join(f"{o:>12}" for o in OUTCOMES)
        lines = [head + f"{'mean cpu s':>11}{'max cpu s':>10}{'peak MB':>9}"]
        for kind in [*kinds, "all"]:
            every = kinds if kind == "all" else [kind]
            n = sum(c for (k, _), c in self.counts.items() if k in every)
            cells = "".join(f"{sum(self.counts[(k, o)] for k in every):>12,}" for o in OUTCOMES)
            mean = sum(self.cpu[k] for k in every) / max(n, 1)
            slowest = max((self.slowest.get(k, 0.0) for k in every), default=0.0)
            peak = max((self.peak_mb.get(k, 0.0) for k in every), default=0.0)
            lines.append(f"{kind:<11}{n:>8,}{cells}{mean:>11.3f}{slowest:>10.2f}{peak:>9.0f}")
        rate = self.cases / max(self.seconds, 1e-9)
        lines.append(f"{self.cases:,} cases in {self.seconds:,.0f} s ({rate:,.1f}/s); {len(self.findings)} findings")
        return "\n".join(lines)

    def report_findings(self, limit: int = 20) -> str:
        out = []
        for case, result in self.findings[:limit]:
            out.append(
                f"case {case.index} (seed {self.seed}): {case.kind} {result.outcome}: {result.detail}\n"
                f"{case.describe()}\n  rerun: python -m bench.fuzz --datasets --seed {self.seed} --case {case.index}"
            )
        if len(self.findings) > limit:
            out.append(f"... and {len(self.findings) - limit} more")
        return "\n".join(out)


def run_dataset_campaign(
    count: int,
    *,
    seed: int = 0,
    workers: int = 2,
    timeout: float = 10.0,
    max_rss_mb: float = 1024.0,
    workdir: Path | None = None,
    first: int = 0,
    progress: Any = None,
    base_root: Path | None = None,
) -> DatasetCampaign:
    """Run cases first..first+count-1 of `seed` on `workers` processes (see the module docstring),
    on `base_root` (a base dataset build_base made) or a base built for the campaign."""
    import tempfile

    campaign = DatasetCampaign(seed)
    started = time.perf_counter()
    own = workdir is None
    root = Path(tempfile.mkdtemp(prefix="tracekit-dsfuzz-")) if workdir is None else workdir
    try:
        base_root = base_root or build_base(root / "base")
        base = describe(base_root)
        pool = _Pool(workers, (seed, str(base_root), str(root / "scratch")), target=_worker)

        def take(slot: _Slot, result: Result) -> None:
            if result.outcome in _RECYCLE:  # what failed may have left state behind (an open file)
                pool.replace(slot)
            campaign.add(make_case(base, seed, result.index), result)
            if progress:
                progress(campaign)

        try:
            drive(pool, range(first, first + count), timeout, max_rss_mb, take)
        finally:
            pool.close()
    finally:
        if own:
            shutil.rmtree(root, ignore_errors=True)
    campaign.seconds = time.perf_counter() - started
    return campaign


def run_one(seed: int, index: int, workdir: Path | None = None) -> str:
    """Case `index` of `seed` made and run here, with everything it printed (for a finding's rerun)."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="tracekit-dsfuzz-")) if workdir is None else workdir
    try:
        base_root = build_base(root / "base")
        base = describe(base_root)
        case = make_case(base, seed, index)
        dataset, refused = prepare(case, base, root / "scratch")
        started = time.process_time()
        if case.kind == "query":
            ran = _run_queries(case, dataset)
        else:
            from typer.testing import CliRunner

            from tracekit.cli import app

            ran = _run_cli(case, dataset, root / "scratch")
            if ran.outcome == "exception":  # again, to show the whole traceback
                args = [str(dataset) if a == "DATASET" else str(root / "scratch" / "out") if a == "OUT" else a
                        for a in case.command]  # fmt: skip
                result = CliRunner().invoke(
                    app, [str(root / "scratch" / "r.html") if a == "OUT.html" else a for a in args]
                )
                if result.exc_info is not None:
                    buffer = io.StringIO()
                    traceback.print_exception(*result.exc_info, file=buffer)
                    ran.output += "\n" + buffer.getvalue()
        seconds = time.process_time() - started
        lines = [f"case {index} of seed {seed}: {case.kind}", case.describe()]
        lines += [f"  refused by DuckDB (skipped): {r}" for r in refused]
        lines += [f"outcome: {ran.outcome} in {seconds:.2f} s of CPU: {ran.detail}", ran.output]
        return "\n".join(lines)
    finally:
        if workdir is None:
            shutil.rmtree(root, ignore_errors=True)


def save_dataset_findings(campaign: DatasetCampaign, out: Path, first: int = 0) -> None:
    """Each finding (from the `first`th on) as <index>.case.json: the seed, statements, command and what it did."""
    out.mkdir(parents=True, exist_ok=True)
    for case, result in campaign.findings[first:]:
        record = {
            "seed": campaign.seed,
            "case": case.index,
            "kind": case.kind,
            "statements": case.statements,
            "command": case.command,
            "params": case.params,
            "scope": case.scope,
            "outcome": result.outcome,
            "detail": result.detail,
            "seconds": round(result.seconds, 3),
            "peak_mb": round(result.peak_mb, 1),
            "rerun": f"python -m bench.fuzz --datasets --seed {campaign.seed} --case {case.index}",
        }
        (out / f"{case.index:07d}.case.json").write_text(json.dumps(record, indent=1, default=str))

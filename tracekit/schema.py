"""Arrow schemas of the data model, built from schemas/tables.toml (declared once, read here)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from tracekit.resources import resource_dir

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import pyarrow as pa

TABLES = (
    "traces",
    "jobs",
    "process_groups",
    "collectives",
    "ops",
    "observed_transfers",
    "observed_collectives",
    "runs",
    "collective_sizes",
    "collective_ranks",
    "collective_ops",
    "collective_groups",
    "collective_peers",
    "job_classes",
    "replay_jobs",
    "replay_fabrics",
    "written_files",
)
# Written by `tracekit replay --fleet`, never by ingest (which drops the rows of the jobs it touches).
REPLAY_TABLES = ("replay_jobs", "replay_fabrics")
# Tables derived by queries/rollups/<name>.sql, kept in step by every ingest for the jobs it touches;
# in this order (each may read those before it).
ROLLUPS = (
    "collective_sizes",
    "collective_ranks",
    "collective_ops",
    "collective_groups",
    "collective_peers",
    "job_classes",
)


@dataclass(frozen=True)
class CommType:
    """One collective type of the data model, and how each source names it."""

    name: str  # collectives.comm_type
    display: str  # NCCL's spelling, for the report
    chakra_codes: tuple[int, ...]  # Chakra CollectiveCommType numbers (schemas/et_def.proto) read as this type
    c10d: str | None  # PyTorch's c10d op as record_param_comms records it (what writers emit)
    stem: str  # the name's start once backend prefix, case, '_' and '-' are gone: "allreduce" for allreduce_
    other_stems: tuple[str, ...] = ()  # other spellings' starts, read the same way


# The one table of collective types: the data model's names, and every other spelling derived from it.
# REDUCE_SCATTER_BLOCK (Chakra 8) is a reduce-scatter with equal blocks: counted as REDUCE_SCATTER.
# FSDP and Megatron use the *_into_tensor/*_tensor forms, which c10d records as _allgather_base and
# _reduce_scatter_base.
COMM_TYPE_TABLE = (
    CommType("ALL_REDUCE", "AllReduce", (0,), "allreduce", "allreduce"),
    CommType("REDUCE", "Reduce", (1,), "reduce", "reduce"),
    CommType("ALL_GATHER", "AllGather", (2,), "_allgather_base", "allgather"),
    CommType("GATHER", "Gather", (3,), "gather", "gather"),
    CommType("SCATTER", "Scatter", (4,), "scatter", "scatter"),
    CommType("BROADCAST", "Broadcast", (5,), "broadcast", "broadcast"),
    # NCCL's ncclFuncToString (NCCL Inspector's `coll`) spells it All2All.
    CommType("ALL_TO_ALL", "AllToAll", (6,), "all_to_all", "alltoall", ("all2all",)),
    CommType("REDUCE_SCATTER", "ReduceScatter", (7, 8), "_reduce_scatter_base", "reducescatter"),
    CommType("BARRIER", "Barrier", (9,), "barrier", "barrier"),
    CommType("SEND", "Send", (), None, "send"),
    CommType("RECV", "Recv", (), None, "recv"),
    # One-sided, NCCL >= 2.28 (ncclPutSignal, ncclSignal; NCCL's names PutSignal, Signal) and torch's
    # symm_mem nccl_put / nccl_put_with_signal: a put writes in_bytes into a peer's memory (bytes on the
    # wire, like a send, with no receive), a signal only raises a flag there. WaitSignal, a local wait,
    # is no communication (as `wait` is not). Chakra has no code for either.
    CommType("PUT", "PutSignal", (), None, "put"),
    CommType("SIGNAL", "Signal", (), None, "signal"),
)
COMM_TYPES = tuple(c.name for c in COMM_TYPE_TABLE)
# The one-sided types: a write into one peer's memory that no receive on the peer matches.
ONE_SIDED = ("PUT", "SIGNAL")


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str


@dataclass(frozen=True)
class TableSpec:
    name: str
    doc: str
    key: tuple[str, ...]
    columns: tuple[Column, ...]

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


@cache
def table_specs() -> dict[str, TableSpec]:
    """Every table of the data model, in declaration order."""
    raw = tomllib.loads((resource_dir("schemas") / "tables.toml").read_text())
    return {
        name: TableSpec(
            name=name,
            doc=body["doc"],
            key=tuple(body["key"]),
            columns=tuple(Column(**c) for c in body["columns"]),
        )
        for name, body in raw.items()
    }


def arrow_type(type_name: str) -> pa.DataType:
    import pyarrow as pa

    scalar: dict[str, Any] = {
        "string": pa.string(),
        "bool": pa.bool_(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "int128": pa.decimal128(38, 0),
        "float64": pa.float64(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }
    if type_name.startswith("list<") and type_name.endswith(">"):
        return pa.list_(arrow_type(type_name[5:-1]))
    return scalar[type_name]


@cache
def arrow_schema(table: str) -> pa.Schema:
    """The Arrow schema of `table` (one of TABLES)."""
    import pyarrow as pa

    spec = table_specs()[table]
    return pa.schema([pa.field(c.name, arrow_type(c.type)) for c in spec.columns])


def table_from_rows(table: str, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Build a table of the data model from row dicts; missing columns are null."""
    import pyarrow as pa

    schema = arrow_schema(table)
    columns = {f.name: [row.get(f.name) for row in rows] for f in schema}
    return pa.Table.from_pydict(columns, schema=schema)


def empty_table(table: str) -> pa.Table:
    return arrow_schema(table).empty_table()


_DOC_HEADER = """\
# The tracekit data model

<!-- Generated from schemas/tables.toml by `make docs`; tests/test_schema.py keeps it in step. -->

`tracekit ingest` writes these tables. They are the public contract that SQL is written
against: in the DuckDB file (`DATASET/tracekit.duckdb`, every table by name, wherever the folder
is moved), in Parquet (`DATASET/<table>.parquet` for the small tables, `DATASET/<table>/*.parquet`
for `traces`, `collectives` and `ops`; the rollups and `written_files` are in the DuckDB file
only), and from Python (`tracekit.open(DATASET).frame("collectives")`).

Conventions:
- A column a format does not carry is **null**, never a guess. A value the tool derived rather
  than read is named in the row's `inferred` list (e.g. `group_size` taken from the process
  group, `world_size` counted from the rank files).
- **`in_bytes` follows Chakra's `comm_size` convention**: the bytes this rank passes in to the
  operation. All-gather: the local shard (output = shard × group size). Reduce-scatter: the
  full input. All-to-all(v): the whole send buffer. All-reduce and broadcast: the buffer.
  Send and recv: the message. Bytes are elements × the dtype's size, or a Chakra node's
  `comm_size` as written.
- Each logical collective is **one row per rank**, whichever of the events that trace it
  (`c10d::` op, `record_param_comms`, `nccl:`/`gloo:` annotation, NCCL kernel) the trace holds.
  When a rank has both a host trace (PyTorch ET) and a device trace (Kineto), their rows are
  linked into one (`source = 'linked'`): sizes from whichever carries them, timing from the
  profiler.
- **Read, checked, and held by no column**: a profiler trace's `Comms Id` (PyTorch's hash of the
  group, `Seq`, p2p or not, rank start, stride and group size: the key the row holds as
  (pg_name, seq); checked as an unsigned 64-bit integer) and `Is asynchronized op`, as a PyTorch
  ET's `is_asynchronized_op` (0 or 1: whether the op was issued async; checked as a flag). A bad
  one is a warning on the file, nothing else. `Input Tensors start` / `Output Tensors start`
  (tensor addresses) are bounded as every text is, not parsed.
- A **PyTorch Flight Recorder** dump (pickle or JSON, `traces.format = 'flight_recorder'`) gives
  a `collectives` row per entry that is a collective (`source = 'flight_recorder'`): comm_type
  and dtype from `profiling_name` and `input_dtypes`, sizes from `input_sizes`/`output_sizes`,
  pg_name from `process_group`, group_size from `pg_config`'s ranks, seq from `collective_seq_id`
  (`p2p_seq_id` for send/recv), peer from `send a->b`, start_us from `time_created_ns`,
  duration_us from `duration_ms` (recorded only with TORCH_NCCL_ENABLE_TIMING); an `ops` row per
  entry, typed by its `state`; `process_groups` from `pg_config`; the rank from the file name
  (`nccl_trace_rank_3`: the dump names none). An entry a trace of the same rank holds is counted
  as that trace's row (tracekit/ingest/logs.py).
- An **NCCL INFO log** (`NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL`, `traces.format = 'nccl_log'`)
  gives a `collectives` row per `<Op>: opCount ... count ... datatype ... comm ... [nranks=N]` line
  of its rank (`source = 'nccl_log'`, op_id its line number): comm_type from the op name, dtype
  from NCCL's datatype number, elements from NCCL's per-rank count (all-gather: count in, count x
  nranks out; reduce-scatter: count x nranks in, count out; all-to-all: count x nranks both; the
  others count), seq from opCount (shared by the collectives of one NCCL group, and 0 on one node
  from NCCL 2.27), pg_name the communicator's `commId` (its Init COMPLETE line; else host:pid:pointer),
  group_size from nranks, peer from a send's or recv's root; `process_groups` from the `comm ...
  rank ... nRanks` and `Init COMPLETE` lines, the rank its rank in its largest communicator, the
  world size that communicator's. No times: beside a trace of the same rank its rows are not counted.
- An **NCCL Inspector** file (NCCL's profiler plugin, JSON lines v4.0 to v4.3, `traces.format =
  'nccl_inspector'`) gives a `collectives` row per `coll_perf` and `p2p_perf` record (`source =
  'nccl_inspector'`, op_id its line number; a v4.3 bare record takes its communicator from the
  `dump_stats` marker before it): comm_type from `coll`/`p2p`, in_bytes/out_bytes from
  `coll_msg_size_bytes` (NCCL's per-rank count x type size) by the NCCL log's rule, no dtype or
  elements, seq from `coll_sn` (counted per collective type), pg_name the communicator id
  (`header.id`), group_size from `n_ranks`, peer from `p2p_peer`, duration_us the execution time,
  start_us verbose output's `event_trace_ts` (the wall clock); `process_groups` one per
  communicator (pg_desc its `comm_name`), the rank its rank in its largest communicator, the world
  size that communicator's. Algorithm, protocol and bandwidths are not kept.
- Times are microseconds on the trace's own clock (a Flight Recorder's is the wall clock, µs since
  the Unix epoch); timestamps are UTC.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """The data model as a Markdown page (schemas/README.md)."""
    parts = [_DOC_HEADER]
    for spec in table_specs().values():
        parts.append(f"\n## `{spec.name}`\n\n{spec.doc} Key: {', '.join(spec.key)}.\n")
        parts.append("\n| column | type | meaning |\n|---|---|---|\n")
        parts.extend(f"| `{c.name}` | {c.type} | {_cell(c.doc)} |\n" for c in spec.columns)
    return "".join(parts)


_PYTHON_TYPES = {
    "string": "str",
    "bool": "bool",
    "int32": "int",
    "int64": "int",
    "int128": "int",
    "float64": "float",
    "timestamp": "datetime",
    "list<int32>": "list[int]",
    "list<int64>": "list[int]",
    "list<string>": "list[str]",
}


def row_classes() -> str:
    """tracekit/rows.py: a TypedDict per declared table, what a row of it is where code passes one on."""
    import textwrap

    lines = [
        '"""A row of each table declared in schemas/tables.toml, as the code passes it between modules.',
        "",
        "Generated by `make docs` (python -m tracekit.schema rows) from schemas/tables.toml; a test keeps",
        "it in step. Every column may be null (None), and a row may leave a column out (it is then null).",
        "Written as calls, not classes: a column may be named `class`.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from datetime import datetime",
        "from typing import TypedDict",
    ]
    for number, spec in enumerate(table_specs().values()):
        name = "".join(part.title() for part in spec.name.split("_")) + "Row"
        lines += ["", ""][: 2 if number else 1] + [
            f"# {line}" for line in textwrap.wrap(f"{spec.name}: {spec.doc}", 100)
        ]
        lines.append(f"{name} = TypedDict(")
        lines.append(f'    "{name}",')
        lines.append("    {")
        lines += [f'        "{c.name}": {_PYTHON_TYPES[c.type]} | None,' for c in spec.columns]
        lines += ["    },", "    total=False,", ")"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    print(row_classes() if sys.argv[1:] == ["rows"] else markdown(), end="")

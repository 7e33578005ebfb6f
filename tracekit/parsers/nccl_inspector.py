"""NCCL Inspector JSON lines as an ingest format (`nccl_inspector`): a process's collectives.

NCCL Inspector is NCCL's profiler plugin (NVIDIA/nccl plugins/profiler/inspector). In JSON mode it
writes `<dump_dir>/<hostname>-pid<pid>.log` (inspector.cc), one compact JSON object a line
(inspector_json.cc, json.cc), every completed operation of every communicator of the process:

* v4.0 to v4.2: each line carries its context, `{"header":{"id","comm_name","rank","n_ranks",
  "nnodes"},"metadata":{"inspector_output_format_version","git_rev","rec_mechanism",
  "dump_timestamp_us","hostname","pid"},"coll_perf"|"p2p_perf":{...}}`; v4.1 adds a `dump_stats`
  line per communicator and dump (its ring's drop counters), v4.2 `coll_algo`/`coll_proto`;
* v4.3 (and later): a dump of a communicator is one `dump_stats` marker line with the header and
  metadata and the counts `coll_records`, `p2p_records`, `proxy_records`, then that many bare
  `{"coll_perf":...}`, `{"p2p_perf":...}` and `{"proxy_trace":...}` lines, which take the marker's
  context (NVIDIA's inspector_json_reader.py `DumpContext`). A marker that comes before the last
  one's counts are used up, a file that ends before, or a bare line beyond the counts (a dump cut
  short, or two writers interleaved) is a warning naming the line: a bare line outside a dump's
  counts has no communicator and is not read.

`coll_perf` gives `coll` (ncclFuncToString: AllReduce, AllGather, AllGatherV, ReduceScatter,
Broadcast, Reduce, All2All, ...), `coll_sn`, `coll_msg_size_bytes`, `coll_exec_time_us`, `coll_timing_source`,
`coll_algobw_gbs`, `coll_busbw_gbs` and, with NCCL_INSPECTOR_DUMP_VERBOSE=1, `event_trace_ts`;
`p2p_perf` the same for `p2p` (Send, Recv) with `p2p_peer`.

The rows (`source = 'nccl_inspector'`), one per coll_perf or p2p_perf line of the file's process:

* comm_type from `coll`/`p2p` by the rulebook (tracekit.parsers.common.names); op_name that name;
* sizes: `coll_msg_size_bytes` is ncclTypeSize(datatype) x NCCL's per-rank count (inspector_plugin.cc),
  so in_bytes/out_bytes follow the data model's convention by the NCCL log reader's rule
  (tracekit.parsers.nccl_collectives.model_sizes, on bytes); Inspector records no datatype, so
  dtype, in_elems and out_elems are null;
* seq = `coll_sn` (`p2p_sn`), which NCCL counts per collective type (comm->seqNumber[func]): the
  cross-rank key of a collective is (pg_name, op_name, seq), not (pg_name, seq);
* pg_name = the communicator id (`header.id`, NCCL's comm hash, the same on every rank of it);
  group_size = `n_ranks`; peer = `p2p_peer`, a rank of the communicator: global when the
  communicator is the largest the file has named so far (the world), else marked inferred;
* duration_us = the execution time; start_us = `event_trace_ts.coll_start_ts` (`p2p_start_ts`), the
  wall clock in µs, where verbose output gives it, else null: `dump_timestamp_us` is when the dump
  thread wrote the line, not when the operation ran;
* op_id = the line number.

`proxy_trace` records (v4.3, NCCL_INSPECTOR_ENABLE_PROXY=1) of type `proxy_op` (in nested output the
final one, `is_final`, which carries the operation's totals) are `observed_transfers` rows: the
communicator, the parent operation (`parent_type`, `parent_sn`, and its name when the file holds
exactly one coll_perf/p2p_perf record of that kind, communicator and sequence number before it),
`channel_id`, `peer` (global by the rule for p2p_peer), `direction`, `trans_size_bytes`, the step
counts, `chunk_size_bytes`, `event_trace_ts.proxy_op_start_ts` and `total_us`; the others
(`proxy_op_start`, `proxy_op_segment`, flat `proxy_step`) are counted in a warning.

Each coll_perf/p2p_perf record is also an `observed_collectives` row: the algorithm and protocol
NCCL ran (`coll_algo`, `coll_proto`, v4.2+), the timing source, the execution time and the
algorithm and bus bandwidths NCCL reports, whether or not its `collectives` row stands. What the
file cannot hold is said in its warnings: operations below NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES
(default 8,192 bytes) are never recorded; ring drops (`*_dropped_total`, the largest of each
communicator's dumps, and overwritten proxy steps) lost
records; execution times timed on the CPU (`kernel_cpu`, `collective_cpu`) are not kernel times.

A file's rank is the comm-local `rank` of the largest communicator the process belongs to (the
world: rank = global rank, as the NCCL log reader takes it), world_size that communicator's
`n_ranks`, so a file of one rank among many leaves the others missing on the job.

Bounds and bad input: lines are read one at a time, at most MAX_LINE bytes of each (a longer line
is skipped with a warning), so a file of gigabytes is streamed in bounded memory; every number is a
bounded integer or a finite float (tracekit.parsers.common.values), a bad one null with a warning
naming its line; a line that is no JSON object is counted in a warning; a file with no Inspector
record at all is a one-line TraceError naming the file and its last line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from tracekit.parsers.base import BatchSink, ProcessGroup, Source, TableBuffer, TraceError, TraceMeta
from tracekit.parsers.common.finish import finished
from tracekit.parsers.common.names import comm_type_of
from tracekit.parsers.common.peers import PEER_TYPES, peer_in_group
from tracekit.parsers.common.rows import CollectiveBuffer, CollectiveRow
from tracekit.parsers.common.values import COUNT, INT64, RANK, SIZE, Checker, excerpt
from tracekit.parsers.nccl_collectives import model_sizes
from tracekit.parsers.nccl_inspector_rows import MEASURED, OBSERVED, measured_row, transfer_row

FORMAT = "nccl_inspector"
SOURCE = "nccl_inspector"
MAX_LINE = 1 << 22  # bytes of a line read at most (a nested proxy_op of 512 steps is ~150 KB)
MAX_COMMS = 1 << 16  # communicators kept per file; records of more are counted, not read
MAX_ID_CHARS = 256  # a communicator id (NCCL writes 0x and 16 hex digits)
MAX_NAMES = 256  # operation names remembered
DEFAULT_MIN_SIZE = 8192  # NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES' default (README.md)
KERNEL_TIMING = "kernel_gpu"
_CHUNK = 1 << 20
_KINDS = ("coll_perf", "p2p_perf", "proxy_trace")
_COUNTS = {"coll_perf": "coll_records", "p2p_perf": "p2p_records", "proxy_trace": "proxy_records"}
_COUNTED_FROM = (4, 3)  # the version whose dump_stats counts give context to bare lines
_LOSSES = ("_dropped_total", "_overwritten_total")
_LOSS_CAP = 64  # loss counters remembered per file
MAX_PARENTS = 1 << 18  # (communicator, kind, sn) -> operation name, remembered to name a transfer's parent
_AMBIGUOUS = ""
_PARENT_KIND = {"coll_perf": "coll", "p2p_perf": "p2p"}


@dataclass
class _Comm:
    comm_id: str
    name: str | None
    rank: int | None
    nranks: int | None


@dataclass
class _Context:
    comm: _Comm | None
    version: str | None
    process: tuple[str | None, int | None]


@dataclass
class _Dump:
    line: int
    context: _Context
    counted: bool  # v4.3+: the bare lines after it are its, up to its counts
    remaining: dict[str, int] = field(default_factory=dict)
    expected: int = 0

    @property
    def missing(self) -> int:
        return sum(self.remaining.values()) if self.counted else 0


@dataclass
class _File:
    checker: Checker
    observed: TableBuffer  # observed_transfers rows
    measured: TableBuffer  # observed_collectives rows
    comms: dict[str, _Comm] = field(default_factory=dict)
    dump: _Dump | None = None
    process: tuple[str | None, int | None] | None = None
    versions: dict[str, int] = field(default_factory=dict)
    records: int = 0
    rows: int = 0
    proxy: int = 0
    largest: int = 0  # the largest communicator size named so far
    smallest: int | None = None  # the smallest message size read
    bad_lines: int = 0
    first_bad: int | None = None
    orphans: int = 0
    first_orphan: int | None = None
    others: int = 0  # records of another process
    comms_over: int = 0
    cpu_timed: dict[str, int] = field(default_factory=dict)
    not_collectives: dict[str, int] = field(default_factory=dict)
    comm_types: dict[str, str | None] = field(default_factory=dict)
    losses: dict[tuple[str, str], int] = field(default_factory=dict)  # (comm, counter) -> largest
    pxn_skipped: int = 0
    timed: bool = False  # some row has a start time
    parents: dict[tuple[str, str, int], str] = field(default_factory=dict)
    transfers: int = 0
    not_final: dict[str, int] = field(default_factory=dict)  # proxy record types that are no final proxy_op


def parse(source: Source, sink: BatchSink) -> TraceMeta:
    """Read one Inspector file (see the module docstring): a collectives row per coll_perf or p2p_perf line."""
    meta = TraceMeta(format=FORMAT)
    state = _File(
        Checker(meta),
        observed=TableBuffer(OBSERVED, sink, flush_rows=8192),
        measured=TableBuffer(MEASURED, sink, flush_rows=8192),
    )
    buffer = CollectiveBuffer(sink)
    number = 0
    with source.open() as stream:
        for number, raw in _lines(stream, meta):
            row = _line(state, raw, number)
            if row is not None:
                buffer.append(finished(row, state.checker, f"line {number}"))
                state.rows += 1
    buffer.flush()
    state.observed.flush()
    state.measured.flush()
    if state.dump is not None:
        _close(state, meta, None)
    if not state.records and not state.comms:
        raise TraceError(
            "no NCCL Inspector record (a coll_perf, p2p_perf, dump_stats or proxy_trace line) in it", f"line {number}"
        )
    _finish(state, meta)
    return meta


def _lines(stream: IO[bytes], meta: TraceMeta) -> Iterator[tuple[int, bytes]]:
    """(number, bytes) of each line no longer than MAX_LINE; longer ones are skipped, with a warning."""
    number = 0
    long_lines = 0
    while raw := stream.readline(MAX_LINE):
        number += 1
        if len(raw) == MAX_LINE and not raw.endswith(b"\n"):
            long_lines += 1
            if long_lines == 1:
                meta.warn(f"line longer than {MAX_LINE:,} bytes: not read", f"line {number}")
            while (rest := stream.readline(_CHUNK)) and not rest.endswith(b"\n"):
                pass
            continue
        yield number, raw
    if long_lines > 1:
        meta.warn(f"{long_lines:,} lines longer than {MAX_LINE:,} bytes: not read")


def _line(state: _File, raw: bytes, number: int) -> CollectiveRow | None:
    if not raw.strip():
        return None
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        record = None
    if not isinstance(record, dict):
        state.bad_lines += 1
        state.first_bad = state.first_bad or number
        return None
    if "dump_stats" in record:
        _marker(state, record, number)
        return None
    kind = next((k for k in _KINDS if k in record), None)
    if kind is None:
        state.bad_lines += 1
        state.first_bad = state.first_bad or number
        return None
    context = _own_context(state, record, number) if "header" in record else _dump_context(state, kind, number)
    if context is None:
        return None
    if state.process is None:
        state.process = context.process
    elif context.process != state.process and context.process != (None, None):
        state.others += 1
        return None
    state.records += 1
    if kind == "proxy_trace":
        state.proxy += 1
        _transfer(state, record[kind], context, number)
        return None
    row = _row(state, kind, record[kind], context, number)
    if row is not None and row.pg_name is not None and row.seq is not None:
        _remember_parent(state, (row.pg_name, _PARENT_KIND[kind], row.seq), row.op_name or "")
    return row


def _dump_context(state: _File, kind: str, number: int) -> _Context | None:
    """The context of a bare v4.3 line: its dump's, while the dump's count of its kind lasts."""
    dump = state.dump
    if dump is None or not dump.counted or dump.remaining.get(kind, 0) <= 0:
        state.orphans += 1
        state.first_orphan = state.first_orphan or number
        return None
    dump.remaining[kind] -= 1
    if not dump.missing:
        state.dump = None
    return dump.context


def _own_context(state: _File, record: dict[str, Any], number: int) -> _Context | None:
    check = state.checker
    where = f"line {number}"
    header = record.get("header")
    metadata = record.get("metadata")
    if not isinstance(header, dict):
        check.note("header", "is not an object", header, where, "record not read")
        return None
    if not isinstance(metadata, dict):
        metadata = {}
    version = metadata.get("inspector_output_format_version")
    if isinstance(version, str) and len(version) <= 32:
        if version in state.versions or len(state.versions) < MAX_NAMES:
            state.versions[version] = state.versions.get(version, 0) + 1
    else:
        version = None
    host = metadata.get("hostname")
    host = host[:MAX_ID_CHARS] if isinstance(host, str) else None
    pid = check.integer(metadata.get("pid"), "metadata.pid", INT64, where)
    return _Context(_comm(state, header, where), version, (host, pid))


def _comm(state: _File, header: dict[str, Any], where: str) -> _Comm | None:
    check = state.checker
    comm_id = header.get("id")
    if not isinstance(comm_id, str) or not comm_id or len(comm_id) > MAX_ID_CHARS:
        check.note("header.id", "is no communicator id", comm_id, where)
        return None
    comm = state.comms.get(comm_id)
    if comm is not None:
        return comm
    if len(state.comms) >= MAX_COMMS:
        state.comms_over += 1
        return None
    name = header.get("comm_name")
    comm = _Comm(
        comm_id,
        name[:MAX_ID_CHARS] if isinstance(name, str) else None,
        check.integer(header.get("rank"), "header.rank", RANK, where),
        check.integer(header.get("n_ranks"), "header.n_ranks", SIZE, where),
    )
    if comm.rank is not None and comm.nranks is not None and comm.rank >= comm.nranks:
        check.note("header.rank", f"is not below n_ranks {comm.nranks}", comm.rank, where)
        comm.rank = None
    state.comms[comm_id] = comm
    state.largest = max(state.largest, comm.nranks or 0)
    return comm


def _marker(state: _File, record: dict[str, Any], number: int) -> None:
    """A dump_stats line: the end of the dump before it, the context and counts of the lines after it."""
    meta = state.checker.meta
    if state.dump is not None:
        _close(state, meta, number)
    context = _own_context(state, record, number)
    stats = record.get("dump_stats")
    if context is None or not isinstance(stats, dict):
        if not isinstance(stats, dict):
            state.checker.note("dump_stats", "is not an object", stats, f"line {number}", "marker not read")
        return
    state.records += 1
    counted = _version(context.version) >= _COUNTED_FROM
    dump = _Dump(number, context, counted)
    where = f"line {number}"
    for kind, key in _COUNTS.items():
        value = stats.get(key, 0 if kind == "proxy_trace" else None)
        count = state.checker.integer(value, f"dump_stats.{key}", COUNT, where)
        dump.remaining[kind] = count or 0
    dump.expected = sum(dump.remaining.values())
    _losses(state, context, stats, where)
    state.dump = dump if counted and dump.expected else None


def _close(state: _File, meta: TraceMeta, at: int | None) -> None:
    dump = state.dump
    state.dump = None
    if dump is None or not dump.missing:
        return
    end = f"the next dump_stats marker (line {at})" if at is not None else "the end of the file"
    meta.warn(
        f"the dump begun by its dump_stats marker is cut short or interleaved: {dump.missing:,} of its "
        f"{dump.expected:,} records are missing before {end}",
        f"line {dump.line}",
    )


def _losses(state: _File, context: _Context, stats: dict[str, Any], where: str) -> None:
    comm = context.comm.comm_id if context.comm is not None else "?"
    for key, value in list(stats.items())[:_LOSS_CAP]:
        if key == "proxy_pxn_skipped_process_total":
            skipped = state.checker.integer(value, f"dump_stats.{key}", COUNT, where) or 0
            state.pxn_skipped = max(state.pxn_skipped, skipped)
        elif isinstance(key, str) and key.endswith(_LOSSES):
            lost = state.checker.integer(value, f"dump_stats.{key}", COUNT, where) or 0
            if lost and ((comm, key) in state.losses or len(state.losses) < _LOSS_CAP):
                state.losses[(comm, key)] = max(state.losses.get((comm, key), 0), lost)


def _version(text: str | None) -> tuple[int, int]:
    """`v4.3` as (4, 3); (0, 0) for anything else."""
    if not text or not text.startswith("v"):
        return (0, 0)
    major, _, minor = text[1:].partition(".")
    if not (major.isascii() and major.isdigit() and minor.isascii() and minor.isdigit()):
        return (0, 0)
    return (int(major), int(minor))


def _row(state: _File, kind: str, perf: Any, context: _Context, number: int) -> CollectiveRow | None:
    check = state.checker
    where = f"line {number}"
    if not isinstance(perf, dict):
        check.note(kind, "is not an object", perf, where, "record not read")
        return None
    prefix = "coll" if kind == "coll_perf" else "p2p"
    op = perf.get(prefix)
    if not isinstance(op, str) or len(op) > MAX_NAMES:
        check.note(prefix, "is no operation name", op, where, "record not read")
        return None
    comm_type = _comm_type(state, op)
    if comm_type is None:
        if op in state.not_collectives or len(state.not_collectives) < MAX_NAMES:
            state.not_collectives[op] = state.not_collectives.get(op, 0) + 1
        return None
    comm = context.comm
    nranks = comm.nranks if comm is not None else None
    size = check.integer(perf.get(f"{prefix}_msg_size_bytes"), f"{prefix}_msg_size_bytes", COUNT, where)
    if size is not None:
        state.smallest = size if state.smallest is None else min(state.smallest, size)
    in_bytes, out_bytes = model_sizes(comm_type, size, nranks)
    timing = perf.get(f"{prefix}_timing_source")
    if isinstance(timing, str) and timing != KERNEL_TIMING:
        key = timing[:32]
        if key in state.cpu_timed or len(state.cpu_timed) < MAX_NAMES:
            state.cpu_timed[key] = state.cpu_timed.get(key, 0) + 1
    trace = perf.get("event_trace_ts")
    start = trace.get(f"{prefix}_start_ts") if isinstance(trace, dict) else None
    row = CollectiveRow(
        op_id=number,
        comm_type=comm_type,
        source=SOURCE,
        op_name=op,
        is_uneven=False,
        pg_name=comm.comm_id if comm is not None else None,
        group_size=nranks,
        in_bytes=in_bytes,
        out_bytes=out_bytes,
        seq=check.integer(perf.get(f"{prefix}_sn"), f"{prefix}_sn", INT64, where),
        start_us=check.time(start, f"event_trace_ts.{prefix}_start_ts", where),
        duration_us=check.time(perf.get(f"{prefix}_exec_time_us"), f"{prefix}_exec_time_us", where),
    )
    state.timed = state.timed or row.start_us is not None
    _peer(state, row, perf, nranks, where)
    state.measured.append(measured_row(check, row, perf, prefix, size, where))
    return row


def _peer(state: _File, row: CollectiveRow, perf: dict[str, Any], nranks: int | None, where: str) -> None:
    check = state.checker
    if row.comm_type in PEER_TYPES:
        local = check.integer(perf.get("p2p_peer"), "p2p_peer", RANK, where)
        if local is not None and nranks is not None and local >= nranks:
            check.note("p2p_peer", f"is not below n_ranks {nranks}", local, where)
            local = None
        if local is not None and nranks is not None and nranks >= state.largest:
            row.peer = local  # a rank of the world: the global rank
        else:
            row.peer, guessed = peer_in_group(local, None)
            if guessed:
                row.inferred = ["peer"]


def _remember_parent(state: _File, key: tuple[str, str, int], op: str) -> None:
    """The operation a (communicator, kind, sequence number) names: coll_sn counts per collective
    type, so two collectives of one communicator can share it, and then it names none."""
    held = state.parents.get(key)
    if held is None:
        if len(state.parents) < MAX_PARENTS:
            state.parents[key] = op
    elif held != op:
        state.parents[key] = _AMBIGUOUS


def _transfer(state: _File, record: Any, context: _Context, number: int) -> None:
    """An observed_transfers row of a final `proxy_op` record; other proxy records are counted."""
    check = state.checker
    where = f"line {number}"
    if not isinstance(record, dict):
        check.note("proxy_trace", "is not an object", record, where, "record not read")
        return
    kind = record.get("record_type")
    if kind != "proxy_op":
        key = kind[:32] if isinstance(kind, str) else "?"
        if key in state.not_final or len(state.not_final) < MAX_NAMES:
            state.not_final[key] = state.not_final.get(key, 0) + 1
        return
    comm = context.comm
    nranks = comm.nranks if comm is not None else None
    parent_type = record.get("parent_type")
    parent_type = parent_type if parent_type in ("coll", "p2p") else None
    parent_seq = check.integer(record.get("parent_sn"), "proxy_trace.parent_sn", INT64, where)
    parent_op = None
    if comm is not None and parent_type is not None and parent_seq is not None:
        parent_op = state.parents.get((comm.comm_id, parent_type, parent_seq)) or None
    state.observed.append(
        transfer_row(check, record, comm.comm_id if comm is not None else None, nranks, state.largest, number)
        | {"parent_type": parent_type, "parent_op": parent_op, "parent_seq": parent_seq}
    )
    state.transfers += 1


def _comm_type(state: _File, op: str) -> str | None:
    if op in state.comm_types:
        return state.comm_types[op]
    comm_type = comm_type_of(op)
    if len(state.comm_types) < MAX_NAMES:
        state.comm_types[op] = comm_type
    return comm_type


def _finish(state: _File, meta: TraceMeta) -> None:
    meta.node_count = state.records
    if state.versions:
        meta.schema_version = max(state.versions, key=lambda v: (_version(v), v))
    known = [c for c in state.comms.values() if c.nranks is not None]
    world = max(known, key=lambda c: c.nranks or 0, default=None)
    if world is not None:
        meta.world_size = world.nranks
        meta.rank = world.rank
    if state.timed:
        meta.epoch_offset_us = 0.0  # event_trace_ts is the wall clock (inspectorGetTime), µs since the epoch
    meta.process_groups = [
        ProcessGroup(c.comm_id, pg_desc=c.name, backend="nccl", group_size=c.nranks)
        for c in state.comms.values()
        if c.nranks is not None
    ]
    _warn_cut(state, meta)
    if state.losses:
        by_counter: dict[str, int] = {}
        for (_, key), lost in state.losses.items():
            by_counter[key] = by_counter.get(key, 0) + lost
        listed = ", ".join(f"{key} {lost:,}" for key, lost in sorted(by_counter.items()))
        meta.warn(f"Inspector's ring buffers dropped records before they were dumped ({listed}): rows are missing")
    if state.pxn_skipped:
        meta.warn(
            f"{state.pxn_skipped:,} PXN proxy operations of another process skipped (proxy_pxn_skipped_process_total)"
        )
    if state.cpu_timed:
        listed = ", ".join(f"{k} {n:,}" for k, n in sorted(state.cpu_timed.items()))
        meta.warn(f"execution times not timed on the GPU kernel ({listed}): their duration_us is CPU-measured")
    if state.bad_lines:
        where = f"line {state.first_bad}"
        meta.warn(f"{state.bad_lines:,} lines are no Inspector record (not JSON, or no known key): not read", where)
    if state.orphans:
        meta.warn(
            f"{state.orphans:,} bare records outside the counts of any v4.3 dump_stats marker (a dump cut short or "
            "interleaved): their communicator is unknown, not read",
            f"line {state.first_orphan}",
        )
    if state.others:
        meta.warn(f"{state.others:,} records of another process than the file's first ({_process(state)}): not read")
    if state.not_collectives:
        listed = ", ".join(f"{op} {n:,}" for op, n in sorted(state.not_collectives.items())[:8])
        meta.warn(f"{sum(state.not_collectives.values()):,} records of operations that are no collective ({listed})")
    if state.not_final:
        listed = ", ".join(f"{k} {n:,}" for k, n in sorted(state.not_final.items()))
        meta.warn(
            f"proxy_trace records that are no final proxy_op ({listed}): not rows of observed_transfers (a final "
            "proxy_op carries the operation's totals; one not yet final when the file ends is missing)"
        )
    if state.comms_over:
        meta.warn(f"more than {MAX_COMMS:,} communicators: {state.comms_over:,} records of the others not read")
    if len(state.versions) > 1:
        meta.warn(f"records of several Inspector format versions: {', '.join(sorted(state.versions))}")
    if meta.rank is None and state.rows:
        meta.warn("no record's header gives the process's rank in a communicator of known size")


def _warn_cut(state: _File, meta: TraceMeta) -> None:
    if state.smallest is not None and state.smallest < DEFAULT_MIN_SIZE:
        lowered = f"; the smallest here is {state.smallest:,} bytes, so the cut was lowered"
    else:
        lowered = ""
    meta.warn(
        f"NCCL Inspector records no operation below NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES (default {DEFAULT_MIN_SIZE:,} "
        f"bytes): smaller collectives are missing{lowered}"
    )


def _process(state: _File) -> str:
    host, pid = state.process or (None, None)
    return excerpt(f"{host}:{pid}", 80)


__all__ = ["FORMAT", "MAX_LINE", "SOURCE", "parse"]

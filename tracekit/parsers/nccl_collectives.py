"""NCCL INFO logs as an ingest format (`nccl_log`): a process's collectives and communicators.

What is read, in NCCL's line formats (NVIDIA/nccl, the same from 2.4 to 2.30.7), each after the
prefix `host:pid:tid [cudaDev] NCCL INFO ` that debug.cc prints (anything before it, a launcher's
`[rank0]:` or Ray's `(RayTrainWorker pid=615, ...) `, is skipped):

* with `NCCL_DEBUG_SUBSYS=COLL` (or ALL), enqueue.cc's line per collective the process enqueued:
  `%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %p [nranks=%d]
  stream %p` (`%zi` before 2.22; RCCL appends ` task %d globalrank %d`, globalrank being the
  caller's rank in the communicator). Its name (`AllReduce`, `AllGather`, `ReduceScatter`,
  `Broadcast`, `Reduce`, `AlltoAll`, `Gather`, `Scatter`, `Send`, `Recv`) gives comm_type by the
  rulebook (tracekit.parsers.common.names); one that is no collective (PutSignal, Signal,
  WaitSignal: one-sided RMA, 2.28+) is counted in a warning;
* init.cc's `comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d` (2.20+) and
  `[ncclCommInitRank|ncclCommSplit] comm %p rank %d nranks %d cudaDev %d [nvmlDev %d] busId %lx
  [parent %p color %d key %d] [commId 0x%llx] - Init COMPLETE` (commId from 2.16): which rank of
  which communicator the process is, on which host and device;
* `NCCL version %s` (init.cc): traces.schema_version.

The rows (`source = 'nccl_log'`), one per COLL line of the file's rank:

* count is NCCL's per-rank element count (ncclAllGather's sendcount, ncclReduceScatter's
  recvcount, ncclAlltoAll's count per peer), datatype NCCL's ncclDataType_t number (nccl.h.in:
  int8 0, uint8 1, int32 2, uint32 3, int64 4, uint64 5, float16 6, float32 7, float64 8, bfloat16 9
  from 2.10, float8 e4m3 10 and e5m2 11 from 2.24), so, by the data model's convention
  (tracekit.schema: Chakra's comm_size), in_elems/out_elems are: all-reduce, broadcast, reduce:
  count and count; all-gather: count and count x nranks; reduce-scatter: count x nranks and count;
  all-to-all: count x nranks both; gather: count and count x nranks (the root's buffer); scatter:
  count x nranks and count; send and recv: count (the message) both. Bytes are elements x the
  type's size;
* seq = opCount, NCCL's count of launches on the communicator, the same on every rank of it: the
  collectives of one ncclGroupStart/End share one, and NCCL 2.27+ prints 0 on communicators within
  one node (NVIDIA/nccl#2021): a warning says how many rows share their opCount with the one before;
* pg_name = the communicator: `commId 0x...` from its Init COMPLETE line (the same in every rank's
  log), else `host:pid:comm pointer` (older logs: the pointer is the process's own); group_size =
  nranks; peer of a send or recv = `root` (NCCL passes the peer there), a rank of the communicator,
  global when the communicator's ranks are known;
* op_id = the line number; no times (NCCL prints none on INFO lines by default; they would be the
  wall clock of the enqueue, not of the transfer).

A file's rank. Every line names its process (host, pid) and device; a process's rank is its rank in
the largest communicator it belongs to (PyTorch's default group: rank = global rank). A log of one
process gives its rows; a log of several processes interleaved (`mpirun ... 2>&1 | tee`) gives the
rows of the lowest global rank its communicator lines name before its first collective (else of
the process that printed that collective), and a warning counts the others' lines
(the dataset holds one rank per file). world_size = the largest communicator's nranks, so a log of
one rank among many leaves the others missing on the job, as a profiler trace of one rank does.
process_groups: one per communicator, its ranks listed when the file holds every member's line
(an interleaved log), else empty with its size (the world's is filled in by the ingest).

Bounds and bad input: lines are read one at a time, at most MAX_LINE bytes of each (the rest of a
longer line is skipped, with a warning), so a log of gigabytes is streamed in bounded memory; ranks,
nranks, counts, opCounts and datatypes are read as bounded integers (tracekit.parsers.common.values)
and sized no list or loop; a bad value is null with a warning naming the line; a zero byte ends the
reading (a log cut by a crash is often zero-filled) with a warning; a file with no NCCL line at all
is a one-line TraceError.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

from tracekit.parsers.base import BatchSink, ProcessGroup, Source, TraceError, TraceMeta
from tracekit.parsers.common.finish import finished
from tracekit.parsers.common.names import comm_type_of, times
from tracekit.parsers.common.peers import PEER_TYPES, peer_in_group
from tracekit.parsers.common.rows import CollectiveBuffer, CollectiveRow
from tracekit.parsers.common.values import COUNT, INT64, MAX_RANKS, RANK, SIZE, Bound, Checker

FORMAT = "nccl_log"
SOURCE = "nccl_log"
MAX_LINE = 1 << 16  # bytes of a line read at most (a COLL line is about 220)
MAX_COMMS = 1 << 16  # communicators kept per file; lines of more are counted, not kept
MAX_NAMES = 256  # op names remembered (their comm_type, or counted as no collective)
_CHUNK = 1 << 20

_MARK = "] NCCL INFO "
_ANY_LEVEL_MARK = "] NCCL "
_MARKS_TRIED = 4  # marks in one line looked at, at most
_COLL = re.compile(
    r"(?P<op>[A-Za-z][A-Za-z0-9_]{0,40}): opCount (?P<opcount>[0-9a-fA-F]{1,32}) sendbuff \S{1,40} recvbuff \S{1,40} "
    r"count (?P<count>-?\d{1,40}) datatype (?P<dtype>-?\d{1,40}) op (?P<redop>-?\d{1,40}) root (?P<root>-?\d{1,40}) "
    r"comm (?P<comm>0x[0-9a-fA-F]{1,32}|\(nil\)) \[nranks=(?P<nranks>-?\d{1,40})\]"
    r"(?: stream \S{1,40})?(?: task -?\d{1,40} globalrank (?P<grank>-?\d{1,40}))?"
)
_COMM = re.compile(r"comm (0x[0-9a-fA-F]{1,32}) rank (\d{1,40}) nRanks (\d{1,40}) nNodes (\d{1,40})")
_INIT = re.compile(
    r"comm (0x[0-9a-fA-F]{1,32}) rank (\d{1,40}) nranks (\d{1,40}) cudaDev (\d{1,40})"
    r"[^\n]{0,240}?(?: commId (0x[0-9a-fA-F]{1,32}))? - Init COMPLETE"
)
_VERSION = re.compile(r"NCCL version (\S{1,64})")

# ncclDataType_t (NVIDIA/nccl src/nccl.h.in) as c10 ScalarType names.
DATATYPES: dict[str, str] = {
    "0": "Char",
    "1": "Byte",
    "2": "Int",
    "3": "UInt32",
    "4": "Long",
    "5": "UInt64",
    "6": "Half",
    "7": "Float",
    "8": "Double",
    "9": "BFloat16",
    "10": "Float8_e4m3fn",
    "11": "Float8_e5m2",
}
_TIMES_NRANKS_IN = frozenset(("REDUCE_SCATTER", "ALL_TO_ALL", "SCATTER"))
_TIMES_NRANKS_OUT = frozenset(("ALL_GATHER", "ALL_TO_ALL", "GATHER"))

Process = tuple[str, str]  # (host, pid)
Member = tuple[str, str, int]  # (host, pid, cudaDev): one rank of the job


@dataclass
class _Comm:
    pointer: str
    process: Process
    nranks: int | None = None
    rank: int | None = None
    device: int | None = None
    comm_id: str | None = None
    complete: bool = False  # its Init COMPLETE line was read: a later init line at its pointer is a new one

    @property
    def member(self) -> Member | None:
        return (*self.process, self.device) if self.device is not None else None

    @property
    def name(self) -> str:
        return f"commId {self.comm_id}" if self.comm_id else f"{self.process[0]}:{self.process[1]}:{self.pointer}"


@dataclass
class _Log:
    """What the file says as a whole, read line by line."""

    checker: Checker
    comms: dict[tuple[str, str, str], _Comm] = field(default_factory=dict)  # (host, pid, pointer) -> comm
    retired: list[_Comm] = field(default_factory=list)  # destroyed: their pointer was taken by a later one
    version: str | None = None
    chosen: Member | None = None  # the rank whose rows the file gives
    others: dict[Member, int] = field(default_factory=dict)  # COLL lines of other ranks
    not_collectives: dict[str, int] = field(default_factory=dict)
    comm_types: dict[str, str | None] = field(default_factory=dict)  # op name -> comm_type (None: no collective)
    shared_opcount: int = 0
    last_opcount: dict[str, int] = field(default_factory=dict)  # pg_name -> last opCount
    nccl_lines: int = 0
    rows: int = 0
    first: Member | None = None  # the first rank a communicator line names
    version_of_comms: int = 0  # bumped when a communicator changes: `_members` is cached by it
    cached: tuple[int, dict[str, list[int]]] | None = None


def parse(source: Source, sink: BatchSink) -> TraceMeta:
    """Read one log (see the module docstring): a collectives row per COLL line of the file's rank."""
    meta = TraceMeta(format=FORMAT)
    log = _Log(Checker(meta))
    buffer = CollectiveBuffer(sink)
    number = 0
    with source.open() as stream:
        for number, line in _lines(stream, meta):
            if "NCCL INFO " not in line:
                if log.version is None and (bare := _VERSION.match(line)):  # rank 0's, printed bare
                    log.version = bare[1]
                continue
            found = _prefix(line)
            if found is None:
                continue
            log.nccl_lines += 1
            row = _line(log, found, number)
            if row is not None:
                buffer.append(finished(row, log.checker, f"line {number}"))
                log.rows += 1
    buffer.flush()
    if not log.nccl_lines:
        raise TraceError("no NCCL INFO line ('host:pid:tid [dev] NCCL INFO ...') in it", f"line {number}")
    _finish(log, meta)
    return meta


def _lines(stream: IO[bytes], meta: TraceMeta) -> Iterator[tuple[int, str]]:
    """(number, text) of each line, at most MAX_LINE bytes of it; stops at a zero byte."""
    number = 0
    long_lines = 0
    while True:
        raw = stream.readline(MAX_LINE)
        if not raw:
            break
        number += 1
        if not raw.endswith(b"\n") and len(raw) == MAX_LINE:
            long_lines += 1
            if long_lines == 1:
                meta.warn(f"line longer than {MAX_LINE:,} bytes: only its first {MAX_LINE:,} read", f"line {number}")
            while (rest := stream.readline(_CHUNK)) and not rest.endswith(b"\n"):
                pass
        if b"\0" in raw:
            meta.warn("zero bytes (a log cut short and zero-filled?): the rest of the file not read", f"line {number}")
            raw = raw.split(b"\0", 1)[0]
            if raw:
                yield number, raw.decode("utf-8", errors="replace")
            break
        yield number, raw.decode("utf-8", errors="replace")
    if long_lines > 1:
        meta.warn(f"{long_lines:,} lines longer than {MAX_LINE:,} bytes: only their first {MAX_LINE:,} read")


@dataclass(frozen=True, slots=True)
class _Prefix:
    host: str
    pid: str
    dev: int
    msg: str


def _prefix(line: str, mark: str = _MARK) -> _Prefix | None:
    """`host:pid:tid [dev] NCCL INFO msg` read from its mark backwards: in time linear in the line,
    whatever precedes the mark (a regular expression searching for the host took time quadratic in a
    long run of host-like characters)."""
    at = line.find(mark)
    for _ in range(_MARKS_TRIED):
        if at < 0:
            return None
        before, bracket, dev = line[:at].rpartition(" [")
        if bracket and dev.isascii() and dev.isdigit() and len(dev) <= 6:
            parts = before.rsplit(None, 1)[-1:] or [""]
            fields = parts[0].rsplit(":", 2)
            if len(fields) == 3 and all(f.isascii() and f.isdigit() and len(f) <= 10 for f in fields[1:]):
                host = fields[0][max(fields[0].rfind(c) for c in ":[]") + 1 :]
                if host:
                    return _Prefix(host, fields[1], int(dev), line[at + len(mark) :].rstrip("\n"))
        at = line.find(mark, at + 1)
    return None


def process_of(line: str) -> Process | None:
    """The (host, pid) that printed an NCCL line of any level (`host:pid:tid [dev] NCCL INFO|WARN ...`),
    by the rule the reader attributes lines with; None for a line NCCL did not print."""
    found = _prefix(line, _ANY_LEVEL_MARK)
    return (found.host, found.pid) if found is not None else None


def _line(log: _Log, found: _Prefix, number: int) -> CollectiveRow | None:
    msg = found.msg
    process = (found.host, found.pid)
    if m := _COLL.match(msg):
        return _collective(log, m, process, found.dev, number)
    if m := _COMM.search(msg):
        comm = _comm(log, process, m[1])
        if comm is not None:
            where = f"line {number}"
            _set(log, comm, "rank", log.checker.integer(m[2], "rank", RANK, where), where)
            _set(log, comm, "nranks", log.checker.integer(m[3], "nRanks", SIZE, where), where)
            if comm.device is None:
                comm.device = found.dev
            log.first = log.first or comm.member
        return None
    if " - Init COMPLETE" in msg and (m := _INIT.search(msg)):
        comm = _comm(log, process, m[1])
        if comm is not None:
            where = f"line {number}"
            _set(log, comm, "rank", log.checker.integer(m[2], "rank", RANK, where), where)
            _set(log, comm, "nranks", log.checker.integer(m[3], "nranks", SIZE, where), where)
            comm.device = log.checker.integer(m[4], "cudaDev", RANK, where)
            if m[5] is not None:
                comm.comm_id = m[5].lower()
            comm.complete = True
            log.first = log.first or comm.member
        return None
    if log.version is None and (v := _VERSION.search(msg)):
        log.version = v[1]
    return None


def _comm(log: _Log, process: Process, pointer: str) -> _Comm | None:
    """The communicator an init line names: a new one where the pointer's last one completed its
    init (NCCL reuses the memory of a destroyed communicator)."""
    key = (*process, pointer.lower())
    comm = log.comms.get(key)
    if comm is not None and comm.complete:
        if len(log.comms) + len(log.retired) >= MAX_COMMS:
            return None
        log.retired.append(comm)
        comm = None
    if comm is None and len(log.comms) + len(log.retired) < MAX_COMMS:
        comm = log.comms[key] = _Comm(pointer.lower(), process)
    log.version_of_comms += 1
    return comm


def _every_comm(log: _Log) -> list[_Comm]:
    return [*log.retired, *log.comms.values()]


def _set(log: _Log, comm: _Comm, name: str, value: int | None, where: str) -> None:
    """A communicator's rank or size, noted when a later line says otherwise (the first one stands)."""
    if value is None:
        return
    before = getattr(comm, name)
    if before is None:
        setattr(comm, name, value)
    elif before != value:
        log.checker.note(f"communicator {name}", f"differs from the {before} said before", value, where, "ignored")


def _collective(log: _Log, m: re.Match[str], process: Process, device: int, number: int) -> CollectiveRow | None:
    check = log.checker
    where = f"line {number}"
    pointer = m["comm"].lower()
    comm = log.comms.get((*process, pointer)) if pointer != "(nil)" else None
    member = (comm.member if comm is not None else None) or (*process, device)
    if log.chosen is None:
        log.chosen = _lowest_rank(log) or member
    if member != log.chosen:
        log.others[member] = log.others.get(member, 0) + 1
        return None
    op = m["op"]
    if op in log.comm_types:
        comm_type = log.comm_types[op]
    else:
        comm_type = comm_type_of(op)
        if len(log.comm_types) < MAX_NAMES:
            log.comm_types[op] = comm_type
    if comm_type is None:
        if op in log.not_collectives or len(log.not_collectives) < MAX_NAMES:
            log.not_collectives[op] = log.not_collectives.get(op, 0) + 1
        return None
    count = _number(check, m["count"], "count", COUNT, where)
    nranks = _number(check, m["nranks"], "nranks", SIZE, where)
    code = m["dtype"]
    dtype = DATATYPES.get(code)
    if dtype is None:
        check.note("datatype", "is no ncclDataType_t this reader knows", code, where)
    seq = _number(check, m["opcount"], "opCount", INT64, where, 16)
    if comm is not None and comm.nranks is None and nranks is not None:
        comm.nranks = nranks
        log.version_of_comms += 1
    if comm is not None and comm.rank is None and m["grank"] is not None:
        comm.rank = check.integer(m["grank"], "globalrank", RANK, where)
        log.version_of_comms += 1
    pg_name = (
        comm.name if comm is not None else (f"{process[0]}:{process[1]}:{pointer}" if pointer != "(nil)" else None)
    )
    if pg_name is not None and seq is not None:
        if log.last_opcount.get(pg_name) == seq:
            log.shared_opcount += 1
        log.last_opcount[pg_name] = seq
    in_elems, out_elems = model_sizes(comm_type, count, nranks)
    row = CollectiveRow(
        op_id=number,
        comm_type=comm_type,
        source=SOURCE,
        op_name=op,
        pg_name=pg_name,
        group_size=nranks,
        dtype=dtype,
        in_elems=in_elems,
        out_elems=out_elems,
        in_bytes=times(in_elems, dtype),
        out_bytes=times(out_elems, dtype),
        seq=seq,
        is_uneven=False,
    )
    if comm_type in PEER_TYPES:
        local = _number(check, m["root"], "root (peer)", RANK, where)
        peer, guessed = peer_in_group(local, _known_ranks(log, comm))
        row.peer = peer
        if guessed:
            row.inferred = ["peer"]
    return row


def _number(check: Checker, text: str, field: str, bound: Bound, where: str, base: int = 10) -> int | None:
    """A number the line's pattern read (at most 40 digits), within `bound`, else None with a warning."""
    value = int(text, base)
    if bound.low <= value <= bound.high:
        return value
    check.note(field, f"is out of bounds [{bound.low}, {bound.high}]", text, where)
    return None


def model_sizes(comm_type: str, count: int | None, nranks: int | None) -> tuple[int | None, int | None]:
    """(in, out) sizes by the data model's convention of a collective of NCCL's per-rank `count`
    (the module docstring): in elements, or in bytes for a count of bytes (NCCL Inspector's
    `coll_msg_size_bytes`, count x type size)."""
    if count is None:
        return None, None
    whole = count * nranks if nranks is not None else None
    return (
        whole if comm_type in _TIMES_NRANKS_IN else count,
        whole if comm_type in _TIMES_NRANKS_OUT else count,
    )


def _known_ranks(log: _Log, comm: _Comm | None) -> ProcessGroup | None:
    """The communicator as a group whose ranks are listed when the file holds every member's line."""
    if comm is None:
        return None
    ranks = _members(log).get(comm.name)
    return ProcessGroup(pg_name=comm.name, group_size=comm.nranks, ranks=ranks or [])


def _members(log: _Log) -> dict[str, list[int]]:
    """Global ranks of each communicator, in its rank order, where the file names all of them
    (recomputed only after a communicator line changed something)."""
    if log.cached is not None and log.cached[0] == log.version_of_comms:
        return log.cached[1]
    found = _all_members(log)
    log.cached = (log.version_of_comms, found)
    return found


def _all_members(log: _Log) -> dict[str, list[int]]:
    ranks = _global_ranks(log)
    by_name: dict[str, dict[int, int]] = {}
    sizes: dict[str, int] = {}
    for comm in _every_comm(log):
        member = comm.member
        if comm.rank is None or comm.nranks is None or member is None or member not in ranks:
            continue
        by_name.setdefault(comm.name, {})[comm.rank] = ranks[member]
        sizes[comm.name] = comm.nranks
    return {
        name: [members[r] for r in range(sizes[name])]
        for name, members in by_name.items()
        if len(members) == sizes[name] and all(r in members for r in range(sizes[name]))
    }


def _lowest_rank(log: _Log) -> Member | None:
    """The rank of the lowest global rank the communicator lines so far name (an interleaved log's
    rank 0, whose collectives it gives)."""
    ranks = _global_ranks(log)
    return min(ranks, key=lambda member: (ranks[member], member)) if ranks else None


def _global_ranks(log: _Log) -> dict[Member, int]:
    """Each rank's global rank: its rank in the largest communicator it belongs to (the first so large)."""
    best: dict[Member, tuple[int, int]] = {}
    for comm in _every_comm(log):
        member = comm.member
        if member is None or comm.rank is None or comm.nranks is None:
            continue
        if member not in best or comm.nranks > best[member][0]:
            best[member] = (comm.nranks, comm.rank)
    return {member: rank for member, (_, rank) in best.items()}


def _finish(log: _Log, meta: TraceMeta) -> None:
    meta.schema_version = log.version
    meta.node_count = log.rows
    sizes = [c.nranks for c in _every_comm(log) if c.nranks is not None]
    meta.world_size = max(sizes) if sizes else None
    ranks = _global_ranks(log)
    chosen = log.chosen or _lowest_rank(log) or log.first
    meta.rank = ranks.get(chosen) if chosen is not None else None
    members = _members(log)
    groups: dict[str, ProcessGroup] = {}
    for comm in _every_comm(log):
        own = comm.member == chosen or (comm.member is None and chosen is not None and comm.process == chosen[:2])
        if comm.nranks is None or not (own or comm.name in members):
            continue  # another rank's communicator, known to this file only by its pointer
        ranks_of = members.get(comm.name, [])
        groups.setdefault(comm.name, ProcessGroup(comm.name, backend="nccl", group_size=comm.nranks, ranks=ranks_of))
    meta.process_groups = list(groups.values())
    if log.others:
        count = sum(log.others.values())
        listed = ", ".join(_describe(m, ranks) for m in list(log.others)[:4])
        more = f" and {len(log.others) - 4:,} more" if len(log.others) > 4 else ""
        meta.warn(
            f"the lines of {len(log.others) + 1:,} ranks are interleaved: only {_describe(chosen, ranks)}'s "
            f"collectives read (one rank per file); {count:,} COLL lines of {listed}{more} not read: "
            "split it by process with `tracekit split-log`"
        )
    if log.not_collectives:
        names = ", ".join(f"{op} {n:,}" for op, n in sorted(log.not_collectives.items())[:8])
        meta.warn(f"{sum(log.not_collectives.values()):,} COLL lines of operations that are no collective ({names})")
    if log.shared_opcount:
        meta.warn(
            f"{log.shared_opcount:,} collectives share their opCount (seq) with the one before on their communicator "
            "(grouped by ncclGroupStart/End, or NCCL 2.27+ on a single node): seq does not tell them apart"
        )
    if log.chosen is None:
        meta.warn("no collective line (COLL lines are printed with NCCL_DEBUG_SUBSYS=COLL or ALL): no rows")
    if meta.rank is None and log.rows:
        meta.warn("no 'comm ... rank ... nRanks' or 'Init COMPLETE' line names the rank of the collectives' process")
    if len(log.comms) + len(log.retired) >= MAX_COMMS:
        meta.warn(f"more than {MAX_COMMS:,} communicators: the lines of the others not read")


def _describe(member: Member | None, ranks: dict[Member, int]) -> str:
    if member is None:
        return "no rank"
    rank = ranks.get(member)
    where = f"{member[0]}:{member[1]} [{member[2]}]"
    return f"rank {rank} ({where})" if rank is not None else where


__all__ = ["DATATYPES", "FORMAT", "MAX_LINE", "MAX_RANKS", "model_sizes", "parse"]

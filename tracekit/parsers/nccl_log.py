"""NCCL INFO logs (`NCCL_DEBUG=INFO`): the communicators, and the rings, trees and NICs NCCL built for them.

Line formats from NVIDIA/nccl 2.30.7 (debug.cc, init.cc, rings.cc, transport/net.cc; older
spellings back to 2.7 are read too), each after the prefix `host:pid:tid [cudaDev] NCCL INFO `
(anything before it, such as a launcher's `[0] ` tag, is skipped):

* `comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d` (init.cc, 2.20+): a
  rank of a communicator, on this host;
* `... comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx [parent %p color %d key %d] commId 0x%llx
  - Init START|COMPLETE` (the parent, color and key on ncclCommSplit's, 2.21+):
  the communicator's id, the same on every rank (older logs print only this line, after the rings);
* `Channel %02d/%02d : r r r ...` (rings.cc, printed by rank 0): channel c's ring from rank 0, in
  ranks of the communicator; NCCL cuts the line at 128 characters (`...`), so large rings come from
  the per-rank `Ring %02d : prev -> rank -> next` lines (NCCL_DEBUG_SUBSYS=GRAPH) instead;
* `Trees [c] d0/d1/d2->rank->up ...` (init.cc, every rank): its children and parent in each channel's tree;
* `Channel %02d/%d : a[dev] -> b[dev] [send|receive] via NET/<net>/<nic>[(<proxy>)]...` (net.cc): the
  NIC a connection of channel c uses (connection index 0: rings and trees; 1: p2p), and the PXN
  proxy rank in parentheses;
* `%d coll channels, ...` and `NCCL version %s`.

Lines are attached to the communicator whose `comm` line the same thread (host, pid, tid) printed
last, or, in older logs, prints next. Every value read is bounded (ranks below 2^20, channels below
64, NIC indices below 1,024); a line that does not fit is a warning naming its number, never a crash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_RANKS = 1 << 20
MAX_CHANNELS = 64
MAX_NICS = 1024
MAX_LINE = 1 << 16  # characters of a line read at most
PREFIX = re.compile(r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL INFO (?P<msg>.*)$")
COMM = re.compile(r"comm (0x[0-9a-fA-F]+) rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+) localRank (\d+)")
INIT = re.compile(
    r"comm (0x[0-9a-fA-F]+) rank (\d+) nranks (\d+) cudaDev (\d+)(?: nvmlDev \d+)?(?: busId [0-9a-fA-F]+)?"
    r"(?: parent 0x[0-9a-fA-F]+ color -?\d+ key -?\d+)?(?: commId (0x[0-9a-fA-F]+))? - Init (START|COMPLETE)"
)
RING = re.compile(r"^Channel (\d+)/(\d+) :((?: +\d+)+)( *\.\.\.)? *$")
RANK_RING = re.compile(r"^Ring (\d+) : (-?\d+) -> (\d+) -> (-?\d+)")
TREES = re.compile(r"^Trees((?: \[\d+\] -?\d+/-?\d+/-?\d+->-?\d+->-?\d+)+)")
TREE = re.compile(r"\[(\d+)\] (-?\d+)/(-?\d+)/(-?\d+)->(-?\d+)->(-?\d+)")
NET = re.compile(
    r"^Channel (\d+)(?:/(\d+))? : (\d+)\[[0-9a-fA-Fx]+\] -> (\d+)\[[0-9a-fA-Fx]+\] \[(send|receive)\] "
    r"via NET/([^/]+)/(\d+)(?:\((\d+)\))?"
)
CHANNELS = re.compile(r"^(\d+) coll channels")
VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")


@dataclass
class Connection:
    channel: int
    conn: int  # NCCL's connection index: 0 rings and trees, 1 p2p
    src: int  # communicator ranks
    dst: int
    direction: str  # "send" (printed by src) or "receive" (printed by dst)
    nic: int  # NCCL's NET device index
    proxy: int | None  # PXN proxy rank
    line: int


@dataclass
class LogComm:
    """One communicator as the log describes it; ranks are the communicator's."""

    key: str
    nranks: int
    host_of: dict[int, str] = field(default_factory=dict)  # rank -> host name
    device_of: dict[int, int] = field(default_factory=dict)  # rank -> CUDA device
    channels: int | None = None
    rings: dict[int, list[int]] = field(default_factory=dict)  # channel -> ring from rank 0
    cut: set[int] = field(default_factory=set)  # channels whose ring line NCCL cut short
    ring_next: dict[tuple[int, int], int] = field(default_factory=dict)  # (channel, rank) -> next
    trees: dict[tuple[int, int], tuple[int, tuple[int, ...]]] = field(default_factory=dict)  # -> (up, downs)
    connections: list[Connection] = field(default_factory=list)
    line: int = 0  # where it first appears
    process: tuple[str, str] = ("", "")  # (host, pid) of the first rank seen


@dataclass
class NcclLog:
    path: str
    comms: list[LogComm]
    version: str | None
    warnings: list[str]


@dataclass
class _Thread:
    comm: LogComm | None = None
    pending: list[tuple[int, str]] = field(default_factory=list)


def read_nccl_log(path: str | Path) -> NcclLog:
    """Parse an NCCL INFO log file (see the module docstring); an unreadable file is an InputError naming it."""
    from tracekit.errors import InputError

    path = Path(path)
    try:
        with path.open("rb") as handle:
            data = handle.read(1 << 30)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the NCCL log ({exc.strerror})") from exc
    text = data.decode("utf-8", errors="replace")
    log = parse_nccl_log(text, str(path))
    if not log.comms:
        raise InputError(f"{path}: no NCCL communicator in it (no 'NCCL INFO comm ... rank ... nRanks' line)")
    return log


def parse_nccl_log(text: str, path: str = "<log>") -> NcclLog:
    comms: dict[str, LogComm] = {}
    threads: dict[tuple[str, str, str], _Thread] = {}
    warnings: list[str] = []
    version = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw[:MAX_LINE]
        found = PREFIX.search(line)
        if found is None:
            continue
        msg = found["msg"].rstrip()
        if version is None and (v := VERSION.search(msg)):
            version = v[1]
        thread = threads.setdefault((found["host"], found["pid"], found["tid"]), _Thread())
        try:
            _line(comms, thread, found["host"], found["pid"], int(found["dev"]), number, msg)
        except ValueError as exc:
            warnings.append(f"{path}: line {number}: {exc}")
    _settle(comms, threads)
    return NcclLog(path, list(comms.values()), version, warnings)


def _settle(comms: dict[str, LogComm], threads: dict[tuple[str, str, str], _Thread]) -> None:
    """Join what one process printed for several ranks of one communicator, and give lines printed before
    any comm line of their thread to that process's communicator.

    A process driving several GPUs (nccl-tests -g 8) prints one comm line per rank, with its own pointer;
    only some carry the commId. Within a process, the communicators of one size without a commId join the
    one that has it (or each other), and a thread's leftover lines go to it.
    """
    by_process: dict[tuple[str, str, int], list[str]] = {}
    for key, comm in comms.items():
        host, pid = _process(key, comm)
        by_process.setdefault((host, pid, comm.nranks), []).append(key)
    for keys in by_process.values():
        ids = [k for k in keys if k.startswith("id:")]
        if len(ids) > 1:
            continue  # several communicators of one size in one process: leave them apart
        target = ids[0] if ids else keys[0]
        for key in keys:
            if key != target and key in comms and not key.startswith("id:"):
                _merge(comms, key, target)
    for (host, pid, _tid), thread in threads.items():
        if not thread.pending:
            continue
        candidates = {id(c): c for c in comms.values() if _process(c.key, c) == (host, pid)}
        if len(candidates) == 1:
            _flush(thread, next(iter(candidates.values())))


def _process(key: str, comm: LogComm) -> tuple[str, str]:
    """(host, pid) of a communicator keyed host:pid:pointer, else of its first rank (a commId key)."""
    if not key.startswith("id:"):
        host, pid, _ = key.split(":", 2)
        return host, pid
    return comm.process


def _line(comms: dict[str, LogComm], thread: _Thread, host: str, pid: str, dev: int, number: int, msg: str) -> None:
    if m := COMM.search(msg):
        rank, nranks = _rank(m[2]), _count(m[3])
        comm = _comm(comms, f"{host}:{pid}:{m[1]}", nranks, number)
        comm.host_of[rank], comm.device_of[rank] = host, dev
        thread.comm = comm
        _flush(thread, comm)
        return
    if m := INIT.search(msg):
        rank, nranks = _rank(m[2]), _count(m[3])
        local = f"{host}:{pid}:{m[1]}"
        comm = comms.get(local) or _comm(comms, local, nranks, number)
        before = comm
        if m[5] is not None:  # the commId joins the ranks of one communicator across hosts and processes
            comm = _merge(comms, local, f"id:{m[5].lower()}")
        comm.host_of.setdefault(rank, host)
        comm.device_of.setdefault(rank, int(m[4]))
        _flush(thread, comm)
        if m[6] == "START" or thread.comm is before:
            thread.comm = comm
        return
    if thread.comm is None:
        thread.pending.append((number, msg))
        return
    _attach(thread.comm, number, msg)


def _flush(thread: _Thread, comm: LogComm) -> None:
    for number, msg in thread.pending:
        _attach(comm, number, msg)
    thread.pending.clear()


def _attach(comm: LogComm, number: int, msg: str) -> None:
    if m := RING.match(msg):
        channel, total = _channel(m[1]), _count(m[2], MAX_CHANNELS)
        comm.channels = total
        comm.rings[channel] = [_rank(r) for r in m[3].split()]
        if m[4]:
            comm.cut.add(channel)
    elif m := RANK_RING.match(msg):
        comm.ring_next[(_channel(m[1]), _rank(m[3]))] = _rank(m[4])
    elif m := TREES.match(msg):
        for t in TREE.finditer(m[1]):
            downs = tuple(_rank(d) for d in (t[2], t[3], t[4]) if int(d) >= 0)
            up = int(t[6])
            comm.trees[(_channel(t[1]), _rank(t[5]))] = (_rank(t[6]) if up >= 0 else -1, downs)
    elif m := NET.match(msg):
        nic = int(m[7])
        if nic >= MAX_NICS:
            raise ValueError(f"NIC index {nic} is past {MAX_NICS - 1}")
        proxy = _rank(m[8]) if m[8] is not None else None
        comm.connections.append(
            Connection(_channel(m[1]), int(m[2] or 0), _rank(m[3]), _rank(m[4]), m[5], nic, proxy, number)
        )
    elif m := CHANNELS.match(msg):
        comm.channels = comm.channels or _count(m[1], MAX_CHANNELS)


def _comm(comms: dict[str, LogComm], key: str, nranks: int, number: int) -> LogComm:
    comm = comms.get(key)
    if comm is None:
        host, pid, _ = key.split(":", 2)
        comm = comms[key] = LogComm(key, nranks, line=number, process=(host, pid))
    elif comm.nranks != nranks:
        raise ValueError(f"communicator {key} said {comm.nranks} ranks, now {nranks}")
    return comm


def _merge(comms: dict[str, LogComm], local: str, key: str) -> LogComm:
    """The communicator `local` (one rank's view) joined into the one of id `key`."""
    part = comms.pop(local)
    whole = comms.get(key)
    if whole is None:
        part.key = key
        comms[key] = part
        return part
    if whole.nranks != part.nranks:
        raise ValueError(f"communicator {key} said {whole.nranks} ranks, now {part.nranks}")
    whole.host_of |= part.host_of
    whole.device_of |= part.device_of
    whole.rings |= part.rings
    whole.cut |= part.cut
    whole.ring_next |= part.ring_next
    whole.trees |= part.trees
    whole.connections += part.connections
    whole.channels = whole.channels or part.channels
    whole.line = min(whole.line, part.line)
    return whole


def _rank(text: str) -> int:
    value = int(text)
    if not 0 <= value < MAX_RANKS:
        raise ValueError(f"rank {value} is outside 0..{MAX_RANKS - 1}")
    return value


def _count(text: str, limit: int = MAX_RANKS) -> int:
    value = int(text)
    if not 1 <= value <= limit:
        raise ValueError(f"count {value} is outside 1..{limit}")
    return value


def _channel(text: str) -> int:
    value = int(text)
    if not 0 <= value < MAX_CHANNELS:
        raise ValueError(f"channel {value} is outside 0..{MAX_CHANNELS - 1}")
    return value

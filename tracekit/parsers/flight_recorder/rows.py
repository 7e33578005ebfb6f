"""Flight Recorder entries and groups into rows, by the rulebook (see the package docstring)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracekit.parsers.base import ProcessGroup, TableBuffer, TraceError
from tracekit.parsers.common.groups import group_named, read_process_groups
from tracekit.parsers.common.names import backend_prefix, comm_type_of, dtype_bytes, normalize_dtype
from tracekit.parsers.common.peers import PEER_TYPES, arrow_peer, peer_in_group
from tracekit.parsers.common.rows import CollectiveRow
from tracekit.parsers.common.sizes import is_uneven
from tracekit.parsers.common.values import INT64, MAX_RANKS, Checker, elements, excerpt

if TYPE_CHECKING:
    from tracekit.parsers.base import BatchSink

SOURCE = "flight_recorder"
MAX_ENTRIES = 1 << 20
# Values visited (entries, tensors, dimensions, dtypes, ranks) per byte of the file, and at least
# this many: a real dump visits fewer than one per byte; a pickle that refers to one list over and
# over (a memo get is two bytes) would have a reader visit it millions of times.
WORK_PER_BYTE = 4
WORK_ALLOWANCE = 1 << 20
# A rank list as pg_config writes it: "[0, 1, 2]" (ranks_str in c10d's TraceUtils.h).
_RANK_TEXT = re.compile(r"\s*\[\s*(?:\d{1,7}\s*(?:,\s*\d{1,7}\s*)*)?\]\s*", re.ASCII)
_RANK_NUMBER = re.compile(r"\d+", re.ASCII)
_STATES = frozenset(("scheduled", "started", "completed"))
_DEFAULT = ("0", "default_pg")


class Work:
    """Counts the values visited; refuses the file past its allowance (see WORK_PER_BYTE)."""

    def __init__(self, size: int) -> None:
        self.left = max(WORK_ALLOWANCE, WORK_PER_BYTE * size)
        self.size = size

    def spend(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise TraceError(
                f"the dump refers to the same values over and over (more than {WORK_PER_BYTE} per byte of its "
                f"{self.size:,}): refused",
                "entries",
            )


def read_groups(raw: Any, checker: Checker, work: Work) -> list[ProcessGroup]:
    """The process groups of `pg_config` ({name: {name, desc, ranks}}), bad ones skipped with a warning."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        checker.meta.warn(f"pg_config {excerpt(raw)} is not an object of groups: no groups read", "pg_config")
        return []
    if len(raw) > MAX_RANKS:
        checker.meta.warn(f"pg_config lists {len(raw):,} groups, more than {MAX_RANKS:,}: none read", "pg_config")
        return []
    work.spend(len(raw))
    payload: list[dict[str, Any]] = []
    for key, value in raw.items():
        if not isinstance(value, dict):
            checker.meta.warn(
                f"process group {excerpt(key, 40)} skipped: not an object ({excerpt(value)})", "pg_config"
            )
            continue
        name = value.get("name", key)
        if name == "":
            continue  # gloo's placeholder, recorded before the group had a name (package docstring)
        payload.append({"pg_name": name, "pg_desc": value.get("desc"), "ranks": _ranks(value.get("ranks"), work)})
    return read_process_groups(payload, checker, "pg_config")


def _ranks(raw: Any, work: Work) -> Any:
    """A rank list from its text ("[0, 1]"); anything else as it is, for the group reader to judge."""
    if isinstance(raw, str) and len(raw) <= 9 * MAX_RANKS and _RANK_TEXT.fullmatch(raw):
        ranks = [int(number) for number in _RANK_NUMBER.findall(raw)]
        work.spend(len(ranks))
        return ranks
    if isinstance(raw, list):
        work.spend(len(raw))
    return raw


@dataclass
class _Tensors:
    elems: int | None
    nbytes: int | None
    dtype: str | None


class Entries:
    """Reads the entries of one dump into rows, and keeps what the file as a whole says."""

    def __init__(self, groups: list[ProcessGroup], checker: Checker, work: Work) -> None:
        self.groups = groups
        self.checker = checker
        self.work = work
        self.count = 0
        self._ops: list[dict[str, Any]] = []
        self._op_ids: dict[str, set[int]] = {}
        self._named_default = False
        self.first_us: float | None = None  # the earliest entry's creation, wall-clock µs

    def rows(self, entries: list[Any]) -> Iterator[tuple[int, CollectiveRow]]:
        """(index, row) of each entry that is a collective, in dump order (the order they were recorded)."""
        if len(entries) > MAX_ENTRIES:
            self.checker.meta.warn(
                f"{len(entries):,} entries, more than {MAX_ENTRIES:,}: only the first {MAX_ENTRIES:,} read", "entries"
            )
        for index, entry in enumerate(entries[:MAX_ENTRIES]):
            self.work.spend(1)
            self.count += 1
            where = f"entries[{index}]"
            if not isinstance(entry, dict):
                self.checker.note("entries", "is not an object: skipped", entry, where)
                continue
            row = self._row(index, entry, where)
            if row is not None:
                yield index, row

    def _row(self, index: int, entry: dict[str, Any], where: str) -> CollectiveRow | None:
        check = self.checker
        name = entry.get("profiling_name")
        if not isinstance(name, str):
            check.note("profiling_name", "is not a string: entry skipped", name, where)
            return None
        pg_name, pg_desc = self._group_of(entry.get("process_group"), where)
        created = check.integer(entry.get("time_created_ns"), "time_created_ns", INT64, where)
        start_us = created / 1000 if created is not None else None
        if start_us is not None and (self.first_us is None or start_us < self.first_us):
            self.first_us = start_us
        duration_ms = check.time(entry.get("duration_ms"), "duration_ms", where)
        duration_us = duration_ms * 1000 if duration_ms is not None else None
        state = entry.get("state")
        self._ops.append(
            {
                "op_id": index,
                "name": name,
                "type": state if isinstance(state, str) and state in _STATES else None,
                "start_us": start_us,
                "duration_us": duration_us,
            }
        )
        self._note_op_id(pg_name, entry.get("op_id"))
        self._note_default(pg_name, pg_desc)
        group = group_named(self.groups, pg_name)
        if group is not None and group.backend is None:
            group.backend = backend_prefix(name)
        comm_type = comm_type_of(name)
        if comm_type is None:
            return None  # `coalesced`, `split`, `new_window`: bookkeeping, no transfer of its own
        ins = self._tensors(entry.get("input_sizes"), entry.get("input_dtypes"), "input_sizes", where)
        outs = self._tensors(entry.get("output_sizes"), entry.get("output_dtypes"), "output_sizes", where)
        p2p = comm_type in PEER_TYPES or entry.get("is_p2p") is True
        seq_key = "p2p_seq_id" if p2p else "collective_seq_id"
        raw_seq = entry.get(seq_key)
        inferred: list[str] = []
        row = CollectiveRow(
            op_id=index,
            comm_type=comm_type,
            source=SOURCE,
            op_name=name.split(" ", 1)[0],
            pg_name=pg_name,
            group_size=len(group.ranks) if group is not None and group.ranks else None,
            dtype=ins.dtype or outs.dtype,
            in_elems=ins.elems,
            out_elems=outs.elems,
            in_bytes=ins.nbytes,
            out_bytes=outs.nbytes,
            seq=check.integer(raw_seq, seq_key, INT64, where),
            start_us=start_us,
            duration_us=duration_us,
            inferred=inferred,
        )
        row.is_uneven = is_uneven(name, comm_type, None, None, known=False)
        if comm_type in PEER_TYPES:
            row.peer, guessed = peer_in_group(arrow_peer(name), group)
            if guessed:
                inferred.append("peer")
        return row

    def _group_of(self, raw: Any, where: str) -> tuple[str | None, str | None]:
        """(name, desc) of an entry's `process_group`: a pair of strings (a tuple, a list in JSON)."""
        if isinstance(raw, list | tuple) and len(raw) == 2 and all(isinstance(part, str) for part in raw):
            return raw[0], raw[1]
        if raw is not None:
            self.checker.note("process_group", "is not a (name, desc) pair", raw, where)
        return None, None

    def _tensors(self, sizes: Any, dtypes: Any, field: str, where: str) -> _Tensors:
        """Elements and bytes summed over an entry's tensors, and their element type if they share one."""
        check = self.checker
        if sizes is None:
            return _Tensors(None, None, None)
        if not isinstance(sizes, list | tuple) or len(sizes) > MAX_RANKS:
            check.note(field, "is not a list of tensor shapes", sizes, where)
            return _Tensors(None, None, None)
        self.work.spend(len(sizes))
        kinds = self._dtypes(dtypes, len(sizes), field.replace("sizes", "dtypes"), where)
        total: int | None = 0
        nbytes: int | None = 0
        for position, shape in enumerate(sizes):
            if not isinstance(shape, list | tuple) or len(shape) > MAX_RANKS:
                check.note(field, "holds a shape that is not a list of sizes", sizes, where)
                return _Tensors(None, None, None)
            self.work.spend(len(shape))
            count = elements(list(shape))
            if count is None:
                check.note(field, "holds a shape that is not a list of sizes", sizes, where)
                return _Tensors(None, None, None)
            width = dtype_bytes(kinds[position])
            total = total + count if total is not None else None
            nbytes = nbytes + count * width if nbytes is not None and width is not None else None
        shared = set(kinds)
        dtype = kinds[0] if kinds and len(shared) == 1 else None
        return _Tensors(total, nbytes, dtype)

    def _dtypes(self, raw: Any, count: int, field: str, where: str) -> list[str | None]:
        """The element type of each of `count` tensors (c10 names; one string for all, as PyTorch's
        analyzer tests write it); None where the dump does not say."""
        if isinstance(raw, str):
            return [normalize_dtype(raw)] * count
        if not isinstance(raw, list | tuple):
            if raw is not None:
                self.checker.note(field, "is not a list of element types", raw, where)
            return [None] * count
        self.work.spend(min(len(raw), count))
        kinds = [normalize_dtype(kind) if isinstance(kind, str) else None for kind in raw[:count]]
        return kinds + [None] * (count - len(kinds))

    def _note_op_id(self, pg_name: str | None, raw: Any) -> None:
        if pg_name is not None and raw.__class__ is int and 0 <= raw < 1 << 62:
            self._op_ids.setdefault(pg_name, set()).add(raw)

    def _note_default(self, pg_name: str | None, pg_desc: str | None) -> None:
        if not self._named_default and (pg_name, pg_desc) == _DEFAULT and group_named(self.groups, "0") is None:
            self._named_default = True
            self.groups.append(ProcessGroup(pg_name="0", pg_desc="default_pg", ranks=[]))

    def write_ops(self, sink: BatchSink) -> None:
        buffer = TableBuffer("ops", sink)
        for row in self._ops:
            buffer.append(row)
        buffer.flush()
        self._ops = []

    def note_gaps(self) -> None:
        """Warn of operations that left no entry: op_id counts every operation of a group, and gloo
        records no send/recv (the package docstring)."""
        missing = {name: max(ids) - min(ids) + 1 - len(ids) for name, ids in sorted(self._op_ids.items())}
        missing = {name: count for name, count in missing.items() if count}
        if missing:
            groups = ", ".join(f"{name!r}: {count:,}" for name, count in list(missing.items())[:8])
            self.checker.meta.warn(
                f"{sum(missing.values()):,} operations between the first and last entry of their process group "
                f"left no entry ({groups}; gloo records no send/recv)",
                "entries",
            )

    def world_size(self) -> int | None:
        """The world's size when the dump lists the default group's ranks (NCCL: every rank)."""
        default = group_named(self.groups, "0") or next((g for g in self.groups if g.pg_desc == "default_pg"), None)
        return len(default.ranks) if default is not None and default.ranks else None

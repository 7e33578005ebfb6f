"""Process groups: one reader for every place and every PyTorch generation that records them.

PyTorch writes `torch.distributed.distributed_c10d._world.pg_config_info`, a list with one entry
per process group of the rank, into the PyTorch ET `## process_group:init ##` node (as JSON text,
which Chakra's converter wraps once more in Python `str()` of the input list) and into Kineto's
`distributedInfo.pg_config` (as JSON). Over the versions an entry has been:

* oldest: `{"pg_id": 0, "backend_id": .., "backend_config": "cuda:nccl", "ranks": {"4": 0, "5": 1}}`
  where `ranks` is `_world.pg_group_ranks[pg]`, a dict {global rank: group rank}: the group's
  global ranks are its keys, ordered by their values, so {"4": 0, "5": 1} is ranks [4, 5], size 2;
* later: `{"pg_name": "1", "pg_desc": .., "backend_config": .., "ranks": [0, 2], "group_size": 2,
  "group_count": ..}` where `ranks` is the list of global ranks in group order, and an empty list
  when the group holds every rank (its order is then not recorded);
* Kineto's own copy names the size `pg_size`.

One policy: an entry that cannot be read (no name, ranks that are not ranks, a size out of
bounds, a rank listed twice) is skipped and noted on the file as a warning; the other entries stand.
A payload that is not a list of entries at all is one warning and no groups. Never an error.

Cost. A payload is the one text longer than MAX_TEXT_CHARS a reader takes (it lists every group of
the job: megabytes at 2**20 ranks), so it is read in passes of C code, whatever it holds: JSON by
`json`, the Python form of Chakra's converter (`['<JSON text>']`) by decoding its one string, and
only a short other Python literal by `ast.literal_eval` (which builds a tree of some 500 bytes per
item: 42 s and 4 GB for 8 MiB of `1,`). Entries that are no groups are counted, the first
_LISTED_BAD of them named (4 M of them took 15 s, a warning built for each). A name, description or
backend longer than MAX_TEXT_CHARS is a bad value like any other (tracekit.parsers.common.values).
"""

from __future__ import annotations

import ast
import json
from typing import Any

from tracekit.parsers.base import ProcessGroup
from tracekit.parsers.common.names import backend_name
from tracekit.parsers.common.values import MAX_RANKS, MAX_TEXT_CHARS, RANK, SIZE, Checker, as_int, excerpt

# Unwrapping JSON text inside Python text inside a list happens a bounded number of times.
_MAX_UNWRAP = 4
# Entries that are no groups named one by one; the others are counted in one line.
_LISTED_BAD = 3
# The longest Python literal other than Chakra's one-string list given to ast.literal_eval.
_MAX_LITERAL_CHARS = 1 << 16


class _Unreadable(Exception):
    def __init__(self, reason: str, value: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.value = value


def read_process_groups(payload: Any, checker: Checker, where: str | None) -> list[ProcessGroup]:
    """The process groups of a `pg_config_info` payload (text, list or dict), bad entries skipped."""
    if payload is None:
        return []
    try:
        entries = _entries(payload)
    except _Unreadable as exc:
        checker.meta.warn(f"process-group record {excerpt(exc.value)} {exc.reason}: no groups read", where)
        return []
    groups = []
    bad = 0
    for entry in entries:
        if entry.__class__ is dict and ("pg_name" in entry or "pg_id" in entry):
            try:
                groups.append(_group(entry, checker, where))
                continue
            except _Unreadable as exc:
                error = exc
        else:
            error = None  # no group at all: worded only if it is among the first listed
        bad += 1
        if bad > _LISTED_BAD:
            continue
        if error is None:
            error = _Unreadable("is not an object" if not isinstance(entry, dict) else "has no pg_name or pg_id", entry)
        name = entry.get("pg_name", entry.get("pg_id")) if isinstance(entry, dict) else None
        label = f"process group {excerpt(name, 40)}" if name is not None else "a process group entry"
        checker.meta.warn(f"{label} skipped: {error.reason} ({excerpt(error.value)})", where)
    if bad > _LISTED_BAD:
        more = bad - _LISTED_BAD
        checker.meta.warn(
            f"{more:,} more process-group entries skipped (only the first {_LISTED_BAD} are listed)", where
        )
    return groups


def merge_groups(known: list[ProcessGroup], more: list[ProcessGroup]) -> list[ProcessGroup]:
    """`known` updated by a later record: a group named again is replaced, new ones are added."""
    by_name = {g.pg_name: g for g in known}
    by_name.update((g.pg_name, g) for g in more)
    return list(by_name.values())


def _entries(payload: Any) -> list[Any]:
    value = payload
    for _ in range(_MAX_UNWRAP):
        if isinstance(value, list | tuple) and len(value) == 1 and isinstance(value[0], str):
            value = value[0]  # the ET input list (str() of it, in Chakra files) wraps the JSON text
        if not isinstance(value, str):
            break
        value = _decode_text(value)
    if isinstance(value, dict):
        # Kineto may key entries by group id; otherwise the dict is one entry.
        value = list(value.values()) if value and all(isinstance(v, dict) for v in value.values()) else [value]
    if not isinstance(value, list | tuple):
        raise _Unreadable("is not a list of process groups", payload)
    return list(value)


def _decode_text(text: str) -> Any:
    stripped = text.strip()
    if not stripped:
        return []
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):
        pass
    wrapped = _one_string_list(stripped)
    if wrapped is not None:
        return wrapped
    if len(stripped) > _MAX_LITERAL_CHARS:
        raise _Unreadable(f"is no JSON, and too long ({len(stripped):,} characters) for a Python literal", text)
    try:
        return ast.literal_eval(stripped)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise _Unreadable("is neither JSON nor a Python literal", text) from None


def _one_string_list(text: str) -> list[str] | None:
    """The list of `str([json_text])`, Chakra's converter's form of the ET input, read as one
    string: its literal decoded by the codec, and taken only if it is exactly the literal repr()
    writes for what it decoded to. None for any other text."""
    if len(text) < 4 or text[0] != "[" or text[-1] != "]" or text[1] not in "'\"" or text[-2] != text[1]:
        return None
    body = text[2:-2]
    try:
        value = body.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except (UnicodeDecodeError, UnicodeEncodeError):
        return None
    return [value] if f"[{value!r}]" == text else None


def _group(entry: dict[str, Any], checker: Checker, where: str | None) -> ProcessGroup:
    name = entry.get("pg_name", entry.get("pg_id"))
    if name is None or isinstance(name, bool) or not isinstance(name, str | int):
        raise _Unreadable("has no pg_name or pg_id", name)
    if isinstance(name, str) and len(name) > MAX_TEXT_CHARS:
        raise _Unreadable(f"its pg_name is {len(name):,} characters long, more than {MAX_TEXT_CHARS:,}", name)
    ranks = group_ranks(entry.get("ranks"))
    raw_size = entry.get("group_size", entry.get("pg_size"))
    size = as_int(raw_size) if raw_size is not None else (len(ranks) if ranks else None)
    if raw_size is not None and (size is None or not SIZE.holds(size)):
        raise _Unreadable(f"size is not a group size in [{SIZE.low}, {SIZE.high}]", raw_size)
    desc = checker.text(entry.get("pg_desc"), "pg_desc", where)
    return ProcessGroup(
        pg_name=str(name),
        pg_desc=desc if isinstance(desc, str) else None,
        backend=backend_name(checker.text(entry.get("backend_config"), "backend_config", where)),
        group_size=size,
        ranks=ranks,
    )


def group_ranks(raw: Any) -> list[int]:
    """Global ranks of a group in group order, from every layout PyTorch wrote (see above)."""
    if raw is None:
        return []
    if isinstance(raw, dict):
        pairs = []
        for glob, local in raw.items():
            g, k = as_int(glob), as_int(local)
            if g is None or k is None or not RANK.holds(g) or not RANK.holds(k):
                raise _Unreadable("ranks are not a {global rank: group rank} map", raw)
            pairs.append((k, g))
        ranks = [g for _, g in sorted(pairs)]
    elif isinstance(raw, list) and len(raw) <= MAX_RANKS:
        ranks = []
        for item in raw:
            rank = as_int(item)
            if rank is None or not RANK.holds(rank):
                raise _Unreadable(f"ranks are not a list of ranks in [0, {RANK.high}]", raw)
            ranks.append(rank)
    else:
        raise _Unreadable("ranks are not a list of ranks", raw)
    if len(set(ranks)) != len(ranks):
        raise _Unreadable("ranks list a rank twice", raw)
    return ranks


def group_named(groups: list[ProcessGroup], name: str | None) -> ProcessGroup | None:
    if name is None:
        return None
    return next((g for g in groups if g.pg_name == name), None)


def default_group(groups: list[ProcessGroup]) -> ProcessGroup | None:
    """The default (world) group: named '0', else described 'default_pg', else the only group."""
    found = group_named(groups, "0") or next((g for g in groups if g.pg_desc == "default_pg"), None)
    if found is None and len(groups) == 1:
        found = groups[0]
    return found


def only_group(groups: list[ProcessGroup]) -> ProcessGroup | None:
    """The group of an op that names none: the rank's only group, when it has exactly one.

    `pg_config_info` lists every group the rank belongs to, so with one listed an op can run in no
    other; the row marks pg_name and group_size as inferred.
    """
    return groups[0] if len(groups) == 1 else None

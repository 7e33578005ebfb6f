"""Sizes: split lists and the unevenness of a collective.

`in_splits`/`out_splits` are the elements a rank sends to / receives from each peer, as an
all-to-all(v) records them: a list, or its text ('[4, 2, 5, 3]'; Kineto abbreviates long ones
with '...', which is not the whole list and so is not read). `is_uneven` is True for the
variable-split all-to-all and whenever a split list holds different values; False when the splits
are known and equal, or the collective cannot be uneven; null when an all-to-all, all-gather,
reduce-scatter, gather or scatter records nothing that tells.
"""

from __future__ import annotations

from typing import Any

from tracekit.parsers.common.names import is_uneven_name
from tracekit.parsers.common.values import COUNT, Checker, as_int

# Collectives whose per-peer sizes may differ; for the others "no splits" means even.
SPLITTABLE_TYPES = frozenset({"ALL_TO_ALL", "ALL_GATHER", "REDUCE_SCATTER", "GATHER", "SCATTER"})


def is_uneven(
    name: str | None, comm_type: str | None, in_splits: list[int] | None, out_splits: list[int] | None, known: bool
) -> bool | None:
    """`known`: the trace records the splits (perhaps as empty lists) or the op has even shards."""
    if is_uneven_name(name):
        return True
    for splits in (in_splits, out_splits):
        if splits and len(set(splits)) > 1:
            return True
    if known or in_splits or out_splits or comm_type not in SPLITTABLE_TYPES:
        return False
    return None


def split_sizes(value: Any, field: str, checker: Checker, where: str | None) -> list[int] | None:
    """A split list from a JSON list or its text; None when absent, abbreviated or unreadable
    (unreadable ones are noted on the file)."""
    if value is None:
        return None
    if isinstance(value, list):
        return checker.integers(value, field, COUNT, where)
    if not isinstance(value, str):
        checker.note(field, "is not a list of split sizes", value, where)
        return None
    text = value.strip()
    if "..." in text or "…" in text:
        return None  # abbreviated by the profiler: not the whole list
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    items = [as_int(part) for part in text.split(",") if part.strip()]
    if any(item is None for item in items):
        checker.note(field, "is not a list of split sizes", value, where)
        return None
    return checker.integers(items, field, COUNT, where)

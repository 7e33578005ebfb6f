"""Sizes: split lists and the unevenness of a collective.

`in_splits`/`out_splits` are the elements a rank sends to / receives from each peer, read from an
all-to-all(v)'s record: a list, or its text ('[4, 2, 5, 3]'; Kineto abbreviates long ones with
'...', which is not the whole list and so is not read).

PyTorch records split sizes as c10d takes them: sizes along dimension 0 of the tensor, not
elements (`in_split_size`/`out_split_size`, the `input_split_sizes` argument, Kineto's
"In split size"). For a 1-D tensor the two agree (the DLRM trace: sum(in_splits) == in_elems); for
a tensor of rows they count rows (sample moe_alltoall: rows of 32, sum(splits) x 32 == in_elems).
The rule (`splits_in_elements`): when sum(splits) divides the element count of its side exactly,
the splits are multiplied by the quotient (the row width) and marked inferred if it is not 1; when
it does not divide, or the element count is unknown, their unit cannot be told and they are null,
with a warning. All-zero splits of an empty buffer stay as they are.

`is_uneven` is True for the variable-split all-to-all and whenever a split list holds different
values; False when the splits are known and equal, or the collective cannot be uneven; null when an
all-to-all, all-gather, reduce-scatter, gather or scatter records nothing that tells. It does not
depend on the unit of the splits, so it is told from them as recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.parsers.common.names import is_uneven_name
from tracekit.parsers.common.values import COUNT, MAX_RANKS, Checker, as_int

if TYPE_CHECKING:
    from tracekit.parsers.common.rows import CollectiveRow

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
    if text.count(",") >= MAX_RANKS:  # counted before anything is parsed: a split per rank at most
        checker.note(field, f"holds more than {MAX_RANKS:,} values, a split per rank", value, where)
        return None
    parts = text.split(",")
    items = _decimals(text, parts)
    if items is not None:
        if items and not COUNT.low <= min(items) <= max(items) <= COUNT.high:
            return checker.integers(items, field, COUNT, where)  # words the warning
        return items
    read = [as_int(part) for part in parts if part.strip()]
    if any(item is None for item in read):
        checker.note(field, "is not a list of split sizes", value, where)
        return None
    return checker.integers(read, field, COUNT, where)


# What a list of decimals is made of; `_decimals` reads one in a single pass when it holds nothing else.
_DECIMAL_CHARS = b"0123456789,+- \t\n\r\f\v"
_DECIMAL_PART_CHARS = 41  # as_int reads at most 40 digits and a sign (longer parts: part by part)


def _decimals(text: str, parts: list[str]) -> list[int] | None:
    """The integers of comma-separated decimals, as `as_int` reads each part (empty parts skipped),
    with int() in one pass; None when the text holds anything else (read part by part then)."""
    if not text.isascii() or text.encode().translate(None, _DECIMAL_CHARS):
        return None
    if max(map(len, parts)) > _DECIMAL_PART_CHARS:
        return None
    try:
        return [int(part) for part in parts if part and not part.isspace()]
    except ValueError:  # "1 2", "+-1", a lone sign
        return None


def splits_in_elements(row: CollectiveRow, checker: Checker, where: str | None) -> None:
    """The row's split lists in elements, by the rule of the module docstring (after bounds checks)."""
    for field, elems_field in (("in_splits", "in_elems"), ("out_splits", "out_elems")):
        splits: list[int] | None = getattr(row, field)
        if not splits:
            continue
        elems: int | None = getattr(row, elems_field)
        total = sum(splits)
        if elems is not None and total == elems:
            continue
        if elems is None or total == 0 or elems % total:
            told = "no element count to tell their unit by" if elems is None else f"{elems_field} = {elems}"
            checker.note(field, f"are neither elements nor rows of equal width ({told})", splits, where)
            setattr(row, field, None)
            continue
        width = elems // total
        setattr(row, field, [size * width for size in splits])
        row.inferred = [*(row.inferred or []), field]

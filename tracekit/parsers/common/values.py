"""Values: the one policy for a number read from a trace file, and the bounds it must lie in.

A value read from a file is untrusted. One that cannot be read as the kind of value its column
holds (a string where a count belongs), or that lies outside the bounds below, becomes null for that
field, and the file gets a warning (`TraceMeta.warn`, stored in `traces.warnings`) that names the
field, the place and a short escaped excerpt of the value. It never raises and never costs the
file: a structural problem (not JSON, no nodes list, a truncated record) is a TraceError, a bad
value is not. Warnings about one field are counted on the first one, so a file with a million bad
values gets one line per field, not a million.

The bounds, and why:

* ranks and peers in [0, MAX_RANKS), world and group sizes in [1, MAX_RANKS], MAX_RANKS = 2**20:
  beyond any real cluster (Llama 3 trained on 16,384 GPUs), yet small enough that a claimed world
  size can never size an allocation or a loop that takes down an ingest;
* element and byte counts in [0, 2**62] (4 EiB): beyond any real message, and a bound below the
  int64 columns' limit, so that a sum of a few counts cannot overflow what SQL adds up; a byte count
  computed from elements (up to 16 bytes each) is checked against it too;
* ids, sequence numbers and record-function ids in the int64 range of their columns; a hash id
  PyTorch writes as a size_t (Kineto's `Comms Id`) in the uint64 range;
* flags (Kineto's `Is asynchronized op`, the PyTorch ET's `is_asynchronized_op`): 0 or 1, true or
  false, as a number, a boolean or a string;
* times (microseconds) finite;
* strings (`MAX_TEXT_CHARS`, 2**20 characters): the longest a reader takes from a node or an event,
  its name, an attribute or an argument (the longest in the public and sample traces: 2,266, an ET
  input type). A longer name is cut to its first MAX_TEXT_CHARS characters (it still names the op);
  any other longer value is dropped, as one that does not fit its column is. The readers check
  where a value enters (`Checker.text`, `Checker.name`), so that no rule after them parses
  megabytes (a split list of 8 MiB took 6 s). A process-group payload is the one longer text read:
  it lists every group of the job (tracekit.parsers.common.groups), and its limit is the record's.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracekit.parsers.base import TraceMeta, TraceWarning

if TYPE_CHECKING:
    from tracekit.parsers.common.rows import CollectiveRow

MAX_RANKS = 1 << 20
MAX_COUNT = 1 << 62
MAX_TEXT_CHARS = 1 << 20
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# Longer excerpts of a bad value are cut: a warning is one line, whatever the file holds.
EXCERPT_CHARS = 80
# A decimal string longer than this is no int64 (19 digits) with room to spare: not parsed, so
# that a megabyte of digits costs nothing (and int() of it would raise).
_MAX_DIGITS = 40
_DECIMAL = re.compile(rf"\s*[+-]?[0-9]{{1,{_MAX_DIGITS}}}\s*", re.ASCII)


@dataclass(frozen=True)
class Bound:
    """Inclusive integer bounds of a field (the reasons are in the module docstring)."""

    low: int
    high: int

    def holds(self, value: int) -> bool:
        return self.low <= value <= self.high


RANK = Bound(0, MAX_RANKS - 1)
SIZE = Bound(1, MAX_RANKS)
COUNT = Bound(0, MAX_COUNT)
INT64 = Bound(INT64_MIN, INT64_MAX)
UINT64 = Bound(0, (1 << 64) - 1)

# Bounds of the integer fields of a collective row; split lists hold counts, per peer.
ROW_BOUNDS: dict[str, Bound] = {
    "op_id": INT64,
    "group_size": SIZE,
    "peer": RANK,
    "in_elems": COUNT,
    "out_elems": COUNT,
    "in_bytes": COUNT,
    "out_bytes": COUNT,
    "seq": INT64,
    "rf_id": INT64,
}
ROW_LISTS: dict[str, Bound] = {"in_splits": COUNT, "out_splits": COUNT}
ROW_TIMES = ("start_us", "duration_us")


def as_int(value: Any) -> int | None:
    """An integer as files write them: a JSON integer, an integral float, or a decimal string.

    None for anything else (booleans included). Bounds are not checked here.
    """
    if value.__class__ is int:
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return int(value)
    return None


_FLAGS = {"0": False, "1": True, "false": False, "true": True}


def as_flag(value: Any) -> bool | None:
    """A flag as files write it (`true`, `1`, `"1"`, `"true"`; their false forms); None for anything else."""
    if isinstance(value, bool):
        return value
    if value.__class__ is int:
        return {0: False, 1: True}.get(value)
    if isinstance(value, str) and len(value) <= 8:
        return _FLAGS.get(value.strip().lower())
    return None


def as_number(value: Any) -> float | None:
    """A finite float from a JSON number; None for anything else (booleans, huge ints included)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def elements(shape: list[Any]) -> int | None:
    """The element count of a tensor shape: None when a dimension is no count (negative, not an
    integer). Past COUNT's bound the product stops growing (MAX_COUNT + 1, which the row check
    nulls), so that a shape of thousands of huge dimensions costs no giant multiplication."""
    sizes = [as_int(d) for d in shape]
    if any(size is None or size < 0 for size in sizes):
        return None
    if 0 in sizes:
        return 0
    total = 1
    for size in sizes:
        total = min(total * size, MAX_COUNT + 1)  # type: ignore[operator]
    return total


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """A short printable rendering of a bad value for a warning: escaped, at most `limit` chars.

    Never renders more than it shows (a huge integer, a long or deeply nested list costs nothing),
    and escapes lone surrogates and control characters, so the text is always writable as UTF-8.
    """
    text = _render(value, limit, _EXCERPT_DEPTH)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


# Containers are rendered this deep, then as `…`: an excerpt shows the shape, not the contents.
_EXCERPT_DEPTH = 4


def _render(value: Any, limit: int, depth: int) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        bits = value.bit_length()
        return str(value) if bits <= 128 else f"<{'-' if value < 0 else ''}integer of {bits} bits>"
    if isinstance(value, str):
        return repr(value[: limit + 1])  # repr escapes surrogates and control characters
    if isinstance(value, bytes):
        return repr(value[: limit + 1])
    if isinstance(value, list | tuple | dict):
        if depth == 0:
            return "[…]" if not isinstance(value, dict) else "{…}"
        items = list(value.items())[:4] if isinstance(value, dict) else value[:8]
        parts: list[str] = []
        used = 0
        for item in items:
            if used > limit:
                break
            if isinstance(value, dict):
                key, inner = item
                part = f"{_render(key, limit, 0)}: {_render(inner, limit, depth - 1)}"
            else:
                part = _render(item, limit, depth - 1)
            parts.append(part)
            used += len(part) + 2
        more = ", …" if len(value) > len(parts) else ""
        inner_text = ", ".join(parts) + more
        return "{" + inner_text + "}" if isinstance(value, dict) else f"[{inner_text}]"
    return f"<{type(value).__name__}>"


def too_long(value: Any, depth: int = _EXCERPT_DEPTH) -> bool:
    """Whether `value` is, or holds in lists and dicts `depth` deep, a string longer than MAX_TEXT_CHARS."""
    if value.__class__ is str:
        return len(value) > MAX_TEXT_CHARS
    if depth and isinstance(value, list | tuple):
        return any(too_long(item, depth - 1) for item in value)
    if depth and isinstance(value, dict):
        return any(too_long(item, depth - 1) for item in value.values())
    return False


def _length_text(value: Any) -> str:
    if isinstance(value, str):
        return f"is {len(value):,} characters long, more than {MAX_TEXT_CHARS:,}"
    return f"holds a string longer than {MAX_TEXT_CHARS:,} characters"


def _bounds_text(bound: Bound) -> str:
    return f"[{bound.low}, {bound.high}]"


class Checker:
    """Applies the value policy for one file: reads and bounds values, nulls bad ones, warns once
    per field (with a count of the others)."""

    def __init__(self, meta: TraceMeta) -> None:
        self.meta = meta
        self._noted: dict[str, tuple[int, int, TraceWarning]] = {}  # field -> (index, count, first)

    def note(
        self, field: str, problem: str, value: Any, where: str | None, outcome: str = "left null", count: int = 1
    ) -> None:
        """Record that `field` was left null (or had `outcome`) because its `value` has `problem`
        (`count` values alike at once: the first is the one named)."""
        seen = self._noted.get(field)
        if seen is None:
            warning = TraceWarning(f"{field} = {excerpt(value)} {problem}: {outcome}", where)
            self.meta.warnings.append(warning)
            self._noted[field] = (len(self.meta.warnings) - 1, 1, warning)
            if count > 1:
                self.meta.warnings[-1] = TraceWarning(f"{warning.message} ({count} values in this file)", where)
                self._noted[field] = (len(self.meta.warnings) - 1, count, warning)
            return
        index, total, first = seen
        count += total
        self._noted[field] = (index, count, first)
        self.meta.warnings[index] = TraceWarning(f"{first.message} ({count} values in this file)", first.where)

    def text(self, value: Any, field: str, where: str | None) -> Any:
        """`value`, or None (noted) when it is or holds a string longer than MAX_TEXT_CHARS."""
        if not too_long(value):
            return value
        self.note(field, _length_text(value), value, where, "dropped")
        return None

    def name(self, value: str, field: str, where: str | None) -> str:
        """A name cut to its first MAX_TEXT_CHARS characters (noted when it was longer)."""
        if len(value) <= MAX_TEXT_CHARS:
            return value
        self.note(field, _length_text(value), value, where, f"cut to its first {MAX_TEXT_CHARS:,}")
        return value[:MAX_TEXT_CHARS]

    def integer(self, value: Any, field: str, bound: Bound, where: str | None) -> int | None:
        """`value` as an integer within `bound`; None (with a warning) when it is not one."""
        if value is None:
            return None
        number = as_int(value)
        if number is None:
            self.note(field, "is not an integer", value, where)
            return None
        if not bound.holds(number):
            self.note(field, f"is out of bounds {_bounds_text(bound)}", value, where)
            return None
        return number

    def flag(self, value: Any, field: str, where: str | None) -> bool | None:
        """`value` as a flag (as_flag); None (with a warning) when it is not one."""
        if value is None:
            return None
        flag = as_flag(value)
        if flag is None:
            self.note(field, "is not a flag (0, 1, true or false)", value, where)
        return flag

    def bounded(self, value: int | None, field: str, bound: Bound, where: str | None) -> int | None:
        """An integer already read, checked against `bound`."""
        if value is None or bound.holds(value):
            return value
        self.note(field, f"is out of bounds {_bounds_text(bound)}", value, where)
        return None

    def time(self, value: Any, field: str, where: str | None) -> float | None:
        """A time in microseconds: a finite number, else None with a warning."""
        return self.number(value, field, where)

    def number(self, value: Any, field: str, where: str | None) -> float | None:
        """A finite number, else None with a warning."""
        if value is None:
            return None
        if value.__class__ is float and math.isfinite(value):
            return value
        number = as_number(value)
        if number is None:
            self.note(field, "is not a finite number", value, where)
        return number

    def integers(self, value: Any, field: str, bound: Bound, where: str | None) -> list[int] | None:
        """A list of integers within `bound`; None (with a warning) when any item is not one."""
        if value is None:
            return None
        if not isinstance(value, list) or len(value) > MAX_RANKS:
            self.note(field, "is not a list of integers", value, where)
            return None
        out = []
        for item in value:
            number = as_int(item)
            if number is None or not bound.holds(number):
                self.note(field, f"holds {excerpt(item, 40)}, not an integer in {_bounds_text(bound)}", value, where)
                return None
            out.append(number)
        return out

    def row(self, row: CollectiveRow, where: str | None) -> CollectiveRow:
        """Bound every field of a finished collective row (sizes are often computed, not read)."""
        for name, bound in ROW_BOUNDS.items():
            value = getattr(row, name)
            if value is not None and not bound.holds(value):
                self.note(name, f"is out of bounds {_bounds_text(bound)}", value, where)
                setattr(row, name, None)
        for name, bound in ROW_LISTS.items():
            items = getattr(row, name)
            if items is not None and len(items) > MAX_RANKS:
                self.note(name, f"holds {len(items)} values, more than {MAX_RANKS} ranks", items, where)
                setattr(row, name, None)
            elif items and not bound.low <= min(items) <= max(items) <= bound.high:
                self.note(name, f"holds a value out of bounds {_bounds_text(bound)}", items, where)
                setattr(row, name, None)
        for name in ROW_TIMES:
            value = getattr(row, name)
            if value is not None and not math.isfinite(value):
                self.note(name, "is not a finite number", value, where)
                setattr(row, name, None)
        return row

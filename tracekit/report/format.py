"""How the report writes numbers and names: bytes in binary units, shares in percent, collectives in
NCCL's spelling. Headlines, charts and tables all use these, so a number reads the same everywhere."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date
from typing import Any

from tracekit.schema import COMM_TYPE_TABLE

COMM_NAMES = {c.name: c.display for c in COMM_TYPE_TABLE}  # NCCL's spelling of each comm_type
# Fixed colours, so that a collective has the same colour in every chart (Tableau 10 and its light tints).
COMM_COLORS = {
    "AllReduce": "#4e79a7",
    "AllToAll": "#f28e2b",
    "AllGather": "#59a14f",
    "ReduceScatter": "#e15759",
    "Send": "#76b7b2",
    "Recv": "#a0cbe8",
    "Broadcast": "#edc948",
    "Reduce": "#b07aa1",
    "Gather": "#ff9da7",
    "Scatter": "#9c755f",
    "Barrier": "#bab0ac",
}
_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def fsum(series: Any) -> float:
    """A polars column's sum as a float (0 for an empty or all-null column). Summed as floats: polars
    sums a 64-bit integer column in 64 bits, wrapping around past 2^63 (three byte counts of 2^62)."""
    import polars as pl

    return float(series.cast(pl.Float64).sum() or 0)


def exact_sum(series: Any) -> int:
    """A polars integer column's exact sum (0 for an empty or all-null column), in 128 bits."""
    import polars as pl

    return int(series.cast(pl.Int128).sum() or 0)


def round_float(value: float) -> float:
    """Twelve significant digits: enough for any chart, and the same page for the same data (DuckDB's parallel
    sums of doubles may differ in their last bits from run to run)."""
    return float(f"{value:.12g}") if math.isfinite(value) else value


def fmax(series: Any) -> float:
    value = series.max()
    return float(value) if value is not None else math.nan


def fmin(series: Any) -> float:
    value = series.min()
    return float(value) if value is not None else math.nan


def comm_name(comm_type: str | None) -> str:
    return COMM_NAMES.get(comm_type or "", comm_type or "unknown")


def plural(count: float | None, word: str, words: str | None = None) -> str:
    """'job' or 'jobs' for a count."""
    return word if count == 1 else (words or f"{word}s")


def names_list(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    if len(names) <= 1:
        return "".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"


def human_bytes(value: float | None) -> str:
    """1536 -> '1.5 KiB', 26214400 -> '25 MiB' (three significant digits at most)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    value = float(value)
    unit = 0
    while abs(value) >= 1024 and unit < len(_BINARY) - 1:
        value /= 1024
        unit += 1
    return f"{_sig(value)} {_BINARY[unit]}"


def human_count(value: float | None) -> str:
    if value is None:
        return "–"
    if float(value).is_integer():
        return f"{int(value):,}"
    return _sig(float(value))


def human_elems(value: float | None) -> str:
    """Elements with SI prefixes: 10485760 -> '10.5M'."""
    if value is None:
        return "–"
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= factor:
            return f"{_sig(value / factor)}{suffix}"
    return _sig(float(value))


def percent(share: float | None) -> str:
    """A share in [0, 1] as a percentage: whole numbers, one decimal near 0 and 100."""
    if share is None:
        return "–"
    pct = share * 100
    if 0 < pct < 1 or 99 < pct < 100:
        text = f"{pct:.1f}"
        if text in ("100.0", "0.0"):
            text = f"{pct:.2f}"
        return f"{text}%"
    return f"{pct:.0f}%"


def ratio(value: float) -> str:
    """A growth factor with two significant digits: ×1.5, ×0.094, ×12."""
    if value == 0:
        return "×0"
    digits = max(0, 1 - int(math.floor(math.log10(abs(value)))))
    return f"×{value:,.{digits}f}"


def microseconds(value: float | None) -> str:
    if value is None:
        return "–"
    if abs(value) >= 1e6:
        return f"{_sig(value / 1e6)} s"
    if abs(value) >= 1e3:
        return f"{_sig(value / 1e3)} ms"
    return f"{_sig(value)} µs"


def gbps(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{_sig(value)} GB/s"


def period_name(start: date, months: int) -> str:
    if months == 3:
        return f"{start.year} Q{(start.month - 1) // 3 + 1}"
    if months == 6:
        return f"{start.year} H{(start.month - 1) // 6 + 1}"
    if months == 12:
        return str(start.year)
    return f"{start.year}-{start.month:02d}"


def _sig(value: float) -> str:
    """Three significant digits, no trailing zeros: 25.0 -> '25', 1.546 -> '1.55', 1234.5 -> '1,234'."""
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    digits = 2 - int(math.floor(math.log10(abs(value))))
    text = f"{value:.{max(0, digits)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


@dataclass(frozen=True)
class Num:
    """A number in a headline: `key` names it for tests and tools, `value` is exact, `text` is shown."""

    key: str
    value: float | int | str
    text: str


Sentence = list[str | Num]

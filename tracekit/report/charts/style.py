"""What every chart of the report shares: its width, font and colours, binary-unit axis labels,
power-of-two ticks, the collectives' colours, and `finish`, which styles a chart and returns its spec.

Sizes span orders of magnitude, so byte and GPU axes are logarithmic (base 2) and labelled in binary units.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tracekit.report.format import COMM_COLORS, COMM_NAMES, round_float

if TYPE_CHECKING:
    import altair as alt
    import polars as pl

Spec = dict[str, Any]

WIDTH = 640
FONT = "Helvetica Neue, Helvetica, Arial, sans-serif"
BLUE, RED, GREY = "#4e79a7", "#e15759", "#9d9d9d"
# Vega expression: a byte count in binary units (axis labels of byte scales).
BYTES_LABEL = (
    "datum.value >= 1099511627776 ? format(datum.value / 1099511627776, '~g') + ' TiB' : "
    "datum.value >= 1073741824 ? format(datum.value / 1073741824, '~g') + ' GiB' : "
    "datum.value >= 1048576 ? format(datum.value / 1048576, '~g') + ' MiB' : "
    "datum.value >= 1024 ? format(datum.value / 1024, '~g') + ' KiB' : format(datum.value, '~g') + ' B'"
)
MICROSECONDS_LABEL = (
    "datum.value >= 1e6 ? format(datum.value / 1e6, '~g') + ' s' : "
    "datum.value >= 1e3 ? format(datum.value / 1e3, '~g') + ' ms' : format(datum.value, '~g') + ' µs'"
)


def finish(chart: Any) -> Spec:
    spec: Spec = (
        chart.configure(font=FONT)
        .configure_axis(labelFontSize=11, titleFontSize=12, titleFontWeight="normal", gridColor="#ececec")
        .configure_title(fontSize=14, anchor="start", subtitleFontSize=11, subtitleColor="#555", offset=10)
        .configure_legend(labelFontSize=11, titleFontSize=11, titleFontWeight="normal", labelLimit=220)
        .configure_view(stroke="#ddd")
        .to_dict()
    )
    for values in spec.get("datasets", {}).values():
        for row in values:
            for key, value in row.items():
                if isinstance(value, float):
                    row[key] = round_float(value)
    return spec


def heading(text: str, subtitle: str | list[str]) -> alt.TitleParams:
    import altair as alt

    return alt.TitleParams(text, subtitle=subtitle)


def pow2_ticks(low: float, high: float, most: int = 9) -> list[float]:
    """Powers of two, every 2^step-th, from one at or below `low` to one at or above `high`: at most `most`."""
    lo = math.floor(math.log2(low)) if low > 0 else 0
    hi = max(math.ceil(math.log2(high)) if high > 0 else 1, lo + 1)
    # Steps that divide 10, so that 1 KiB, 1 MiB, 1 GiB are ticks whenever they can be.
    step = next((k for k in (1, 2, 5, 10, 20, 40) if -(-(hi - lo) // k) + 1 <= most), 40)
    start = lo - lo % step
    end = start + step * -(-(hi - start) // step)
    return [2.0**k for k in range(start, end + 1, step)]


def comm_scale(names: list[str]) -> alt.Scale:
    import altair as alt

    domain = [n for n in COMM_COLORS if n in names] + sorted(n for n in names if n not in COMM_COLORS)
    return alt.Scale(domain=domain, range=[COMM_COLORS.get(n, GREY) for n in domain])


def with_comm_names(frame: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    return frame.with_columns(pl.col("comm_type").replace_strict(COMM_NAMES, default=pl.col("comm_type")))

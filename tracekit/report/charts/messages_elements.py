"""The fleet's message sizes in elements (as the Meta paper plots them), where traces record the
element type."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.report.charts import FleetChart
from tracekit.report.charts.messages import message_cdf
from tracekit.report.format import percent
from tracekit.report.page import Figure

if TYPE_CHECKING:
    from tracekit.report.data import FleetData


def figure(fleet: FleetData) -> Figure | None:
    import polars as pl

    share = fleet.overview.get("elems_known_share")
    if not share:
        return None
    data = fleet.cdf.filter(pl.col("unit") == "elements")
    return Figure(
        "fig-messages-elements",
        "Message sizes in elements (as the Meta paper plots them)",
        [[f"Element counts are known where the trace records the element type: {percent(share)} of calls."]],
        message_cdf(fleet.cdf, "elements") if data.height else None,
        "no collective records its element count.",
        ["message_size_cdf"],
    )


CHART = FleetChart("messages-elements", 50, figure, __doc__ or "")

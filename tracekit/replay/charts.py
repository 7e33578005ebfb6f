"""The host × host heatmap of a replayed job (the Meta paper's Figure 3), for the HTML report.

    from tracekit.replay import replay, host_matrix
    from tracekit.replay.charts import host_heatmap

    chart = host_heatmap(host_matrix(replay(ds, job)), title=job)   # an altair.Chart

Cells are the network bytes from each host (row) to each host (column), coloured by their share
of the largest cell (0-100 %); NVLink traffic inside a host is left out, as in the paper.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import altair as alt
    import polars as pl


def host_heatmap(matrix: pl.DataFrame, title: str = "") -> alt.Chart:
    """An Altair heatmap of `matrix` (src_host, dst_host, bytes, share) as host_matrix returns it."""
    import altair as alt

    data = matrix.select("src_host", "dst_host", "bytes", "share").to_dicts()
    return (
        alt.Chart(alt.Data(values=data), title=title or "Network bytes between hosts")
        .mark_rect()
        .encode(
            x=alt.X("dst_host:O", title="to host"),
            y=alt.Y("src_host:O", title="from host"),
            color=alt.Color("share:Q", title="share of the largest cell", scale=alt.Scale(domain=[0, 1])),
            tooltip=[
                alt.Tooltip("src_host:O", title="from"),
                alt.Tooltip("dst_host:O", title="to"),
                alt.Tooltip("bytes:Q", title="bytes", format=","),
                alt.Tooltip("share:Q", format=".0%"),
            ],
        )
    )

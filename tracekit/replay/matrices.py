"""Traffic matrices at GPU, host and rack level, long form (row = sender, column = receiver).

Every matrix keeps NVLink and network bytes apart: `scope` is 'intra_host' for a flow whose two
ends share a host, 'inter_host' otherwise (at rack level: 'intra_host', 'intra_rack' between hosts
of one rack, 'inter_rack'). A flow of an in-network reduction has a switch at one end: its null rank
(and, for collnet, null host and rack) is a row or column of its own. The same matrices are
queries/replay/traffic_matrix_*.sql over a `flows` table, stored in OUT/replay.duckdb by `tracekit replay`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl


def _scope() -> pl.Expr:
    import polars as pl

    return (
        pl.when(pl.col("src_host") == pl.col("dst_host"))
        .then(pl.lit("intra_host"))
        .when(pl.col("src_rack") == pl.col("dst_rack"))
        .then(pl.lit("intra_rack"))
        .otherwise(pl.lit("inter_rack"))
    )


def _matrix(flows: pl.DataFrame, src: str, dst: str, scope: pl.Expr) -> pl.DataFrame:
    import polars as pl

    return (
        flows.filter(pl.col("bytes") > 0)
        .group_by(pl.col(src).alias("src"), pl.col(dst).alias("dst"), scope.alias("scope"))
        .agg(pl.col("bytes").sum().alias("bytes"), pl.len().cast(pl.Int64).alias("flows"))
        .sort("src", "dst")
    )


def gpu_matrix(flows: pl.DataFrame) -> pl.DataFrame:
    """src, dst (global ranks), scope (intra_host | inter_host), bytes, flows."""
    import polars as pl

    scope = pl.when(pl.col("src_host") == pl.col("dst_host")).then(pl.lit("intra_host")).otherwise(pl.lit("inter_host"))
    return _matrix(flows, "src_rank", "dst_rank", scope)


def host_level_matrix(flows: pl.DataFrame) -> pl.DataFrame:
    """src, dst (hosts), scope (intra_host on the diagonal | inter_host), bytes, flows."""
    import polars as pl

    scope = pl.when(pl.col("src_host") == pl.col("dst_host")).then(pl.lit("intra_host")).otherwise(pl.lit("inter_host"))
    return _matrix(flows, "src_host", "dst_host", scope)


def rack_matrix(flows: pl.DataFrame) -> pl.DataFrame:
    """src, dst (racks), scope (intra_host | intra_rack | inter_rack), bytes, flows."""
    return _matrix(flows, "src_rack", "dst_rack", _scope())


def host_matrix(flows: pl.DataFrame) -> pl.DataFrame:
    """Inter-host traffic between hosts for a heatmap: src_host, dst_host, bytes, share of the largest cell.

    Only network bytes (the diagonal is NVLink traffic, which the paper's Figure 3 leaves out).
    """
    import polars as pl

    cells = (
        flows.filter((pl.col("src_host") != pl.col("dst_host")) & (pl.col("bytes") > 0))
        .group_by("src_host", "dst_host")
        .agg(pl.col("bytes").sum().alias("bytes"))
        .sort("src_host", "dst_host")
    )
    return cells.with_columns(share=pl.col("bytes") / pl.col("bytes").max())
